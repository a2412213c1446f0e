#!/bin/sh
# retrain.sh - rebuilds the shipped NeuSight weights from the dataset (run from the repo root
# after building; ../shared holds the data). Retrain whenever tiling/ changes the tiles.
#   predictor/weights                  the five training GPUs (the product's weights)
#   predictor/weights/forward-in-time  P4, P100, T4, V100 only (bench/kernel_accuracy split (c))
# Each run is deterministic for its seed and writes weights.json + MANIFEST (data sha256s,
# seed, hyperparameters, command). About 2 CPU-minutes each on one core.
set -e
BIN=${NEUSIGHT_BIN:-build/bin/neusight-onnx}
HP="--seed 1 --epochs 30 --hidden 32 --layers 2 --ensemble 5"
export OPENBLAS_NUM_THREADS=1
"$BIN" train --data ../shared/neusight-data --out predictor/weights $HP
"$BIN" train --data ../shared/neusight-data --out predictor/weights/forward-in-time $HP \
  --devices "Tesla P4,Tesla P100-PCIE-16GB,Tesla T4,Tesla V100-PCIE-32GB"
