#!/usr/bin/env python3
"""check_test_names.py - fail when a doctest case cannot be run on its own by ctest.

    python3 scripts/check_test_names.py UNIT_BINARY

doctest_discover_tests makes one ctest test per TEST_CASE, passing its name to
--test-case. A name with a ';' is split there (';' separates CMake list items): ctest then
runs fragments of the name that match no case and report success without running it. Lists
the binary's cases (--list-test-cases) and prints one line per such name, exit 1; else exits
0 silently.
"""
import subprocess
import sys


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out = subprocess.run([sys.argv[1], "--list-test-cases", "--no-version"], capture_output=True, text=True, check=True)
    bad = [line.strip() for line in out.stdout.splitlines() if ";" in line]
    for name in bad:
        print(f"test case name with ';' (ctest cannot run it alone): {name}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
