// pipeline.h - pipeline parallelism in inference (api-internal): a forward pass or a
// generation's phase cut into stages over pp GPUs, its microbatches through them.
//
// Takes: an Analysis of one microbatch and its Report on one GPU (the nodes' times), the
// Options with --parallel pp. Gives: the pipeline's time, the stages, the weights each holds,
// and a forward pass's ParallelReport.
#pragma once

#include <vector>

#include "neusight/neusight.h"

namespace neusight {

// One phase (a forward pass, a prefill, a decode step) of one microbatch, `r` its report, on
// the pipeline: the stages cut from its nodes' times, the longest send between them on `link`,
// and the pipeline's time for every microbatch.
struct PipelinedPhase {
  double ms = 0;     // the pipeline's time
  double scale = 1;  // ms over the microbatch's time through every stage (r's)
  std::vector<double> stage_ms;
  double hop_ms = 0;
  double send_bytes = 0;  // the most activation bytes a cut carries, per microbatch
  std::vector<int> cuts;
};
// `prefill`: the microbatches one after another through the stages (a forward pass, a
// prefill; parallel.h pipelined_prefill_ms); else a decode round (pipelined_step_ms).
// `even_layers`: vLLM's even split of the layers (parallel.h inference_stages), else stages
// balanced by time.
PipelinedPhase pipelined(const Analysis& an, const Report& r, const Link& link, int pp, int microbatches, bool prefill,
                         bool even_layers = false);

// The weight bytes each stage of `cuts` holds under `options` (one GPU's before tensor
// parallelism): every weight a node of the stage reads (a tied LM head's table on the first
// stage and on the last, as vLLM keeps them); weights read by no top-level node (a control-flow
// body's) spread evenly.
std::vector<double> stage_weight_bytes(const Graph& g, const Options& options, const std::vector<int>& cuts);

// A forward pass of options.dims.batch samples (inference, --parallel pp > 1) in
// `microbatches` microbatches, `a` and `r` one microbatch's analysis and report on `gpu` (its
// memory one GPU's of tp, all the weights): the pipeline's iteration, its compute, sends and
// bubble, each stage's time and memory.
ParallelReport pipeline_forward(const Analysis& a, const Report& r, const Gpu& gpu, const Options& options,
                                int microbatches);

}  // namespace neusight
