// lowering_graph.h - a tiny builder of shape-annotated IR graphs for the lowering tests
// (no protobuf: tensors are declared with their final shapes, as after shape inference).
#pragma once

#include <string>
#include <vector>

#include "neusight/lowering.h"

namespace neusight::test {

struct IrGraph {
  Graph g;

  // Declares a tensor with a known shape. `init`: an initializer (a weight).
  std::string t(const std::string& name, std::vector<int64_t> dims, DType dt = DType::f32, bool init = false) {
    TensorInfo& ti = g.tensor(name);
    ti.name = name;
    ti.dtype = dt;
    ti.has_shape = true;
    ti.shape.clear();
    for (int64_t d : dims) ti.shape.push_back(Dim::of(d));
    ti.is_initializer = init;
    if (init) g.initializers.push_back(name);
    return name;
  }
  std::string w(const std::string& name, std::vector<int64_t> dims, DType dt = DType::f32) { return t(name, dims, dt, true); }
  std::string input(const std::string& name, std::vector<int64_t> dims, DType dt = DType::f32) {
    t(name, dims, dt);
    g.tensor(name).is_graph_input = true;
    g.inputs.push_back(name);
    return name;
  }
  // A compile-time integer value (shape math).
  std::string ints(const std::string& name, std::vector<int64_t> v, bool init = true) {
    t(name, {static_cast<int64_t>(v.size())}, DType::i64, init);
    g.tensor(name).int_value = v;
    return name;
  }
  Node& node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
             const std::string& domain = "") {
    Node n;
    n.name = op + "_" + std::to_string(g.nodes.size());
    n.op_type = op;
    n.domain = domain;
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    g.nodes.push_back(n);
    return g.nodes.back();
  }
  void output(const std::string& name) { g.outputs.push_back(name); }
};

inline Attribute attr_int(int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::i;
  a.i = v;
  return a;
}
inline Attribute attr_ints(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::ints;
  a.ints = std::move(v);
  return a;
}
inline Attribute attr_str(const std::string& s) {
  Attribute a;
  a.kind = Attribute::Kind::s;
  a.s = s;
  return a;
}

inline std::vector<Kernel> of_class(const KernelList& kl, KernelClass c, Phase p = Phase::forward) {
  std::vector<Kernel> out;
  for (const auto& k : kl.kernels)
    if (k.cls == c && k.phase == p) out.push_back(k);
  return out;
}

inline std::vector<Kernel> of_phase(const KernelList& kl, Phase p) {
  std::vector<Kernel> out;
  for (const auto& k : kl.kernels)
    if (k.phase == p) out.push_back(k);
  return out;
}

// Total FLOPs of the GEMM kernels of one phase.
inline double gemm_flops(const KernelList& kl, Phase p) {
  double f = 0;
  for (const auto& k : kl.kernels)
    if (k.cls == KernelClass::gemm && k.phase == p) f += k.flops;
  return f;
}

inline KernelList lower_with(const Graph& g, Fusion f, Mode m = Mode::inference) {
  LoweringOptions o;
  o.fusion = f;
  o.mode = m;
  return lower(g, o);
}

}  // namespace neusight::test
