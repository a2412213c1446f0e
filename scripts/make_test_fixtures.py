#!/usr/bin/env python3
"""make_test_fixtures.py - derives the test fixtures under tests/data/neusight-data from the
NeuSight dataset, so that the test suite runs without it.

    scripts/make_test_fixtures.py DATASET [OUT]

DATASET is the neusight-data folder (e.g. ../shared/neusight-data); OUT defaults to
tests/data/neusight-data next to this script. The output is deterministic: the same dataset
gives byte-identical fixtures. No file of the dataset is copied; what is derived (the layout
mirrors the dataset's):

* model_configs/*.json: the fields the tool reads for the config's model_type (CONFIG_FIELDS,
  the keys model_builder/src/config.cpp looks up), nothing else.
* kernels/train/<op>/<gpu>.csv: every (rows // 200)-th row, the rows the predictor unit tests
  train on (linear), or every (rows // 100)-th row (the classes the CLI trains on).
* kernels/test/<class>.csv: per device, its first 20 rows (the CLI tests take the first rows
  of a device) and every 8th of the rest, up to 30 rows.
* e2e/opgraph/*.csv: the operator rows that list a kernel other than a copy (MEM), with the
  columns the readers use (Name, OpName, FwOps, BwOps, AccOps, InputShapes).
* e2e/labels: the measured end-to-end latency (e2e_latency) of the runs the tests compare.
* NOTICE: which files these are and where they come from, then the dataset's MIT licence text
  (its notice goes with substantial portions).

device_configs/ is not among them: the build writes the fixtures' device JSONs from the
project's own GPU database (hardware/data/gpus.json; tests/CMakeLists.txt).
"""
import ast
import csv
import json
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
LABEL_FIELDS = ["e2e_latency"]
# The config fields the tool reads, per model_type (model_builder/src/config.cpp: model_type and
# torch_dtype for all, then the family's reader).
CONFIG_COMMON = ["model_type", "torch_dtype"]
CONFIG_FIELDS = {
    "gpt2": ["n_layer", "num_hidden_layers", "n_embd", "hidden_size", "n_head", "num_attention_heads", "n_inner",
             "vocab_size", "n_positions", "n_ctx", "activation_function", "layer_norm_epsilon", "resid_pdrop",
             "attn_pdrop"],
    "bert": ["num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size",
             "max_position_embeddings", "type_vocab_size", "hidden_act", "layer_norm_eps", "hidden_dropout_prob",
             "attention_probs_dropout_prob", "num_labels", "architectures"],
    "opt": ["num_hidden_layers", "hidden_size", "num_attention_heads", "ffn_dim", "vocab_size",
            "max_position_embeddings", "activation_function", "dropout", "attention_dropout", "do_layer_norm_before",
            "word_embed_proj_dim"],
    "switch_transformers": ["num_layers", "num_decoder_layers", "d_model", "num_heads", "d_kv", "d_ff", "vocab_size",
                            "num_experts", "expert_capacity", "encoder_sparse_step", "relative_attention_num_buckets",
                            "dense_act_fn", "feed_forward_proj", "layer_norm_epsilon", "dropout_rate"],
}
NOTICE_HEAD = """\
The data files in this folder are derived from the NeuSight dataset (neusight-data),
published by the authors of Lee, Phanishayee, Mahajan, "Forecasting GPU Performance for Deep
Learning Training and Inference", ASPLOS '25 (doi 10.1145/3669940.3707265), with its MIT
licence below. scripts/make_test_fixtures.py writes them from the dataset's folder of the
same layout:

* model_configs/*.json: from the dataset's model_configs/, only the fields the tool reads;
* kernels/train/<op>/<gpu>.csv, kernels/test/*.csv: sampled rows of the dataset's measured
  kernels (kernels/train, kernels/test);
* e2e/opgraph/*.csv: the computing rows and six columns of the dataset's traced operator
  graphs (e2e/opgraph);
* e2e/labels/<gpu>/*.json: the measured end-to-end latency of the dataset's runs (e2e/labels).

(The device_configs/ that the build adds beside them in its copy of this folder is written from
the project's own GPU database, hardware/data/gpus.json, not from the dataset.)

"""


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


def write_json(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")


def model_configs(data, out):
    """Each model config reduced to the fields the tool reads for its model_type."""
    folder = os.path.join(data, "model_configs")
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            config = json.load(f)
        if config.get("model_type") not in CONFIG_FIELDS:
            sys.exit(f"make_test_fixtures.py: {name}: model_type {config.get('model_type')!r} has no CONFIG_FIELDS")
        keep = CONFIG_COMMON + CONFIG_FIELDS[config["model_type"]]
        write_json(os.path.join(out, "model_configs", name), {k: config[k] for k in keep if k in config})


def notice(data, out):
    with open(os.path.join(data, "LICENSE")) as f:
        licence = f.read()
    with open(os.path.join(out, "NOTICE"), "w") as f:
        f.write(NOTICE_HEAD + licence.rstrip("\n") + "\n")


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
        rel = os.path.join("e2e", "labels", gpu, name)
        with open(os.path.join(data, rel)) as f:
            label = json.load(f)
        write_json(os.path.join(out, rel), {k: label[k] for k in LABEL_FIELDS})


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
    notice(data, out)
    model_configs(data, out)
    train_rows(data, out)
    test_rows(data, out)
    opgraphs(data, out)


if __name__ == "__main__":
    main()
