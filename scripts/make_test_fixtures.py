#!/usr/bin/env python3
"""make_test_fixtures.py - derives the test fixtures under tests/data/neusight-data from the
NeuSight dataset, so that the test suite runs without it.

    scripts/make_test_fixtures.py DATASET [OUT]

DATASET is the neusight-data folder (e.g. ../shared/neusight-data); OUT defaults to
tests/data/neusight-data next to this script. The output is deterministic: the same dataset
gives byte-identical fixtures. What is taken (the layout mirrors the dataset's):

* LICENSE, device_configs/*.json, model_configs/*.json: copied whole.
* kernels/train/<op>/<gpu>.csv: every (rows // 200)-th row, the rows the predictor unit tests
  train on (linear), or every (rows // 100)-th row (the classes the CLI trains on).
* kernels/test/<class>.csv: per device, its first 20 rows (the CLI tests take the first rows
  of a device) and every 8th of the rest, up to 30 rows.
* e2e/opgraph/*.csv: the operator rows that list a kernel other than a copy (MEM), with the columns the readers use
  (Name, OpName, FwOps, BwOps, AccOps, InputShapes); e2e/labels: the runs the tests compare.
"""
import ast
import csv
import os
import shutil
import sys

TRAIN = {  # op -> (GPUs, rows to keep about)
    "linear": (["Tesla_T4", "Tesla_V100-PCIE-32GB"], 200),
    "addu": (["Tesla_T4"], 100),
    "softmax": (["Tesla_T4", "Tesla_P4"], 100),
    "ln": (["Tesla_T4", "Tesla_P4"], 100),
}
TEST_FILES = ["bmm.csv", "elem.csv", "linear.csv", "ln.csv", "softmax.csv"]
TEST_FIRST, TEST_STRIDE, TEST_MAX = 20, 8, 30
OPGRAPHS = [
    "gpt2_large-inf-1024-4", "gpt2_large-train-1024-4", "gpt2_large-train-1024-1", "gpt3_27-inf-2048-2",
    "gpt3_xl-inf-2048-2", "bert_large-inf-512-8", "bert_large-train-512-2", "opt_13-inf-2048-2",
    "opt_13-train-2048-1", "gpt2_large-train-1024-4-dp4", "gpt2_large-train-1024-4-tp4",
    "gpt2_large-train-1024-4-pp4_1", "switchxl4-inf-512-1", "switchxl4-inf-512-2",
]
OPGRAPH_COLUMNS = ["Name", "OpName", "FwOps", "BwOps", "AccOps", "InputShapes"]
LABELS = [("NVIDIA_A100-SXM4-40GB", "gpt2_large-train-1024-4-" + p + ".json") for p in ("dp4", "tp4", "pp4_1")]


def read_rows(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def write_rows(path, header, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def copy_folder(src, dst):
    os.makedirs(dst, exist_ok=True)
    for name in sorted(os.listdir(src)):
        shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))


def train_rows(data, out):
    for op, (gpus, keep) in TRAIN.items():
        for gpu in gpus:
            rel = os.path.join("kernels", "train", op, gpu + ".csv")
            header, rows = read_rows(os.path.join(data, rel))
            step = max(1, len(rows) // keep)
            write_rows(os.path.join(out, rel), header, rows[::step])


def test_rows(data, out):
    for name in TEST_FILES:
        rel = os.path.join("kernels", "test", name)
        header, rows = read_rows(os.path.join(data, rel))
        dev = header.index("Device")
        seen = {}
        kept = []
        for r in rows:
            i = seen.get(r[dev], 0)
            seen[r[dev]] = i + 1
            j = i - TEST_FIRST
            if j < 0 or (j % TEST_STRIDE == 0 and j // TEST_STRIDE < TEST_MAX - TEST_FIRST):
                kept.append(r)
        write_rows(os.path.join(out, rel), header, kept)


def computes(record):
    """True when an opgraph row lists a kernel other than a memory copy (MEM): the readers
    compare GEMM, VEC and update kernels only."""
    return any(k[0] != "MEM" for col in ("FwOps", "BwOps", "AccOps") for k in ast.literal_eval(record[col]))


def opgraphs(data, out):
    for name in OPGRAPHS:
        rel = os.path.join("e2e", "opgraph", name + ".csv")
        with open(os.path.join(data, rel), newline="") as f:
            records = list(csv.DictReader(f))
        rows = [[r[c] for c in OPGRAPH_COLUMNS] for r in records if computes(r)]
        write_rows(os.path.join(out, rel), OPGRAPH_COLUMNS, rows)
    for gpu, name in LABELS:
        os.makedirs(os.path.join(out, "e2e", "labels", gpu), exist_ok=True)
        shutil.copyfile(os.path.join(data, "e2e", "labels", gpu, name), os.path.join(out, "e2e", "labels", gpu, name))


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.split("\n\n")[1])
    data = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                                "tests", "data", "neusight-data")
    if not os.path.isdir(os.path.join(data, "kernels")):
        sys.exit(f"make_test_fixtures.py: {data} is not the neusight-data folder (no kernels/)")
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    shutil.copyfile(os.path.join(data, "LICENSE"), os.path.join(out, "LICENSE"))
    copy_folder(os.path.join(data, "device_configs"), os.path.join(out, "device_configs"))
    copy_folder(os.path.join(data, "model_configs"), os.path.join(out, "model_configs"))
    train_rows(data, out)
    test_rows(data, out)
    opgraphs(data, out)


if __name__ == "__main__":
    main()
