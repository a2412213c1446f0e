#!/bin/sh
# retrain.sh - rebuilds the shipped NeuSight weights from the dataset (run from the repo root
# after building; ../shared holds the data). Retrain whenever tiling/ changes the tiles.
#   predictor/weights                  the five training GPUs (the product's weights)
#   predictor/weights/forward-in-time  P4, P100, T4, V100 only (bench/kernel_accuracy split (c))
#   predictor/weights/balance-out      P100, V100, A100 40GB only (bench/kernel_accuracy split (d):
#                                      T4 and P4 GEMMs, beyond their machine balance)
# Each run is deterministic for its seed and writes weights.json + MANIFEST (data sha256s,
# seed, hyperparameters, command). About 2.5-3 CPU-minutes each on one core. Ensembles of 10
# networks of 32 units, the GEMM class 20 networks of 64 units (forward-in-time BMM MAPE on
# the A100s with seeds 1 / 2 / 3: 9.68 / 8.68 / see README; with 10 networks of 32 units it
# moved 10.7-12.7 between seeds); the small classes (softmax, layernorm: ~30 batches an
# epoch) run until 6000 Adam steps (TrainOptions::min_steps, at most 10x --epochs).
# --hidden and --ensemble take N or N,CLASS=N,... (classes: gemm, elementwise, softmax, layernorm).
set -e
BIN=${NEUSIGHT_BIN:-build/bin/neusight-onnx}
HP="--seed 1 --epochs 30 --hidden 32,gemm=64 --layers 2 --ensemble 10,gemm=20"
export OPENBLAS_NUM_THREADS=1
"$BIN" train --data ../shared/neusight-data --out predictor/weights $HP
"$BIN" train --data ../shared/neusight-data --out predictor/weights/forward-in-time $HP \
  --devices "Tesla P4,Tesla P100-PCIE-16GB,Tesla T4,Tesla V100-PCIE-32GB"
"$BIN" train --data ../shared/neusight-data --out predictor/weights/balance-out $HP \
  --devices "Tesla P100-PCIE-16GB,Tesla V100-PCIE-32GB,NVIDIA A100-PCIE-40GB"
