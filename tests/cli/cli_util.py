"""Shared helpers for the CLI tests: run the real binary, find the fixtures and the dataset."""
import json
import os
import subprocess
import tempfile
import unittest

BIN = os.environ.get("NEUSIGHT_BIN", "neusight-onnx")
BUILD = os.environ.get("NEUSIGHT_BUILD_DIR", "build")
SOURCE = os.environ.get("NEUSIGHT_SOURCE_DIR", ".")
# The whole dataset (the neusight-data folder): $NEUSIGHT_DATASET, else
# $NEUSIGHT_SHARED_DIR/neusight-data; none when neither is set. The real ONNX models
# (onnx-models/) sit beside it. The fixtures (same layout: tests/data/neusight-data, derived
# from the dataset, plus device_configs/ written from hardware/data/gpus.json), assembled by
# the build in <build>/tests/neusight-data, are what the tests read unless they need the whole
# dataset.
DATASET = os.environ.get("NEUSIGHT_DATASET") or (
    os.path.join(os.environ["NEUSIGHT_SHARED_DIR"], "neusight-data") if os.environ.get("NEUSIGHT_SHARED_DIR") else "")
SHARED = os.path.dirname(os.path.abspath(DATASET)) if DATASET else ""
FIXTURES = os.path.join(BUILD, "tests", "neusight-data")
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
    """A path in the folder that holds the dataset: shared("onnx-models", "x.onnx")."""
    return os.path.join(SHARED, *parts)


def fixture(*parts):
    """A path in the fixtures, laid out as the dataset: fixture("device_configs", "Tesla_T4.json")."""
    return os.path.join(FIXTURES, *parts)


def needs_shared(*parts):
    """Skips a test (class or method) unless <the dataset's folder>/<parts> exists; unittest -v
    prints the reason on the test's line."""
    return unittest.skipUnless(SHARED and os.path.exists(shared(*parts)),
                               "needs %s beside the whole dataset (set NEUSIGHT_DATASET to the neusight-data folder)"
                               % "/".join(parts))
