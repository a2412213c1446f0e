// lowering.h - ONNX nodes to the kernels a GPU framework launches (the kernel IR).
//
// Takes: a shape-inferred Graph.
// Gives: one KernelList: for every node the kernels it runs (forward; with training also
// backward and weight-update kernels), with exact work counts (FLOPs, bytes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "neusight/graph.h"

namespace neusight {

enum class KernelClass { gemm, elementwise, softmax, layernorm, reduce, memory, collective, unknown };
enum class Phase { forward, backward, update };
enum class Fusion { none, eager, full };
enum class Mode { inference, training };

const char* kernel_class_name(KernelClass c);
const char* phase_name(Phase p);

// GEMM problem in CUTLASS words: C[m x n] = A[m x k] * B[k x n], `batch` independent
// products. (The NeuSight dataset names these differently: its M = m, its N = k (the
// reduction), its K = n. Conversions happen only where the dataset is read or written.)
struct GemmShape {
  int64_t batch = 1;
  int64_t m = 0, n = 0, k = 0;
};

struct Kernel {
  KernelClass cls = KernelClass::unknown;
  Phase phase = Phase::forward;
  std::string op;      // what runs: "linear", "bmm", "conv", "add", "gelu", "softmax", "ln", ...
  DType dtype = DType::f32;
  int node = -1;       // index of the ONNX node in Graph::nodes (-1: not tied to one node)

  GemmShape gemm;      // cls == gemm
  // Vector kernels (elementwise, softmax, layernorm, reduce): `rows` x `cols` elements;
  // softmax/layernorm normalise each row of length `cols`; elementwise uses rows*cols.
  int64_t rows = 0, cols = 0;
  int inputs = 1;      // tensor operands read (elementwise)

  double flops = 0;    // useful floating-point operations
  double bytes = 0;    // bytes read + written from/to memory at minimum
  std::string note;    // free text for reports (e.g. "bias+gelu epilogue", unknown op type)
};

struct LoweringOptions {
  Mode mode = Mode::inference;
  Fusion fusion = Fusion::eager;
  // Precision the kernels run in when forced (--dtype); undefined = take the model's.
  DType compute_dtype = DType::undefined;
};

struct KernelList {
  std::vector<Kernel> kernels;              // execution order: forward, backward, update
  std::vector<std::string> unknown_ops;     // op types lowered to class "unknown"
};

KernelList lower(const Graph& graph, const LoweringOptions& options);

}  // namespace neusight
