"""Shared helpers for the CLI tests: run the real binary, find fixtures and shared data."""
import json
import os
import subprocess
import tempfile
import unittest

BIN = os.environ.get("NEUSIGHT_BIN", "neusight-onnx")
BUILD = os.environ.get("NEUSIGHT_BUILD_DIR", "build")
SOURCE = os.environ.get("NEUSIGHT_SOURCE_DIR", ".")
SHARED = os.environ.get("NEUSIGHT_SHARED_DIR") or os.path.join(SOURCE, "..", "shared")
EXAMPLE = os.path.join(BUILD, "examples", "gpt2-small.onnx")


def run(*args, timeout=600):
    """Runs the CLI; returns (exit code, stdout, stderr)."""
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def run_json(*args):
    """Runs the CLI with --json into a temporary file and returns the parsed report."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        code, so, se = run(*args, "--json", out, "--quiet")
        if code != 0:
            raise AssertionError(f"exit {code}: {se}")
        with open(out) as f:
            return json.load(f)


def shared(*parts):
    return os.path.join(SHARED, *parts)


def needs_shared(*parts):
    """Skips a test (class or method) unless ../shared/<parts> exists; unittest -v prints the
    reason on the test's line."""
    return unittest.skipUnless(os.path.exists(shared(*parts)),
                               "needs ../shared/%s (the dataset folder beside the repository)" % "/".join(parts))
