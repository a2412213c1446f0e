// roofline_options.h - the analyze() options of a test run priced by the plain roofline.
#pragma once

#include <cstdint>
#include <string>

#include "neusight/neusight.h"
#include "neusight/parallel.h"

namespace neusight::test {

// Options for a roofline-priced run of `batch` x `seq` in `mode`, under `parallel` ("" for one GPU).
inline Options roofline_options(int64_t batch, int64_t seq, Mode mode = Mode::inference, const std::string& parallel = "") {
  Options o;
  o.dims.batch = batch;
  o.dims.seq = seq;
  o.mode = mode;
  o.predictor = PredictorKind::roofline;
  if (!parallel.empty()) o.parallel = parse_parallel(parallel);
  return o;
}

}  // namespace neusight::test
