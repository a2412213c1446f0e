// tensor_parallel.cpp - Megatron-style tensor parallelism on a graph's kernel list.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <set>

#include "neusight/parallel.h"
#include "neusight/parameters.h"
#include "shard.h"

namespace neusight {

using parallel_detail::divide_first;
using parallel_detail::is_moe_op;
using parallel_detail::rescale_gemm;
using parallel_detail::shrink_vector;

const char* tp_role_name(TpRole r) {
  switch (r) {
    case TpRole::replicated: return "replicated";
    case TpRole::column: return "column";
    case TpRole::row: return "row";
    case TpRole::sharded: return "sharded";
    case TpRole::vocab_embedding: return "vocab_embedding";
  }
  return "replicated";
}

std::set<std::string> tensor_parallel_split_weights(const Graph& g, const std::vector<TpRole>& roles) {
  const std::unordered_set<std::string> held = held_values(g);
  std::set<std::string> split;
  for (size_t i = 0; i < g.nodes.size() && i < roles.size(); ++i) {
    if (roles[i] == TpRole::replicated) continue;
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty() && held.count(in) && g.find(in)) split.insert(in);
  }
  return split;
}

bool splits_output(TpRole r) { return r == TpRole::column || r == TpRole::sharded; }

std::vector<char> sequence_parallel_nodes(const Graph& g, const std::vector<TpRole>& roles) {
  std::vector<char> split(g.nodes.size(), 0);
  for (const PathTensor& t : data_path_tensors(g, DType::undefined))
    if (t.producer >= 0 && static_cast<size_t>(t.producer) < roles.size() &&
        roles[static_cast<size_t>(t.producer)] == TpRole::replicated)
      split[static_cast<size_t>(t.producer)] = 1;
  return split;
}

namespace {

// The 2-D float weight node `n` reads at input i (parameters.h reads_weight), or nullptr.
const TensorInfo* weight_2d(const Graph& g, const std::unordered_set<std::string>& held, const Node& n, size_t i) {
  if (!reads_weight(g, held, n, i)) return nullptr;
  const TensorInfo* t = g.find(n.inputs[i]);
  if (!t->fully_known() || t->shape.size() != 2) return nullptr;
  return t;
}

bool is_gemm_op(const Node& n) { return n.domain.empty() && (n.op_type == "MatMul" || n.op_type == "Gemm"); }

// Output width of a GEMM with a weight operand, 0 when the node has none.
int64_t weight_out_width(const Graph& g, const std::unordered_set<std::string>& held, const Node& n) {
  if (!is_gemm_op(n)) return 0;
  const TensorInfo* w = weight_2d(g, held, n, 1);
  if (!w) return 0;
  const bool trans_b = n.op_type == "Gemm" && n.attr_i("transB", 0);
  return w->shape[trans_b ? 0 : 1].value;
}

int64_t numel(const TensorInfo* t) { return t ? std::max<int64_t>(t->num_elements(), 0) : 0; }

// The start of a normalization over a tensor's last axis (decomposed RMSNorm's Pow or
// ReduceMean, or a norm operator).
bool starts_norm(const Node& n) {
  return n.op_type == "Pow" || n.op_type == "ReduceMean" || n.op_type == "LayerNormalization" ||
         n.op_type == "SimplifiedLayerNormalization" || n.op_type == "RMSNormalization";
}

// Splits one GEMM kernel of a column- (out dim split) or row-parallel (in dim split) node.
// `f` is the node's forward GEMM {batch, M, N=out, K=in}; backward kernels are the grad
// input {M, K, N} and the grad weight {K, N, M} (or its transpose {N, K, M}).
void split_weight_gemm(Kernel& k, const GemmShape* f, bool column, int tp) {
  const GemmShape before = k.gemm;
  GemmShape& s = k.gemm;
  if (k.phase == Phase::forward || !f) {
    divide_first({column ? &s.n : &s.k}, tp);
  } else if (s.m == f->m && s.n == f->k && s.k == f->n) {  // grad input
    divide_first({column ? &s.k : &s.n}, tp);
  } else if (s.m == f->k && s.n == f->n && s.k == f->m) {  // grad weight dB = A^T dC
    divide_first({column ? &s.n : &s.m}, tp);
  } else if (s.m == f->n && s.n == f->k && s.k == f->m) {  // grad weight dB^T = dC^T A
    divide_first({column ? &s.m : &s.n}, tp);
  } else {  // unknown layout: the dim equal to the split one
    const int64_t v = column ? f->n : f->k;
    if (s.n == v) divide_first({&s.n}, tp);
    else if (s.k == v) divide_first({&s.k}, tp);
    else if (s.m == v) divide_first({&s.m}, tp);
  }
  rescale_gemm(k, before);
}

Kernel allreduce_kernel(int node, Phase phase, double bytes, DType dtype, int tp, const std::string& what) {
  Kernel c;
  c.cls = KernelClass::collective;
  c.phase = phase;
  c.op = "allreduce";
  c.dtype = dtype;
  c.node = node;
  c.rows = 1;
  c.cols = static_cast<int64_t>(bytes / element_bytes(dtype));
  c.bytes = bytes;
  c.note = "tensor-parallel all-reduce over " + std::to_string(tp) + " GPUs (" + what + ")";
  return c;
}

// Each tensor's producing node and its consumers.
struct Edges {
  std::map<std::string, size_t> producer;
  std::map<std::string, std::vector<size_t>> consumers;
};

Edges graph_edges(const Graph& g) {
  Edges e;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) e.producer[o] = i;
    for (const auto& x : g.nodes[i].inputs)
      if (!x.empty()) e.consumers[x].push_back(i);
  }
  return e;
}

// Two row-parallel outputs summed by one Add need one all-reduce, after the later of them
// (all-reduce(a) + all-reduce(b) = all-reduce(a + b)): a mixture's experts and its shared
// expert, as vLLM adds them before reducing. The earlier addends, whose all-reduce the later
// one's carries.
std::set<size_t> row_outputs_summed_later(const Graph& g, const std::vector<TpRole>& roles, Edges& edges) {
  auto& producer = edges.producer;
  auto& consumers = edges.consumers;
  std::set<size_t> earlier;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (roles[i] != TpRole::row || n.outputs.empty()) continue;
    const auto& cs = consumers[n.outputs[0]];
    if (cs.size() != 1 || g.nodes[cs[0]].op_type != "Add" || g.nodes[cs[0]].inputs.size() != 2) continue;
    const Node& add = g.nodes[cs[0]];
    const std::string& other = add.inputs[0] == n.outputs[0] ? add.inputs[1] : add.inputs[0];
    auto p = producer.find(other);
    if (p != producer.end() && p->second > i && roles[p->second] == TpRole::row) earlier.insert(i);
  }
  return earlier;
}

// An expert kernel on the busiest of `ep` GPUs holding whole experts (expert_parallel_load):
// its reached experts and routed tokens in place of the whole mixture's.
void place_experts(Kernel& k, int ep) {
  const Kernel::MoeRouting& m = k.moe;
  if (ep <= 1 || m.experts <= 0 || !(m.tokens > 0)) return;
  const ExpertLoad all = expert_parallel_load(m.tokens, m.experts, m.top_k, 1);
  const ExpertLoad busiest = expert_parallel_load(m.tokens, m.experts, m.top_k, ep);
  if (!(all.routed > 0) || !(all.reached > 0) || !(busiest.reached > 0)) return;
  const double routed_share = busiest.routed / all.routed;
  if (k.cls == KernelClass::gemm) {
    const double weights = m.weight_bytes * busiest.reached / all.reached;
    k.bytes = (k.bytes - m.weight_bytes) * routed_share + weights;
    k.moe.weight_bytes = weights;
    k.flops *= routed_share;
    k.gemm.batch = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(busiest.reached - 1e-9)));
    k.gemm.m = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(busiest.routed / double(k.gemm.batch) - 1e-9)));
  } else {
    k.rows = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(busiest.routed - 1e-9)));
    k.flops *= routed_share;
    k.bytes *= routed_share;
  }
  // The lowering's note names the part ("FC1 of the ... experts reached"); keep the name.
  const size_t of = k.note.find(" of the ");
  char buf[240];
  std::snprintf(buf, sizeof buf, " on the busiest of %d GPUs holding %lld of the %lld experts: %.1f reached, %.0f tokens", ep,
                static_cast<long long>((m.experts + ep - 1) / ep), static_cast<long long>(m.experts), busiest.reached,
                busiest.routed);
  k.note = (of == std::string::npos ? k.note : k.note.substr(0, of)) + buf;
}

// A mixture's kernel on one of tp GPUs: the experts of its share of ep GPUs (place_experts),
// each split along its intermediate dim over tp / ep GPUs (fc1 and fc3 by their output
// columns, fc2 by its reduction), the activation over its share; the routing and the weighted
// sum stay whole.
void split_expert_kernel(Kernel& k, int tp, int ep) {
  if (k.expert_part == Kernel::ExpertPart::none) return;
  place_experts(k, ep);
  const int split = std::max(1, tp / std::max(1, ep));
  if (split <= 1) return;
  if (k.cls == KernelClass::gemm) {
    const GemmShape before = k.gemm;
    divide_first({k.expert_part == Kernel::ExpertPart::down ? &k.gemm.k : &k.gemm.n}, split);
    rescale_gemm(k, before);
  } else if (k.expert_part == Kernel::ExpertPart::activation) {
    shrink_vector(k, split);
  }
}

std::vector<TpRole> roles_of(const Graph& g, int tp, Edges& edges) {
  std::vector<TpRole> roles(g.nodes.size(), TpRole::replicated);
  if (tp <= 1) return roles;
  const std::unordered_set<std::string> held = held_values(g);
  auto& consumers = edges.consumers;
  auto& producer = edges.producer;
  // Kept whole on every GPU, as serving engines keep them: a mixture's router (the GEMM, and
  // its bias Add, whose logits every GPU's share of the experts needs), and a bottleneck
  // projection normalised over its full width before the next GEMM (DeepSeek's q_a_proj and
  // kv_a_proj: a column split would need the whole row for the norm).
  std::set<size_t> whole;
  for (const auto& n : g.nodes) {
    if (!is_moe_op(n) || n.inputs.size() < 2) continue;
    std::string t = n.inputs[1];
    for (int guard = 0; guard < 4; ++guard) {
      auto it = producer.find(t);
      if (it == producer.end()) break;
      const Node& p = g.nodes[it->second];
      whole.insert(it->second);
      if (weight_out_width(g, held, p) || p.inputs.empty()) break;
      t = p.inputs[0];
    }
  }
  auto normalised = [&](const Node& n) {
    for (const auto& o : n.outputs)
      for (size_t c : consumers[o]) {
        const Node& cn = g.nodes[c];
        if (starts_norm(cn)) return true;
        if (cn.op_type == "Slice" && !cn.outputs.empty())
          for (size_t cc : consumers[cn.outputs[0]])
            if (starts_norm(g.nodes[cc])) return true;
      }
    return false;
  };
  std::set<int64_t> vocab_widths;
  for (const auto& n : g.nodes)
    if (int64_t w = weight_out_width(g, held, n)) vocab_widths.insert(w);
  std::set<std::string> split;
  auto is_split = [&](const std::string& t) { return !t.empty() && split.count(t) > 0; };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    bool any = false;
    for (const auto& in : n.inputs) any = any || is_split(in);
    TpRole role = TpRole::replicated;
    bool out_split = false;
    if (whole.count(i)) {
      role = TpRole::replicated;
    } else if (is_moe_op(n)) {
      // Each GPU holds 1/tp of every expert (fc1, fc3 by columns, fc2 by rows, as vLLM's
      // fused MoE under TP): the experts' work is split, the output all-reduced.
      role = TpRole::row;
    } else if (const int64_t out = weight_out_width(g, held, n)) {
      if (!n.inputs.empty() && is_split(n.inputs[0])) {
        role = TpRole::row;  // the reduction dim arrives split; the output is summed across GPUs
      } else if (normalised(n)) {
        role = TpRole::replicated;
      } else if (out >= tp) {
        role = TpRole::column;
        out_split = true;
      }
    } else if (n.domain.empty() && n.op_type == "Gather" && !any) {
      const TensorInfo* table = weight_2d(g, held, n, 0);
      if (table && vocab_widths.count(table->shape[0].value) && table->shape[0].value >= tp)
        role = TpRole::vocab_embedding;
    } else if (any && n.op_type != "Shape" && n.op_type != "Size") {
      role = TpRole::sharded;
      out_split = true;
    }
    roles[i] = role;
    if (out_split)
      for (const auto& o : n.outputs)
        if (!o.empty()) split.insert(o);
  }
  return roles;
}

}  // namespace

std::vector<TpRole> tensor_parallel_roles(const Graph& g, int tp) {
  Edges edges = tp > 1 ? graph_edges(g) : Edges{};
  return roles_of(g, tp, edges);
}

namespace {

// A graph whose nodes get tensor-parallel roles: the analysed graph, or an If branch of one of
// its nodes (with the outer scope's tensors: its weights), whose kernels carry the body node's
// name.
struct TpScope {
  Graph branch;  // a branch with its outer scope's tensors (empty for the analysed graph)
  const Graph& graph;
  std::vector<TpRole> roles;
  std::set<size_t> summed_later;
  std::vector<const GemmShape*> fwd_gemm;       // the forward GEMM of each weight node
  std::map<std::string, size_t> index;          // body node name -> node (branches only)
  std::vector<char> sequence_split;             // sequence parallelism: per node (empty without)
  // The analysed graph, read in place (its kernels carry their node's index).
  TpScope(const Graph& g, int tp, bool sp) : graph(g) { assign_roles(tp, sp); }
  // A branch, held here.
  TpScope(Graph&& b, int tp, bool sp) : branch(std::move(b)), graph(branch) {
    assign_roles(tp, sp);
    for (size_t i = 0; i < graph.nodes.size(); ++i) index.emplace(graph.nodes[i].name, i);
  }
  void assign_roles(int tp, bool sp) {
    Edges edges = graph_edges(graph);
    roles = roles_of(graph, tp, edges);
    summed_later = row_outputs_summed_later(graph, roles, edges);
    fwd_gemm.assign(graph.nodes.size(), nullptr);
    if (sp) sequence_split = sequence_parallel_nodes(graph, roles);
  }
  bool split_along_sequence(int node) const {
    return node >= 0 && static_cast<size_t>(node) < sequence_split.size() && sequence_split[static_cast<size_t>(node)];
  }
  TpRole role(int node) const {
    return node >= 0 && static_cast<size_t>(node) < roles.size() ? roles[static_cast<size_t>(node)] : TpRole::replicated;
  }
};

// The branch of If `n` that holds `body_node` (the one a known condition takes, else the one
// that has a node of that name), or nullptr.
const Graph* if_branch_of(const Graph& g, const Node& n, const std::string& body_node) {
  const Attribute* then_b = n.attr("then_branch");
  const Attribute* else_b = n.attr("else_branch");
  auto graph_of = [](const Attribute* a) { return a && !a->graphs.empty() ? a->graphs[0].get() : nullptr; };
  if (const int known = known_if_condition(g, n); known >= 0) return graph_of(known != 0 ? then_b : else_b);
  for (const Attribute* a : {then_b, else_b})
    if (const Graph* b = graph_of(a))
      for (const auto& x : b->nodes)
        if (x.name == body_node) return b;
  return nullptr;
}

// Each kernel's scope and node in it ({-1, -1}: a body kernel that runs whole). Scope 0 is
// the graph; each If node whose branch kernels appear adds its branch (a known condition's:
// optimum's merged decoders), roles computed on the branch as on a graph. Kernels of other
// bodies (Loop, Scan, nested control flow) are counted in `whole`.
std::vector<std::pair<int, int>> place_kernels(const Graph& g, const KernelList& in, int tp, bool sp,
                                               std::vector<std::unique_ptr<TpScope>>& scopes, size_t& whole) {
  scopes.push_back(std::make_unique<TpScope>(g, tp, sp));
  std::map<int, int> if_scope;  // If node -> scope (-1: none)
  std::vector<std::pair<int, int>> where(in.kernels.size(), {0, -1});
  for (size_t i = 0; i < in.kernels.size(); ++i) {
    const Kernel& k = in.kernels[i];
    if (k.body_node.empty()) {
      where[i] = {0, k.node};
      continue;
    }
    const Node* n = k.node >= 0 && static_cast<size_t>(k.node) < g.nodes.size() ? &g.nodes[static_cast<size_t>(k.node)] : nullptr;
    const std::string prefix = n ? n->name + "/" : std::string();
    const std::string body_name = n && k.body_node.rfind(prefix, 0) == 0 ? k.body_node.substr(prefix.size()) : "";
    auto it = if_scope.find(k.node);
    if (it == if_scope.end()) {
      const Graph* b = n && n->op_type == "If" ? if_branch_of(g, *n, body_name) : nullptr;
      int sc = -1;
      if (b) {
        scopes.push_back(std::make_unique<TpScope>(with_outer_scope(*b, g), tp, sp));
        sc = static_cast<int>(scopes.size()) - 1;
      }
      it = if_scope.emplace(k.node, sc).first;
    }
    const TpScope* s = it->second >= 0 ? scopes[static_cast<size_t>(it->second)].get() : nullptr;
    const auto node_it = s ? s->index.find(body_name) : std::map<std::string, size_t>::const_iterator();
    if (s && node_it != s->index.end()) {
      where[i] = {it->second, static_cast<int>(node_it->second)};
    } else {
      where[i] = {-1, -1};
      ++whole;
    }
  }
  return where;
}

// One kernel of node `node` of scope `s` as one GPU runs it.
// A LoRA adapter's forward kernel beside a tensor-parallel layer, as vLLM shards its LoRA
// layers: beside a column-parallel layer A is whole (every GPU computes x A) and B holds the
// GPU's output columns (its expand and add over them); beside a row-parallel layer A holds the
// GPU's input rows, so x A is partial, and B is whole: (x_i A_i) B added into the partial
// output sums to (x A) B in the layer's own all-reduce.
bool split_lora_kernel(Kernel& k, bool column, int tp) {
  if (!k.lora_adapter || k.phase != Phase::forward) return false;
  const bool a = k.op == "lora_a", b = k.op == "lora_b";
  if (k.cls == KernelClass::gemm && (a || b)) {
    const GemmShape before = k.gemm;
    if (a && !column) divide_first({&k.gemm.k}, tp);
    if (b && column) divide_first({&k.gemm.n}, tp);
    rescale_gemm(k, before);
    k.operand_elems = {k.gemm.batch * k.gemm.m * k.gemm.k, k.gemm.batch * k.gemm.k * k.gemm.n};
  } else if (column && k.cls == KernelClass::elementwise) {
    shrink_vector(k, tp);
  }
  return true;
}

void split_kernel(Kernel& k, const TpScope& s, int node, int tp, int ep, const std::set<std::string>& split_weights) {
  const TpRole r = s.role(node);
  const bool moe = node >= 0 && static_cast<size_t>(node) < s.graph.nodes.size() && is_moe_op(s.graph.nodes[static_cast<size_t>(node)]);
  if ((r == TpRole::column || r == TpRole::row) && split_lora_kernel(k, r == TpRole::column, tp)) {
    return;
  } else if (moe && r == TpRole::row && k.phase == Phase::forward) {
    split_expert_kernel(k, tp, ep);
  } else if (k.phase == Phase::update) {
    if (split_weights.count(k.weight)) shrink_vector(k, tp);
  } else if (r == TpRole::column || r == TpRole::row) {
    if (k.cls == KernelClass::gemm)
      split_weight_gemm(k, s.fwd_gemm[static_cast<size_t>(node)], r == TpRole::column, tp);
    else if (r == TpRole::column)
      shrink_vector(k, tp);
  } else if (r == TpRole::sharded) {
    if (k.cls == KernelClass::gemm) {
      const GemmShape before = k.gemm;
      divide_first({&k.gemm.batch, &k.gemm.m, &k.gemm.n}, tp);
      rescale_gemm(k, before);
      // FlashAttention's heads split: its Q and K/V operands with them (the ring of context
      // parallelism sends this GPU's K/V).
      if (k.gemm.batch != before.batch && is_flash_gemm(k)) {
        for (int64_t& e : k.operand_elems)
          e = static_cast<int64_t>(std::ceil(double(e) * double(k.gemm.batch) / double(before.batch)));
        // A GPU's heads: 1/tp of them, a KV head never split (fewer than tp: one each).
        k.heads = (k.heads + tp - 1) / tp;
        k.kv_heads = (k.kv_heads + tp - 1) / tp;
      }
    } else if (k.cls != KernelClass::collective && k.cls != KernelClass::unknown) {
      shrink_vector(k, tp);
    }
  } else if (r == TpRole::replicated && s.split_along_sequence(node) && k.cls != KernelClass::collective &&
             k.cls != KernelClass::unknown) {
    // Sequence parallel: this GPU's share of the tokens (a GEMM's token rows: its output rows
    // forward, the dim of that size in a backward GEMM).
    if (k.cls == KernelClass::gemm) {
      const GemmShape before = k.gemm;
      const GemmShape* f = s.fwd_gemm[static_cast<size_t>(node)];
      const int64_t tokens = f ? f->m : k.gemm.m;
      if (k.gemm.m == tokens) divide_first({&k.gemm.m}, tp);
      else if (k.gemm.k == tokens) divide_first({&k.gemm.k}, tp);
      else divide_first({&k.gemm.n, &k.gemm.m}, tp);
      rescale_gemm(k, before);
    } else {
      shrink_vector(k, tp);
    }
  }
}

}  // namespace

KernelList shard_tensor_parallel(const Graph& g, const KernelList& in, int tp, int ep, bool sequence_parallel) {
  if (tp <= 1) return in;
  std::vector<std::unique_ptr<TpScope>> scopes;
  size_t whole_body = 0;
  const std::vector<std::pair<int, int>> where = place_kernels(g, in, tp, sequence_parallel, scopes, whole_body);
  // Weights held in 1/tp slices: every weight a non-replicated node reads.
  std::set<std::string> split_weights;
  for (const auto& sc : scopes)
    for (const auto& name : tensor_parallel_split_weights(sc->graph, sc->roles)) {
      const TensorInfo* t = sc->graph.find(name);
      if (t && is_float(t->dtype)) split_weights.insert(name);
    }
  for (size_t i = 0; i < in.kernels.size(); ++i) {
    const Kernel& k = in.kernels[i];
    const auto [sc, node] = where[i];
    if (sc < 0 || node < 0 || k.cls != KernelClass::gemm || k.phase != Phase::forward) continue;
    TpScope& s = *scopes[static_cast<size_t>(sc)];
    if (static_cast<size_t>(node) < s.fwd_gemm.size() && !s.fwd_gemm[static_cast<size_t>(node)])
      s.fwd_gemm[static_cast<size_t>(node)] = &k.gemm;
  }

  KernelList out = in;
  out.kernels.clear();
  out.kernels.reserve(in.kernels.size() + 4 * g.nodes.size() / 8);
  if (whole_body > 0)
    out.warnings.push_back("tensor parallelism: " + std::to_string(whole_body) +
                           " kernels of Loop / Scan bodies or nested control flow run whole on every GPU");
  // A TP all-reduce follows the last kernel of a (node, phase) group.
  auto close_group = [&](std::pair<int, int> at, int owner, Phase phase, DType dtype) {
    const auto [sc, node] = at;
    if (sc < 0 || node < 0 || static_cast<size_t>(node) >= scopes[static_cast<size_t>(sc)]->graph.nodes.size()) return;
    const TpScope& s = *scopes[static_cast<size_t>(sc)];
    const Node& n = s.graph.nodes[static_cast<size_t>(node)];
    const TpRole r = s.roles[static_cast<size_t>(node)];
    if (phase == Phase::forward && (r == TpRole::row || r == TpRole::vocab_embedding) && !n.outputs.empty() &&
        !s.summed_later.count(static_cast<size_t>(node))) {
      const double bytes = double(numel(s.graph.find(n.outputs[0]))) * element_bytes(dtype);
      if (bytes > 0)
        out.kernels.push_back(allreduce_kernel(owner, phase, bytes, dtype, tp,
                                               r == TpRole::row ? "row-parallel output" : "vocab-parallel embedding"));
    } else if (phase == Phase::backward && r == TpRole::column && !n.inputs.empty()) {
      const TensorInfo* a = s.graph.find(n.inputs[0]);
      const double bytes = double(numel(a)) * element_bytes(dtype);
      if (a && !a->is_graph_input && bytes > 0)
        out.kernels.push_back(allreduce_kernel(owner, phase, bytes, dtype, tp, "column-parallel input gradient"));
    }
  };
  std::pair<int, int> cur{-1, -1};
  int cur_owner = -1;
  Phase cur_phase = Phase::forward;
  DType cur_dtype = DType::f32;
  for (size_t i = 0; i < in.kernels.size(); ++i) {
    const Kernel& src = in.kernels[i];
    if (where[i] != cur || src.node != cur_owner || src.phase != cur_phase) {
      close_group(cur, cur_owner, cur_phase, cur_dtype);
      cur = where[i];
      cur_owner = src.node;
      cur_phase = src.phase;
      cur_dtype = src.dtype;
    }
    Kernel k = src;
    if (where[i].first >= 0) split_kernel(k, *scopes[static_cast<size_t>(where[i].first)], where[i].second, tp, ep, split_weights);
    out.kernels.push_back(std::move(k));
  }
  close_group(cur, cur_owner, cur_phase, cur_dtype);
  return out;
}

double expected_max_standard_normal(int n) {
  if (n <= 1) return 0;
  // E[max] = integral of x n phi(x) Phi(x)^(n-1): the midpoint rule over [-9, 9].
  constexpr int kSteps = 3600;
  constexpr double lo = -9, hi = 9, h = (hi - lo) / kSteps, kInvSqrt2Pi = 0.3989422804014327;
  double sum = 0;
  for (int i = 0; i < kSteps; ++i) {
    const double x = lo + (i + 0.5) * h;
    const double phi = std::exp(-0.5 * x * x) * kInvSqrt2Pi;
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    sum += x * n * phi * std::pow(cdf, n - 1);
  }
  return sum * h;
}

double expected_max_binomial(int64_t trials, double p, int n) {
  if (trials <= 0 || !(p > 0)) return 0;
  if (p >= 1) return double(trials);
  // E[max] = sum over m < trials of P(max > m) = 1 - F(m)^n, F the binomial CDF.
  double pmf = std::pow(1 - p, double(trials)), cdf = 0, sum = 0;
  for (int64_t m = 0; m < trials; ++m) {
    cdf = std::min(1.0, cdf + pmf);
    sum += 1 - std::pow(cdf, n);
    pmf *= double(trials - m) / double(m + 1) * p / (1 - p);
  }
  return sum;
}

ExpertLoad expert_parallel_load(double tokens, int64_t experts, int64_t top_k, int gpus) {
  ExpertLoad l;
  if (experts <= 0 || !(tokens > 0)) return l;
  const double e = double(experts), k = double(std::clamp<int64_t>(top_k, 1, experts));
  const double routed = tokens * k;
  if (gpus <= 1) {
    l.reached = moe_experts_reached(tokens, experts, top_k);
    l.routed = routed;
    return l;
  }
  const double g = double(gpus);
  const int64_t local = (experts + gpus - 1) / gpus;
  const double p = std::clamp(1.0 - std::pow(1.0 - k / e, tokens), 0.0, 1.0);
  l.reached = expected_max_binomial(local, p, gpus);
  const double var = experts > 1 ? routed * (1 / g) * (1 - 1 / g) * (e - k) / (e - 1) : 0;
  l.routed = std::clamp(routed / g + std::sqrt(var) * expected_max_standard_normal(gpus), l.reached, routed);
  return l;
}

KernelList shard_optimizer_updates(const KernelList& in, int dp) {
  if (dp <= 1) return in;
  KernelList out = in;
  for (Kernel& k : out.kernels)
    if (k.phase == Phase::update) shrink_vector(k, dp);
  return out;
}

}  // namespace neusight
