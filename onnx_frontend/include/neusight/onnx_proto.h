// onnx_proto.h - the frontend's protobuf side, for code that already holds a ModelProto
// (the public analyze() entry point, the model builder). Includes ONNX headers.
#pragma once

#include <onnx/onnx_pb.h>

#include "neusight/onnx_frontend.h"

namespace neusight {

struct ProtoHolder {
  onnx::ModelProto model;
};

// Writes a tensor's dtype and (possibly symbolic) shape into a ValueInfoProto.
void set_value_type(onnx::ValueInfoProto& vi, const TensorInfo& t);

// Wraps an existing ModelProto (copied once) into a LoadedModel.
LoadedModel load_model_from_proto(const onnx::ModelProto& proto, const std::string& what);

}  // namespace neusight
