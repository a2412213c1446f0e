"""Shared helpers for the Python module tests: the module under test and the CLI it must match."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))

import neusight_onnx  # noqa: E402  (the extension in the build tree, on PYTHONPATH)
from cli_util import BIN, BUILD, EXAMPLE, SOURCE, fixture, needs_shared, run, run_json, shared  # noqa: E402,F401

DEVICE_JSON = fixture("device_configs", "NVIDIA_H100_80GB_HBM3.json")


def same(a, b, rel=1e-12):
    """Whether two reports (JSON values) are equal, floats to `rel` relative: the module and
    the CLI run the same code, but the process that imports numpy may resolve the BLAS calls
    of the predictor's networks to another BLAS build, which rounds differently."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= rel * max(abs(a), abs(b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k], rel) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y, rel) for x, y in zip(a, b))
    return a == b


def cli_error(*args):
    """Runs the CLI expecting a failure; returns (exit code, the message after 'error: ')."""
    code, _, err = run(*args)
    assert code in (1, 2), (code, err)
    lines = err.strip().splitlines()
    prefix = "neusight-onnx: error: "
    assert len(lines) == 1 and lines[0].startswith(prefix), err
    return code, lines[0][len(prefix):]
