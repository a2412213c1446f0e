// write.cpp - write the original model back with annotations, atomically.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unordered_map>
#include <unordered_set>

#include "onnx_proto.h"

namespace neusight {
namespace fs = std::filesystem;

void write_file_atomic(const std::string& path, const std::string& content) {
  if (path.empty()) throw RuntimeError("output path is empty");
  fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) throw RuntimeError(path + ": is a directory, cannot write output");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw RuntimeError(path + ": cannot write output: " + std::strerror(errno));
    f.write(content.data(), static_cast<std::streamsize>(content.size()));
    f.flush();
    if (!f) {
      f.close();
      std::remove(tmp.c_str());
      throw RuntimeError(path + ": cannot write output: " + std::strerror(errno));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw RuntimeError(path + ": cannot write output: " + why);
  }
}

namespace {
// A latency for the annotation text (6 significant digits).
std::string fmt_ms(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Sequence / optional values: the type of what they hold (one element type for a sequence:
// its elements' common type; ONNX has no per-element types).
void set_type(onnx::TypeProto& type, const TensorInfo& t) {
  if (t.kind != ValueKind::tensor) {
    onnx::TypeProto& elem = t.kind == ValueKind::sequence ? *type.mutable_sequence_type()->mutable_elem_type()
                                                          : *type.mutable_optional_type()->mutable_elem_type();
    TensorInfo e;
    e.dtype = t.dtype;
    if (!t.elements.empty()) {
      e = t.elements[0];
      for (size_t i = 1; i < t.elements.size(); ++i) {  // dims the elements disagree on are left out
        const TensorInfo& o = t.elements[i];
        if (o.kind != e.kind || o.has_shape != e.has_shape || o.shape.size() != e.shape.size()) {
          e.has_shape = false;
          break;
        }
        for (size_t k = 0; k < e.shape.size(); ++k)
          if (o.shape[k].value != e.shape[k].value || o.shape[k].param != e.shape[k].param) e.shape[k] = Dim{};
      }
    }
    set_type(elem, e);
    return;
  }
  auto* tt = type.mutable_tensor_type();
  tt->set_elem_type(static_cast<int>(t.dtype == DType::tf32 ? DType::f32 : t.dtype));
  if (!t.has_shape) return;
  auto* sh = tt->mutable_shape();
  for (const auto& d : t.shape) {
    auto* dp = sh->add_dim();
    if (d.known()) dp->set_dim_value(d.value);
    else if (!d.param.empty()) dp->set_dim_param(d.param);
  }
}
}  // namespace

void set_value_type(onnx::ValueInfoProto& vi, const TensorInfo& t) { set_type(*vi.mutable_type(), t); }

namespace {

// Rewrites external-data locations so that they resolve from the new model's directory.
void relocate_external(onnx::TensorProto& tp, const fs::path& from_dir, const fs::path& to_dir) {
  if (tp.data_location() != onnx::TensorProto::EXTERNAL) return;
  for (auto& kv : *tp.mutable_external_data()) {
    if (kv.key() != "location") continue;
    fs::path loc(kv.value());
    if (loc.is_absolute()) continue;
    std::error_code ec;
    fs::path abs = fs::weakly_canonical(from_dir / loc, ec);
    if (ec) continue;
    fs::path rel = abs.lexically_relative(fs::weakly_canonical(to_dir, ec));
    kv.set_value(rel.empty() ? abs.string() : rel.string());
  }
}

// Appends `add` to a node's doc_string on a line of its own.
void append_doc(onnx::NodeProto& np, const std::string& add) {
  std::string doc = np.doc_string();
  if (!doc.empty()) doc += "\n";
  np.set_doc_string(doc + add);
}

// The nodes of the control-flow bodies `np` (the IR's node `ir`) holds: each gets the
// annotation of the kernels it ran, which the analysis names "<node>/<body node>" (a nested
// body a level more), and a body node holding bodies of its own the sum of theirs. A body
// node is matched to the IR's by an output name (unique in its graph), as its name may be
// empty in the file. Returns the latency annotated inside `np`'s bodies.
double annotate_bodies(onnx::NodeProto& np, const Node& ir, const std::string& prefix,
                       const std::unordered_map<std::string, const NodeAnnotation*>& by_name, int depth) {
  double sum = 0;
  if (depth > 16) return sum;
  for (auto& a : *np.mutable_attribute()) {
    if (!a.has_g()) continue;
    const Attribute* ia = ir.attr(a.name());
    if (!ia || ia->graphs.empty() || !ia->graphs[0]) continue;
    const Graph& body = *ia->graphs[0];
    std::unordered_map<std::string, const Node*> by_output;
    for (const auto& n : body.nodes)
      for (const auto& o : n.outputs)
        if (!o.empty()) by_output.emplace(o, &n);
    for (auto& bp : *a.mutable_g()->mutable_node()) {
      const Node* bn = nullptr;
      for (const auto& o : bp.output())
        if (auto it = by_output.find(o); !bn && it != by_output.end()) bn = it->second;
      if (!bn) continue;
      if (bp.name().empty()) bp.set_name(bn->name);
      const std::string key = prefix + bn->name;
      const double inner = annotate_bodies(bp, *bn, key + "/", by_name, depth + 1);
      if (auto it = by_name.find(key); it != by_name.end()) {
        append_doc(bp, it->second->doc);
        sum += it->second->latency_ms;
      } else if (inner > 0) {
        append_doc(bp, "neusight: latency_ms=" + fmt_ms(inner) + " (the kernels of its bodies' nodes)");
      }
      sum += inner;
    }
  }
  return sum;
}

}  // namespace

void write_proto(const ProtoHolder& proto, const std::string& out_path) {
  std::string bytes;
  if (!proto.model.SerializeToString(&bytes)) throw RuntimeError(out_path + ": cannot serialise model");
  write_file_atomic(out_path, bytes);
}

void write_model(const LoadedModel& model, const std::string& out_path, const std::string& external_data_location) {
  if (!model.proto) throw RuntimeError("no model to write");
  if (external_data_location.empty()) return write_proto(*model.proto, out_path);
  ProtoHolder copy{model.proto->model};
  for (auto& t : *copy.model.mutable_graph()->mutable_initializer())
    for (auto& kv : *t.mutable_external_data())
      if (kv.key() == "location") kv.set_value(external_data_location);
  write_proto(copy, out_path);
}

void write_annotated(const LoadedModel& loaded, const Graph& inferred, const AnnotatedWrite& ann,
                     const std::string& out_path) {
  if (!loaded.proto) throw RuntimeError("no model to annotate");
  onnx::ModelProto mp = loaded.proto->model;  // the one copy of inline weights
  auto* g = mp.mutable_graph();

  // Node names as the IR saw them (generated names for unnamed nodes are written back so
  // reports and the annotated graph agree).
  std::unordered_map<std::string, const NodeAnnotation*> by_name;
  for (const auto& a : ann.nodes) by_name[a.node_name] = &a;
  // Calls of model-local functions: the IR holds their inlined bodies; the call node gets the
  // sum of its body's latency and one line per body node.
  std::unordered_map<std::string, std::vector<std::pair<std::string, const NodeAnnotation*>>> body_of;
  std::unordered_map<std::string, std::string> ir_name_by_output;
  std::unordered_map<std::string, const Node*> ir_node;  // the nodes that hold bodies, by name
  for (const auto& n : loaded.model.graph.nodes) {
    for (const auto& [attr, a] : n.attributes)
      if (!a.graphs.empty()) ir_node.emplace(n.name, &n);
    const std::string& proto_name = n.inlined_from.empty() ? n.name : n.inlined_from;
    for (const auto& o : n.outputs)
      if (!o.empty()) ir_name_by_output.emplace(o, proto_name);
    if (!n.inlined_from.empty()) {
      auto it = by_name.find(n.name);
      body_of[n.inlined_from].emplace_back(n.name, it == by_name.end() ? nullptr : it->second);
    }
  }
  std::unordered_set<std::string> proto_outputs;  // the names the written graph has
  for (auto& np : *g->mutable_node()) {
    std::string name = np.name();
    for (const auto& o : np.output()) {
      if (o.empty()) continue;
      proto_outputs.insert(o);
      auto it = ir_name_by_output.find(o);
      if (it != ir_name_by_output.end() && name == np.name()) name = it->second;
    }
    if (np.name().empty()) np.set_name(name);
    std::string add;
    if (auto it = by_name.find(name); it != by_name.end()) {
      add = it->second->doc;
    } else if (auto b = body_of.find(name); b != body_of.end()) {
      double sum = 0;
      std::string lines;
      for (const auto& [body_name, a] : b->second) {
        if (!a) continue;
        sum += a->latency_ms;
        lines += "\n  " + body_name + " latency_ms=" + fmt_ms(a->latency_ms);
      }
      add = "neusight: latency_ms=" + fmt_ms(sum) + " (inlined function body, " + std::to_string(b->second.size()) +
            " nodes)" + lines;
    }
    if (!add.empty()) append_doc(np, add);
    if (auto ir = ir_node.find(name); ir != ir_node.end()) annotate_bodies(np, *ir->second, name + "/", by_name, 0);
  }

  if (ann.write_value_info) {
    std::unordered_set<std::string> skip;
    for (const auto& in : g->input()) skip.insert(in.name());
    for (const auto& out : g->output()) skip.insert(out.name());
    for (const auto& init : g->initializer()) skip.insert(init.name());
    g->clear_value_info();
    for (const auto& n : inferred.nodes)
      for (const auto& o : n.outputs) {
        // Names internal to an inlined function body do not exist in the written graph.
        if (o.empty() || skip.count(o) || !proto_outputs.count(o)) continue;
        const TensorInfo* t = inferred.find(o);
        if (!t || t->dtype == DType::undefined) continue;
        auto* vi = g->add_value_info();
        vi->set_name(o);
        set_value_type(*vi, *t);
        skip.insert(o);
      }
    // Graph outputs: fill inferred shapes where the stored type has none.
    for (auto& out : *g->mutable_output()) {
      const TensorInfo* t = inferred.find(out.name());
      if (!t || t->dtype == DType::undefined) continue;
      const bool stored_tensor = out.has_type() && out.type().has_tensor_type();
      if (!out.has_type() || (stored_tensor && t->kind == ValueKind::tensor && !out.type().tensor_type().has_shape()))
        set_value_type(out, *t);
    }
  }

  for (const auto& [k, v] : ann.metadata) {
    bool found = false;
    for (auto& p : *mp.mutable_metadata_props())
      if (p.key() == k) {
        p.set_value(v);
        found = true;
      }
    if (!found) {
      auto* p = mp.add_metadata_props();
      p->set_key(k);
      p->set_value(v);
    }
  }

  const fs::path from_dir = loaded.model.path.empty() ? fs::current_path()
                                                      : fs::absolute(fs::path(loaded.model.path)).parent_path();
  fs::path to_dir = fs::absolute(fs::path(out_path)).parent_path();
  for (auto& tp : *g->mutable_initializer()) relocate_external(tp, from_dir, to_dir);

  write_proto(ProtoHolder{std::move(mp)}, out_path);
}

}  // namespace neusight
