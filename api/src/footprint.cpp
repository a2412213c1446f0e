// footprint.cpp - device memory of a run (footprint.h).
#include "footprint.h"
#include "neusight/precision.h"
#include "neusight/parameters.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace neusight {
namespace {


// The kernel group of each node (the node its forward kernel is anchored at; -1: none).
std::vector<int> kernel_groups(const Analysis& a) {
  std::vector<int> group(a.graph.nodes.size(), -1);
  for (const Kernel& k : a.kernels.kernels) {
    if (k.phase != Phase::forward || k.node < 0 || static_cast<size_t>(k.node) >= group.size()) continue;
    if (group[static_cast<size_t>(k.node)] < 0) group[static_cast<size_t>(k.node)] = k.node;
    for (int f : k.fused_nodes)
      if (f >= 0 && static_cast<size_t>(f) < group.size() && group[static_cast<size_t>(f)] < 0)
        group[static_cast<size_t>(f)] = k.node;
  }
  return group;
}

// The tensor each view (the output of a node without a kernel of its own) views: its first
// activation input's, through chains of views; a materialised tensor views itself.
struct ViewRoots {
  std::unordered_map<std::string, std::string> root;
  std::string operator()(const std::string& t) const {
    auto it = root.find(t);
    return it == root.end() ? t : it->second;
  }
};
ViewRoots view_roots(const Graph& g, const std::vector<int>& group, const std::unordered_set<std::string>& constants) {
  ViewRoots v;
  for (size_t i = 0; i < g.nodes.size(); ++i) {  // nodes are in topological order
    const Node& n = g.nodes[i];
    if (group[i] >= 0) continue;
    std::string first;
    for (const auto& in : n.inputs)
      if (!in.empty() && g.find(in) && !constants.count(in)) {
        first = v(in);
        break;
      }
    if (!first.empty())
      for (const auto& out : n.outputs)
        if (!out.empty()) v.root[out] = first;
  }
  return v;
}

// What a FlashAttention group (a flash_attention kernel and the nodes it fuses) keeps for its
// backward pass, as flash_attn's autograd function saves it: the tensors the group reads from
// outside (Q, K, V; a float mask) and writes for outside (O), and the log-sum-exp of each query
// row in FP32; never the scores or probabilities, which its backward recomputes. Marks the
// group's nodes in `member`, whose own rules then do not apply.
void flash_saved(const Analysis& a, const Options& o, const ViewRoots& resolve,
                 const std::unordered_set<std::string>& constants, const std::unordered_map<std::string, int>& writer,
                 std::vector<char>& member, std::set<std::string>& seen, std::vector<SavedActivation>& saved) {
  const Graph& g = a.graph;
  for (const Kernel& k : a.kernels.kernels) {
    if (k.op != "flash_attention" || k.phase != Phase::forward || k.node < 0 || static_cast<size_t>(k.node) >= g.nodes.size())
      continue;
    std::set<int> nodes(k.fused_nodes.begin(), k.fused_nodes.end());
    nodes.insert(k.node);
    std::set<std::string> inside;
    for (int m : nodes)
      if (m >= 0 && static_cast<size_t>(m) < g.nodes.size()) {
        member[static_cast<size_t>(m)] = 1;
        inside.insert(g.nodes[static_cast<size_t>(m)].outputs.begin(), g.nodes[static_cast<size_t>(m)].outputs.end());
      }
    auto keep = [&](const std::string& name) {
      const TensorInfo* t = name.empty() ? nullptr : g.find(name);
      if (!t || constants.count(name) || !is_float(t->dtype)) return;
      const std::string r = resolve(name);
      if (!g.find(r) || constants.count(r) || !seen.insert(r).second) return;
      auto w = writer.find(r);
      saved.push_back({k.node, w == writer.end() ? -1 : w->second, tensor_bytes(g.find(r), o), r});
    };
    int last = k.node;
    for (int m : nodes) {
      if (m < 0 || static_cast<size_t>(m) >= g.nodes.size()) continue;
      last = std::max(last, m);
      for (const auto& in : g.nodes[static_cast<size_t>(m)].inputs)
        if (!inside.count(in)) keep(in);
    }
    if (static_cast<size_t>(last) < g.nodes.size())
      for (const auto& out : g.nodes[static_cast<size_t>(last)].outputs) keep(out);
    saved.push_back({k.node, k.node, double(k.gemm.batch) * double(k.gemm.m) * 4.0, ""});  // log-sum-exp
  }
}

// What autograd keeps of the forward pass for a training step's backward pass: per node that is
// differentiated (a backward kernel of its own), the activations its gradient formula reads, as
// PyTorch's derivatives save them: none for ops whose gradient is linear in the output's
// (additions, copies, views, concatenations, reductions by sum or mean, gathers of an
// embedding, casts); the output for those whose derivative follows from it (softmax, tanh,
// sigmoid, exp, relu, sqrt); the activation inputs for the others (products of two
// activations, GEMMs, normalizations, gelu, powers, ...), but none for a product or quotient
// with a one-element constant (a scale). Dropout keeps its mask, a byte per element. A tensor
// saved by several nodes counts once, kept by the first (a view keeps the tensor it views).
std::vector<SavedActivation> saved_for_backward(const Analysis& a, const Options& o, const std::vector<int>& group,
                                                const ViewRoots& resolve,
                                                const std::unordered_set<std::string>& constants) {
  static const std::set<std::string> keeps_nothing = {
      "Add", "Sub", "Neg", "Concat", "Split", "Slice", "Cast", "Transpose", "Expand", "Reshape", "Flatten",
      "Squeeze", "Unsqueeze", "Identity", "Pad", "Sum", "ReduceSum", "ReduceMean", "Gather", "Tile", "Shape",
      "ConstantOfShape", "Range", "Where", "Trilu", "CumSum", "GatherElements", "ScatterND", "DepthToSpace",
      "SpaceToDepth"};
  static const std::set<std::string> keeps_output = {"Softmax", "LogSoftmax", "Tanh", "Sigmoid", "Exp", "Relu", "Sqrt"};
  const Graph& g = a.graph;
  std::vector<char> differentiated(g.nodes.size(), 0);
  for (const Kernel& k : a.kernels.kernels)
    if (k.phase == Phase::backward && !k.recomputed && k.node >= 0 && static_cast<size_t>(k.node) < g.nodes.size())
      differentiated[static_cast<size_t>(k.node)] = 1;
  std::unordered_map<std::string, int> writer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& out : g.nodes[i].outputs)
      if (!out.empty()) writer[out] = static_cast<int>(i);
  std::set<std::string> seen;
  std::vector<SavedActivation> saved;
  std::vector<char> flash(g.nodes.size(), 0);
  flash_saved(a, o, resolve, constants, writer, flash, seen, saved);
  // LoRA: a frozen layer's GEMM keeps nothing (autograd saves its input for the weight's
  // gradient alone); an adapted one's adapter keeps x (for dA) and x A (for dB).
  std::vector<char> frozen_gemm(g.nodes.size(), 0);
  std::vector<double> adapter_bytes(g.nodes.size(), 0);
  if (o.lora.rank > 0)
    for (const Kernel& k : a.kernels.kernels) {
      if (k.phase != Phase::forward || k.node < 0 || static_cast<size_t>(k.node) >= g.nodes.size()) continue;
      const Node& n = g.nodes[static_cast<size_t>(k.node)];
      if (k.op == "lora_a")
        adapter_bytes[static_cast<size_t>(k.node)] = double(k.gemm.m) * double(k.gemm.n) * element_bytes(k.dtype);
      else if (k.cls == KernelClass::gemm && k.b_input >= 0 && static_cast<size_t>(k.b_input) < n.inputs.size() &&
               constants.count(n.inputs[static_cast<size_t>(k.b_input)]))
        frozen_gemm[static_cast<size_t>(k.node)] = 1;
    }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const bool own = differentiated[i] || (group[i] >= 0 && differentiated[static_cast<size_t>(group[i])]);
    if (!own || flash[i] || keeps_nothing.count(n.op_type)) continue;
    if (frozen_gemm[i]) {
      if (adapter_bytes[i] <= 0) continue;
      saved.push_back({static_cast<int>(i), static_cast<int>(i), adapter_bytes[i], ""});
    }
    if (n.op_type == "Dropout") {
      const TensorInfo* t = n.inputs.empty() ? nullptr : g.find(n.inputs[0]);
      if (t && t->fully_known()) saved.push_back({static_cast<int>(i), static_cast<int>(i), double(t->num_elements()), ""});
      continue;
    }
    const bool output = keeps_output.count(n.op_type) > 0;
    // A product or quotient with a one-element constant (a scale) needs none of its inputs.
    if ((n.op_type == "Mul" || n.op_type == "Div") && std::any_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& in) {
          const TensorInfo* t = in.empty() ? nullptr : g.find(in);
          return t && (constants.count(in) || t->int_value) && t->fully_known() && t->num_elements() <= 1;
        }))
      continue;
    for (const auto& name : output ? n.outputs : n.inputs) {
      const TensorInfo* t = name.empty() ? nullptr : g.find(name);
      if (!t || constants.count(name) || !is_float(t->dtype)) continue;
      const std::string r = resolve(name);
      if (!g.find(r) || constants.count(r) || !seen.insert(r).second) continue;
      auto w = writer.find(r);
      saved.push_back({static_cast<int>(i), w == writer.end() ? -1 : w->second, tensor_bytes(g.find(r), o), r});
    }
  }
  return saved;
}

// The tensors of `g` a node reads: its inputs, and for a control-flow node (If, Loop, Scan) the
// outer tensors its bodies read by name.
std::vector<std::string> reads(const Graph& g, const Node& n) {
  std::vector<std::string> in = n.inputs;
  bool bodies = false;
  for (const auto& [name, a] : n.attributes) bodies = bodies || !a.graphs.empty();
  if (!bodies) return in;
  // Names the bodies read that none of them defines (as a body input, initializer or node
  // output, nested bodies included) and the outer graph has.
  std::set<std::string> read, local;
  for (const auto& [name, a] : n.attributes)
    for (const auto& sub : a.graphs) {
      if (!sub) continue;
      local.insert(sub->inputs.begin(), sub->inputs.end());
      local.insert(sub->initializers.begin(), sub->initializers.end());
      each_node(*sub, [&](const Graph& body, const Node& bn) {
        if (&body != sub.get()) {
          local.insert(body.inputs.begin(), body.inputs.end());
          local.insert(body.initializers.begin(), body.initializers.end());
        }
        read.insert(bn.inputs.begin(), bn.inputs.end());
        local.insert(bn.outputs.begin(), bn.outputs.end());
      });
    }
  for (const auto& x : read)
    if (!x.empty() && !local.count(x) && g.find(x)) in.push_back(x);
  return in;
}

}  // namespace

DType held_dtype(const TensorInfo& t, const Options& o) {
  return o.dtype != DType::undefined && is_float(t.dtype) ? activation_dtype(o.dtype) : t.dtype;
}

double gemm_weight_bytes(const TensorInfo* t, const Options& o) {
  if (!t || !t->fully_known()) return 0;
  if (narrow_weight_gemms(o.dtype) && is_float(t->dtype) && t->shape.size() >= 2)
    return double(t->num_elements()) * narrow_operand_bytes(o.dtype);
  return double(t->num_elements()) * element_bytes(held_dtype(*t, o));
}

double tensor_bytes(const TensorInfo* t, const Options& o) {
  if (!t || !t->fully_known()) return 0;
  return double(t->num_elements()) * element_bytes(held_dtype(*t, o));
}

double sparse_2_4_saved_bytes(const Graph& g, const std::vector<std::string>& weights, const Options& o,
                              std::map<std::string, double>* factor, double* compressed) {
  double saved = 0;
  if (compressed) *compressed = 0;
  // The weights the footprint holds (weight_bytes): a value computed from constants is not one.
  const std::unordered_set<std::string> held = held_values(g);
  for (const std::string& name : weights) {
    if (!held.count(name)) continue;
    const TensorInfo* t = g.find(name);
    const double dense = gemm_weight_bytes(t, o);
    if (!(dense > 0)) continue;
    const double eb = dense / double(t->num_elements());
    const double f = sparse_2_4_bytes_per_element(eb) / eb;
    saved += dense * (1 - f);
    if (factor) (*factor)[name] = f;
    if (compressed) *compressed += dense * f;
  }
  return saved;
}

bool holds_sparse_2_4(const Analysis& a, const Gpu& gpu) {
  return std::any_of(a.kernels.kernels.begin(), a.kernels.kernels.end(),
                     [&](const Kernel& k) { return runs_sparse_2_4(k, gpu); });
}

void each_node(const Graph& g, const std::function<void(const Graph&, const Node&)>& f, int depth) {
  for (const auto& n : g.nodes) {
    f(g, n);
    if (depth < 8)
      for (const auto& [name, a] : n.attributes)
        for (const auto& sub : a.graphs)
          if (sub) each_node(*sub, f, depth + 1);
  }
}

double lora_adapter_bytes(const std::vector<Kernel>& kernels, int64_t adapters, double* params) {
  double bytes = 0, n = 0;
  for (const Kernel& k : kernels) {
    if (k.phase != Phase::forward || k.cls != KernelClass::gemm || (k.op != "lora_a" && k.op != "lora_b")) continue;
    // x A: [in x rank]; (x A) B: [rank x out]; of each adapter held (a grouped GEMM's groups
    // are the adapters its tokens reach).
    const double elems = double(k.gemm.k) * double(k.gemm.n) * double(std::max<int64_t>(adapters, 1));
    n += elems;
    bytes += elems * element_bytes(k.dtype);
  }
  if (params) *params = n;
  return bytes;
}

void weight_bytes(const Graph& g, const Options& o, double& all, double& embedding, const TensorShare& share) {
  std::map<std::string, bool> gather_only;
  each_node(g, [&](const Graph&, const Node& n) {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) continue;
      auto it = gather_only.find(n.inputs[i]);
      const bool gather = n.op_type == "Gather" && i == 0;
      if (it == gather_only.end()) gather_only[n.inputs[i]] = gather;
      else it->second = it->second && gather;
    }
  });
  all = embedding = 0;
  std::set<std::string> counted;  // a name a malformed graph repeats counts once
  const auto count = [&](const std::string& name) {
    const TensorInfo* t = g.find(name);
    if (!t || t->int_value || !(is_float(t->dtype) || t->num_elements() > 64) || !counted.insert(name).second) return;
    auto it = gather_only.find(name);
    const bool table = it != gather_only.end() && it->second;
    const double b = (table ? tensor_bytes(t, o) : gemm_weight_bytes(t, o)) * (share ? share(name) : 1.0);
    all += b;
    if (table) embedding += b;
  };
  for (const auto& name : g.initializers) count(name);
  for (const Node& n : g.nodes)
    if (n.op_type == "Constant" && n.domain.empty())
      for (const auto& out : n.outputs)
        if (!out.empty()) count(out);
}

ActivationUse activation_use(const Analysis& a, const Options& o, const TensorShare& share) {
  const Graph& g = a.graph;
  const std::vector<int> group = kernel_groups(a);
  // Weights, never activations (parameters.h held_values). Values folded from constants are
  // not among them: a bound sequence folds a position lookup, a rotary table or a causal mask
  // that a framework computes every forward.
  const std::unordered_set<std::string> constants = held_values(g);
  const ViewRoots resolve = view_roots(g, group, constants);
  std::unordered_map<std::string, int> producer;  // a materialised tensor -> its kernel's group
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (group[i] >= 0)
      for (const auto& out : g.nodes[i].outputs)
        if (!out.empty()) producer[out] = group[i];
  // Each materialised tensor's life in node indices: [written, last read]; a graph input's from
  // -1, a graph output's to the end.
  const int end = static_cast<int>(g.nodes.size());
  std::map<std::string, std::pair<int, int>> life;
  std::map<int, std::set<std::string>> touched;  // group -> the materialised tensors it reads or writes
  auto live = [&](const std::string& name, int from, int to) {
    auto [it, fresh] = life.emplace(name, std::make_pair(from, to));
    if (!fresh) it->second = {std::min(it->second.first, from), std::max(it->second.second, to)};
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (group[i] < 0) continue;
    // A control-flow body's reads by name keep their tensors alive to the node; its kernels'
    // working sets are the body's own kernels', not the whole body's reads.
    const std::vector<std::string> in_all = reads(g, g.nodes[i]);
    for (size_t j = 0; j < in_all.size(); ++j) {
      const std::string& in = in_all[j];
      if (in.empty() || !g.find(in) || constants.count(in)) continue;
      const std::string r = resolve(in);
      if (!g.find(r) || constants.count(r)) continue;
      auto p = producer.find(r);
      if (p != producer.end() && p->second == group[i]) continue;
      if (j < g.nodes[i].inputs.size()) {
        touched[group[i]].insert(r);
        if (p != producer.end()) touched[p->second].insert(r);
      }
      live(r, p != producer.end() ? p->second : -1, group[i]);
    }
  }
  for (const auto& out : g.outputs) {
    const std::string r = resolve(out);
    auto p = producer.find(r);
    if (p != producer.end()) touched[p->second].insert(p->first);
    if (p != producer.end() || (g.find(r) && !constants.count(r))) live(r, p != producer.end() ? p->second : -1, end);
  }
  ActivationUse use;
  use.saved_bytes = peak_saved_bytes(checkpointed(a, saved_for_backward(a, o, group, resolve, constants)));
  const auto held = [&](const std::string& name) { return tensor_bytes(g.find(name), o) * (share ? share(name) : 1.0); };
  for (const auto& entry : touched) {
    double b = 0;
    for (const auto& name : entry.second) b += held(name);
    use.largest_kernel_bytes = std::max(use.largest_kernel_bytes, b);
  }
  // Bytes alive at each node index (shifted by one for the inputs' -1): a difference array.
  std::vector<double> delta(g.nodes.size() + 3, 0.0);
  for (const auto& [name, span] : life) {
    const double b = held(name);
    use.all_bytes += b;
    delta[static_cast<size_t>(span.first + 1)] += b;
    delta[static_cast<size_t>(std::max(span.first, span.second) + 2)] -= b;
  }
  double alive = 0;
  for (double d : delta) use.peak_live_bytes = std::max(use.peak_live_bytes, alive += d);
  return use;
}

std::vector<SavedActivation> saved_activations(const Analysis& a, const Options& o) {
  const std::vector<int> group = kernel_groups(a);
  const std::unordered_set<std::string> constants = held_values(a.graph);
  return checkpointed(a, saved_for_backward(a, o, group, view_roots(a.graph, group, constants), constants));
}

DType held_activation_dtype(const Options& o) {
  return o.dtype != DType::undefined ? activation_dtype(o.dtype) : DType::undefined;
}

std::vector<SavedActivation> checkpointed(const Analysis& a, std::vector<SavedActivation> saved) {
  if (!a.checkpoints) return saved;
  return apply_checkpoints(saved, *a.checkpoints);
}

// Tensor-parallel inference (parallel.h tensor_parallel_roles): one GPU holds 1/tp of each
// weight a split node reads (column- and row-parallel GEMMs, a vocabulary-parallel embedding,
// sharded ops) and of each activation a column-parallel or sharded node writes (a head's
// share of the attention, the MLP's hidden columns); the rest whole (the residual stream, the
// norms, a row-parallel GEMM's all-reduced output).
TensorShare tensor_parallel_share(const Graph& g, int tp) {
  const std::vector<TpRole> roles = tensor_parallel_roles(g, tp);
  auto split = std::make_shared<std::set<std::string>>(tensor_parallel_split_weights(g, roles));
  for (size_t i = 0; i < g.nodes.size() && i < roles.size(); ++i)
    if (splits_output(roles[i]))
      for (const auto& out : g.nodes[i].outputs)
        if (!out.empty()) split->insert(out);
  return [split, tp](const std::string& name) { return split->count(name) ? 1.0 / tp : 1.0; };
}

MemoryFootprint memory_footprint(const Analysis& a, const Options& o, double capacity_gib) {
  MemoryFootprint m;
  m.training = o.mode == Mode::training;
  m.capacity_gib = capacity_gib;
  m.tp = o.parallel.active && !m.training ? std::max(1, o.parallel.tp) : 1;
  const TensorShare tp_share = m.tp > 1 ? tensor_parallel_share(a.graph, m.tp) : TensorShare{};
  // QLoRA: the weights its dequantize kernels expand are held in NF4.
  std::map<std::string, double> nf4;  // name -> bytes held over gemm_weight_bytes (NF4; 2:4 below)
  for (const std::string& name : nf4_weights(a.kernels.kernels))
    if (const TensorInfo* t = a.graph.find(name))
      nf4[name] = kNf4BitsPerParameter / 8.0 / element_bytes(held_dtype(*t, o));
  // --sparsity 2:4: the pruned weights held compressed (predict() adds them back on a GPU that
  // runs them dense).
  double compressed = 0;
  sparse_2_4_saved_bytes(a.graph, a.kernels.sparse_weights, o, &nf4, &compressed);
  const TensorShare share = nf4.empty() ? tp_share : TensorShare([&](const std::string& name) {
    auto it = nf4.find(name);
    return (tp_share ? tp_share(name) : 1.0) * (it == nf4.end() ? 1.0 : it->second);
  });
  m.lora_nf4 = !nf4_weights(a.kernels.kernels).empty();
  m.sparse_2_4_gib = compressed / m.tp / kGiB;
  double weights = 0, embedding = 0;
  weight_bytes(a.graph, o, weights, embedding, share);
  m.weights_gib = weights / kGiB;
  const ActivationUse use = activation_use(a, o, tp_share);
  m.activations_gib = (m.training ? use.saved_bytes : use.peak_live_bytes) / kGiB;
  m.recompute_segments = m.training && a.checkpoints ? a.checkpoints->segments : 0;
  m.recompute_attention = m.recompute_segments > 0 && a.checkpoints->positions.empty();
  m.lora_rank = o.lora.rank;
  if (!m.training && o.lora.rank > 0) {  // served unmerged: the adapters beside the weights
    m.weights_gib += lora_adapter_bytes(a.kernels.kernels, o.lora.adapters, &m.adapter_params) / kGiB;
    m.lora_adapters = o.lora.adapters;
  }
  if (m.training) {
    // The parameters the optimizer updates (lowering: one update kernel each), their
    // gradients in their own type, and the optimizer's FP32 state (optimizer_state_bytes: none
    // for SGD, a momentum buffer, Adam's two moments) plus an FP32 master copy of 16-bit
    // parameters, as the multi-GPU plan counts them (parallel.h).
    for (const Kernel& k : a.kernels.kernels) {
      if (k.phase != Phase::update || k.weight.empty()) continue;
      const double n = double(k.rows) * double(k.cols), eb = element_bytes(k.dtype);
      m.optimizer = optimizer_of_update(k.op);
      m.master_weights = m.master_weights || eb < 4;
      m.trainable_params += n;
      if (!a.graph.find(k.weight)) m.weights_gib += n * eb / kGiB;  // LoRA's adapters: held beside the graph's
      m.gradients_gib += n * eb / kGiB;
      m.optimizer_gib += n * (optimizer_state_bytes(k.op) + (eb < 4 ? 4.0 : 0.0)) / kGiB;
    }
  }
  return m;
}

}  // namespace neusight
