// fusion.cpp - the fusion plan: which nodes launch no kernel (host shape math, views,
// strided operands, constant folding) and which nodes run together as one kernel (eager
// framework kernels recognised from decomposed ONNX; torch.compile-style pointwise fusion).
#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "internal.h"
#include "neusight/op_traits.h"

namespace neusight::lowering_detail {
namespace {

constexpr int64_t kHostMaxElements = 64;  // integer tensors this small are shape math on the host

const std::set<std::string>& view_ops() {
  static const std::set<std::string> s = {"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Shape",
                                          "Size", "Constant", "Optional", "OptionalGetElement", "StopGradient",
                                          // sequences hold references: no data moves
                                          "SequenceConstruct", "SequenceAt", "SequenceEmpty", "SequenceInsert",
                                          "SequenceErase", "SequenceLength", "OptionalHasElement"};
  return s;
}

const std::set<std::string>& gemm_ops() {
  static const std::set<std::string> s = {"MatMul", "Gemm", "FusedMatMul", "Einsum", "MatMulInteger", "QLinearMatMul"};
  return s;
}

// Pointwise for fusion (op_traits.h): one output element from the same position of each
// broadcast input.
bool pointwise(const Node& n) {
  const OpTraits* t = find_op_traits(n.domain, n.op_type);
  return t && t->fusible;
}

const std::set<std::string>& rowwise_ops() {
  static const std::set<std::string> s = {
      "Softmax", "LogSoftmax", "LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization",
      "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "GroupNormalization", "InstanceNormalization",
      "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL2", "ReduceLogSumExp"};
  return s;
}

bool same_dims(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].value != b[i].value) return false;
  return true;
}

// Ops that read only some of what feeds them from elsewhere (never absorbed backwards).
bool is_broadcasting_consumer(const Node& n) {
  return pointwise(n) || n.op_type == "Where";
}

const TensorInfo* tensor(const Graph& g, const std::string& name) { return name.empty() ? nullptr : g.find(name); }

bool small_int(const TensorInfo* t) {
  if (!t) return false;
  if (t->int_value) return true;
  return is_integer_like(t->dtype) && t->num_elements() >= 0 && t->num_elements() <= kHostMaxElements;
}

// Shape math: every output is a tiny integer tensor (a compile-time value or not) computed
// from integer tensors that are tiny or compile-time values. Runs on the host (or is
// folded) in every framework. Larger integer tensors (an arange over the sequence, a mask)
// are data the GPU computes, even when their values are known.
bool host_node(const Graph& g, const Node& n) {
  if (n.outputs.empty()) return false;
  for (const auto& o : n.outputs) {
    if (o.empty()) continue;
    const TensorInfo* t = g.find(o);
    if (!t || !(t->int_value || is_integer_like(t->dtype))) return false;
    const int64_t e = t->int_value ? static_cast<int64_t>(t->int_value->size()) : t->num_elements();
    if (e < 0 || e > kHostMaxElements) return false;
  }
  for (const auto& i : n.inputs)
    if (!i.empty() && !small_int(g.find(i))) return false;
  return true;
}

// GEMM-class ops whose float operands a preceding DequantizeLinear can feed in quantized form.
const std::set<std::string>& qdq_gemm_ops() {
  static const std::set<std::string> s = {"MatMul", "Gemm", "FusedMatMul", "Conv", "ConvTranspose"};
  return s;
}

bool dequantize_into_gemm(const Graph& g, const Consumers& cons, const Node& nd) {
  if (nd.op_type != "DequantizeLinear" || nd.inputs.empty() || nd.outputs.empty() || nd.outputs[0].empty()) return false;
  const TensorInfo* x = tensor(g, nd.inputs[0]);
  if (!x || !is_quantized_storage(x->dtype)) return false;
  auto it = cons.find(nd.outputs[0]);
  if (it == cons.end() || it->second.empty()) return false;
  for (int c : it->second) {
    if (c < 0) return false;
    const Node& cn = g.nodes[static_cast<size_t>(c)];
    if (!qdq_gemm_ops().count(cn.op_type)) return false;
    // Operand A or B only (a dequantized bias is an epilogue input, not a GEMM operand).
    for (size_t k = 2; k < cn.inputs.size(); ++k)
      if (cn.inputs[k] == nd.outputs[0]) return false;
  }
  return true;
}

bool is_scalar_const(const Graph& g, const std::string& name) {
  const TensorInfo* t = tensor(g, name);
  return t && t->is_initializer && t->num_elements() == 1;
}

// A value known before the model runs: an initializer (in training not a float one: those
// are the trainable weights, updated every step) or the output of a folded node; with
// `static_shapes` also a value computed from the bound input shapes (a static-shape engine
// such as TensorRT's folds `Shape -> Range` position ids; a runtime that takes the model's
// symbolic dims, as onnxruntime and PyTorch eager do, computes them every run). Graph
// inputs never are, whatever --value says about them.
bool is_const(const Graph& g, const std::string& name, const std::vector<bool>& folded,
              const std::unordered_map<std::string, int>& producer, Mode mode, bool static_shapes) {
  const TensorInfo* t = tensor(g, name);
  if (!t || t->is_graph_input) return false;
  if (t->is_initializer) return !(mode == Mode::training && is_float(t->dtype));
  if (static_shapes && t->int_value) return true;
  auto it = producer.find(name);
  return it != producer.end() && folded[static_cast<size_t>(it->second)];
}

// Ops whose output differs run to run (never folded) or that hold a body (priced per branch
// and trip by the control-flow lowering).
// A DequantizeLinear of a weight is kept too, as onnxruntime keeps it for its QDQ fusions
// (which --fusion full models; without them the CUDA provider runs it every time).
bool foldable_op(const Node& nd, const LoweringOptions& opt) {
  static const std::set<std::string> never = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                              "Bernoulli", "Multinomial", "If", "Loop", "Scan", "SequenceMap"};
  if (nd.op_type == "DequantizeLinear" && opt.fusion != Fusion::full) return false;
  return !never.count(nd.op_type);
}

// ---------------------------------------------------------------------------------------
// Eager patterns.

// MatMul (weight operand) whose only reader is Add(bias): addmm, one GEMM with epilogue.
bool match_bias_gemm(const Graph& g, const Consumers& cons, const Plan& plan, int mi, Group& grp) {
  const Node& m = g.nodes[static_cast<size_t>(mi)];
  if (m.op_type != "MatMul" || m.outputs.empty() || m.inputs.size() < 2) return false;
  const TensorInfo* b = tensor(g, m.inputs[1]);
  const TensorInfo* y = tensor(g, m.outputs[0]);
  if (!b || !y || !b->fully_known() || !y->fully_known() || b->shape.size() != 2) return false;
  const int ai = single_consumer(cons, m.outputs[0]);
  if (ai < 0 || plan.free_reason[static_cast<size_t>(ai)] != FreeReason::none) return false;
  const Node& add = g.nodes[static_cast<size_t>(ai)];
  if (add.op_type != "Add" || add.inputs.size() != 2) return false;
  const std::string& other = add.inputs[0] == m.outputs[0] ? add.inputs[1] : add.inputs[0];
  const TensorInfo* bias = tensor(g, other);
  const TensorInfo* z = add.outputs.empty() ? nullptr : tensor(g, add.outputs[0]);
  if (!bias || !bias->is_initializer || !z || !z->fully_known()) return false;
  if (bias->num_elements() != b->shape[1].value || z->num_elements() != y->num_elements()) return false;
  grp = Group{GroupKind::bias_gemm, {mi, ai}, mi, ai};
  return true;
}

// Decomposed LayerNorm: ReduceMean -> Sub -> Pow(2)|Mul(d,d) -> ReduceMean -> Add(eps) ->
// Sqrt -> Div (or Reciprocal + Mul) [-> Mul(gamma)] [-> Add(beta)].
bool match_layernorm(const Graph& g, const Consumers& cons, int r1, Group& grp) {
  const Node& mean = g.nodes[static_cast<size_t>(r1)];
  if (mean.op_type != "ReduceMean" || mean.inputs.empty() || mean.outputs.empty()) return false;
  const std::string x = mean.inputs[0];
  std::vector<int> nodes = {r1};
  auto consumers = [&](const std::string& t) {
    auto it = cons.find(t);
    return it == cons.end() ? std::vector<int>{} : it->second;
  };
  // Sub(x, mean)
  int sub = single_consumer(cons, mean.outputs[0]);
  if (sub < 0) return false;
  const Node& s = g.nodes[static_cast<size_t>(sub)];
  if (s.op_type != "Sub" || s.inputs.size() != 2 || s.inputs[0] != x) return false;
  nodes.push_back(sub);
  const std::string d = s.outputs[0];
  // d feeds the square and the normalising division.
  int sq = -1, div = -1;
  for (int ci : consumers(d)) {
    if (ci < 0) return false;
    const Node& cn = g.nodes[static_cast<size_t>(ci)];
    if (cn.op_type == "Pow" || (cn.op_type == "Mul" && cn.inputs.size() == 2 && cn.inputs[0] == d && cn.inputs[1] == d))
      sq = ci;
    else if (cn.op_type == "Div" && cn.inputs[0] == d)
      div = ci;
    else if (cn.op_type == "Mul")
      div = ci;  // d * reciprocal(std)
    else
      return false;
  }
  if (sq < 0 || div < 0) return false;
  nodes.push_back(sq);
  int r2 = single_consumer(cons, g.nodes[static_cast<size_t>(sq)].outputs[0]);
  if (r2 < 0 || g.nodes[static_cast<size_t>(r2)].op_type != "ReduceMean") return false;
  nodes.push_back(r2);
  int add = single_consumer(cons, g.nodes[static_cast<size_t>(r2)].outputs[0]);
  if (add < 0 || g.nodes[static_cast<size_t>(add)].op_type != "Add") return false;
  nodes.push_back(add);
  int sqrt = single_consumer(cons, g.nodes[static_cast<size_t>(add)].outputs[0]);
  if (sqrt < 0 || g.nodes[static_cast<size_t>(sqrt)].op_type != "Sqrt") return false;
  nodes.push_back(sqrt);
  std::string std_out = g.nodes[static_cast<size_t>(sqrt)].outputs[0];
  int next = single_consumer(cons, std_out);
  if (next >= 0 && g.nodes[static_cast<size_t>(next)].op_type == "Reciprocal") {
    nodes.push_back(next);
    std_out = g.nodes[static_cast<size_t>(next)].outputs[0];
    next = single_consumer(cons, std_out);
  }
  if (next != div) return false;
  nodes.push_back(div);
  int last = div;
  // Optional affine: Mul(gamma) then Add(beta), constants.
  for (const char* op : {"Mul", "Add"}) {
    const int ci = single_consumer(cons, g.nodes[static_cast<size_t>(last)].outputs[0]);
    if (ci < 0) break;
    const Node& cn = g.nodes[static_cast<size_t>(ci)];
    if (cn.op_type != op || cn.inputs.size() != 2) break;
    const std::string& other = cn.inputs[0] == g.nodes[static_cast<size_t>(last)].outputs[0] ? cn.inputs[1] : cn.inputs[0];
    const TensorInfo* t = tensor(g, other);
    if (!t || !t->is_initializer) break;
    nodes.push_back(ci);
    last = ci;
  }
  std::set<int> set(nodes.begin(), nodes.end());
  // Every intermediate stays inside.
  for (int ni : nodes)
    if (ni != last)
      for (const auto& o : g.nodes[static_cast<size_t>(ni)].outputs)
        if (!consumed_only_by(cons, o, set)) return false;
  std::sort(nodes.begin(), nodes.end());
  grp = Group{GroupKind::layernorm, nodes, last, nodes.back()};
  return true;
}

// Decomposed RMSNorm: Pow(x,2) -> ReduceMean -> Add(eps) -> Sqrt -> Div(x, .) or
// Reciprocal -> Mul(x, .) [-> Mul(weight)]. (PyTorch eager runs HF's RMSNorm as separate
// kernels; only --fusion full groups it.)
bool match_rmsnorm(const Graph& g, const Consumers& cons, const Plan& plan, int pi, Group& grp) {
  const Node& p = g.nodes[static_cast<size_t>(pi)];
  if (!(p.op_type == "Pow" || (p.op_type == "Mul" && p.inputs.size() == 2 && p.inputs[0] == p.inputs[1]))) return false;
  const std::string x = p.inputs[0];
  std::vector<int> nodes = {pi};
  auto step = [&](int from, const char* op) {
    const int ci = single_consumer(cons, g.nodes[static_cast<size_t>(from)].outputs[0]);
    if (ci < 0 || g.nodes[static_cast<size_t>(ci)].op_type != op) return -1;
    nodes.push_back(ci);
    return ci;
  };
  int r = step(pi, "ReduceMean");
  if (r < 0) return false;
  int a = step(r, "Add");
  if (a < 0) return false;
  int s = step(a, "Sqrt");
  if (s < 0) return false;
  int last = -1;
  const int ci = single_consumer(cons, g.nodes[static_cast<size_t>(s)].outputs[0]);
  if (ci < 0) return false;
  const Node& cn = g.nodes[static_cast<size_t>(ci)];
  if (cn.op_type == "Div" && cn.inputs[0] == x) {
    nodes.push_back(ci);
    last = ci;
  } else if (cn.op_type == "Reciprocal") {
    nodes.push_back(ci);
    const int mi = single_consumer(cons, cn.outputs[0]);
    if (mi < 0) return false;
    const Node& mn = g.nodes[static_cast<size_t>(mi)];
    if (mn.op_type != "Mul" || (mn.inputs[0] != x && mn.inputs[1] != x)) return false;
    nodes.push_back(mi);
    last = mi;
  } else {
    return false;
  }
  const int wi = single_consumer(cons, g.nodes[static_cast<size_t>(last)].outputs[0]);
  if (wi >= 0) {
    const Node& wn = g.nodes[static_cast<size_t>(wi)];
    const std::string& other = wn.inputs.size() == 2 ? (wn.inputs[0] == g.nodes[static_cast<size_t>(last)].outputs[0] ? wn.inputs[1] : wn.inputs[0]) : "";
    const TensorInfo* t = tensor(g, other);
    if (wn.op_type == "Mul" && t && t->is_initializer) {
      nodes.push_back(wi);
      last = wi;
    }
  }
  // x sliced out of a wider tensor (DeepSeek's latent, out of kv_a_proj's output): the norm
  // reads the slice in place.
  if (const int sl = slice_read_only_by(g, cons, plan, x, nodes); sl >= 0) nodes.push_back(sl);
  std::sort(nodes.begin(), nodes.end());
  grp = Group{GroupKind::rmsnorm, nodes, last, nodes.back()};
  return true;
}

// Single-input pointwise islands: every input of every member is x, a scalar constant or
// a member's output, and exactly one member output leaves. Classified by op counts.
struct IslandPattern {
  GroupKind kind;
  std::map<std::string, int> ops;
  bool eager;  // one kernel in PyTorch eager (nn.GELU, nn.SiLU); else only --fusion full
};

const std::vector<IslandPattern>& island_patterns() {
  static const std::vector<IslandPattern> p = {
      {GroupKind::gelu, {{"Div", 1}, {"Erf", 1}, {"Add", 1}, {"Mul", 2}}, true},   // x*0.5*(1+erf(x/sqrt2))
      {GroupKind::gelu, {{"Erf", 1}, {"Add", 1}, {"Mul", 3}}, true},               // erf(x*0.7071...)
      {GroupKind::silu, {{"Sigmoid", 1}, {"Mul", 1}}, true},                       // x*sigmoid(x)
      // HF gelu_new / NewGELU (python tanh form): 8 eager kernels in the traced GPT-2 opgraph.
      {GroupKind::gelu_tanh, {{"Pow", 1}, {"Mul", 4}, {"Add", 2}, {"Tanh", 1}}, false},
      {GroupKind::gelu_tanh, {{"Mul", 6}, {"Add", 2}, {"Tanh", 1}}, false},
      {GroupKind::quick_gelu, {{"Sigmoid", 1}, {"Mul", 2}}, false},  // HF QuickGELU: 3 eager kernels
  };
  return p;
}

bool match_island(const Graph& g, const Consumers& cons, const Plan& plan, const std::string& x, int first, bool eager,
                  std::vector<bool>& taken, Group& grp) {
  std::vector<int> nodes;
  std::set<std::string> produced;
  std::map<std::string, int> counts;
  const size_t max_nodes = 9, window = 48;
  int last_added = first - 1;
  for (size_t i = static_cast<size_t>(first); i < g.nodes.size() && i <= static_cast<size_t>(last_added) + window; ++i) {
    const Node& n = g.nodes[i];
    if (taken[i] || plan.free_reason[i] != FreeReason::none || !pointwise(n) || n.op_type == "Cast") continue;
    bool reads_island = false, ok = true;
    for (const auto& in : n.inputs) {
      if (in.empty()) continue;
      if (in == x || produced.count(in)) reads_island = true;
      else if (!is_scalar_const(g, in)) ok = false;
    }
    if (!ok || !reads_island) continue;
    nodes.push_back(static_cast<int>(i));
    for (const auto& o : n.outputs) produced.insert(o);
    ++counts[n.op_type];
    last_added = static_cast<int>(i);
    if (nodes.size() > max_nodes) return false;
    for (const auto& p : island_patterns()) {
      if (p.ops != counts || (eager && !p.eager)) continue;
      // Exactly one output leaves the island: the last member's.
      std::set<int> set(nodes.begin(), nodes.end());
      bool closed = true;
      for (int ni : nodes)
        if (ni != last_added)
          for (const auto& o : g.nodes[static_cast<size_t>(ni)].outputs)
            if (!consumed_only_by(cons, o, set)) closed = false;
      if (!closed) continue;
      grp = Group{p.kind, nodes, last_added, last_added};
      return true;
    }
  }
  return false;
}

// ---------------------------------------------------------------------------------------
// torch.compile-style pointwise fusion (--fusion full).

struct UnionFind {
  std::vector<int> p;
  explicit UnionFind(size_t n) : p(n) { std::iota(p.begin(), p.end(), 0); }
  int find(int a) { return p[static_cast<size_t>(a)] == a ? a : p[static_cast<size_t>(a)] = find(p[static_cast<size_t>(a)]); }
  void join(int a, int b) { p[static_cast<size_t>(find(a))] = find(b); }
};

// How a unit (a node or an eager group) takes part in full fusion: pointwise units fuse with
// each other and into a row-wise unit's prologue; a gather feeds a fused kernel.
enum class UnitKind { not_fusible, pointwise, rowwise, gather };

// Normalisations over the last dim that a residual stream feeds (a graph op or an eager group).
bool norm_op(const std::string& op) {
  return op == "LayerNormalization" || op == "SimplifiedLayerNormalization" || op == "RMSNormalization";
}

// The union of units full fusion builds (one kernel per class of more than one unit).
struct FullFusion {
  const Graph& g;
  const Consumers& cons;
  Plan& plan;
  std::vector<int> unit;        // per node: its unit (a node, or an eager group's first node); -1: free
  UnionFind uf;
  std::vector<int> rowwise_in;  // per root: row-wise units inside (at most one per kernel)
  std::vector<int> units_in;    // per root: units inside

  FullFusion(const Graph& graph, const Consumers& c, Plan& p)
      : g(graph), cons(c), plan(p), unit(graph.nodes.size(), -1), uf(graph.nodes.size()), rowwise_in(graph.nodes.size(), 0),
        units_in(graph.nodes.size(), 1) {
    for (size_t i = 0; i < unit.size(); ++i) {
      if (plan.free_reason[i] != FreeReason::none) continue;
      unit[i] = plan.group_of[i] >= 0 ? plan.groups[static_cast<size_t>(plan.group_of[i])].nodes.front() : static_cast<int>(i);
    }
    for (size_t i = 0; i < unit.size(); ++i)
      if (unit[i] == static_cast<int>(i) && kind(static_cast<int>(i)) == UnitKind::rowwise) rowwise_in[i] = 1;
  }
  const Group* group(int u) const {
    const int gi = plan.group_of[static_cast<size_t>(u)];
    return gi >= 0 ? &plan.groups[static_cast<size_t>(gi)] : nullptr;
  }
  UnitKind kind(int u) const {
    if (const Group* grp = group(u)) {
      if (grp->kind == GroupKind::layernorm || grp->kind == GroupKind::rmsnorm) return UnitKind::rowwise;
      if (grp->kind == GroupKind::bias_gemm || grp->kind == GroupKind::flash_attention) return UnitKind::not_fusible;
      return UnitKind::pointwise;
    }
    const Node& nd = g.nodes[static_cast<size_t>(u)];
    // Where is a select, pointwise for inductor: GPT-2's masked scores (div, where) fuse into
    // the softmax kernel.
    if (pointwise(nd) || nd.op_type == "Where") return UnitKind::pointwise;
    if (rowwise_ops().count(nd.op_type)) return UnitKind::rowwise;
    if (nd.op_type == "Gather") return UnitKind::gather;
    return UnitKind::not_fusible;
  }
  bool merge(int a, int b) {
    const int ra = uf.find(a), rb = uf.find(b);
    if (ra == rb) return true;
    const int sum = rowwise_in[static_cast<size_t>(ra)] + rowwise_in[static_cast<size_t>(rb)];
    if (sum > 1) return false;
    const int units = units_in[static_cast<size_t>(ra)] + units_in[static_cast<size_t>(rb)];
    uf.join(ra, rb);
    rowwise_in[static_cast<size_t>(uf.find(ra))] = sum;
    units_in[static_cast<size_t>(uf.find(ra))] = units;
    return true;
  }
  // The tensor a norm unit normalises (its first member's input; none past a Slice).
  std::string norm_input(int u) const {
    const Group* grp = group(u);
    if (grp ? grp->kind != GroupKind::layernorm && grp->kind != GroupKind::rmsnorm
            : !norm_op(g.nodes[static_cast<size_t>(u)].op_type))
      return "";
    const Node& first = g.nodes[static_cast<size_t>(u)];
    return first.op_type == "Slice" || first.inputs.empty() ? "" : first.inputs[0];
  }

  void fuse_chains();
  void fuse_residual_norms();
  void rebuild_groups();
};

// Pointwise producers into their readers when every reader of the tensor is inside the unit
// (it never reaches memory); into a row-wise unit only through its normalised input.
void FullFusion::fuse_chains() {
  for (size_t i = 0; i < unit.size(); ++i) {
    if (unit[i] < 0) continue;
    const UnitKind k_here = kind(unit[i]);
    if (k_here != UnitKind::pointwise && k_here != UnitKind::rowwise) continue;
    const Node& nd = g.nodes[i];
    for (size_t k = 0; k < nd.inputs.size(); ++k) {
      const std::string& in = nd.inputs[k];
      auto it = plan.producer.find(in);
      if (it == plan.producer.end() || unit[static_cast<size_t>(it->second)] < 0) continue;
      const int pu = unit[static_cast<size_t>(it->second)];
      if (pu == unit[i]) continue;
      const UnitKind pk = kind(pu);
      if (pk != UnitKind::pointwise && pk != UnitKind::gather) continue;
      if (k_here == UnitKind::rowwise && k != 0) continue;  // prologue: the normalised input only
      auto cit = cons.find(in);
      bool inside = cit != cons.end();
      if (inside)
        for (int c : cit->second)
          if (c < 0 || unit[static_cast<size_t>(c)] != unit[i]) inside = false;
      if (!inside) continue;
      merge(pu, unit[i]);
    }
  }
}

// A residual stream: the pointwise sum (x + attn(x)) that a norm reads and later nodes read
// too (the next residual add) is computed in the norm's kernel, which also writes it:
// inductor's fused add + norm reduction, vLLM's fused_add_rms_norm, onnxruntime's
// SkipLayerNormalization. Only where the merged kernel has no path out and back in.
void FullFusion::fuse_residual_norms() {
  for (size_t u = 0; u < unit.size(); ++u) {
    if (unit[u] != static_cast<int>(u) || kind(static_cast<int>(u)) != UnitKind::rowwise) continue;
    const std::string x = norm_input(static_cast<int>(u));
    auto it = x.empty() ? plan.producer.end() : plan.producer.find(x);
    if (it == plan.producer.end() || unit[static_cast<size_t>(it->second)] < 0) continue;
    const int pu = unit[static_cast<size_t>(it->second)];
    const TensorInfo* t = tensor(g, x);
    if (kind(pu) != UnitKind::pointwise || !t || !is_float(t->dtype)) continue;
    // The norm alone in its class (full fusion joins no reader of a norm's output to it), and
    // every other operand it reads made before the sum: no path leaves the joined kernel and
    // comes back (a scale computed from the sum would).
    if (units_in[static_cast<size_t>(uf.find(static_cast<int>(u)))] != 1) continue;
    const Group* own = group(static_cast<int>(u));
    const std::vector<int> norm = own ? own->nodes : std::vector<int>{static_cast<int>(u)};
    bool earlier = true;
    for (int m : norm) {
      for (const auto& in : g.nodes[static_cast<size_t>(m)].inputs) {
        auto pit = in.empty() || in == x ? plan.producer.end() : plan.producer.find(in);
        if (pit != plan.producer.end() && unit[static_cast<size_t>(pit->second)] != static_cast<int>(u) &&
            pit->second > it->second)
          earlier = false;
      }
    }
    if (earlier) merge(pu, static_cast<int>(u));
  }
}

// Every union-find class with more than one unit is one kernel: a norm's kind when it holds a
// norm group (reported under the norm), else a fused chain under its row-wise member.
void FullFusion::rebuild_groups() {
  std::map<int, std::vector<int>> classes;
  for (size_t i = 0; i < unit.size(); ++i)
    if (unit[i] >= 0) classes[uf.find(unit[i])].push_back(static_cast<int>(i));
  std::vector<Group> groups;
  std::vector<int> group_of(unit.size(), -1);
  for (auto& [root, nodes] : classes) {
    std::set<int> units;
    for (int ni : nodes) units.insert(unit[static_cast<size_t>(ni)]);
    if (units.size() == 1) {
      if (const Group* own = group(nodes.front())) {
        groups.push_back(*own);
        for (int ni : nodes) group_of[static_cast<size_t>(ni)] = static_cast<int>(groups.size()) - 1;
      }
      continue;
    }
    Group grp{GroupKind::fused, nodes, nodes.back(), nodes.back()};
    for (int ni : nodes)
      if (kind(unit[static_cast<size_t>(ni)]) == UnitKind::rowwise) {
        const Group* norm = group(unit[static_cast<size_t>(ni)]);
        grp.anchor = norm ? norm->anchor : ni;
        if (norm) {
          grp.kind = norm->kind;
          grp.extended = true;
        }
      }
    groups.push_back(grp);
    for (int ni : nodes) group_of[static_cast<size_t>(ni)] = static_cast<int>(groups.size()) - 1;
  }
  plan.groups = std::move(groups);
  plan.group_of = std::move(group_of);
}

void full_fusion(const Graph& g, const Consumers& cons, Plan& plan) {
  FullFusion f(g, cons, plan);
  f.fuse_chains();
  f.fuse_residual_norms();
  f.rebuild_groups();
}

constexpr int64_t kMinMergedGemmColumns = 16;

// Serving engines' merged weights (LoweringOptions::serving_kernels): MatMuls (and
// MatMulNBits) not in any group that read the same activation through a constant weight with
// the same reduction dim and dtype become one group, emitted at the first of them (its inputs
// are that activation and constants, so every member's inputs exist there). Outputs narrower
// than kMinMergedGemmColumns (per-token gates) are not merged.
void merge_parallel_gemms(const Graph& g, Plan& plan) {
  std::map<std::tuple<std::string, std::string, int64_t, int>, std::vector<int>> siblings;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& nd = g.nodes[i];
    const bool nbits = nd.op_type == "MatMulNBits" && nd.domain == "com.microsoft";
    if (!(nd.op_type == "MatMul" && nd.domain.empty()) && !nbits) continue;
    if (plan.free_reason[i] != FreeReason::none || nd.inputs.size() < 2) continue;
    // Alone, or the GEMM of a MatMul + bias Add (addmm): its bias rides along.
    if (plan.group_of[i] >= 0) {
      const Group& own = plan.groups[static_cast<size_t>(plan.group_of[i])];
      if (own.kind != GroupKind::bias_gemm || own.anchor != static_cast<int>(i)) continue;
    }
    const TensorInfo* a = tensor(g, nd.inputs[0]);
    const TensorInfo* w = tensor(g, nd.inputs[1]);
    if (!a || !w || !w->is_initializer || !a->fully_known() || a->shape.empty()) continue;
    // The reduction dim: MatMul's weight is [K, N]; MatMulNBits carries K as an attribute.
    int64_t k = 0;
    if (nbits) {
      k = nd.attr_i("K", 0);
    } else if (w->shape.size() == 2 && w->fully_known()) {
      k = w->shape[0].value;
    }
    if (k <= 0 || a->shape.back().value != k) continue;
    // A gate of a few values per token (Qwen2-MoE's and Qwen3-Next's shared_expert_gate) stays
    // its own GEMV, as vLLM's ReplicatedLinear runs it: engines merge a layer's projections.
    const int64_t cols = nbits ? nd.attr_i("N", 0) : w->shape.size() == 2 && w->fully_known() ? w->shape[1].value : 0;
    if (cols < kMinMergedGemmColumns) continue;
    siblings[{nd.inputs[0], nd.op_type, k, static_cast<int>(w->dtype)}].push_back(static_cast<int>(i));
  }
  for (const auto& [key, gemms] : siblings) {
    if (gemms.size() < 2) continue;
    std::vector<int> nodes;
    for (int ni : gemms) {
      const int own = plan.group_of[static_cast<size_t>(ni)];
      if (own >= 0) {
        const auto& members = plan.groups[static_cast<size_t>(own)].nodes;
        nodes.insert(nodes.end(), members.begin(), members.end());
      } else {
        nodes.push_back(ni);
      }
    }
    std::sort(nodes.begin(), nodes.end());
    // Emitted at the first GEMM: every member reads the activation and constants only (a bias
    // Add reads its GEMM's output, which the merged kernel computes).
    plan.groups.push_back(Group{GroupKind::parallel_gemm, nodes, gemms.front(), gemms.front()});
    for (int ni : nodes) plan.group_of[static_cast<size_t>(ni)] = static_cast<int>(plan.groups.size()) - 1;
  }
}

// Phase 1, every mode: nodes that launch no kernel whatever the fusion (views, host shape
// math, inference Dropout, QDQ dequantization inside GEMMs, constant folding).
void mark_free_nodes(const Graph& g, const LoweringOptions& opt, const Consumers& cons, Plan& plan) {
  const size_t n = g.nodes.size();
  // Free nodes, every mode.
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = g.nodes[i];
    if (view_ops().count(nd.op_type)) plan.free_reason[i] = FreeReason::view;
    else if (host_node(g, nd)) plan.free_reason[i] = FreeReason::host;
    else if (nd.op_type == "Dropout" && opt.mode != Mode::training) plan.free_reason[i] = FreeReason::identity_in_inference;
  }

  // Quantize-dequantize models (--fusion full, inference): a DequantizeLinear of an integer
  // or FP8 tensor read only as a GEMM operand runs inside the GEMM, as TensorRT and ORT's QDQ
  // fusions run it: the GEMM reads the quantized bytes (and computes in that precision when
  // both operands are quantized; see gemm.cpp). Marked before constant folding, which would
  // otherwise fold a weight's dequantization into float weights.
  // Priced as written otherwise (onnxruntime's CUDA kernels), they are counted for a warning.
  if (opt.mode == Mode::inference)
    for (size_t i = 0; i < n; ++i) {
      if (!dequantize_into_gemm(g, cons, g.nodes[i])) continue;
      if (opt.fusion == Fusion::full) plan.free_reason[i] = FreeReason::dequantize_into_gemm;
      else ++plan.unfused_dequantize;
    }

  // Constant folding, every mode, as onnxruntime and TensorRT do before the first run: a node
  // whose inputs are all constants (initializers, Constant, other folded nodes) runs no kernel
  // (the model-zoo "light" models generate every weight with ConstantOfShape). In training a
  // float initializer is a trainable weight, so what is computed from one keeps its kernels.
  // Values that follow from the bound input shapes fold only under full inference.
  {
    const bool static_shapes = opt.fusion == Fusion::full && opt.mode == Mode::inference;
    std::vector<bool> folded(n, false);
    for (size_t i = 0; i < n; ++i) {
      const Node& nd = g.nodes[i];
      if (!foldable_op(nd, opt) || nd.outputs.empty()) continue;
      bool all = true;
      for (const auto& in : nd.inputs)
        if (!in.empty() && !is_const(g, in, folded, plan.producer, opt.mode, static_shapes)) all = false;
      if (!all) continue;
      folded[i] = true;
      if (plan.free_reason[i] == FreeReason::none) plan.free_reason[i] = FreeReason::constant_folded;
    }
  }
}

// Whether every reader of tensor `t` is a node `accept(index, node)` takes, or a free view
// (Reshape, ...) whose output is read so in turn; false for a graph output or no reader.
bool read_only_by(const Graph& g, const Consumers& cons, const Plan& plan, const std::string& t,
                  const std::function<bool(size_t, const Node&)>& accept) {
  auto it = cons.find(t);
  if (it == cons.end() || it->second.empty()) return false;
  for (int c : it->second) {
    if (c < 0) return false;
    const size_t ci = static_cast<size_t>(c);
    const Node& cn = g.nodes[ci];
    if (accept(ci, cn)) continue;
    if (plan.free_reason[ci] == FreeReason::view && !cn.outputs.empty() && read_only_by(g, cons, plan, cn.outputs[0], accept))
      continue;
    return false;
  }
  return true;
}

// A unit-step Slice read only by the Mamba-2 mixer's kernels (ai.neusight ops; through Reshape
// views) is a view: causal_conv1d, the chunked scan and the gated norm read their operands
// through their strides (the splits of in_proj's output, of the convolution's).
void mark_mixer_views(const Graph& g, const Consumers& cons, Plan& plan) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& nd = g.nodes[i];
    if (nd.op_type == "Slice" && plan.free_reason[i] == FreeReason::none && !nd.outputs.empty() && unit_step_slice(g, nd) &&
        read_only_by(g, cons, plan, nd.outputs[0], [](size_t, const Node& cn) { return cn.domain == "ai.neusight"; }))
      plan.free_reason[i] = FreeReason::strided_view_read_by_elementwise;
  }
}

// Phase 2, eager and full: strided views the readers take through their strides (transposes
// and splits read by GEMMs, broadcast Expands, permuted operands of eager elementwise ops).
void mark_strided_views(const Graph& g, const LoweringOptions& opt, const Consumers& cons, Plan& plan) {
  const size_t n = g.nodes.size();
  // Strided views (eager): a Transpose read only by GEMMs (directly or through further
  // free transposes: PyTorch's permute + transpose before a matmul), an Expand read only by
  // broadcasting elementwise ops or as a gather's index. Consumers come later in topological order: walk backwards.
  for (size_t i = n; i-- > 0;) {
    const Node& nd = g.nodes[i];
    if (plan.free_reason[i] != FreeReason::none || nd.outputs.empty()) continue;
    if (nd.op_type != "Transpose" && nd.op_type != "Expand") continue;
    auto it = cons.find(nd.outputs[0]);
    if (it == cons.end() || it->second.empty()) continue;
    bool all = true;
    for (int c : it->second) {
      if (c < 0) { all = false; break; }
      const Node& cn = g.nodes[static_cast<size_t>(c)];
      const std::string& op = cn.op_type;
      const bool view_chain = op == "Transpose" && plan.free_reason[static_cast<size_t>(c)] == FreeReason::strided_view_read_by_gemm;
      // torch.gather reads an expanded index through its strides (GatherElements' indices).
      const bool gather_index = op == "GatherElements" && cn.inputs.size() > 1 && cn.inputs[1] == nd.outputs[0];
      if (nd.op_type == "Transpose" ? !(gemm_ops().count(op) || view_chain) : !(is_broadcasting_consumer(cn) || gather_index))
        all = false;
    }
    if (all) plan.free_reason[i] = nd.op_type == "Transpose" ? FreeReason::strided_view_read_by_gemm : FreeReason::broadcast_view;
  }

  // Strided views read by elementwise ops (eager): PyTorch's `a += b.permute(...)` (T5's
  // relative position bias, added to every layer's scores) launches no copy: TensorIterator
  // walks the output in the order of its first operand (`a`, contiguous and full-size) and
  // reads the permuted operand through its strides (see LowerCtx::strided_read). Only when every
  // consumer is such an op; a permuted first operand would set the output's layout instead.
  if (opt.fusion == Fusion::eager)
    for (size_t i = 0; i < n; ++i) {
      const Node& nd = g.nodes[i];
      if (nd.op_type != "Transpose" || plan.free_reason[i] != FreeReason::none || nd.outputs.empty()) continue;
      auto it = cons.find(nd.outputs[0]);
      if (it == cons.end() || it->second.empty()) continue;
      bool all = true;
      for (int c : it->second) {
        if (c < 0) { all = false; break; }
        const Node& cn = g.nodes[static_cast<size_t>(c)];
        const TensorInfo* first = cn.inputs.empty() ? nullptr : tensor(g, cn.inputs[0]);
        const TensorInfo* y = cn.outputs.empty() ? nullptr : tensor(g, cn.outputs[0]);
        if (!pointwise(cn) || cn.inputs[0] == nd.outputs[0] || !first || !y ||
            !first->fully_known() || !y->fully_known() || !same_dims(first->shape, y->shape))
          all = false;
      }
      if (all) plan.free_reason[i] = FreeReason::strided_view_read_by_elementwise;
    }

  // A Split whose pieces reach only GEMMs (through views and strided-view transposes) is
  // PyTorch's split: views of the input (GPT-2's fused c_attn output split into q, k, v);
  // the traces list no copy for it. A Slice so read is the same view (x[..., :n] @ W: the
  // GEMM reads the slice through its leading dimension; DeepSeek's no-rotary query part, the
  // last position a prefill's head reads).
  const auto read_by_gemm_only = [&](const std::string& t) {
    return read_only_by(g, cons, plan, t, [&](size_t c, const Node& cn) {
      return gemm_ops().count(cn.op_type) || plan.free_reason[c] == FreeReason::strided_view_read_by_gemm;
    });
  };
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = g.nodes[i];
    if ((nd.op_type != "Split" && nd.op_type != "Slice") || plan.free_reason[i] != FreeReason::none || nd.outputs.empty())
      continue;
    if (nd.op_type == "Slice" && !unit_step_slice(g, nd)) continue;  // strided steps: leave as a copy
    bool all = true;
    for (const auto& o : nd.outputs)
      if (!o.empty() && !read_by_gemm_only(o)) all = false;
    if (all) plan.free_reason[i] = FreeReason::strided_view_read_by_gemm;
  }
}

// Phase 2 (continued): unit-step slices read through their strides by pointwise readers.
void mark_slice_views(const Graph& g, const LoweringOptions& opt, const Consumers& cons, Plan& plan) {
  const size_t n = g.nodes.size();
  // Eager inference: a unit-step slice read only by pointwise ops and concatenations is
  // PyTorch's basic indexing, a view (rotate_half's x[..., :d/2] and x[..., d/2:] before
  // torch.cat((-x2, x1))); the readers' TensorIterator walks it through its strides. In
  // training its backward (slice_backward: zeros, then a copy) stays priced as the copy's.
  if (opt.fusion == Fusion::eager && opt.mode == Mode::inference)
    for (size_t i = 0; i < n; ++i) {
      const Node& nd = g.nodes[i];
      if (nd.op_type != "Slice" || plan.free_reason[i] != FreeReason::none || nd.outputs.empty() ||
          !unit_step_slice(g, nd))
        continue;
      if (read_only_by(g, cons, plan, nd.outputs[0],
                       [](size_t, const Node& cn) { return pointwise(cn) || cn.op_type == "Concat"; }))
        plan.free_reason[i] = FreeReason::strided_view_read_by_elementwise;
    }

  // Full fusion: a GEMM output's unit-step slice read only by pointwise ops (Phi-3's
  // gate_up_proj chunked into gate and up for silu(gate) * up) is an index into the GEMM's
  // output that the fused kernel reads in place (inductor's indexing, vLLM's silu_and_mul over
  // the merged [gate | up]); no copy.
  if (opt.fusion == Fusion::full)
    for (size_t i = 0; i < n; ++i) {
      const Node& nd = g.nodes[i];
      if (nd.op_type != "Slice" || plan.free_reason[i] != FreeReason::none || nd.outputs.empty() || nd.inputs.empty() ||
          !unit_step_slice(g, nd))
        continue;
      auto pit = plan.producer.find(nd.inputs[0]);
      if (pit == plan.producer.end() || !gemm_ops().count(g.nodes[static_cast<size_t>(pit->second)].op_type)) continue;
      auto it = cons.find(nd.outputs[0]);
      if (it == cons.end() || it->second.empty()) continue;
      bool all = true;
      for (int c : it->second)
        if (c < 0 || !pointwise(g.nodes[static_cast<size_t>(c)])) all = false;
      if (all) plan.free_reason[i] = FreeReason::strided_view_read_by_elementwise;
    }
}

// Phase 4, eager 16-bit inference (--dtype fp16 / bf16): the decomposed RMSNorms (with their
// weight) as Hugging Face's RMSNorm modules run them, in FP32 whatever the model's dtype:
// hidden.to(float32), pow, mean, add, rsqrt, hidden * rsqrt, .to(input dtype), weight *
// hidden. The input is read by pow and the normalisation through an FP32 copy (a cast
// kernel before pow), the statistics and the normalised rows are FP32, and the weight's
// multiply reads a 16-bit copy of them (a cast kernel before it).
void mark_fp32_norms(const Graph& g, const LoweringOptions& opt, const Consumers& cons, Plan& plan) {
  const DType act = activation_dtype(opt);
  if (opt.fusion != Fusion::eager || opt.mode != Mode::inference || opt.compute_dtype == DType::undefined ||
      !is_float(act) || dtype_bits(act) != 16)
    return;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Group grp;
    if (plan.free_reason[i] != FreeReason::none || plan.group_of[i] >= 0 ||
        !match_rmsnorm(g, cons, plan, static_cast<int>(i), grp))
      continue;
    std::vector<int> chain;  // the norm's nodes past a slice it reads
    for (int m : grp.nodes)
      if (g.nodes[static_cast<size_t>(m)].op_type != "Slice") chain.push_back(m);
    const Node& weight = g.nodes[static_cast<size_t>(chain.back())];
    const bool weighted = chain.size() >= 6 && weight.op_type == "Mul";
    if (!weighted || std::any_of(chain.begin(), chain.end(), [&](int m) {
          return plan.free_reason[static_cast<size_t>(m)] != FreeReason::none || plan.group_of[static_cast<size_t>(m)] >= 0;
        }))
      continue;
    const std::string& x = g.nodes[i].inputs[0];
    const TensorInfo* xt = tensor(g, x);
    if (!xt || !is_float(xt->dtype) || plan.tensor_dtype.count(x)) continue;
    const std::string& normed = g.nodes[static_cast<size_t>(chain[chain.size() - 2])].outputs[0];
    for (size_t k = 0; k + 1 < chain.size(); ++k) {
      const Node& nd = g.nodes[static_cast<size_t>(chain[k])];
      plan.tensor_dtype[nd.outputs[0]] = DType::f32;
      if (std::find(nd.inputs.begin(), nd.inputs.end(), x) != nd.inputs.end())
        plan.read_dtype[{chain[k], x}] = DType::f32;
    }
    plan.read_dtype[{chain.back(), normed}] = act;
    plan.casts_before.insert({chain.front(), {x, DType::f32}});
    plan.casts_before.insert({chain.back(), {normed, act}});
  }
}

// Phase 3, eager and full: the framework kernels recognised from decomposed ONNX
// (FlashAttention and rotary under full inference, norms, addmm, activation islands).
void group_framework_kernels(const Graph& g, const LoweringOptions& opt, const Consumers& cons, Plan& plan) {
  const size_t n = g.nodes.size();
  std::vector<bool> taken(n, false);
  auto add_group = [&](const Group& grp) {
    for (int m : grp.nodes) {
      taken[static_cast<size_t>(m)] = true;
      plan.group_of[static_cast<size_t>(m)] = static_cast<int>(plan.groups.size());
    }
    plan.groups.push_back(grp);
  };
  // Attention as serving engines run it (and PyTorch's scaled_dot_product_attention under
  // --attention fused): one FlashAttention kernel (half precision; match_flash_attention asks
  // flash_attention_applies), and under full the rotary embedding as one kernel
  // (flash_attention.cpp).
  if (attention_fused(opt))
    for (size_t i = 0; i < n; ++i) {
      Group grp;
      if (taken[i] || plan.free_reason[i] != FreeReason::none || !match_flash_attention(g, opt, cons, plan, static_cast<int>(i), grp)) continue;
      if (std::none_of(grp.nodes.begin(), grp.nodes.end(), [&](int m) { return taken[static_cast<size_t>(m)]; })) add_group(grp);
    }
  if (opt.fusion == Fusion::full && opt.mode == Mode::inference)
    for (size_t i = 0; i < n; ++i) {
      Group grp;
      if (taken[i] || plan.free_reason[i] != FreeReason::none || !match_rotary(g, cons, plan, static_cast<int>(i), grp)) continue;
      if (std::none_of(grp.nodes.begin(), grp.nodes.end(), [&](int m) { return taken[static_cast<size_t>(m)]; })) add_group(grp);
    }
  if (opt.serving_kernels && opt.fusion == Fusion::full && opt.mode == Mode::inference) pair_rotary_groups(g, plan);
  for (size_t i = 0; i < n; ++i) {
    if (taken[i] || plan.free_reason[i] != FreeReason::none) continue;
    Group grp;
    if (match_layernorm(g, cons, static_cast<int>(i), grp)) add_group(grp);
    else if (opt.fusion == Fusion::full && match_rmsnorm(g, cons, plan, static_cast<int>(i), grp)) add_group(grp);
  }
  for (size_t i = 0; i < n; ++i) {
    if (taken[i] || plan.free_reason[i] != FreeReason::none) continue;
    Group grp;
    if (match_bias_gemm(g, cons, plan, static_cast<int>(i), grp) && !taken[static_cast<size_t>(grp.nodes[1])]) add_group(grp);
  }
  // Pointwise islands, seeded at each float tensor read by a pointwise node.
  std::set<std::string> seeds_done;
  for (size_t i = 0; i < n; ++i) {
    if (taken[i] || plan.free_reason[i] != FreeReason::none || !pointwise(g.nodes[i])) continue;
    for (const auto& x : g.nodes[i].inputs) {
      if (x.empty() || is_scalar_const(g, x) || seeds_done.count(x)) continue;
      const TensorInfo* t = g.find(x);
      if (!t || !is_float(t->dtype)) continue;
      seeds_done.insert(x);
      Group grp;
      if (match_island(g, cons, plan, x, static_cast<int>(i), opt.fusion == Fusion::eager, taken, grp)) {
        add_group(grp);
        break;
      }
    }
  }
}

}  // namespace

const char* group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::bias_gemm: return "bias_gemm";
    case GroupKind::layernorm: return "layernorm";
    case GroupKind::rmsnorm: return "rmsnorm";
    case GroupKind::gelu: return "gelu";
    case GroupKind::gelu_tanh: return "gelu_tanh";
    case GroupKind::quick_gelu: return "quick_gelu";
    case GroupKind::silu: return "silu";
    case GroupKind::fused: return "fused";
    case GroupKind::flash_attention: return "flash_attention";
    case GroupKind::rotary: return "rotary";
    case GroupKind::parallel_gemm: return "parallel_gemm";
  }
  return "fused";
}

Plan make_plan(const Graph& g, const LoweringOptions& opt, const Consumers& cons) {
  const size_t n = g.nodes.size();
  Plan plan;
  plan.free_reason.assign(n, FreeReason::none);
  plan.group_of.assign(n, -1);
  for (size_t i = 0; i < n; ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) plan.producer[o] = static_cast<int>(i);
  mark_free_nodes(g, opt, cons, plan);
  if (opt.fusion == Fusion::none) return plan;
  mark_strided_views(g, opt, cons, plan);
  mark_slice_views(g, opt, cons, plan);
  mark_mixer_views(g, cons, plan);
  group_framework_kernels(g, opt, cons, plan);
  mark_fp32_norms(g, opt, cons, plan);
  if (opt.fusion == Fusion::full) full_fusion(g, cons, plan);
  if (opt.serving_kernels && opt.mode == Mode::inference) merge_parallel_gemms(g, plan);
  return plan;
}

// ---------------------------------------------------------------------------------------
// Group emission.

namespace {

DType compute_dtype(const LoweringOptions& opt, const TensorInfo* t) {
  if (opt.compute_dtype != DType::undefined && t && is_float(t->dtype)) return activation_dtype(opt);
  return t && t->dtype != DType::undefined ? t->dtype : DType::f32;
}

int class_rank(KernelClass c) {
  switch (c) {
    case KernelClass::softmax: case KernelClass::layernorm: return 3;
    case KernelClass::reduce: return 2;
    case KernelClass::elementwise: return 1;
    default: return 0;
  }
}

// A bias Add (node `add`) on the output `gemm_out` of the GEMM `k`, read by its epilogue.
void add_bias_epilogue(const Graph& g, int add, const std::string& gemm_out, Kernel& k) {
  const Node& nd = g.nodes[static_cast<size_t>(add)];
  const std::string& bias = nd.inputs[0] == gemm_out ? nd.inputs[1] : nd.inputs[0];
  k.epilogue = "bias";
  k.bytes += double(numel(g.find(bias))) * element_bytes(k.dtype);
  k.fused_nodes.push_back(add);
}

// The GEMM of a MatMul + bias Add (addmm): the bias is read by the GEMM's epilogue.
void emit_bias_gemm(const Graph& g, const LoweringOptions& opt, const Plan& plan, const Group& grp,
                    std::vector<Kernel>& out) {
  const Node& anchor = g.nodes[static_cast<size_t>(grp.anchor)];
  LowerCtx c{g, opt, anchor, grp.anchor, out, &plan};
  const size_t before = out.size();
  emit_matmul(c);
  if (out.size() == before + 1 && out.back().cls == KernelClass::gemm) {
    Kernel& k = out.back();
    k.note = k.note.empty() ? "bias epilogue (addmm)" : k.note + "; bias epilogue (addmm)";
    add_bias_epilogue(g, grp.nodes[1], anchor.outputs[0], k);
  }
}

// Sibling GEMMs over concatenated weights (LoweringOptions::serving_kernels): each member lowered as it
// would run alone, then one GEMM whose output columns are theirs together, reading the shared
// activation once. Members that do not lower to one GEMM each of the same rows, reduction and
// dtype stay separate kernels.
void emit_parallel_gemm(const Graph& g, const LoweringOptions& opt, const Plan& plan, const Group& grp,
                        std::vector<Kernel>& out) {
  std::vector<Kernel> parts;
  std::vector<size_t> count;
  std::vector<int> gemm_nodes;
  std::map<std::string, size_t> part_of_output;  // a GEMM's output -> its (single) part
  for (int ni : grp.nodes) {
    const Node& nd = g.nodes[static_cast<size_t>(ni)];
    if (nd.op_type == "Add" && nd.inputs.size() == 2) {
      // A bias Add on a member's output: read by that GEMM's epilogue (addmm).
      const std::string* gemm_out = nullptr;
      for (const std::string& in : nd.inputs)
        if (!gemm_out && part_of_output.count(in)) gemm_out = &in;
      if (gemm_out) {
        add_bias_epilogue(g, ni, *gemm_out, parts[part_of_output.at(*gemm_out)]);
        continue;
      }
    }
    LowerCtx c{g, opt, nd, ni, parts, &plan};
    const size_t before = parts.size();
    if (const Rule* rule = find_rule(nd, opt)) (*rule)(c);
    count.push_back(parts.size() - before);
    gemm_nodes.push_back(ni);
    if (parts.size() == before + 1 && !nd.outputs.empty()) part_of_output[nd.outputs[0]] = before;
  }
  bool mergeable = parts.size() == gemm_nodes.size();
  for (size_t i = 0; mergeable && i < parts.size(); ++i) {
    const Kernel& p = parts[i];
    mergeable = count[i] == 1 && p.cls == KernelClass::gemm && p.dtype == parts[0].dtype &&
                p.gemm.batch == parts[0].gemm.batch && p.gemm.m == parts[0].gemm.m && p.gemm.k == parts[0].gemm.k &&
                !p.gemm.batched;
  }
  if (!mergeable) {
    // Each GEMM alone (with its bias epilogue).
    out.insert(out.end(), parts.begin(), parts.end());
    return;
  }
  const TensorInfo* a = g.find(g.nodes[static_cast<size_t>(grp.anchor)].inputs[0]);
  const double a_bytes =
      double(numel(a)) * (narrow_weight_gemms(parts[0].dtype) && parts[0].dtype == opt.compute_dtype
                              ? narrow_operand_bytes(parts[0].dtype)
                              : element_bytes(compute_dtype(opt, a)));
  Kernel k = parts[0];
  std::string names = g.nodes[static_cast<size_t>(grp.anchor)].name;
  for (size_t i = 1; i < parts.size(); ++i) {
    k.gemm.n += parts[i].gemm.n;
    k.flops += parts[i].flops;
    k.bytes += std::max(0.0, parts[i].bytes - a_bytes);
    k.fused_nodes.push_back(gemm_nodes[i]);
    k.fused_nodes.insert(k.fused_nodes.end(), parts[i].fused_nodes.begin(), parts[i].fused_nodes.end());
    names += ", " + g.nodes[static_cast<size_t>(gemm_nodes[i])].name;
  }
  const std::string note = "one GEMM over the concatenated weights of " + names;
  k.note = k.note.empty() ? note : k.note + "; " + note;
  out.push_back(std::move(k));
}

// A group kernel's memory traffic: every tensor read from outside the group (shape operands
// computed on the host excepted) and every output read outside it (or by nobody). Sets the
// kernel's operands, bytes, inputs and dtype; returns the last output written.
const TensorInfo* group_traffic(const Graph& g, const LoweringOptions& opt, const Plan& plan, const Group& grp,
                                const Consumers& cons, Kernel& k) {
  const std::set<int> members(grp.nodes.begin(), grp.nodes.end());
  std::set<std::string> produced;
  for (int ni : grp.nodes)
    for (const auto& o : g.nodes[static_cast<size_t>(ni)].outputs) produced.insert(o);
  std::set<std::string> seen;
  double in_bytes = 0, out_bytes = 0;
  int inputs = 0;
  const TensorInfo* first_in = nullptr;
  for (int ni : grp.nodes)
    for (size_t ii = 0; ii < g.nodes[static_cast<size_t>(ni)].inputs.size(); ++ii) {
      const Node& member = g.nodes[static_cast<size_t>(ni)];
      const std::string& in = member.inputs[ii];
      if (in.empty() || produced.count(in) || !seen.insert(in).second) continue;
      const TensorInfo* t = g.find(in);
      if (!t) continue;
      auto pit = plan.producer.find(in);
      if (pit != plan.producer.end() && plan.free_reason[static_cast<size_t>(pit->second)] == FreeReason::host)
        continue;  // shape operands are not read by the kernel
      if (!first_in && is_float(t->dtype)) first_in = t;
      int64_t e = numel(t);
      // A Gather reads the rows it gathers, as many elements as it outputs, not its whole
      // table (an embedding lookup fused with what follows it); a Slice the part it keeps.
      if ((member.op_type == "Gather" || member.op_type == "Slice") && ii == 0 && !member.outputs.empty())
        if (const TensorInfo* o = g.find(member.outputs[0]); o && numel(o) >= 0) e = std::min(e, numel(o));
      in_bytes += double(e) * element_bytes(compute_dtype(opt, t));
      k.operand_elems.push_back(e);
      if (e > 1) ++inputs;
    }
  const TensorInfo* last_out = nullptr;
  for (int ni : grp.nodes)
    for (const auto& o : g.nodes[static_cast<size_t>(ni)].outputs) {
      // Written unless every reader is inside (an output nobody reads is a result).
      if (o.empty() || (cons.count(o) && consumed_only_by(cons, o, members))) continue;
      const TensorInfo* t = g.find(o);
      out_bytes += double(numel(t)) * element_bytes(compute_dtype(opt, t));
      last_out = t;
    }
  k.dtype = compute_dtype(opt, first_in ? first_in : last_out);
  k.inputs = std::max(inputs, 1);
  k.bytes = in_bytes + out_bytes;
  return last_out;
}

// A group kernel's class, shape and work: a norm, a fused chain (every member's work, the
// class of its heaviest member) or one elementwise activation / rotary kernel.
void group_work(const Graph& g, const Group& grp, const std::vector<Kernel>& parts, const TensorInfo* last_out,
                Kernel& k) {
  if (grp.kind == GroupKind::layernorm || grp.kind == GroupKind::rmsnorm) {
    k.cls = KernelClass::layernorm;
    k.op = grp.kind == GroupKind::layernorm ? "ln" : "rmsnorm";
    // The norm's input: the first member's, past a Slice it reads in place (a norm joined with
    // other units: its output's, the same rows).
    size_t first = 0;
    while (first + 1 < grp.nodes.size() && g.nodes[static_cast<size_t>(grp.nodes[first])].op_type == "Slice") ++first;
    const TensorInfo* x = grp.extended ? g.find(g.nodes[static_cast<size_t>(grp.anchor)].outputs[0])
                                       : g.find(g.nodes[static_cast<size_t>(grp.nodes[first])].inputs[0]);
    rows_cols(x, k.rows, k.cols);
    const std::string name = grp.kind == GroupKind::layernorm ? "LayerNorm" : "RMSNorm";
    k.flops = (grp.kind == GroupKind::layernorm ? kLayerNormOpsPerElement : kRmsNormOpsPerElement) * double(k.rows) *
              double(k.cols);
    if (grp.extended) {
      if (k.residual_add) k.flops += double(k.rows) * double(k.cols);
      k.note = k.residual_add ? "residual add + " + name + " in one kernel" : name + " with fused pointwise ops";
    } else {
      k.note = "decomposed " + name + " (" + std::to_string(grp.nodes.size()) + " nodes)";
    }
  } else if (grp.kind == GroupKind::fused) {
    // torch.compile-style: one kernel doing every member's work.
    k.cls = KernelClass::memory;
    int best = -1;
    std::string ops;
    for (const auto& p : parts) {
      k.flops += p.flops;
      ops += (ops.empty() ? "" : "+") + p.op;
      if (class_rank(p.cls) >= best) {
        best = class_rank(p.cls);
        k.cls = best == 0 ? KernelClass::memory : p.cls;
        k.rows = p.rows;
        k.cols = p.cols;
        k.op = p.op;
      }
    }
    if (k.cls == KernelClass::elementwise || k.cls == KernelClass::memory) rows_cols(last_out, k.rows, k.cols);
    if (k.cls == KernelClass::elementwise) k.op = ops == "sigmoid+mul+mul" ? "silu_and_mul" : "fused";
    k.note = "fused: " + ops;
  } else {
    // gelu / silu / gelu_tanh / quick_gelu / rotary: one elementwise kernel (a paired rotary:
    // each token's query and key heads).
    k.cls = KernelClass::elementwise;
    k.op = group_kind_name(grp.kind);
    rows_cols(last_out, k.rows, k.cols);
    k.flops = double(k.rows) * double(k.cols);
    k.note = "decomposed " + std::string(group_kind_name(grp.kind)) + " (" + std::to_string(grp.nodes.size()) + " nodes)";
  }
}

}  // namespace

void emit_group(const Graph& g, const LoweringOptions& opt, const Plan& plan, const Group& grp, const Consumers& cons,
                std::vector<Kernel>& out) {
  if (grp.kind == GroupKind::flash_attention) {
    emit_flash_attention(g, opt, plan, grp, cons, out);
    return;
  }
  if (grp.kind == GroupKind::bias_gemm) {
    emit_bias_gemm(g, opt, plan, grp, out);
    return;
  }
  if (grp.kind == GroupKind::parallel_gemm) {
    emit_parallel_gemm(g, opt, plan, grp, out);
    return;
  }
  // Work: each member (or eager sub-pattern) as it would run alone.
  std::vector<Kernel> parts;
  for (int ni : grp.nodes) {
    const Node& nd = g.nodes[static_cast<size_t>(ni)];
    LowerCtx c{g, opt, nd, ni, parts, &plan};
    if (const Rule* rule = find_rule(nd, opt)) (*rule)(c);
  }
  Kernel k;
  k.node = grp.anchor;
  k.phase = Phase::forward;
  const TensorInfo* last_out = group_traffic(g, opt, plan, grp, cons, k);
  for (int ni : grp.nodes)
    if (ni != grp.anchor) k.fused_nodes.push_back(ni);
  // A norm kernel that also adds two full-size operands: the residual stream's fused add +
  // norm (writing the sum when later nodes read it). Set before group_work, which notes it.
  k.residual_add = std::any_of(grp.nodes.begin(), grp.nodes.end(), [&](int ni) {
    const Node& nd = g.nodes[static_cast<size_t>(ni)];
    const TensorInfo* y = nd.outputs.empty() ? nullptr : g.find(nd.outputs[0]);
    return nd.op_type == "Add" && nd.inputs.size() == 2 && y && numel(y) > 0 && numel(g.find(nd.inputs[0])) == numel(y) &&
           numel(g.find(nd.inputs[1])) == numel(y);
  });
  group_work(g, grp, parts, last_out, k);
  if (k.cls != KernelClass::layernorm) k.residual_add = false;
  if (grp.rotary_tokens > 0) {
    // Each token's query and key heads.
    k.rows = grp.rotary_tokens;
    k.cols = grp.rotary_q_width + grp.rotary_kv_width;
    k.flops = double(k.rows) * double(k.cols);
    k.note = "rotary of the queries and keys in one kernel";
    if (opt.serving_kernels && element_bytes(k.dtype) == 2) k.access = vllm_rotary_access(grp.rotary_q_width);
  }
  if (k.rows <= 0 && k.cols <= 0) {
    k.cls = KernelClass::unknown;
    k.note = "shapes not inferred";
  }
  out.push_back(k);
}

}  // namespace neusight::lowering_detail

namespace neusight {

const char* free_reason_text(FreeReason r) {
  switch (r) {
    case FreeReason::none: return "";
    case FreeReason::view: return "view";
    case FreeReason::host: return "host (shape computation)";
    case FreeReason::identity_in_inference: return "identity in inference";
    case FreeReason::dequantize_into_gemm: return "dequantize runs in the GEMM (quantized operand)";
    case FreeReason::constant_folded: return "constant folded";
    case FreeReason::strided_view_read_by_gemm: return "strided view read by GEMM";
    case FreeReason::broadcast_view: return "broadcast view";
    case FreeReason::strided_view_read_by_elementwise: return "strided view read by elementwise";
  }
  return "";
}

}  // namespace neusight
