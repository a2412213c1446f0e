// footprint.h - device memory of a run (api-internal): the weights as held under the options,
// the activations (one kernel's working set, the most alive at once, all the forward pass
// writes), and one GPU's whole footprint for a report.
//
// Takes: an Analysis (shapes inferred, kernels lowered) and the Options it was made with.
// Gives: byte counts, from which memory_footprint() (neusight.h) makes a report's
// MemoryFootprint (report.h).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "neusight/neusight.h"

namespace neusight {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;  // bytes in the GiB the reports count memory in

// The element type a tensor is held in under the options (--dtype forces float tensors;
// under fp8 / fp4 / int8 only the GEMMs' weight matrices are narrow, the rest BF16 / FP16:
// lowering.h).
DType held_dtype(const TensorInfo& t, const Options& o);
// Bytes of a weight matrix a GEMM reads: NVFP4's 4.5 bits under --dtype fp4 (its E2M1 values
// and one E4M3 scale per 16), a byte under fp8 and int8, otherwise as held. 0 for an unknown
// shape.
double gemm_weight_bytes(const TensorInfo* t, const Options& o);
// Bytes of a tensor as held; 0 for an unknown shape.
double tensor_bytes(const TensorInfo* t, const Options& o);
// The LoRA adapters' bytes among `kernels` (--lora: each forward lora_a / lora_b kernel's
// A [in x rank] or B [rank x out], in its dtype, once per adapter held: `adapters`), their
// parameters into `params` when given.
double lora_adapter_bytes(const std::vector<Kernel>& kernels, int64_t adapters = 1, double* params = nullptr);
// --sparsity 2:4: the bytes the 2:4 compression (lowering.h sparse_2_4_bytes_per_element) of the
// weights named saves against their gemm_weight_bytes; their factor, compressed over dense, by
// name into `factor` and their compressed bytes into `compressed` when given.
double sparse_2_4_saved_bytes(const Graph& g, const std::vector<std::string>& weights, const Options& o,
                              std::map<std::string, double>* factor = nullptr, double* compressed = nullptr);
// Whether `gpu` holds the analysis's 2:4-pruned weights compressed: some pruned GEMM's math has
// sparse matrix units there (precision.h runs_sparse_2_4); else they are held dense.
bool holds_sparse_2_4(const Analysis& a, const Gpu& gpu);
// Calls f on every node of `g` and of the graphs its nodes hold (If branches, Loop bodies: an
// optimum merged decoder's layers are in an If), a few levels deep, with the graph holding it.
void each_node(const Graph& g, const std::function<void(const Graph&, const Node&)>& f, int depth = 0);
// Weights: every initializer and every Constant node's output (a weight some exporters
// write as a node) that is not a small integer constant; the embedding table is one read
// only as the data input of Gather nodes (a decode step reads a row).
// `share` (when given) is the part of a tensor one GPU holds (tensor parallelism: 1/tp of a
// split one), by its name.
using TensorShare = std::function<double(const std::string&)>;
void weight_bytes(const Graph& g, const Options& o, double& all, double& embedding, const TensorShare& share = {});

// The forward pass's activations: the tensors a kernel writes that another kernel reads or the
// graph returns, and the graph's inputs; never a weight (weight_bytes). A fused kernel's intermediates are never materialised
// (FlashAttention's scores and probabilities, a fused elementwise chain's values), and a node
// without a kernel (a view, an inference Dropout, a KV head repeat the attention reads in
// place) makes no tensor of its own: its output is its first activation input, seen another
// way.
struct ActivationUse {
  // The largest working set of one kernel: the activations it reads and writes.
  double largest_kernel_bytes = 0;
  // The most bytes alive at once in execution order: each tensor from the kernel that writes
  // it (an input from the start) to the last kernel that reads it (an output to the end), as
  // a framework frees a tensor after its last use or an inference engine's planner reuses its
  // buffer.
  double peak_live_bytes = 0;
  // Every activation together.
  double all_bytes = 0;
  // What a training step keeps for its backward pass (footprint.cpp saved_for_backward): the
  // activations the gradients of the differentiated nodes read.
  double saved_bytes = 0;
};
ActivationUse activation_use(const Analysis& a, const Options& o, const TensorShare& share = {});
// The activations a training step keeps for its backward pass (ActivationUse::saved_bytes),
// each with the node that keeps it and the node that wrote it, for the multi-GPU plan's
// stages (parallel.h).
std::vector<SavedActivation> saved_activations(const Analysis& a, const Options& o);
// `saved` under the analysis's activation checkpoints (parallel.h apply_checkpoints), as it is
// without them.
std::vector<SavedActivation> checkpointed(const Analysis& a, std::vector<SavedActivation> saved);
// The type activations are held in under the options (DType::undefined: each tensor's own).
DType held_activation_dtype(const Options& o);


}  // namespace neusight
