// positions.h - the positions an ONNX decoder's learned position table holds.
#pragma once

#include <cstdint>

#include "neusight/graph.h"

namespace neusight {

// The positions a sequence may hold in a decoder graph whose position embedding is a learned
// table (GPT-2's wpe, OPT's embed_positions, GPTBigCode's), found as the graph spells it:
//   * a Gather from a 2-D initializer [rows, hidden], added to the token embedding (a Gather
//     from an initializer of the same width whose indices come from the `input_ids` input),
//     whose indices are 0-based positions (the `position_ids` input, a Range) or 1-based ones
//     (a CumSum of the attention mask), moved by constant Adds and Subs (OPT's offset of 2):
//     rows less that offset;
//   * onnxruntime's EmbedLayerNormalization: the rows of its position_embedding input.
// 0 when none is found (rotary or ALiBi positions, or indices the walk cannot follow): no limit.
int64_t learned_positions(const Graph& g);

}  // namespace neusight
