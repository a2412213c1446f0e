// neusight.h - the public entry point: analyse an ONNX model for a GPU.
//
//   #include <neusight/neusight.h>
//   neusight::Options opts; opts.dims.batch = 8; opts.dims.seq = 512;
//   opts.dims.shapes["pixel_values"] = {8, 3, 224, 224};  // --shape: a whole input shape
//   neusight::Report r = neusight::analyze(model_proto, neusight::GpuDatabase::builtin().resolve("b200"), opts);
//   printf("%.3f ms\n", r.e2e_latency_ms);
//
// Link with the `neusight::neusight` CMake target (find_package(neusight)).
#pragma once

#include <string>

#include "neusight/gpu.h"
#include "neusight/lowering.h"
#include "neusight/onnx_frontend.h"
#include "neusight/parallel.h"
#include "neusight/precision.h"
#include "neusight/predictor.h"
#include "neusight/report.h"
#include "neusight/shape_inference.h"
#include "neusight/tiling.h"

namespace onnx {
class ModelProto;
}

namespace neusight {

struct Options {
  DimBindings dims;
  Mode mode = Mode::inference;
  Fusion fusion = Fusion::eager;
  DType dtype = DType::undefined;  // undefined = auto (from the model's tensors)
  std::string predictor = "neusight";  // "neusight" | "neusight-paper" | "roofline" (make_predictor)
  std::string weights_dir;             // "" = built-in weights
  // What the predicted kernel times include (precision.h). "device" (the default for whole
  // models): a model's kernels run back to back in one stream, so each launch overlaps the
  // kernel before it and only device time adds up. "eager": every kernel as if timed alone
  // from PyTorch, like the training data (framework dispatch in every small kernel); the
  // `kernels` command always predicts in this convention.
  Timing timing = Timing::device;
  ParallelConfig parallel;             // multi-GPU training (--parallel); dims.batch is then global
};

// Runs every stage. Throws InputError / RuntimeError (graph.h).
Report analyze(const onnx::ModelProto& model, const Gpu& gpu, const Options& options);
Report analyze(const LoadedModel& model, const Gpu& gpu, const Options& options);

// The shape-inferred graph of the last stage, for writers that need tensor shapes.
struct Analysis {
  Graph graph;  // shapes inferred, dims bound
  KernelList kernels;
  ShapeResult shapes;
};
Analysis prepare(const LoadedModel& model, const Options& options);
Report predict(const Analysis& analysis, const Model& model, const Gpu& gpu, const Options& options);

const char* version();

}  // namespace neusight
