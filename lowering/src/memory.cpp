// memory.cpp - data-movement ops (bytes moved, no math), free views, collectives.
#include <algorithm>

#include "internal.h"

namespace neusight::lowering_detail {
namespace {

double tensor_bytes(const LowerCtx& c, const TensorInfo* t) { return t ? double(numel(t)) * elem_bytes(c.dtype(t)) : 0; }

double outputs_bytes(const LowerCtx& c) {
  double b = 0;
  for (size_t i = 0; i < c.n.outputs.size(); ++i) b += tensor_bytes(c, c.outp(i));
  return b;
}

double inputs_bytes(const LowerCtx& c, size_t from = 0, size_t to = SIZE_MAX) {
  double b = 0;
  for (size_t i = from; i < std::min(to, c.n.inputs.size()); ++i) b += tensor_bytes(c, c.in(i));
  return b;
}

// How much a memory op reads.
enum class Reads {
  inputs,       // every input once (transpose, concat, cast, pad, where, copy ...)
  first_input,  // the data input only (expand, tile, resize: the rest are shapes/scales)
  output,       // as much as it writes (slice, gather: the selected elements) + indices
  nothing,      // writes only (constant fills, range, random)
};

void emit_memory(LowerCtx& c, const std::string& op, Reads reads) {
  const TensorInfo* y = c.outp(0);
  if (!y || !y->fully_known()) {
    c.unknown("shapes not inferred");
    return;
  }
  Kernel k = c.base(KernelClass::memory, op);
  rows_cols(y, k.rows, k.cols);
  const double out = outputs_bytes(c);
  double in = 0;
  switch (reads) {
    case Reads::inputs: in = inputs_bytes(c); break;
    case Reads::first_input: in = tensor_bytes(c, c.in(0)); break;
    case Reads::output: in = out + inputs_bytes(c, 1); break;  // selected data + indices/starts
    case Reads::nothing: in = 0; break;
  }
  for (size_t i = 0; i < c.n.inputs.size(); ++i) k.operand_elems.push_back(numel(c.in(i)));
  k.bytes = in + out;
  c.out.push_back(k);
}

void lower_gather(LowerCtx& c) {
  const TensorInfo* data = c.in(0);
  const bool embedding = data && data->is_initializer && c.n.op_type == "Gather";
  emit_memory(c, embedding ? "embedding" : "gather", Reads::output);
}

void lower_cast(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* y = c.outp(0);
  // A cast to the dtype the tensor already has (or, with a forced compute dtype, between
  // two float types that both become that dtype) moves nothing.
  if (x && y && (x->dtype == y->dtype || (is_float(x->dtype) && is_float(y->dtype) && c.dtype(x) == c.dtype(y))))
    return;
  emit_memory(c, "cast", Reads::inputs);
}

void lower_collective(LowerCtx& c, const std::string& op) {
  const TensorInfo* x = c.in(0);
  Kernel k = c.base(KernelClass::collective, op);
  rows_cols(x, k.rows, k.cols);
  k.bytes = tensor_bytes(c, x);
  k.note = "group size from --parallel";
  c.out.push_back(k);
}

void lower_view(LowerCtx&) {}

}  // namespace

void add_memory_rules(RuleTable& r) {
  auto mem = [](const char* name, Reads reads) {
    const std::string nm = name;
    return [nm, reads](LowerCtx& c) { emit_memory(c, nm, reads); };
  };
  r["Transpose"] = mem("transpose", Reads::inputs);
  r["Concat"] = mem("concat", Reads::inputs);
  r["Split"] = mem("split", Reads::inputs);
  r["Pad"] = mem("pad", Reads::first_input);
  r["Where"] = mem("where", Reads::inputs);
  r["Expand"] = mem("expand", Reads::first_input);
  r["Tile"] = mem("tile", Reads::first_input);
  r["Slice"] = mem("slice", Reads::output);
  r["Gather"] = lower_gather;
  r["GatherElements"] = mem("gather", Reads::output);
  r["GatherND"] = mem("gather", Reads::output);
  r["Compress"] = mem("gather", Reads::inputs);
  r["ScatterND"] = mem("scatter", Reads::inputs);
  r["ScatterElements"] = mem("scatter", Reads::inputs);
  r["Scatter"] = mem("scatter", Reads::inputs);
  r["Cast"] = lower_cast;
  r["CastLike"] = lower_cast;
  r["Resize"] = mem("resize", Reads::first_input);
  r["Upsample"] = mem("resize", Reads::first_input);
  r["DepthToSpace"] = mem("transpose", Reads::inputs);
  r["SpaceToDepth"] = mem("transpose", Reads::inputs);
  r["Trilu"] = mem("trilu", Reads::first_input);
  r["ReverseSequence"] = mem("copy", Reads::first_input);
  r["OneHot"] = mem("onehot", Reads::nothing);
  r["NonZero"] = mem("nonzero", Reads::inputs);
  r["Unique"] = mem("unique", Reads::inputs);
  r["ConstantOfShape"] = mem("fill", Reads::nothing);
  r["EyeLike"] = mem("fill", Reads::nothing);
  r["Range"] = mem("range", Reads::nothing);
  for (const char* op : {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial"})
    r[op] = mem("random", Reads::nothing);
  for (const char* op : {"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Shape", "Size", "Constant",
                         "Optional", "OptionalGetElement", "OptionalHasElement", "SequenceConstruct", "SequenceAt",
                         "SequenceEmpty", "StopGradient"})
    r[op] = lower_view;
  // Collectives (com.microsoft contrib ops and the names exporters use).
  for (const char* op : {"AllReduce", "NcclAllReduce", "AllGather", "NcclAllGather", "ReduceScatter",
                         "NcclReduceScatter", "AllToAll", "Send", "Recv"}) {
    std::string nm = op;
    if (nm.rfind("Nccl", 0) == 0) nm = nm.substr(4);
    std::transform(nm.begin(), nm.end(), nm.begin(), ::tolower);
    r[op] = [nm](LowerCtx& c) { lower_collective(c, nm); };
  }
}

}  // namespace neusight::lowering_detail
