#!/bin/sh
# retrain.sh - rebuilds the NeuSight weights from the dataset (run from the repo root after
# building). Retrain whenever tiling/ or the features change.
#   predictor/retrain.sh DATASET OUT
# DATASET is the neusight-data folder (../shared/neusight-data); OUT the folder to write,
# `predictor/weights` to refresh the shipped weights. Nothing is written outside OUT.
#   OUT                  the five training GPUs (the product's weights): their kernels/train
#                        rows and their kernels/test rows (--test-rows: the end-to-end models'
#                        shapes, timed as the unseen GPUs' kernels are; the train rows of four
#                        of the five ran 10-30% slower than their test rows of matched shape)
#   OUT/forward-in-time  P4, P100, T4, V100 only (bench/kernel_accuracy (c))
#   OUT/logo-<GPU>       every training GPU but one (bench/kernel_accuracy (d), leave one GPU out)
#   OUT/paper[/...]      the same three kinds for the published formulation, on the train
#                        rows alone as published (--predictor neusight-paper, kernel_accuracy (e))
# then calibrates the product's 80% interval on the leave-one-GPU-out rows
# (kernel_accuracy --calibrate; its figures in OUT/INTERVAL). Each training run is
# deterministic for its seed and writes weights.json (minified JSON of weights schema 9, every
# double exact; files of the older schema 8 are rewritten by predictor/convert_weights.py
# DIR...) + MANIFEST (data sha256s, seed, hyperparameters, command); about 2.5-5 CPU-minutes
# each on one core, two at a time. Ensembles of 10 networks of 32 units, the GEMM class 20
# networks of 64 units; the small classes (softmax, layernorm: ~30 batches an epoch) run until
# 6000 Adam steps (TrainOptions::min_steps, at most 10x --epochs). The published formulation:
# ensembles of 5 networks of 64 units (about 1.5 CPU-minutes each).
#   PART=product|paper|all (default all)
set -e
if [ $# -ne 2 ]; then
  echo "usage: predictor/retrain.sh DATASET OUT   (e.g. ../shared/neusight-data predictor/weights)" >&2
  exit 2
fi
DATA=$1
OUT=$2
[ -d "$DATA/kernels" ] || { echo "retrain.sh: $DATA is not the neusight-data folder (no kernels/)" >&2; exit 2; }
BIN=${NEUSIGHT_BIN:-build/bin/neusight-onnx}
CAL=${NEUSIGHT_CALIBRATE_BIN:-build/bin/kernel_accuracy}
PART=${PART:-all}
HP="--seed 1 --epochs 30 --hidden 32,gemm=64 --layers 2 --ensemble 10,gemm=20 --test-rows"
PAPER_HP="--seed 1 --epochs 30 --hidden 64 --layers 2 --ensemble 5 --formulation neusight-paper"
export OPENBLAS_NUM_THREADS=1
P4="Tesla P4"; P100="Tesla P100-PCIE-16GB"; T4="Tesla T4"; V100="Tesla V100-PCIE-32GB"; A100="NVIDIA A100-PCIE-40GB"
train() {  # OUT DEVICES HYPERPARAMETERS (the log stays in OUT when a run fails)
  mkdir -p "$1"
  "$BIN" train --data "$DATA" --out "$1" $3 --devices "$2" > "$1/train.log" 2>&1 && rm -f "$1/train.log"
}
# The main set, forward in time and the five leave-one-GPU-out sets of one formulation.
train_all() {  # ROOT HYPERPARAMETERS
  mkdir -p "$1/forward-in-time"
  train "$1" "$P4,$P100,$T4,$V100,$A100" "$2" &
  train "$1/forward-in-time" "$P4,$P100,$T4,$V100" "$2" &
  wait
  for pair in "Tesla_P4|$P100,$T4,$V100,$A100" "Tesla_P100-PCIE-16GB|$P4,$T4,$V100,$A100" \
              "Tesla_T4|$P4,$P100,$V100,$A100" "Tesla_V100-PCIE-32GB|$P4,$P100,$T4,$A100" \
              "NVIDIA_A100-PCIE-40GB|$P4,$P100,$T4,$V100"; do
    tag=${pair%%|*}; devs=${pair#*|}
    mkdir -p "$1/logo-$tag"
    train "$1/logo-$tag" "$devs" "$2" &
    [ "$tag" = "Tesla_P100-PCIE-16GB" ] || [ "$tag" = "Tesla_V100-PCIE-32GB" ] && wait
  done
  wait
}
[ "$PART" = paper ] || train_all "$OUT" "$HP"
[ "$PART" = product ] || train_all "$OUT/paper" "$PAPER_HP"
if [ "$PART" != paper ]; then
  # The calibration reads the leave-one-GPU-out weights from its data folder's weights/ and
  # the dataset from its shared folder's neusight-data/: a temporary folder links both to
  # OUT and DATASET, beside the build tree's GPU and tile tables.
  STAGE=$(mktemp -d)
  trap 'rm -rf "$STAGE"' EXIT
  BUILD_DATA=$(cd "$(dirname "$(dirname "$CAL")")/data" && pwd)
  mkdir "$STAGE/data" "$STAGE/shared"
  for f in "$BUILD_DATA"/*; do
    [ "$(basename "$f")" = weights ] || ln -s "$f" "$STAGE/data/"
  done
  ln -s "$(cd "$OUT" && pwd)" "$STAGE/data/weights"
  ln -s "$(cd "$DATA" && pwd)" "$STAGE/shared/neusight-data"
  NEUSIGHT_DATA_DIR="$STAGE/data" NEUSIGHT_SHARED_DIR="$STAGE/shared" "$CAL" --calibrate "$OUT" | tee "$OUT/INTERVAL"
fi
