"""Shared helpers for the Python module tests: the module under test and the CLI it must match."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))

import neusight_onnx  # noqa: E402  (the extension in the build tree, on PYTHONPATH)
from cli_util import BIN, BUILD, EXAMPLE, SOURCE, needs_shared, run, run_json, shared  # noqa: E402,F401

DEVICE_JSON = shared("neusight-data", "device_configs", "NVIDIA_H100_80GB_HBM3.json")


def cli_error(*args):
    """Runs the CLI expecting a failure; returns (exit code, the message after 'error: ')."""
    code, _, err = run(*args)
    assert code in (1, 2), (code, err)
    lines = err.strip().splitlines()
    prefix = "neusight-onnx: error: "
    assert len(lines) == 1 and lines[0].startswith(prefix), err
    return code, lines[0][len(prefix):]
