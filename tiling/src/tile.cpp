// tile.cpp - threadblock tile choice and wave count per kernel class.
#include <algorithm>
#include <cmath>

#include "neusight/tiling.h"

namespace neusight {
namespace {

double elem_bytes(DType t) {
  const int bits = dtype_bits(t == DType::tf32 ? DType::f32 : t);
  return bits > 0 ? bits / 8.0 : 4.0;
}

bool uses_tensor_cores(DType t, const Gpu& gpu) {
  return (t == DType::f16 || t == DType::bf16 || t == DType::tf32 || dtype_bits(t) == 8) &&
         gpu.peak_gflops(t) > gpu.fp32_gflops * 1.01;
}

// Candidate threadblock shapes (M x N) a library heuristic picks from.
struct Candidate {
  int64_t m, n, k;
  int threads;
};

Tiling tile_gemm(const Kernel& kr, const Gpu& gpu) {
  const GemmShape& s = kr.gemm;
  const bool tc = uses_tensor_cores(kr.dtype, gpu);
  static const Candidate simt[] = {{128, 128, 8, 256}, {128, 64, 8, 128}, {64, 128, 8, 128},
                                   {64, 64, 8, 64},    {32, 128, 8, 256}, {128, 32, 8, 256}, {32, 32, 8, 128}};
  static const Candidate tensor[] = {{256, 128, 32, 256}, {128, 256, 32, 256}, {128, 128, 32, 128},
                                     {128, 64, 32, 128},  {64, 128, 32, 128},  {64, 64, 32, 128}};
  const Candidate* begin = tc ? std::begin(tensor) : std::begin(simt);
  const Candidate* end = tc ? std::end(tensor) : std::end(simt);
  // Pick the largest tile that still fills the GPU with at least one full wave; else the
  // tile with the least wasted work (padding + idle SMs).
  const Candidate* best = nullptr;
  double best_cost = 1e300;
  for (const Candidate* c = begin; c != end; ++c) {
    const int64_t tiles = s.batch * ceil_div(s.m, c->m) * ceil_div(s.n, c->n);
    const int64_t waves = waves_for(tiles, gpu.num_sm);
    const double padded = double(s.batch) * ceil_div(s.m, c->m) * c->m * ceil_div(s.n, c->n) * c->n;
    // Cost: waves x per-tile work (large tiles are more efficient per FLOP: penalise small).
    const double eff = 1.0 / (1.0 + 32.0 / double(c->m) + 32.0 / double(c->n));
    const double cost = double(waves) * double(c->m * c->n) / eff + padded * 1e-9;
    if (cost < best_cost) {
      best_cost = cost;
      best = c;
    }
  }
  Tiling t;
  t.config.tb_m = best->m;
  t.config.tb_n = best->n;
  t.config.tb_k = best->k;
  t.config.threads = best->threads;
  t.config.tensor_core = tc;
  t.config.stages = tc ? 3 : 2;
  t.tiles = s.batch * ceil_div(s.m, best->m) * ceil_div(s.n, best->n);
  t.blocks_per_sm = 1;
  t.waves = waves_for(t.tiles, gpu.num_sm * t.blocks_per_sm);
  t.tile = std::to_string(best->m) + "x" + std::to_string(best->n);
  const double eb = elem_bytes(kr.dtype);
  t.tile_flops = 2.0 * best->m * best->n * s.k;
  t.tile_bytes = eb * (double(best->m) * s.k + double(s.k) * best->n + double(best->m) * best->n);
  return t;
}

Tiling tile_vector(const Kernel& kr, const Gpu& gpu) {
  Tiling t;
  const double eb = elem_bytes(kr.dtype);
  const double elems = double(kr.rows) * double(kr.cols);
  if (kr.cls == KernelClass::softmax || kr.cls == KernelClass::layernorm) {
    t.tiles = std::max<int64_t>(kr.rows, 1);
    t.tile = std::to_string(kr.cols);
    t.tile_flops = kr.rows > 0 ? kr.flops / double(kr.rows) : 0;
    t.tile_bytes = kr.rows > 0 ? kr.bytes / double(kr.rows) : 0;
    t.config.tb_m = 1;
    t.config.tb_n = kr.cols;
  } else {
    // PyTorch's vectorised elementwise kernel: 128 threads x 4 elements (16-byte vectors).
    const int64_t vec = std::max<int64_t>(1, static_cast<int64_t>(16 / eb));
    const int64_t per_block = 128 * vec;
    const int64_t total = static_cast<int64_t>(elems > 0 ? elems : 1);
    t.tiles = ceil_div(total, per_block);
    t.tile = std::to_string(per_block);
    t.config.tb_m = per_block;
    t.tile_flops = elems > 0 ? kr.flops / double(t.tiles) : 0;
    t.tile_bytes = elems > 0 ? kr.bytes / double(t.tiles) : 0;
  }
  t.blocks_per_sm = 1;
  t.waves = waves_for(t.tiles, gpu.num_sm);
  return t;
}

}  // namespace

Tiling tile_kernel(const Kernel& kernel, const Gpu& gpu) {
  switch (kernel.cls) {
    case KernelClass::gemm:
      if (kernel.gemm.m <= 0 || kernel.gemm.n <= 0 || kernel.gemm.k <= 0) return Tiling{};
      return tile_gemm(kernel, gpu);
    case KernelClass::elementwise:
    case KernelClass::softmax:
    case KernelClass::layernorm:
    case KernelClass::reduce:
    case KernelClass::memory:
      return tile_vector(kernel, gpu);
    default:
      return Tiling{};
  }
}

}  // namespace neusight
