// flash_attention.cpp - attention as serving engines run it (--fusion full, inference): the
// decomposed attention (QK^T, scale, mask, softmax, AV) as one FlashAttention kernel for a
// prompt or a KV-cache read for a decode step, with the KV-cache concatenation, the
// grouped-query head repetition and the head (un)permutes around it done by that kernel; and
// the rotary embedding (HF rotate_half) as one kernel.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "internal.h"

namespace neusight::lowering_detail {
namespace {

const TensorInfo* tensor(const Graph& g, const std::string& name) { return name.empty() ? nullptr : g.find(name); }

bool same_shape(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].value != b[i].value) return false;
  return true;
}

bool scalar_const(const Graph& g, const std::string& name) {
  const TensorInfo* t = tensor(g, name);
  return t && t->is_initializer && t->num_elements() == 1;
}

// Walks from a GEMM operand back to the tensor the attention kernel reads: through free
// views and strided transposes, the Expand of a grouped-query head repetition (repeat_kv:
// read in place by the kernel, whose query heads share a KV head) and a KV-cache Concat
// along the sequence of a graph input with the step's new keys or values. Under full fusion
// the kernel writes the new entries into the cache in place (flash_attn_with_kvcache, a
// serving engine's paged cache): the Concat is absorbed. Under eager the cache grows as
// Hugging Face's DynamicCache grows it, by torch.cat: a copy of the whole cache every step
// (of the new keys into an empty one in a prompt), the Concat's own kernel, whose output the
// attention reads. Collects the absorbed nodes in `absorbed` and the cache's new part in
// `appended`.
struct Operand {
  const TensorInfo* stored = nullptr;  // what the kernel reads (the whole cache for a Concat)
  const TensorInfo* appended = nullptr;
  std::vector<int> absorbed;
  bool sliced = false;  // a leading slice of the cache's last axis (MLA's values: the latent)
  bool cache = false;   // `stored` is a KV cache (absorbed Concat or the eager one's output)
};

Operand trace_operand(const Graph& g, const LoweringOptions& opt, const Consumers& cons, const Plan& plan,
                      const std::string& start) {
  Operand o;
  std::string t = start;
  for (int guard = 0; guard < 16; ++guard) {
    auto it = plan.producer.find(t);
    if (it == plan.producer.end()) break;
    const int pi = it->second;
    const Node& p = g.nodes[static_cast<size_t>(pi)];
    if (p.inputs.empty() || p.outputs.empty()) break;
    const bool free = plan.free_reason[static_cast<size_t>(pi)] != FreeReason::none;
    if (free && (p.op_type == "Transpose" || p.op_type == "Reshape" || p.op_type == "Unsqueeze" ||
                 p.op_type == "Squeeze" || p.op_type == "Identity")) {
      t = p.inputs[0];
      continue;
    }
    // Only a tensor nothing else reads is absorbed (a repeated K read elsewhere is real); a
    // head permute (split_heads) is the kernel's index math.
    if (!free && (p.op_type == "Expand" || p.op_type == "Transpose") && single_consumer(cons, p.outputs[0]) >= 0) {
      o.absorbed.push_back(pi);
      t = p.inputs[0];
      continue;
    }
    // A slice of the last axis (multi-head latent attention's values: the latent part of the
    // cache rows the keys read): the kernel reads those columns in place.
    // (Already a view when only GEMMs read it: nothing to absorb then.)
    if (p.op_type == "Slice" && (free || single_consumer(cons, p.outputs[0]) >= 0) && p.inputs.size() >= 4) {
      const TensorInfo* in = tensor(g, p.inputs[0]);
      const TensorInfo* axes = tensor(g, p.inputs[3]);
      const int64_t rank = in && in->has_shape ? static_cast<int64_t>(in->shape.size()) : -1;
      if (axes && axes->int_value && axes->int_value->size() == 1 &&
          (axes->int_value->front() == rank - 1 || axes->int_value->front() == -1)) {
        if (!free) o.absorbed.push_back(pi);
        o.sliced = true;
        t = p.inputs[0];
        continue;
      }
    }
    if (!free && p.op_type == "Concat" && p.inputs.size() == 2 && !o.appended) {
      const TensorInfo* past = tensor(g, p.inputs[0]);
      const TensorInfo* out = tensor(g, p.outputs[0]);
      // A graph input, or in an If branch an input of the graph around it (optimum's merged
      // decoder: the branch with the cache reads the outer graph's past_key_values).
      const bool graph_input = (past && past->is_graph_input) ||
                               std::find(g.inputs.begin(), g.inputs.end(), p.inputs[0]) != g.inputs.end();
      const int64_t axis = p.attr_i("axis", 0);
      if (graph_input && past && out && out->shape.size() == 4 && (axis == 2 || axis == -2)) {
        o.cache = true;
        if (opt.fusion != Fusion::full) {
          o.stored = out;  // DynamicCache's torch.cat: a kernel of its own
          return o;
        }
        o.absorbed.push_back(pi);
        o.appended = tensor(g, p.inputs[1]);
        o.stored = out;
        // The new entries' head permute (split_heads) is the kernel's index math too.
        auto nit = plan.producer.find(p.inputs[1]);
        if (nit != plan.producer.end()) {
          const Node& np = g.nodes[static_cast<size_t>(nit->second)];
          if (np.op_type == "Transpose" && plan.free_reason[static_cast<size_t>(nit->second)] == FreeReason::none &&
              single_consumer(cons, p.inputs[1]) == pi)
            o.absorbed.push_back(nit->second);
        }
        return o;
      }
    }
    break;
  }
  o.stored = tensor(g, t);
  return o;
}

// The sliding window a mask imposes, 0 when it imposes none that is known: a Trilu keeping
// its lower part (upper = 0) at a known diagonal offset k among the ops that build the mask
// masks key j for query row i when j <= i + k, so with `past` = keys - queries earlier
// positions every query sees the past - k most recent keys. Searched through the elementwise
// ops and reshapes a mask is assembled with, a few levels deep.
int64_t mask_window(const Graph& g, const Plan& plan, const std::string& mask, int64_t past) {
  static const std::set<std::string> through = {"Add", "Min", "Max", "Mul", "Where", "Expand", "Unsqueeze",
                                                "Reshape", "Squeeze", "Cast", "Identity", "Concat", "Tile"};
  int64_t window = 0;
  std::vector<std::pair<std::string, int>> todo = {{mask, 0}};
  std::set<std::string> seen;
  while (!todo.empty()) {
    const auto [t, depth] = todo.back();
    todo.pop_back();
    if (!seen.insert(t).second || depth > 8) continue;
    auto it = plan.producer.find(t);
    if (it == plan.producer.end()) continue;
    const Node& p = g.nodes[static_cast<size_t>(it->second)];
    if (p.op_type == "Trilu") {
      const TensorInfo* k = p.inputs.size() > 1 ? tensor(g, p.inputs[1]) : nullptr;
      if (p.attr_i("upper", 1) == 0 && k && k->int_value && k->int_value->size() == 1) {
        const int64_t w = past - k->int_value->front();
        if (w > 0 && (window == 0 || w < window)) window = w;
      }
      continue;
    }
    if (!through.count(p.op_type)) continue;
    for (const auto& in : p.inputs)
      if (!in.empty()) todo.emplace_back(in, depth + 1);
  }
  return window;
}

}  // namespace

bool match_flash_attention(const Graph& g, const LoweringOptions& opt, const Consumers& cons, const Plan& plan, int qk,
                           Group& grp) {
  const Node& m = g.nodes[static_cast<size_t>(qk)];
  if (m.op_type != "MatMul" || m.inputs.size() != 2 || m.outputs.empty()) return false;
  const TensorInfo* q = tensor(g, m.inputs[0]);
  const TensorInfo* s = tensor(g, m.outputs[0]);
  if (!q || !s || !q->fully_known() || !s->fully_known() || q->shape.size() != 4 || s->shape.size() != 4) return false;
  // FlashAttention computes in 16-bit (and 8-bit) floats; FP32 attention stays unfused, as
  // torch.compile runs it (the FP32 fusion traces of neusight-data keep softmax apart).
  const DType dt = opt.compute_dtype != DType::undefined && is_float(q->dtype) ? activation_dtype(opt.compute_dtype) : q->dtype;
  if (!is_float(dt) || dtype_bits(dt) > 16) return false;
  std::vector<int> nodes = {qk};
  // Scores -> [scale] -> [soft-cap: / cap, Tanh, * cap] -> [mask] -> Softmax(last axis) ->
  // [Dropout] -> MatMul(., V). FlashAttention-2 (softcap) and the serving engines' kernels
  // apply Gemma 2's cap to the scores they hold.
  std::string cur = m.outputs[0];
  bool softmax = false;
  int av = -1;
  for (int guard = 0; guard < 8 && av < 0; ++guard) {
    const int ci = single_consumer(cons, cur);
    if (ci < 0) return false;
    const Node& c = g.nodes[static_cast<size_t>(ci)];
    if (c.outputs.empty()) return false;
    const bool free = plan.free_reason[static_cast<size_t>(ci)] != FreeReason::none;
    if (!softmax && (c.op_type == "Div" || c.op_type == "Mul") && c.inputs.size() == 2) {
      const std::string& other = c.inputs[0] == cur ? c.inputs[1] : c.inputs[0];
      if (!scalar_const(g, other) || (c.op_type == "Div" && c.inputs[0] != cur)) return false;
    } else if (!softmax && c.op_type == "Tanh") {
    } else if (!softmax && (c.op_type == "Add" || c.op_type == "Where")) {
      const TensorInfo* y = tensor(g, c.outputs[0]);
      if (!y || !y->fully_known() || !same_shape(y->shape, s->shape)) return false;  // a mask never widens the scores
    } else if (!softmax && c.op_type == "Softmax") {
      const int64_t axis = c.attr_i("axis", -1);
      if (axis != -1 && axis != 3) return false;
      softmax = true;
    } else if (softmax && c.op_type == "Dropout") {
      // Free in inference; in training FlashAttention drops the probabilities out in its kernel.
      if (!free) nodes.push_back(ci);
      cur = c.outputs[0];
      continue;
    } else if (softmax && c.op_type == "MatMul" && c.inputs.size() == 2 && c.inputs[0] == cur) {
      av = ci;
    } else {
      return false;
    }
    if (free) return false;
    nodes.push_back(ci);
    cur = c.outputs[0];
  }
  if (av < 0) return false;
  const TensorInfo* o = tensor(g, g.nodes[static_cast<size_t>(av)].outputs[0]);
  if (!o || !o->fully_known() || o->shape.size() != 4) return false;
  // The heads merged back ([b, h, s, d] -> [b, s, h, d]): FlashAttention writes that layout.
  int last = av;
  const int mi = single_consumer(cons, g.nodes[static_cast<size_t>(av)].outputs[0]);
  if (mi >= 0) {
    const Node& mt = g.nodes[static_cast<size_t>(mi)];
    if (mt.op_type == "Transpose" && plan.free_reason[static_cast<size_t>(mi)] == FreeReason::none &&
        mt.attr_ints("perm") == std::vector<int64_t>{0, 2, 1, 3}) {
      nodes.push_back(mi);
      last = mi;
    }
  }
  for (const std::string& operand : {m.inputs[1], g.nodes[static_cast<size_t>(av)].inputs[1]}) {
    const Operand op = trace_operand(g, opt, cons, plan, operand);
    if (!op.stored || !op.stored->fully_known()) return false;
    nodes.insert(nodes.end(), op.absorbed.begin(), op.absorbed.end());
  }
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  grp = Group{GroupKind::flash_attention, nodes, qk, last};
  return true;
}

int single_consumer(const Consumers& cons, const std::string& t) {
  auto it = cons.find(t);
  if (it == cons.end() || it->second.size() != 1) return -1;
  return it->second[0];
}

bool consumed_only_by(const Consumers& cons, const std::string& t, const std::set<int>& set) {
  auto it = cons.find(t);
  if (it == cons.end()) return true;
  for (int c : it->second)
    if (c < 0 || !set.count(c)) return false;
  return true;
}

bool unit_step_slice(const Graph& g, const Node& n) {
  if (n.op_type != "Slice") return false;
  if (n.inputs.size() <= 4 || n.inputs[4].empty()) return true;
  const TensorInfo* steps = g.find(n.inputs[4]);
  return steps && steps->int_value &&
         std::all_of(steps->int_value->begin(), steps->int_value->end(), [](int64_t v) { return v == 1; });
}

// The Slice (unit steps, a kernel of its own so far) that `t` is a view of, through free
// reshapes, when nothing but `readers` (and those reshapes) reads it: a kernel reading `t` can
// read the slice in place. -1 when there is none.
int slice_read_only_by(const Graph& g, const Consumers& cons, const Plan& plan, std::string t, const std::vector<int>& readers) {
  std::set<int> inside(readers.begin(), readers.end());
  for (int guard = 0; guard < 4 && !t.empty(); ++guard) {
    auto pit = plan.producer.find(t);
    if (pit == plan.producer.end()) return -1;
    const int pi = pit->second;
    const Node& p = g.nodes[static_cast<size_t>(pi)];
    auto cit = cons.find(t);
    if (cit == cons.end()) return -1;
    for (int c : cit->second)
      if (c < 0 || !inside.count(c)) return -1;
    const bool free = plan.free_reason[static_cast<size_t>(pi)] != FreeReason::none;
    if (free && (p.op_type == "Reshape" || p.op_type == "Unsqueeze" || p.op_type == "Squeeze") && !p.inputs.empty()) {
      inside.insert(pi);
      t = p.inputs[0];
      continue;
    }
    if (free || p.op_type != "Slice" || p.inputs.empty() || !unit_step_slice(g, p)) return -1;
    return pi;
  }
  return -1;
}

// HF rotate_half embedding: out = x * cos + cat(-x[..., d/2:], x[..., :d/2]) * sin, i.e.
// Slice, Slice, Neg, Concat, Mul, Mul, Add on x (and the Transpose that made x, when only
// they read it): one kernel in serving engines (vLLM's rotary_embedding) and in inductor.
namespace {

// Partial rotary (Phi, GPT-NeoX): the rotated part (`add_i`, of the Slice `rot`) concatenated
// with the rest of the head, a Slice of the same tensor that only that Concat reads. The
// kernel rotates its part in place (vLLM's rotary_embedding with rotary_dim < head_size;
// inductor writes both parts from one kernel), so the Concat and the pass-through Slice join
// the group, and with them the views the head came through when nothing else reads them
// (GPT-NeoX: the query's or key's Slice of the fused QKV output and its Transpose). Returns
// the group's last node (the Concat, or `add_i` when the pattern is not there).
int partial_rotary_tail(const Graph& g, const Consumers& cons, const Plan& plan, int add_i, int rot, std::vector<int>& nodes) {
  auto node = [&](int i) -> const Node& { return g.nodes[static_cast<size_t>(i)]; };
  auto kernel_free = [&](int i) { return plan.free_reason[static_cast<size_t>(i)] == FreeReason::none; };
  auto producer = [&](const std::string& t) -> int {
    auto it = plan.producer.find(t);
    return it == plan.producer.end() ? -1 : it->second;
  };
  const Node& add = node(add_i);
  if (add.outputs.empty()) return add_i;
  const int cat = single_consumer(cons, add.outputs[0]);
  if (cat < 0 || !kernel_free(cat) || node(cat).op_type != "Concat" || node(cat).inputs.size() != 2 ||
      node(cat).inputs[0] != add.outputs[0] || node(cat).attr_i("axis", 0) != -1)
    return add_i;
  const int pass = producer(node(cat).inputs[1]);
  const std::string& head = node(rot).inputs.empty() ? std::string() : node(rot).inputs[0];
  if (pass < 0 || !kernel_free(pass) || !unit_step_slice(g, node(pass)) || node(pass).inputs.empty() ||
      node(pass).inputs[0] != head || !consumed_only_by(cons, node(cat).inputs[1], {cat}))
    return add_i;
  nodes.push_back(cat);
  nodes.push_back(pass);
  std::string src = head;
  for (int guard = 0; guard < 2; ++guard) {
    const int v = producer(src);
    if (v < 0 || !kernel_free(v) || node(v).inputs.empty() ||
        !(node(v).op_type == "Transpose" || unit_step_slice(g, node(v))) ||
        !consumed_only_by(cons, src, std::set<int>(nodes.begin(), nodes.end())))
      break;
    nodes.push_back(v);
    src = node(v).inputs[0];
  }
  return cat;
}

}  // namespace

bool match_rotary(const Graph& g, const Consumers& cons, const Plan& plan, int add_i, Group& grp) {
  const Node& add = g.nodes[static_cast<size_t>(add_i)];
  if (add.op_type != "Add" || add.inputs.size() != 2) return false;
  auto producer = [&](const std::string& t) -> int {
    auto it = plan.producer.find(t);
    return it == plan.producer.end() ? -1 : it->second;
  };
  auto node = [&](int i) -> const Node& { return g.nodes[static_cast<size_t>(i)]; };
  const int m1 = producer(add.inputs[0]), m2 = producer(add.inputs[1]);
  if (m1 < 0 || m2 < 0 || node(m1).op_type != "Mul" || node(m2).op_type != "Mul") return false;
  // One Mul reads x, the other the rotated half (a Concat of a Neg and a Slice).
  for (int pass = 0; pass < 2; ++pass) {
    const int mx = pass == 0 ? m1 : m2, mr = pass == 0 ? m2 : m1;
    int cat = -1;
    for (const auto& in : node(mr).inputs) {
      const int p = producer(in);
      if (p >= 0 && node(p).op_type == "Concat") cat = p;
    }
    if (cat < 0 || node(cat).inputs.size() != 2) continue;
    const int neg = producer(node(cat).inputs[0]), s1 = producer(node(cat).inputs[1]);
    if (neg < 0 || s1 < 0 || node(neg).op_type != "Neg" || node(s1).op_type != "Slice" || node(neg).inputs.empty() ||
        node(s1).inputs.empty())
      continue;
    const int s2 = producer(node(neg).inputs[0]);
    if (s2 < 0 || node(s2).op_type != "Slice" || node(s2).inputs.empty()) continue;
    const std::string& x = node(s1).inputs[0];
    if (node(s2).inputs[0] != x || std::find(node(mx).inputs.begin(), node(mx).inputs.end(), x) == node(mx).inputs.end())
      continue;
    std::vector<int> nodes = {s1, s2, neg, cat, mx, mr, add_i};
    std::set<int> set(nodes.begin(), nodes.end());
    bool closed = true;  // every intermediate read only inside
    for (int ni : nodes)
      if (ni != add_i)
        for (const auto& out : node(ni).outputs) {
          auto it = cons.find(out);
          if (it == cons.end()) continue;
          for (int c : it->second)
            if (c < 0 || !set.count(c)) closed = false;
        }
    for (int ni : nodes)
      if (plan.free_reason[static_cast<size_t>(ni)] != FreeReason::none) closed = false;
    if (!closed) continue;
    const int tp = producer(x);
    std::string from = x;  // what the kernel reads x from
    if (tp >= 0 && node(tp).op_type == "Transpose" && plan.free_reason[static_cast<size_t>(tp)] == FreeReason::none) {
      auto it = cons.find(x);
      bool inside = it != cons.end();
      if (inside)
        for (int c : it->second)
          if (c < 0 || !set.count(c)) inside = false;
      if (inside) {
        nodes.push_back(tp);
        from = node(tp).inputs.empty() ? std::string() : node(tp).inputs[0];
      }
    }
    // x sliced out of a wider tensor (the rotary part of DeepSeek's query and key heads), through
    // free reshapes: the kernel reads the slice in place (absorb_slice).
    int last = add_i;
    if (const int sl = slice_read_only_by(g, cons, plan, from, nodes); sl >= 0) {
      nodes.push_back(sl);
      last = partial_rotary_tail(g, cons, plan, add_i, sl, nodes);
    }
    std::sort(nodes.begin(), nodes.end());
    grp = Group{GroupKind::rotary, nodes, add_i, last};
    return true;
  }
  return false;
}

namespace {

// The rotary group whose output reaches `t` through free views and the FlashAttention group's
// own absorbed nodes (a key's cache Concat: its appended part), or -1.
int rotary_behind(const Graph& g, const Plan& plan, int flash, std::string t) {
  for (int guard = 0; guard < 16; ++guard) {
    auto it = plan.producer.find(t);
    if (it == plan.producer.end()) return -1;
    const size_t pi = static_cast<size_t>(it->second);
    const int own = plan.group_of[pi];
    if (own >= 0 && plan.groups[static_cast<size_t>(own)].kind == GroupKind::rotary) return own;
    const Node& p = g.nodes[pi];
    if (p.inputs.empty() || (plan.free_reason[pi] == FreeReason::none && own != flash)) return -1;
    t = p.op_type == "Concat" && p.inputs.size() == 2 ? p.inputs[1] : p.inputs[0];
  }
  return -1;
}

int64_t anchor_elements(const Graph& g, const Group& grp) {
  const Node& a = g.nodes[static_cast<size_t>(grp.anchor)];
  return a.outputs.empty() ? -1 : numel(tensor(g, a.outputs[0]));
}

}  // namespace

void pair_rotary_groups(const Graph& g, Plan& plan) {
  for (size_t fi = 0; fi < plan.groups.size(); ++fi) {
    if (plan.groups[fi].kind != GroupKind::flash_attention) continue;
    const Node& qk = g.nodes[static_cast<size_t>(plan.groups[fi].anchor)];
    const TensorInfo* q = tensor(g, qk.inputs[0]);
    const int rq = rotary_behind(g, plan, static_cast<int>(fi), qk.inputs[0]);
    const int rk = rotary_behind(g, plan, static_cast<int>(fi), qk.inputs[1]);
    if (rq < 0 || rk < 0 || rq == rk || !q || !q->fully_known() || q->shape.size() != 4) continue;
    Group& a = plan.groups[static_cast<size_t>(rq)];
    Group& b = plan.groups[static_cast<size_t>(rk)];
    if (a.nodes.empty() || b.nodes.empty() || a.rotary_tokens > 0 || b.rotary_tokens > 0) continue;
    // q: [batch, heads, queries, head_dim]; the two rotary outputs hold every token's heads
    // (their rotated part: all of each head, or Phi's and GPT-NeoX's leading fraction).
    const int64_t tokens = q->shape[0].value * q->shape[2].value, width = q->shape[1].value * q->shape[3].value;
    const int64_t kv = tokens > 0 ? anchor_elements(g, b) : 0, rotated = anchor_elements(g, a);
    if (tokens <= 0 || width <= 0 || rotated <= 0 || rotated % tokens != 0 || rotated / tokens > width || kv <= 0 ||
        kv % tokens != 0)
      continue;
    a.nodes.insert(a.nodes.end(), b.nodes.begin(), b.nodes.end());
    std::sort(a.nodes.begin(), a.nodes.end());
    a.emit_at = std::max(a.emit_at, b.emit_at);
    a.rotary_tokens = tokens;
    a.rotary_q_width = rotated / tokens;
    a.rotary_kv_width = kv / tokens;
    for (int m : b.nodes) plan.group_of[static_cast<size_t>(m)] = rq;
    b.nodes.clear();
  }
}

bool attention_fused(const LoweringOptions& opt) {
  // Automatic: fused under full fusion, and under eager as transformers' default
  // (attn_implementation "sdpa") runs it, in inference and in training (SDPA's FlashAttention
  // and memory-efficient kernels have backward passes; Megatron-LM and NeMo run Transformer
  // Engine's). FlashAttention runs 16-bit only (the match checks), so FP32 attention stays
  // MatMul + Softmax, as the measured FP32 runs ran it. Training's backward is
  // FlashAttention-2's (training.cpp).
  return opt.attention == Attention::automatic ? opt.fusion != Fusion::none : opt.attention == Attention::fused;
}

bool flash_attention_applies(const LoweringOptions& opt, DType dt) {
  return attention_fused(opt) && is_float(dt) && dtype_bits(dt) <= 16;
}

double attention_pairs(int64_t queries, int64_t keys, bool causal, int64_t window) {
  if (queries <= 0 || keys <= 0) return 0;
  const double q = double(queries), all = q * double(keys);
  const double w = window > 0 ? double(window) : std::numeric_limits<double>::infinity();
  if (!causal) return q * std::min(double(keys), w);
  // Query i (0-based, at position keys - queries + i) sees v = keys - queries + i + 1 keys,
  // at most `window`: the sum of min(v, w) for v from keys - queries + 1 to keys.
  const double first = std::max(1.0, double(keys - queries + 1)), last = double(keys);
  const double n = last - first + 1;
  auto ramp = [](double a, double b) { return b >= a ? (a + b) * (b - a + 1) / 2.0 : 0.0; };  // a + ... + b
  const double pairs = last <= w ? ramp(first, last) : first > w ? n * w : ramp(first, w) + (last - w) * w;
  return std::clamp(pairs, 0.0, all);
}

void emit_flash_kernel(const LowerCtx& c, const FlashProblem& f, std::vector<Kernel>& out) {
  Kernel kr = c.base(KernelClass::gemm, "flash_attention");
  kr.dtype = f.dtype;
  kr.heads = f.heads;
  kr.kv_heads = f.kv_heads;
  const double eb = element_bytes(f.dtype);
  const int64_t bh = f.batch * f.heads;
  // Causal: query i (at position keys - queries + i) sees keys - queries + i + 1 keys, the
  // triangle FlashAttention's causal mode skips the rest of; a sliding window also the keys
  // before the window's start (the band its local mode computes).
  const double pairs = attention_pairs(f.queries, f.keys, f.causal, f.window);
  kr.flops = 2.0 * double(bh) * pairs * double(f.head_dim + f.head_dim_v);
  // The keys read: all of them in a prompt (each within some query's window), the last
  // `window` of the cache in a decode step.
  const int64_t read_keys = f.queries == 1 && f.window > 0 ? std::min(f.keys, f.window) : f.keys;
  const std::string band = f.window > 0 && f.window < f.keys ? ", sliding window " + std::to_string(f.window) : "";
  const double q_bytes = double(bh) * double(f.queries) * double(f.head_dim) * eb;
  const double o_bytes = double(bh) * double(f.queries) * double(f.head_dim_v) * eb;
  const int64_t row = f.shared_kv ? f.head_dim : f.head_dim + f.head_dim_v;  // a cached key's (and value's) elements
  const double kv_bytes = double(f.batch) * double(f.kv_heads) * double(read_keys) * double(row) * element_bytes(f.cache_dtype());
  // Serving engines write a step's (and a prompt's) keys and values into the paged cache with
  // a kernel of their own before the attention reads the cache (vLLM's reshape_and_cache_flash);
  // otherwise the attention kernel appends them in place (flash_attn_with_kvcache).
  const bool cache_kernel = c.opt.serving_kernels && (f.appended_bytes > 0 || f.queries > 1);
  kr.bytes = q_bytes + kv_bytes + o_bytes + f.bias_bytes + (cache_kernel ? 0.0 : f.appended_bytes);
  const std::string cache = f.appended_bytes > 0 && !cache_kernel ? ", KV cache append in place" : "";
  if (f.queries == 1) {
    // Decode: every query row reads the whole cache once; memory-bound. One row per KV head
    // (its query heads share the read); the split over the keys that keeps the GPU busy when
    // batch x KV heads is small is chosen per GPU (api: split_kv_on_gpu).
    kr.cls = KernelClass::reduce;
    kr.op = "flash_decode";
    kr.rows = f.batch * f.kv_heads;
    kr.cols = read_keys * row;
    kr.gemm = {bh, 1, f.head_dim_v, read_keys};  // the attention problem (query rows x keys), for the split
    kr.note = f.what + "flash decoding: KV-cache read over " + std::to_string(read_keys) + " keys" + band + cache;
  } else {
    // Prefill: FlashAttention's tiles of query rows per (batch, head), each streaming the
    // keys it sees through QK^T and PV on the tensor cores: as a GEMM of the output
    // [queries x head_dim_v] whose reduction covers both products over the visible keys.
    const double k_eff = f.queries > 0 && f.head_dim_v > 0
                             ? std::ceil(pairs * double(f.head_dim + f.head_dim_v) / (double(f.queries) * double(f.head_dim_v)))
                             : 1.0;
    kr.gemm = {bh, f.queries, f.head_dim_v, std::max<int64_t>(1, static_cast<int64_t>(k_eff))};
    kr.operand_elems = {bh * f.queries * f.head_dim, f.batch * f.kv_heads * f.keys * row};
    kr.note = f.what + "FlashAttention (" + (f.causal ? "causal" : "full") + ") over " + std::to_string(f.keys) +
              " keys" + band + cache;
  }
  if (cache_kernel) {
    // vLLM's reshape_and_cache_flash: one block per new token of min(KV heads x head_dim, 512)
    // threads; the token's cache slot loaded first, then the key's and the value's elements
    // (2-byte loads, both in flight), each stored into the cache.
    Kernel w = c.base(KernelClass::memory, "kv_cache_write");
    w.dtype = f.dtype;
    const int64_t tokens = f.batch * f.queries;
    const int64_t width = f.kv_heads * f.head_dim;
    const int tensors = f.shared_kv ? 1 : 2;
    w.rows = tokens;
    w.cols = width;
    w.inputs = tensors;
    w.bytes = double(tokens) * double(f.kv_heads) * double(row) * (eb + element_bytes(f.cache_dtype()));
    w.operand_elems = {tokens * width};
    w.access = {2, tensors, static_cast<int>(std::clamp<int64_t>(width, 1, 512)), 0, 0, false};
    w.access.row_tensors = tensors;
    w.access.index_loads = 1;
    w.note = f.what + "the new keys and values written into the KV cache";
    out.push_back(w);
  }
  out.push_back(kr);
}

void emit_flash_attention(const Graph& g, const LoweringOptions& opt, const Plan& plan, const Group& grp,
                          const Consumers& cons, std::vector<Kernel>& out) {
  const Node& qk = g.nodes[static_cast<size_t>(grp.anchor)];
  int av_i = grp.emit_at;  // the PV MatMul: the group's other MatMul
  for (int ni : grp.nodes)
    if (ni != grp.anchor && g.nodes[static_cast<size_t>(ni)].op_type == "MatMul") av_i = ni;
  const Node& av = g.nodes[static_cast<size_t>(av_i)];
  const TensorInfo* q = tensor(g, qk.inputs[0]);
  const TensorInfo* scores = tensor(g, qk.outputs[0]);
  const TensorInfo* o = tensor(g, av.outputs[0]);
  const Operand k = trace_operand(g, opt, cons, plan, qk.inputs[1]);
  const Operand v = trace_operand(g, opt, cons, plan, av.inputs[1]);
  LowerCtx c{g, opt, qk, grp.anchor, out, &plan};
  FlashProblem f;
  f.dtype = c.dtype(q);
  f.batch = q->shape[0].value;
  f.heads = q->shape[1].value;
  f.queries = q->shape[2].value;
  f.head_dim = q->shape[3].value;
  f.keys = scores->shape[3].value;
  f.head_dim_v = o->shape[3].value;
  // The keys' heads as stored (grouped-query attention repeats them after): a [batch, KV heads,
  // keys, head_dim] tensor whose heads divide the queries'. Keys stored in another layout (a
  // [batch, keys, heads, head_dim] rotary output transposed after it, windows folded into the
  // batch) have the queries' heads.
  const auto& ks = k.stored->shape;
  const bool grouped = ks.size() == 4 && ks[0].value == f.batch && ks[1].value > 0 && f.heads % ks[1].value == 0 &&
                       ks[2].value == f.keys;
  f.kv_heads = grouped ? ks[1].value : f.heads;
  // A mask that differs per query row is causal; one broadcast over the queries (padding)
  // or none: every key. A [*, heads, queries, keys] bias of its own per head is a position
  // bias (T5's relative one), read, not a mask: the kernel computes every pair (a causal one
  // combined into it, as T5's decoder adds, is not known to it either).
  // The scores themselves (QK^T, scaled or capped inside the group) are no mask.
  std::set<std::string> chain;
  for (int ni : grp.nodes)
    for (const auto& o : g.nodes[static_cast<size_t>(ni)].outputs) chain.insert(o);
  bool bias = false, per_query = false;
  for (int ni : grp.nodes) {
    const Node& nd = g.nodes[static_cast<size_t>(ni)];
    if (nd.op_type != "Add" && nd.op_type != "Where") continue;
    for (const auto& in : nd.inputs) {
      const TensorInfo* t = tensor(g, in);
      if (!t || !t->fully_known() || t->shape.size() < 2 || chain.count(in)) continue;
      if (nd.op_type == "Add" && t->shape.size() == 4 && f.heads > 1 && f.queries > 1 && t->shape[1].value == f.heads &&
          t->shape[2].value == f.queries) {
        bias = true;
        f.bias_bytes += double(numel(t)) * element_bytes(f.dtype);  // in the attention's dtype, as SDPA casts it
      }
      per_query = per_query || (t->shape[t->shape.size() - 2].value == f.queries && f.queries > 1);
      // A sliding window (a band of the mask), also in a decode step's one-row mask.
      if (const int64_t w = mask_window(g, plan, in, f.keys - f.queries); w > 0 && (f.window == 0 || w < f.window))
        f.window = w;
    }
  }
  f.causal = per_query && !bias;
  // Values sliced from the keys' own cache (MLA): one cache, read once, appended once.
  f.shared_kv = v.sliced && k.stored && v.stored == k.stored;
  // A cache (keys that the step appends to): --kv-dtype's element type.
  if (opt.kv_cache_dtype != DType::undefined && (k.cache || v.cache)) f.kv_dtype = opt.kv_cache_dtype;
  for (const Operand* op : {&k, &v})
    if (op->appended && !(f.shared_kv && op == &v))
      f.appended_bytes += double(numel(op->appended)) * element_bytes(f.cache_dtype());
  const size_t before = out.size();
  emit_flash_kernel(c, f, out);
  for (size_t i = before; i < out.size(); ++i)
    for (int ni : grp.nodes)
      if (ni != grp.anchor) out[i].fused_nodes.push_back(ni);
}

}  // namespace neusight::lowering_detail
