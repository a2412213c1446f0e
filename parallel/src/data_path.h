// data_path.h - the data path's crossings, shared by the pipeline's cuts (iteration.cpp) and
// the activation checkpoints (checkpoint.cpp). Internal to the parallel stage.
#pragma once

#include <vector>

#include "neusight/parallel.h"

namespace neusight::parallel_detail {

// Bytes of `tensors` crossing each position c = 0 .. nodes (between node c-1 and node c): a
// tensor crosses producer + 1 .. last_use.
std::vector<double> crossing_bytes(const std::vector<PathTensor>& tensors, size_t nodes);

// The bounds on the bytes a cut or checkpoint may carry, tried one by one: the distinct
// `sizes` ascending, at most kMostBounds of them spread evenly over the list.
inline constexpr size_t kMostBounds = 256;
std::vector<double> crossing_bounds(std::vector<double> sizes);

// Per tensor of `tensors`: it crosses one of `positions` (ascending) among `nodes` nodes.
std::vector<char> crossing_any(const std::vector<int>& positions, const std::vector<PathTensor>& tensors, size_t nodes);

}  // namespace neusight::parallel_detail
