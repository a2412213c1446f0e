// onnx_frontend.h - load and validate ONNX models into the graph IR, write annotated ONNX.
//
// Takes: a path to a .onnx file, its bytes, or a caller's onnx::ModelProto.
// Gives: neusight::Model (graph.h). External-data weight files are never opened.
// Also: writes a copy of the original model with per-node annotations (the only way back
// to protobuf for later stages). Protobuf and the ONNX headers are private to the frontend:
// this header only forward-declares onnx::ModelProto for callers that already hold one.
#pragma once

#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "neusight/graph.h"

namespace onnx {
class ModelProto;
}

namespace neusight {

// Parsed protobuf kept alive next to the IR so that an annotated copy can be written
// without re-reading the file. Opaque to everything outside the frontend.
struct ProtoHolder;

struct LoadedModel {
  Model model;
  std::shared_ptr<ProtoHolder> proto;
};

// Reads and validates a model file. Throws InputError with a one-line message naming the
// file for missing paths, directories, empty/truncated/non-ONNX bytes, cyclic graphs.
LoadedModel load_model(const std::string& path);

// Parses model bytes (for fuzzing and tests). `what` names the source in errors.
LoadedModel load_model_from_bytes(const std::string& bytes, const std::string& what);

// Wraps a caller's ModelProto (copied once, or moved) into a LoadedModel; `what` names it in
// errors and becomes Model::path. Throws InputError as load_model does.
LoadedModel load_model_from_proto(const onnx::ModelProto& proto, const std::string& what);
LoadedModel load_model_from_proto(onnx::ModelProto&& proto, const std::string& what);

// Two models as one graph, the first's nodes before the second's (onnx.compose.merge_models):
// `connect` maps inputs of the second to the first's outputs that feed them (those inputs
// disappear) or to the first's inputs that stand for them (declared once, by the first, under
// the second's name). The first model's other values and node names that the second also uses
// take `prefix`. The default domain's opsets must agree. `what` names the result. InputError
// otherwise.
LoadedModel merge_models(const LoadedModel& first, const LoadedModel& second,
                         const std::map<std::string, std::string>& connect, const std::string& prefix,
                         const std::string& what);

// Shapes and dtypes that ONNX's own shape inference (with data propagation) gives for the
// model when its graph inputs have the shapes in `bound` (dims already bound). Keyed by
// tensor name, subgraph tensors included. Debian's ONNX 1.12 knows opsets <= 17 and infers
// nothing for newer ops, so these are hints for tensors the project's rules leave unknown.
// Never throws for a bad model (returns what was inferred before the failure).
std::map<std::string, TensorInfo> onnx_shape_hints(const LoadedModel& loaded, const Graph& bound);

// Whether the values of initializer `name` (float: FP32, FP16, BF16, FP64; or a quantized
// weight's stored INT8, UINT8 or FP8 values, a stored 0 taken as a zero weight) are pruned 2:4 along
// `axis` (a GEMM weight's reduction dim: a MatMul B's rows, a convolution's input channels):
// of every four consecutive elements along it at least two are zero (the pattern sparse tensor
// cores run; the dim a multiple of 4). nullopt when the model holds no such initializer with
// its values inline (external data is never read).
std::optional<bool> initializer_pruned_2_4(const LoadedModel& loaded, const std::string& name, int axis);

// Whether every value of initializer `name` is zero (the types of initializer_pruned_2_4: a
// quantized weight's zero point is stored in its weight's type). nullopt when the model holds no
// such initializer with its values inline.
std::optional<bool> initializer_all_zero(const LoadedModel& loaded, const std::string& name);

// Annotations for the written copy.
struct NodeAnnotation {
  std::string node_name;
  std::string doc;          // appended to the node's doc_string
  double latency_ms = 0;    // summed over the body when the node called an inlined function
};
struct AnnotatedWrite {
  std::vector<NodeAnnotation> nodes;
  std::vector<std::pair<std::string, std::string>> metadata;  // model metadata_props
  bool write_value_info = true;  // store every inferred tensor shape (Netron shows them)
};

// Writes the original model with annotations to `out_path` (temporary file, then rename;
// nothing is left behind on failure). External-data locations are rewritten relative to
// the new directory so they still resolve. Throws RuntimeError when it cannot write.
void write_annotated(const LoadedModel& loaded, const Graph& inferred, const AnnotatedWrite& ann,
                     const std::string& out_path);

// Writes the model as loaded or built (atomically). With `external_data_location`, every
// initializer stored as external data points at that file instead (model_builder exports,
// whose weights are stubs). Throws RuntimeError when it cannot write.
void write_model(const LoadedModel& model, const std::string& out_path, const std::string& external_data_location = "");

// Atomically writes a text file (temporary file, then rename). Throws RuntimeError.
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace neusight
