#!/usr/bin/env python3
"""check_function_length.py - fail when a C++ function body is longer than the limit.

    python3 scripts/check_function_length.py [--max 100] [GLOB...]

GLOBs are relative to the repository root (default: the stages' sources, */src/**/*.cpp, and
the CLI, tools/**/*.cpp). A function body's length is the number of lines between the line of
its opening brace and the line of its closing one. Functions are found by matching braces
with comments, string and character literals blanked out: a brace block whose header (the
text since the previous ';', '{' or '}') ends in a parameter list (with the usual const,
override, noexcept, trailing return type or constructor initializers after it) is a
function; namespace, class, struct, enum and initializer blocks are looked into, function
bodies are not (their lambdas and local classes count toward them). Prints one line per
function over the limit (PATH:LINE: NAME: N lines) and exits 1, else exits 0 silently.
"""
import argparse
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_GLOBS = ["*/src/**/*.cpp", "tools/**/*.cpp"]
CONTROL = re.compile(r"^(if|for|while|switch|catch|do|else|try|return)\b")
SCOPE = re.compile(r"^(template\s*<.*>\s*)?(namespace|class|struct|union|enum)\b|^extern\s+\"C\"", re.S)


def blank_literals(text):
    """The text with comments and string/char literals replaced by spaces, newlines kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\ ]{0,16})\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # digit separator (1'000)
                out.append(c)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            out.append(c)
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        i = j
    return "".join(out)


def is_function_header(header):
    h = " ".join(header.split())
    if not h or CONTROL.match(h) or SCOPE.match(h) or "(" not in h:
        return False
    if re.search(r"\]\s*(\(.*\))?\s*(mutable\s*)?(->[^{]*)?$", h) or h.endswith("]"):
        return False  # a lambda
    # Constructor initializers: "Name(args) : member_(x), other_{y}" ends in ')' or '}'.
    head = h.split(")")[0]
    if "=" in head.split("(")[0]:
        return False  # an initializer such as "auto f = g(x) {" is not a function
    tail = re.sub(r"\s*(const|override|final|noexcept(\(.*?\))?|volatile|&|&&|\s)*$", "", h)
    tail = re.sub(r"\s*->\s*[\w:<>,\s*&]+$", "", tail)
    return tail.endswith(")") or re.search(r"\)\s*:\s*.*[)}]$", h) is not None


def long_functions(path, limit):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = blank_literals(f.read())
    found = []
    stack = []  # (kind, line of '{', header)
    start = 0  # where the current header begins
    line = 1
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c == ";":
            start = i + 1
        elif c == "{":
            header = text[start:i]
            in_function = any(k == "function" for k, _, _ in stack)
            kind = "block" if in_function else ("function" if is_function_header(header) else "scope")
            stack.append((kind, line, header))
            start = i + 1
        elif c == "}":
            if stack:
                kind, open_line, header = stack.pop()
                body = line - open_line - 1
                if kind == "function" and body > limit:
                    name = " ".join(header.split())
                    found.append((path, open_line, name[:90], body))
            start = i + 1
    return found


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=100, help="longest body allowed, in lines (default 100)")
    ap.add_argument("globs", nargs="*", default=DEFAULT_GLOBS)
    a = ap.parse_args(argv)
    files = sorted({f for g in a.globs for f in glob.glob(os.path.join(ROOT, g), recursive=True)})
    if not files:
        print(f"check_function_length: no files match {' '.join(a.globs)}", file=sys.stderr)
        return 2
    found = [x for f in files for x in long_functions(f, a.max)]
    for path, line, name, body in sorted(found, key=lambda x: -x[3]):
        print(f"{os.path.relpath(path, ROOT)}:{line}: {name}: {body} lines (at most {a.max})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
