#!/bin/sh
# retrain.sh - rebuilds the shipped NeuSight weights from the dataset (run from the repo root
# after building; ../shared holds the data). Retrain whenever tiling/ or the features change.
#   predictor/weights                  the five training GPUs (the product's weights)
#   predictor/weights/forward-in-time  P4, P100, T4, V100 only (bench/kernel_accuracy (c))
#   predictor/weights/logo-<GPU>       every training GPU but one (bench/kernel_accuracy (d),
#                                      leave one GPU out)
#   predictor/weights/paper[/...]      the same three kinds for the published formulation
#                                      (--predictor neusight-paper, bench/kernel_accuracy (e))
# then calibrates the product's 80% interval on the leave-one-GPU-out rows
# (kernel_accuracy --calibrate). Each training run is deterministic for its seed and writes
# weights.json (minified JSON of weights schema 9, every double exact; files of the older
# schema 8 are rewritten by predictor/convert_weights.py DIR...) + MANIFEST (data sha256s,
# seed, hyperparameters, command); about 2.5-5
# CPU-minutes each on one core, two at a time. Ensembles of 10 networks of 32 units,
# the GEMM class 20 networks of 64 units; the small classes (softmax, layernorm: ~30 batches
# an epoch) run until 6000 Adam steps (TrainOptions::min_steps, at most 10x --epochs). The
# published formulation: ensembles of 5 networks of 64 units (about 1.5 CPU-minutes each).
#   PART=product|paper|all (default all)
set -e
BIN=${NEUSIGHT_BIN:-build/bin/neusight-onnx}
CAL=${NEUSIGHT_CALIBRATE_BIN:-build/bin/kernel_accuracy}
DATA=${NEUSIGHT_SHARED_DIR:-../shared}/neusight-data
PART=${PART:-all}
HP="--seed 1 --epochs 30 --hidden 32,gemm=64 --layers 2 --ensemble 10,gemm=20"
PAPER_HP="--seed 1 --epochs 30 --hidden 64 --layers 2 --ensemble 5 --formulation neusight-paper"
export OPENBLAS_NUM_THREADS=1
P4="Tesla P4"; P100="Tesla P100-PCIE-16GB"; T4="Tesla T4"; V100="Tesla V100-PCIE-32GB"; A100="NVIDIA A100-PCIE-40GB"
train() {  # OUT DEVICES HYPERPARAMETERS
  "$BIN" train --data "$DATA" --out "$1" $3 --devices "$2" > "$1.log" 2>&1 && rm -f "$1.log"
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
[ "$PART" = paper ] || train_all predictor/weights "$HP"
[ "$PART" = product ] || train_all predictor/weights/paper "$PAPER_HP"
# The benches read the weights next to the binaries: refresh the build tree's copy first.
cmake --build "$(dirname "$(dirname "$BIN")")" > /dev/null
if [ "$PART" != paper ]; then
  NEUSIGHT_DATA_DIR= "$CAL" --calibrate predictor/weights | tee predictor/weights/INTERVAL
  cmake --build "$(dirname "$(dirname "$BIN")")" > /dev/null
fi
