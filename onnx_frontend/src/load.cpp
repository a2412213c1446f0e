// load.cpp - read ONNX bytes, validate them, convert ModelProto to the graph IR.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <algorithm>
#include <set>
#include <string_view>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "onnx_proto.h"

namespace neusight {
namespace {

constexpr int kMaxSubgraphDepth = 32;
// Most nodes that inlining model-local functions may add to one graph (calls nest, so a small
// file could otherwise expand exponentially).
constexpr size_t kMaxInlinedNodes = size_t(1) << 21;
// Largest integer tensor whose values are kept for shape-value propagation.
constexpr int64_t kMaxKeptIntValues = 4096;

Shape shape_from_proto(const onnx::TensorShapeProto& s) {
  Shape out;
  out.reserve(s.dim_size());
  for (const auto& d : s.dim()) {
    if (d.has_dim_value() && d.dim_value() >= 0)
      out.push_back(Dim::of(d.dim_value()));
    else if (d.has_dim_param() && !d.dim_param().empty())
      out.push_back(Dim::sym(d.dim_param()));
    else
      out.push_back(Dim{});  // unknown or literal -1
  }
  return out;
}

void set_from_type(TensorInfo& t, const onnx::TypeProto& type) {
  if (type.has_sequence_type() || type.has_optional_type()) {
    const bool seq = type.has_sequence_type();
    t.kind = seq ? ValueKind::sequence : ValueKind::optional;
    const auto& elem = seq ? type.sequence_type().elem_type() : type.optional_type().elem_type();
    if (elem.value_case() == onnx::TypeProto::VALUE_NOT_SET) return;
    TensorInfo e;
    set_from_type(e, elem);
    t.dtype = e.dtype;
    t.elements.push_back(std::move(e));
    return;
  }
  if (!type.has_tensor_type()) return;
  const auto& tt = type.tensor_type();
  t.dtype = static_cast<DType>(tt.elem_type());
  if (tt.has_shape()) {
    t.has_shape = true;
    t.shape = shape_from_proto(tt.shape());
  }
}

// Integer values of a small tensor, when present inline; also its float values (`floats`)
// and string values (`strings`) when asked for.
std::optional<std::vector<int64_t>> int_values(const onnx::TensorProto& tp,
                                               std::optional<std::vector<double>>* floats = nullptr,
                                               std::optional<std::vector<std::string>>* strings = nullptr) {
  int64_t n = 1;
  for (auto d : tp.dims()) {
    if (d < 0 || d > kMaxKeptIntValues) return std::nullopt;
    n *= d;
    if (n > kMaxKeptIntValues) return std::nullopt;
  }
  if (tp.data_location() == onnx::TensorProto::EXTERNAL) return std::nullopt;
  std::vector<int64_t> v;
  v.reserve(n);
  const auto dt = tp.data_type();
  if (dt == onnx::TensorProto::INT64) {
    if (tp.has_raw_data()) {
      if (tp.raw_data().size() != static_cast<size_t>(n) * 8) return std::nullopt;
      for (int64_t i = 0; i < n; ++i) {
        int64_t x;
        std::memcpy(&x, tp.raw_data().data() + 8 * i, 8);
        v.push_back(x);
      }
    } else {
      if (tp.int64_data_size() != n) return std::nullopt;
      v.assign(tp.int64_data().begin(), tp.int64_data().end());
    }
  } else if (dt == onnx::TensorProto::INT32 || dt == onnx::TensorProto::INT8 ||
             dt == onnx::TensorProto::UINT8 || dt == onnx::TensorProto::BOOL ||
             dt == onnx::TensorProto::INT16 || dt == onnx::TensorProto::UINT16) {
    if (tp.has_raw_data()) {
      const int width = dt == onnx::TensorProto::INT32 ? 4
                        : (dt == onnx::TensorProto::INT16 || dt == onnx::TensorProto::UINT16) ? 2
                                                                                               : 1;
      if (tp.raw_data().size() != static_cast<size_t>(n) * width) return std::nullopt;
      for (int64_t i = 0; i < n; ++i) {
        const char* p = tp.raw_data().data() + width * i;
        if (width == 4) {
          int32_t x;
          std::memcpy(&x, p, 4);
          v.push_back(x);
        } else if (width == 2) {
          uint16_t x;
          std::memcpy(&x, p, 2);
          v.push_back(dt == onnx::TensorProto::INT16 ? static_cast<int16_t>(x) : x);
        } else {
          v.push_back(dt == onnx::TensorProto::INT8 ? static_cast<int8_t>(*p)
                                                    : static_cast<uint8_t>(*p));
        }
      }
    } else {
      if (tp.int32_data_size() != n) return std::nullopt;
      v.assign(tp.int32_data().begin(), tp.int32_data().end());
    }
  } else if (dt == onnx::TensorProto::FLOAT || dt == onnx::TensorProto::DOUBLE) {
    // Float scalars/vectors sometimes feed shape arithmetic (e.g. Resize scales); keep them
    // only when they are integral.
    std::vector<double> f;
    if (tp.has_raw_data()) {
      const size_t w = dt == onnx::TensorProto::FLOAT ? 4 : 8;
      if (tp.raw_data().size() != static_cast<size_t>(n) * w) return std::nullopt;
      for (int64_t i = 0; i < n; ++i) {
        if (w == 4) {
          float x;
          std::memcpy(&x, tp.raw_data().data() + 4 * i, 4);
          f.push_back(x);
        } else {
          double x;
          std::memcpy(&x, tp.raw_data().data() + 8 * i, 8);
          f.push_back(x);
        }
      }
    } else if (dt == onnx::TensorProto::FLOAT) {
      if (tp.float_data_size() != n) return std::nullopt;
      f.assign(tp.float_data().begin(), tp.float_data().end());
    } else {
      if (tp.double_data_size() != n) return std::nullopt;
      f.assign(tp.double_data().begin(), tp.double_data().end());
    }
    if (floats) *floats = f;
    for (double x : f) {
      // Range first: casting a float outside int64 (or NaN) is undefined behaviour.
      if (!(x >= -9.0e18 && x <= 9.0e18) || x != std::trunc(x)) return std::nullopt;
      v.push_back(static_cast<int64_t>(x));
    }
  } else if (dt == onnx::TensorProto::STRING) {
    if (strings && tp.string_data_size() == n) {
      size_t bytes = 0;
      for (const auto& x : tp.string_data()) bytes += x.size();
      if (bytes <= static_cast<size_t>(kMaxKeptIntValues) * 16)
        *strings = std::vector<std::string>(tp.string_data().begin(), tp.string_data().end());
    }
    return std::nullopt;
  } else {
    return std::nullopt;
  }
  return v;
}

std::shared_ptr<TensorInfo> tensor_from_proto(const onnx::TensorProto& tp) {
  auto t = std::make_shared<TensorInfo>();
  t->name = tp.name();
  t->dtype = static_cast<DType>(tp.data_type());
  t->has_shape = true;
  for (auto d : tp.dims()) {
    if (d < 0) throw InputError("initializer '" + tp.name() + "' has a negative dimension");
    t->shape.push_back(Dim::of(d));
  }
  t->is_initializer = true;
  t->external_data = tp.data_location() == onnx::TensorProto::EXTERNAL;
  t->int_value = int_values(tp, &t->float_value, &t->string_value);
  return t;
}

// Model-local functions (ModelProto.functions), by domain and name. A node that calls one is
// replaced in the IR by the function's body (inlined), like onnxruntime and TensorRT do:
// the body's kernels are what a GPU runs.
struct FunctionTable {
  std::unordered_map<std::string, const onnx::FunctionProto*> by_key;
  static std::string key(const std::string& domain, const std::string& name) {
    return (domain == "ai.onnx" ? std::string() : domain) + '\0' + name;
  }
  const onnx::FunctionProto* find(const std::string& domain, const std::string& name) const {
    if (by_key.empty()) return nullptr;
    auto it = by_key.find(key(domain, name));
    return it == by_key.end() ? nullptr : it->second;
  }
  // How many nodes the body of `f` becomes once every call in it is inlined, saturated at
  // kMaxInlinedNodes + 1, computed without expanding anything. Checks the whole call tree
  // before any of it is expanded: throws on recursion and on calls nested more than
  // kMaxSubgraphDepth deep (the check also bounds this function's own recursion).
  size_t inlined_size(const onnx::FunctionProto* f, const std::string& what) const {
    std::vector<const onnx::FunctionProto*> stack;
    return expansion(f, what, stack).nodes;
  }

 private:
  struct Expansion {
    size_t nodes = 0;  // saturated at kMaxInlinedNodes + 1
    size_t height = 0; // nested calls, `f` included
  };
  mutable std::unordered_map<const onnx::FunctionProto*, Expansion> memo_;
  Expansion expansion(const onnx::FunctionProto* f, const std::string& what,
                      std::vector<const onnx::FunctionProto*>& stack) const {
    if (std::find(stack.begin(), stack.end(), f) != stack.end())
      throw InputError(what + ": function '" + f->name() + "' calls itself");
    auto it = memo_.find(f);
    if (stack.size() >= size_t(kMaxSubgraphDepth) ||
        (it != memo_.end() && stack.size() + it->second.height > size_t(kMaxSubgraphDepth)))
      throw InputError(what + ": function calls nested too deeply (function '" + f->name() + "')");
    if (it != memo_.end()) return it->second;
    stack.push_back(f);
    Expansion e;
    for (const auto& node : f->node()) {
      const onnx::FunctionProto* g = find(node.domain(), node.op_type());
      const Expansion sub = g ? expansion(g, what, stack) : Expansion{1, 0};
      e.nodes = std::min(e.nodes + sub.nodes, kMaxInlinedNodes + 1);
      e.height = std::max(e.height, sub.height);
    }
    stack.pop_back();
    ++e.height;
    memo_[f] = e;
    return e;
  }
};

// Renames the outer-scope names a subgraph reads (If/Loop/Scan bodies inside a function).
void rename_in_subgraph(onnx::GraphProto& g, const std::unordered_map<std::string, std::string>& ren) {
  for (auto& n : *g.mutable_node()) {
    for (auto& in : *n.mutable_input()) {
      auto it = ren.find(in);
      if (it != ren.end()) in = it->second;
    }
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) rename_in_subgraph(*a.mutable_g(), ren);
      for (auto& sg : *a.mutable_graphs()) rename_in_subgraph(sg, ren);
    }
  }
  for (auto& o : *g.mutable_output()) {
    auto it = ren.find(o.name());
    if (it != ren.end()) o.set_name(it->second);
  }
}

// The body of function `f` as called by node `call` (named `call_name` in the IR): formal
// inputs and outputs bound to the call's names (missing optional ones to ""), every internal
// name and node name prefixed with "<call_name>/", attribute references (ref_attr_name)
// resolved from the call's attributes (left out when the call does not set them).
std::vector<onnx::NodeProto> expand_call(const onnx::NodeProto& call, const onnx::FunctionProto& f,
                                         const std::string& call_name) {
  const std::string prefix = call_name + "/";
  std::unordered_map<std::string, std::string> ren;
  for (int i = 0; i < f.input_size(); ++i) ren[f.input(i)] = i < call.input_size() ? call.input(i) : std::string();
  for (int i = 0; i < f.output_size(); ++i)
    ren[f.output(i)] = i < call.output_size() && !call.output(i).empty() ? call.output(i) : prefix + f.output(i);
  for (const auto& n : f.node())
    for (const auto& o : n.output())
      if (!o.empty() && !ren.count(o)) ren[o] = prefix + o;
  std::unordered_map<std::string, const onnx::AttributeProto*> call_attrs;
  for (const auto& a : call.attribute()) call_attrs[a.name()] = &a;
  std::vector<onnx::NodeProto> body;
  body.reserve(static_cast<size_t>(f.node_size()));
  int idx = 0;
  for (const auto& src : f.node()) {
    onnx::NodeProto n;
    n.set_op_type(src.op_type());
    n.set_domain(src.domain());
    n.set_doc_string(src.doc_string());
    n.set_name(prefix + (src.name().empty() ? src.op_type() + "_" + std::to_string(idx) : src.name()));
    for (const auto& in : src.input()) {
      auto it = ren.find(in);
      n.add_input(it == ren.end() ? in : it->second);
    }
    for (const auto& o : src.output()) n.add_output(o.empty() ? o : ren.at(o));
    for (const auto& a : src.attribute()) {
      if (!a.ref_attr_name().empty()) {
        auto it = call_attrs.find(a.ref_attr_name());
        if (it == call_attrs.end()) continue;
        onnx::AttributeProto* b = n.add_attribute();
        *b = *it->second;
        b->set_name(a.name());
        continue;
      }
      onnx::AttributeProto* b = n.add_attribute();
      *b = a;
      if (b->has_g()) rename_in_subgraph(*b->mutable_g(), ren);
      for (auto& sg : *b->mutable_graphs()) rename_in_subgraph(sg, ren);
    }
    body.push_back(std::move(n));
    ++idx;
  }
  return body;
}

void convert_graph(const onnx::GraphProto& gp, Graph& g, int depth, const std::string& what, const FunctionTable& fns);

Attribute convert_attribute(const onnx::AttributeProto& ap, int depth, const std::string& what,
                            const FunctionTable& fns) {
  Attribute a;
  switch (ap.type()) {
    case onnx::AttributeProto::FLOAT: a.kind = Attribute::Kind::f; a.f = ap.f(); break;
    case onnx::AttributeProto::INT: a.kind = Attribute::Kind::i; a.i = ap.i(); break;
    case onnx::AttributeProto::STRING: a.kind = Attribute::Kind::s; a.s = ap.s(); break;
    case onnx::AttributeProto::TENSOR:
      a.kind = Attribute::Kind::t;
      a.t = tensor_from_proto(ap.t());
      break;
    case onnx::AttributeProto::GRAPH:
      a.kind = Attribute::Kind::g;
      a.graphs.push_back(std::make_shared<Graph>());
      convert_graph(ap.g(), *a.graphs.back(), depth + 1, what, fns);
      break;
    case onnx::AttributeProto::FLOATS:
      a.kind = Attribute::Kind::floats;
      a.floats.assign(ap.floats().begin(), ap.floats().end());
      break;
    case onnx::AttributeProto::INTS:
      a.kind = Attribute::Kind::ints;
      a.ints.assign(ap.ints().begin(), ap.ints().end());
      break;
    case onnx::AttributeProto::STRINGS:
      a.kind = Attribute::Kind::strings;
      a.strings.assign(ap.strings().begin(), ap.strings().end());
      break;
    case onnx::AttributeProto::GRAPHS:
      a.kind = Attribute::Kind::graphs;
      for (const auto& sg : ap.graphs()) {
        a.graphs.push_back(std::make_shared<Graph>());
        convert_graph(sg, *a.graphs.back(), depth + 1, what, fns);
      }
      break;
    default:
      // Old files leave `type` unset; infer it from what is filled in.
      if (ap.has_f()) { a.kind = Attribute::Kind::f; a.f = ap.f(); }
      else if (ap.has_i()) { a.kind = Attribute::Kind::i; a.i = ap.i(); }
      else if (ap.has_s()) { a.kind = Attribute::Kind::s; a.s = ap.s(); }
      else if (ap.ints_size()) { a.kind = Attribute::Kind::ints; a.ints.assign(ap.ints().begin(), ap.ints().end()); }
      else if (ap.floats_size()) { a.kind = Attribute::Kind::floats; a.floats.assign(ap.floats().begin(), ap.floats().end()); }
      else if (ap.has_t()) { a.kind = Attribute::Kind::t; a.t = tensor_from_proto(ap.t()); }
      break;
  }
  return a;
}

// Kahn's algorithm; nodes whose inputs are produced later are moved after their producers.
// Throws InputError on a cycle.
void topo_sort(Graph& g, const std::string& what) {
  const size_t n = g.nodes.size();
  // Views into the nodes' own output names (not moved before the reorder at the end).
  std::unordered_map<std::string_view, size_t> producer;
  producer.reserve(n * 2);
  for (size_t i = 0; i < n; ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer.emplace(o, i);  // first producer wins for duplicates
  std::vector<std::vector<size_t>> users(n);
  std::vector<size_t> indeg(n, 0);
  bool sorted = true;
  std::vector<size_t> deps;
  for (size_t i = 0; i < n; ++i) {
    deps.clear();
    for (const auto& in : g.nodes[i].inputs) {
      if (in.empty()) continue;
      auto it = producer.find(in);
      if (it != producer.end() && it->second != i) deps.push_back(it->second);
      else if (it != producer.end() && it->second == i)
        throw InputError(what + ": graph has a cycle (node '" + g.nodes[i].name + "' consumes its own output)");
    }
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    for (size_t d : deps) {
      users[d].push_back(i);
      ++indeg[i];
      if (d > i) sorted = false;
    }
  }
  if (sorted) return;
  std::vector<size_t> order;
  order.reserve(n);
  std::vector<size_t> ready;
  for (size_t i = n; i-- > 0;)
    if (indeg[i] == 0) ready.push_back(i);
  // Keep original order among ready nodes: use a min-heap via sorted vector.
  std::set<size_t> q(ready.begin(), ready.end());
  while (!q.empty()) {
    size_t i = *q.begin();
    q.erase(q.begin());
    order.push_back(i);
    for (size_t u : users[i])
      if (--indeg[u] == 0) q.insert(u);
  }
  if (order.size() != n) throw InputError(what + ": graph has a cycle");
  std::vector<Node> nodes;
  nodes.reserve(n);
  for (size_t i : order) nodes.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(nodes);
}

void convert_graph(const onnx::GraphProto& gp, Graph& g, int depth, const std::string& what, const FunctionTable& fns) {
  if (depth > kMaxSubgraphDepth) throw InputError(what + ": subgraphs nested too deeply");
  g.name = gp.name();
  for (const auto& tp : gp.initializer()) {
    auto t = tensor_from_proto(tp);
    g.initializers.push_back(tp.name());
    g.tensors[tp.name()] = std::move(*t);
  }
  for (const auto& sp : gp.sparse_initializer()) {
    auto t = tensor_from_proto(sp.values());
    t->name = sp.values().name();
    t->shape.clear();
    for (auto d : sp.dims()) t->shape.push_back(Dim::of(d));
    g.initializers.push_back(t->name);
    g.tensors[t->name] = std::move(*t);
  }
  for (const auto& vi : gp.input()) {
    TensorInfo& t = g.tensor(vi.name());
    if (t.is_initializer) {
      if (!t.has_shape) set_from_type(t, vi.type());
      continue;  // old IR lists initializers as inputs too
    }
    set_from_type(t, vi.type());
    t.is_graph_input = true;
    g.inputs.push_back(vi.name());
  }
  for (const auto& vi : gp.output()) {
    g.outputs.push_back(vi.name());
    TensorInfo& t = g.tensor(vi.name());
    // Stored output types are kept only as a dtype hint; shapes are re-inferred.
    if (t.dtype == DType::undefined && vi.type().has_tensor_type())
      t.dtype = static_cast<DType>(vi.type().tensor_type().elem_type());
  }
  g.nodes.reserve(gp.node_size());
  // Hashed sets (ordered ones cost a string comparison per tree level on long, shared
  // prefixes); `produced` holds views into the protobuf's names, alive during the load.
  std::unordered_set<std::string> names;
  names.reserve(static_cast<size_t>(gp.node_size()));
  std::unordered_set<std::string_view> produced;
  produced.reserve(static_cast<size_t>(gp.node_size()) * 2 + static_cast<size_t>(gp.initializer_size()) +
                   static_cast<size_t>(gp.input_size()));
  for (const auto& in : gp.input()) produced.insert(in.name());
  for (const auto& in : gp.initializer()) produced.insert(in.name());
  for (const auto& sp : gp.sparse_initializer()) produced.insert(sp.values().name());
  // Bodies of inlined function calls: kept alive (stable addresses) while `produced` views them.
  std::deque<onnx::NodeProto> expanded;
  size_t inlined = 0;
  // Adds one node, or the body of the function it calls (recursively).
  std::function<void(const onnx::NodeProto&, const std::string&, const std::string&)> add_node =
      [&](const onnx::NodeProto& np, const std::string& fallback_name, const std::string& inlined_from) {
        std::string name = np.name();
        if (name.empty() || names.count(name)) name = fallback_name;
        while (names.count(name)) name += "_";
        names.insert(name);
        if (const onnx::FunctionProto* f = fns.find(np.domain(), np.op_type())) {
          // A graph's own call: its whole call tree is checked (recursion, nesting depth) and
          // counted here, before anything is expanded; nested calls need no further check.
          if (inlined_from.empty()) inlined += fns.inlined_size(f, what);
          if (inlined > kMaxInlinedNodes)
            throw InputError(what + ": inlining its functions would add more than " + std::to_string(kMaxInlinedNodes) +
                             " nodes");
          const std::string outer = inlined_from.empty() ? name : inlined_from;
          for (auto& body_node : expand_call(np, *f, name)) {
            expanded.push_back(std::move(body_node));
            const onnx::NodeProto& b = expanded.back();
            add_node(b, b.name(), outer);
          }
          return;
        }
        Node n;
        n.op_type = np.op_type();
        n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
        n.name = std::move(name);
        n.inlined_from = inlined_from;
        n.inputs.assign(np.input().begin(), np.input().end());
        n.outputs.assign(np.output().begin(), np.output().end());
        for (const auto& o : np.output()) {
          if (o.empty()) continue;
          if (!produced.insert(o).second)
            throw InputError(what + ": tensor '" + o + "' is produced twice (node '" + n.name + "')");
          g.tensor(o);
        }
        for (const auto& ap : np.attribute()) n.attributes[ap.name()] = convert_attribute(ap, depth, what, fns);
        n.doc_string = np.doc_string();
        g.nodes.push_back(std::move(n));
      };
  int idx = 0;
  for (const auto& np : gp.node()) {
    add_node(np, np.op_type() + "_" + std::to_string(idx), std::string());
    ++idx;
  }
  // Dangling edges: at the top level every consumed name must be produced, fed or stored
  // (subgraphs may read outer-scope names, checked where they are defined).
  if (depth == 0) {
    for (const auto& n : g.nodes)
      for (const auto& in : n.inputs)
        if (!in.empty() && !produced.count(in))
          throw InputError(what + ": node '" + n.name + "' reads '" + in +
                           "', which no node produces and is neither a graph input nor an initializer");
  }
  topo_sort(g, what);
}

}  // namespace

Model to_ir(const ProtoHolder& holder, const std::string& path) {
  const onnx::ModelProto& mp = holder.model;
  const std::string what = path.empty() ? std::string("model") : path;
  if (!mp.has_graph()) throw InputError(what + ": not an ONNX model (no graph)");
  Model m;
  m.path = path;
  m.ir_version = mp.ir_version();
  m.producer_name = mp.producer_name();
  for (const auto& kv : mp.metadata_props()) m.metadata[kv.key()] = kv.value();
  for (const auto& op : mp.opset_import())
    m.opsets[op.domain() == "ai.onnx" ? "" : op.domain()] = op.version();
  if (m.opsets.empty()) m.opsets[""] = 1;
  FunctionTable fns;
  for (const auto& f : mp.functions()) fns.by_key.emplace(FunctionTable::key(f.domain(), f.name()), &f);
  convert_graph(mp.graph(), m.graph, 0, what, fns);
  if (m.graph.nodes.empty() && m.graph.outputs.empty())
    throw InputError(what + ": not an ONNX model (empty graph)");
  return m;
}

LoadedModel load_model_from_bytes(const std::string& bytes, const std::string& what) {
  if (bytes.empty()) throw InputError(what + ": empty file, not an ONNX model");
  if (bytes.size() > INT32_MAX)
    throw InputError(what + ": model larger than 2 GiB; store weights as external data");
  auto holder = std::make_shared<ProtoHolder>();
  google::protobuf::io::ArrayInputStream raw(bytes.data(), static_cast<int>(bytes.size()));
  google::protobuf::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(INT32_MAX);
  coded.SetRecursionLimit(200);
  if (!holder->model.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
    throw InputError(what + ": not a valid ONNX model (protobuf parse failed; truncated or not ONNX)");
  if (!holder->model.has_graph() || holder->model.ir_version() <= 0)
    throw InputError(what + ": not an ONNX model (no graph or IR version)");
  LoadedModel lm;
  lm.model = to_ir(*holder, what);
  lm.proto = std::move(holder);
  return lm;
}

LoadedModel load_model(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    throw InputError(path + ": cannot open model: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw InputError(path + ": is a directory, not an ONNX file");
  if (st.st_size > INT32_MAX)
    throw InputError(path + ": model file larger than 2 GiB; store weights as external data");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path + ": cannot open model: " + std::strerror(errno));
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  f.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (static_cast<size_t>(f.gcount()) != bytes.size()) throw InputError(path + ": cannot read model");
  LoadedModel lm = load_model_from_bytes(bytes, path);
  lm.model.path = path;
  return lm;
}

namespace {

LoadedModel wrap(std::shared_ptr<ProtoHolder> holder, const std::string& what) {
  LoadedModel lm;
  lm.model = to_ir(*holder, what);
  lm.proto = std::move(holder);
  return lm;
}

}  // namespace

LoadedModel load_model_from_proto(const onnx::ModelProto& proto, const std::string& what) {
  auto holder = std::make_shared<ProtoHolder>();
  holder->model = proto;
  return wrap(std::move(holder), what);
}

LoadedModel load_model_from_proto(onnx::ModelProto&& proto, const std::string& what) {
  auto holder = std::make_shared<ProtoHolder>();
  holder->model = std::move(proto);
  return wrap(std::move(holder), what);
}

}  // namespace neusight
