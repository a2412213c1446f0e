// onnx_proto.h - the frontend's protobuf side: the parsed ModelProto behind a LoadedModel.
// Not installed; the frontend's sources and the unit tests (which inspect the proto a model
// was loaded from or built into) include it.
#pragma once

#include <onnx/onnx_pb.h>

#include "neusight/onnx_frontend.h"

namespace neusight {

struct ProtoHolder {
  onnx::ModelProto model;
};

// Converts the protobuf held by `proto` into the IR; `path` names it in errors.
Model to_ir(const ProtoHolder& proto, const std::string& path);

// Writes a tensor's dtype and (possibly symbolic) shape into a ValueInfoProto.
void set_value_type(onnx::ValueInfoProto& vi, const TensorInfo& t);

// Serialises the ModelProto held by `proto` to `out_path` (atomically).
void write_proto(const ProtoHolder& proto, const std::string& out_path);

}  // namespace neusight
