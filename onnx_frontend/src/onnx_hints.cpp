// onnx_hints.cpp - run ONNX's own shape inference as a fallback source of shape hints.
//
// Debian's ONNX 1.12 knows opsets up to 17 and silently infers nothing for newer ones, so
// its results are hints only: shape_inference uses them for tensors its own rules leave
// unknown and never lets them override a rule.
#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <set>
#include <vector>

#include "onnx_proto.h"

namespace neusight {
namespace {

// Initializers up to this many elements travel with their data (ONNX's data propagation
// reads shape tensors from them); larger ones only as typed inputs.
constexpr int64_t kMaxCopiedElements = 4096;

TensorInfo info_from_type(const std::string& name, const onnx::TypeProto& type) {
  TensorInfo t;
  t.name = name;
  if (!type.has_tensor_type()) return t;
  const auto& tt = type.tensor_type();
  t.dtype = static_cast<DType>(tt.elem_type());
  if (!tt.has_shape()) return t;
  t.has_shape = true;
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value() && d.dim_value() >= 0) t.shape.push_back(Dim::of(d.dim_value()));
    else if (d.has_dim_param() && !d.dim_param().empty()) t.shape.push_back(Dim::sym(d.dim_param()));
    else t.shape.push_back(Dim{});
  }
  return t;
}


int64_t elements(const onnx::TensorProto& tp) {
  int64_t n = 1;
  for (auto d : tp.dims()) {
    if (d < 0 || d > kMaxCopiedElements) return kMaxCopiedElements + 1;
    n *= d;
    if (n > kMaxCopiedElements) return n;
  }
  return n;
}

// True when a tensor's stored data has exactly the size its dims and element type call for.
// ONNX 1.12 reads initializers and Constant values during inference without that check (a
// short raw_data makes it copy into an empty vector and crash), so a tensor failing it never
// reaches ONNX with its data.
bool data_consistent(const onnx::TensorProto& tp) {
  if (tp.data_location() == onnx::TensorProto::EXTERNAL) return true;  // ONNX never reads it
  int64_t n = 1;
  for (auto d : tp.dims()) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 40) / d)) return false;
    n *= d;
  }
  using T = onnx::TensorProto;
  int64_t width = 0;      // bytes per element in raw_data
  int64_t per_value = 1;  // typed-field values per element
  int typed_count = 0;
  switch (tp.data_type()) {
    case T::FLOAT: width = 4; typed_count = tp.float_data_size(); break;
    case T::COMPLEX64: width = 8; per_value = 2; typed_count = tp.float_data_size(); break;
    case T::DOUBLE: width = 8; typed_count = tp.double_data_size(); break;
    case T::COMPLEX128: width = 16; per_value = 2; typed_count = tp.double_data_size(); break;
    case T::INT64: width = 8; typed_count = tp.int64_data_size(); break;
    case T::UINT32: width = 4; typed_count = tp.uint64_data_size(); break;
    case T::UINT64: width = 8; typed_count = tp.uint64_data_size(); break;
    case T::INT32: width = 4; typed_count = tp.int32_data_size(); break;
    case T::INT16: case T::UINT16: case T::FLOAT16: case T::BFLOAT16:
      width = 2; typed_count = tp.int32_data_size(); break;
    case T::INT8: case T::UINT8: case T::BOOL: width = 1; typed_count = tp.int32_data_size(); break;
    case T::STRING:
      return !tp.has_raw_data() && tp.string_data_size() == n;
    default: return false;
  }
  const int fields = (tp.float_data_size() > 0) + (tp.double_data_size() > 0) + (tp.int64_data_size() > 0) +
                     (tp.uint64_data_size() > 0) + (tp.int32_data_size() > 0) + (tp.string_data_size() > 0) +
                     (tp.has_raw_data() ? 1 : 0);
  if (fields > 1) return false;
  if (tp.has_raw_data()) return static_cast<int64_t>(tp.raw_data().size()) == n * width;
  return typed_count == n * per_value;
}

bool graph_consistent(const onnx::GraphProto& g);

// True when every tensor-valued attribute of these nodes, their subgraphs included, passes
// data_consistent.
bool nodes_consistent(const google::protobuf::RepeatedPtrField<onnx::NodeProto>& nodes) {
  for (const auto& n : nodes)
    for (const auto& a : n.attribute()) {
      if (a.has_t() && !data_consistent(a.t())) return false;
      for (const auto& t : a.tensors())
        if (!data_consistent(t)) return false;
      if (a.has_g() && !graph_consistent(a.g())) return false;
      for (const auto& sg : a.graphs())
        if (!graph_consistent(sg)) return false;
    }
  return true;
}

bool graph_consistent(const onnx::GraphProto& g) {
  for (const auto& t : g.initializer())
    if (!data_consistent(t)) return false;
  return nodes_consistent(g.node());
}

// Drops the shapes of a type, keeping element types (ONNX's checker requires a graph
// output to have a type).
void strip_shape(onnx::TypeProto& t) {
  if (t.has_tensor_type()) t.mutable_tensor_type()->clear_shape();
  else if (t.has_sequence_type()) strip_shape(*t.mutable_sequence_type()->mutable_elem_type());
  else if (t.has_optional_type()) strip_shape(*t.mutable_optional_type()->mutable_elem_type());
}

// Drops stored value_info and output shapes (they may be wrong, and ONNX throws when its
// result disagrees with them) in a graph and every subgraph.
void strip_stored_shapes(onnx::GraphProto& g) {
  g.clear_value_info();
  for (auto& o : *g.mutable_output()) strip_shape(*o.mutable_type());
  for (auto& n : *g.mutable_node())
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) strip_stored_shapes(*a.mutable_g());
      for (auto& sg : *a.mutable_graphs()) strip_stored_shapes(sg);
    }
}

void collect(const onnx::GraphProto& g, std::map<std::string, TensorInfo>& out) {
  auto add = [&](const onnx::ValueInfoProto& vi) {
    if (vi.name().empty() || !vi.type().has_tensor_type()) return;
    out.emplace(vi.name(), info_from_type(vi.name(), vi.type()));
  };
  for (const auto& vi : g.value_info()) add(vi);
  for (const auto& vi : g.output()) add(vi);
  for (const auto& n : g.node())
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect(a.g(), out);
      for (const auto& sg : a.graphs()) collect(sg, out);
    }
}

}  // namespace

std::map<std::string, TensorInfo> onnx_shape_hints(const LoadedModel& loaded, const Graph& bound) {
  std::map<std::string, TensorInfo> hints;
  if (!loaded.proto) return hints;
  const onnx::ModelProto& src = loaded.proto->model;
  // A light copy: graph structure, bound input shapes, small initializers only.
  onnx::ModelProto m;
  m.set_ir_version(std::max<int64_t>(src.ir_version(), 4));
  *m.mutable_opset_import() = src.opset_import();
  *m.mutable_functions() = src.functions();
  const onnx::GraphProto& sg = src.graph();
  onnx::GraphProto& g = *m.mutable_graph();
  g.set_name(sg.name().empty() ? std::string("graph") : sg.name());  // the checker wants a name
  // Nodes in the IR's topological order (ONNX infers in file order).
  std::map<std::string, int> by_output;
  for (int i = 0; i < sg.node_size(); ++i)
    for (const auto& o : sg.node(i).output())
      if (!o.empty()) by_output.emplace(o, i);
  std::vector<bool> taken(static_cast<size_t>(sg.node_size()), false);
  for (const auto& n : loaded.model.graph.nodes) {
    for (const auto& o : n.outputs) {
      auto it = by_output.find(o);
      if (o.empty() || it == by_output.end()) continue;
      if (!taken[static_cast<size_t>(it->second)]) *g.add_node() = sg.node(it->second);
      taken[static_cast<size_t>(it->second)] = true;
      break;
    }
  }
  for (int i = 0; i < sg.node_size(); ++i)
    if (!taken[static_cast<size_t>(i)]) *g.add_node() = sg.node(i);
  *g.mutable_output() = sg.output();
  std::set<std::string> declared;
  for (const auto& tp : sg.initializer()) {
    if (!declared.insert(tp.name()).second) continue;
    if (tp.data_location() != onnx::TensorProto::EXTERNAL && elements(tp) <= kMaxCopiedElements &&
        data_consistent(tp)) {
      *g.add_initializer() = tp;
    } else {
      const TensorInfo* t = bound.find(tp.name());
      onnx::ValueInfoProto& vi = *g.add_input();
      vi.set_name(tp.name());
      if (t) set_value_type(vi, *t);
    }
  }
  for (const auto& vi : sg.input()) {
    if (!declared.insert(vi.name()).second) continue;
    onnx::ValueInfoProto& in = *g.add_input();
    in.set_name(vi.name());
    const TensorInfo* t = bound.find(vi.name());
    if (t && vi.type().has_tensor_type()) set_value_type(in, *t);
    else *in.mutable_type() = vi.type();
  }
  strip_stored_shapes(g);
  // Subgraph initializers and Constant values travel as they are: a malformed one means no
  // hints at all.
  if (!graph_consistent(g)) return hints;
  for (const auto& f : m.functions())
    if (!nodes_consistent(f.node())) return hints;
  // ONNX's inference (Debian's 1.12) is not hardened against malformed graphs (the CI fuzzer
  // crashed it inside InferShapes): only a model its own checker accepts is handed to it.
  // The checker wants a typed, shaped main-graph output: while it checks, an untyped output
  // is a float tensor and a shapeless one a scalar; the stored types come back before the
  // inference.
  std::vector<onnx::TypeProto> stored_types;
  for (auto& o : *g.mutable_output()) {
    stored_types.push_back(o.type());
    onnx::TypeProto* t = o.mutable_type();
    while (t->has_sequence_type() || t->has_optional_type())
      t = t->has_sequence_type() ? t->mutable_sequence_type()->mutable_elem_type() : t->mutable_optional_type()->mutable_elem_type();
    if (t->value_case() == onnx::TypeProto::VALUE_NOT_SET) t->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    if (!t->has_tensor_type()) continue;
    if (t->tensor_type().elem_type() == 0) t->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_tensor_type()->mutable_shape();
  }
  try {
    onnx::checker::check_model(m);
  } catch (const std::exception&) {
    return hints;
  }
  for (int i = 0; i < g.output_size(); ++i) {
    if (stored_types[static_cast<size_t>(i)].value_case() == onnx::TypeProto::VALUE_NOT_SET) g.mutable_output(i)->clear_type();
    else *g.mutable_output(i)->mutable_type() = stored_types[static_cast<size_t>(i)];
  }
  try {
    onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(false, 0, true));
  } catch (const std::exception&) {
    // Whatever was inferred before the failure is still in the graph.
  }
  collect(g, hints);
  for (const auto& name : bound.inputs) hints.erase(name);
  for (const auto& name : bound.initializers) hints.erase(name);
  return hints;
}

}  // namespace neusight
