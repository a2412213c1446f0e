// lora.cpp - low-rank adapters (LoRA, Hu et al. 2021, as Hugging Face PEFT trains them) on a
// training step: the base weights frozen, a rank-r pair A [in x r], B [r x out] beside each
// targeted linear layer, y = x W + s (x A) B.
#include <algorithm>
#include <cmath>
#include <regex>
#include <set>

#include "internal.h"

namespace neusight::lowering_detail {

// A forward GEMM of the analysed graph's node that reads its second operand from an input of
// that node (a linear layer's GEMM, whatever the operand holds).
bool layer_gemm(const Kernel& k) {
  return k.cls == KernelClass::gemm && k.phase == Phase::forward && k.b_input >= 0 && !is_flash_gemm(k) &&
         k.body_node.empty();
}

// A forward GEMM of a 2-D initializer (a linear layer's weight): that weight's name, else "".
std::string linear_weight(const Graph& g, const Kernel& k) {
  if (!layer_gemm(k) || k.node < 0 || static_cast<size_t>(k.node) >= g.nodes.size()) return "";
  const Node& n = g.nodes[static_cast<size_t>(k.node)];
  if (static_cast<size_t>(k.b_input) >= n.inputs.size()) return "";
  const std::string& w = n.inputs[static_cast<size_t>(k.b_input)];
  const TensorInfo* t = w.empty() ? nullptr : g.find(w);
  return t && t->is_initializer && is_float(t->dtype) && t->shape.size() == 2 && t->num_elements() > 1 ? w : "";
}

// A member of a GEMM over concatenated weights (a node of `merged`'s fused_nodes): the 2-D
// float initializer it multiplies by and its output columns ([in, out] for MatMul; Gemm's B,
// transposed by transB), or "" for a node that is no such GEMM.
std::string member_weight(const Graph& g, int node, int64_t& columns) {
  if (node < 0 || static_cast<size_t>(node) >= g.nodes.size()) return "";
  const Node& n = g.nodes[static_cast<size_t>(node)];
  if ((n.op_type != "MatMul" && n.op_type != "Gemm") || n.inputs.size() < 2) return "";
  const TensorInfo* t = g.find(n.inputs[1]);
  if (!t || !t->is_initializer || !is_float(t->dtype) || t->shape.size() != 2 || !t->fully_known()) return "";
  const bool trans_b = n.op_type == "Gemm" && n.attr_i("transB", 0) != 0;
  columns = t->shape[trans_b ? 0 : 1].value;
  return n.inputs[1];
}

// Per node: some GEMM runs at or after it on the data path (its outputs reach a GEMM node).
std::vector<char> feeds_a_gemm(const Graph& g, const std::vector<Kernel>& fwd) {
  std::vector<char> gemm_node(g.nodes.size(), 0), feeds(g.nodes.size(), 0);
  for (const Kernel& k : fwd)
    if (k.cls == KernelClass::gemm && k.node >= 0 && static_cast<size_t>(k.node) < g.nodes.size())
      gemm_node[static_cast<size_t>(k.node)] = 1;
  std::map<std::string, std::vector<size_t>> readers;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty()) readers[in].push_back(i);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    bool any = false;
    for (const auto& out : g.nodes[i].outputs) {
      auto it = readers.find(out);
      if (it == readers.end()) continue;
      for (size_t r : it->second) any = any || (r > i && (gemm_node[r] || feeds[r]));
    }
    feeds[i] = any;
  }
  return feeds;
}

namespace {

// A kernel of the adapter beside the forward GEMM `f`, under f's node: in the activations'
// dtype (under --dtype fp8 / fp4 / int8 the frozen layer's GEMM runs narrow, the adapters as
// PEFT's nn.Linear adapters run beside Transformer Engine's layers).
Kernel adapter_kernel(const Kernel& f, KernelClass cls, Phase phase, const std::string& op, const std::string& note) {
  Kernel k;
  k.cls = cls;
  k.phase = phase;
  k.op = op;
  k.dtype = narrow_weight_gemms(f.dtype) ? activation_dtype(f.dtype) : f.dtype;
  k.node = f.node;
  k.note = note;
  k.lora_adapter = true;
  return k;
}

// An adapter GEMM of shape `s`.
Kernel adapter_gemm(const Kernel& f, Phase phase, const GemmShape& s, const std::string& op, const std::string& note) {
  Kernel k = adapter_kernel(f, KernelClass::gemm, phase, op, note);
  k.gemm = s;
  const Work w = work_of_gemm(s, element_bytes(k.dtype));
  k.flops = w.flops;
  k.bytes = w.bytes;
  k.operand_elems = {s.batch * s.m * s.k, s.batch * s.k * s.n};
  return k;
}

// An elementwise kernel of `rows` x `cols` reading `inputs` tensors of that size.
Kernel adapter_vector(const Kernel& f, Phase phase, const std::string& op, int inputs, int64_t rows, int64_t cols,
                      const std::string& note) {
  Kernel k = adapter_kernel(f, KernelClass::elementwise, phase, op, note);
  k.rows = rows;
  k.cols = cols;
  k.inputs = inputs;
  const Work w = work_of_elementwise(double(rows) * double(cols), inputs, 1, element_bytes(k.dtype));
  k.flops = w.flops;
  k.bytes = w.bytes;
  k.operand_elems.assign(static_cast<size_t>(inputs), rows * cols);
  return k;
}

// f's tokens (rows), input and output features.
struct LinearDims {
  int64_t tokens = 0, in = 0, out = 0;
};
LinearDims dims_of(const Kernel& f) {
  return {f.gemm.batch * f.gemm.m, f.gemm.k, f.gemm.n};
}

}  // namespace

LoraTargets lora_targets(const Graph& g, const std::vector<Kernel>& fwd, const LoraOptions& lora) {
  LoraTargets t;
  if (lora.rank <= 0) return t;
  const bool all = lora.targets.empty() || lora.targets == "all";
  std::regex pattern;
  if (!all) {
    try {
      pattern = std::regex(lora.targets, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw InputError("--lora targets=" + lora.targets + ": not a regular expression (" + e.what() + ")");
    }
  }
  const std::vector<char> feeds = feeds_a_gemm(g, fwd);
  // PEFT's "all-linear": every linear layer but the output head (the last GEMM on its path).
  const auto targeted = [&](int node, const std::string& w) {
    return all ? feeds[static_cast<size_t>(node)] != 0 : std::regex_search(w, pattern);
  };
  for (const Kernel& k : fwd) {
    const std::string w = linear_weight(g, k);
    if (w.empty()) continue;
    // bitsandbytes quantizes every linear layer but the head (transformers keeps the last
    // module in its own precision).
    if (lora.nf4_base && feeds[static_cast<size_t>(k.node)]) t.nf4_of_node.emplace(k.node, w);
    // A GEMM over concatenated weights (serving kernels): each member its own adapter.
    LoraTargets::Slices sl{0, 0};
    std::string first;
    int64_t own = 0;
    if (!member_weight(g, k.node, own).empty() && targeted(k.node, w)) sl = {1, own}, first = w;
    bool merged = false;
    for (int m : k.fused_nodes) {
      int64_t columns = 0;
      const std::string mw = member_weight(g, m, columns);
      if (mw.empty()) continue;
      merged = true;
      if (!targeted(m, mw)) continue;
      ++sl.count;
      sl.columns += columns;
      if (first.empty()) first = mw;
    }
    if (!merged) {
      if (targeted(k.node, w)) t.weight_of_node.emplace(k.node, w);
      continue;
    }
    if (sl.count == 0) continue;
    t.weight_of_node.emplace(k.node, first);
    t.slices_of_node.emplace(k.node, sl);
  }
  if (t.weight_of_node.empty())
    throw InputError(
        all ? std::string("--lora: the graph has no linear layer (a GEMM of a 2-D float weight) before its "
                          "output head to adapt")
            : "--lora targets=" + lora.targets + ": no linear layer's weight name matches");
  t.rank = lora.rank;
  return t;
}

bool LoraTargets::dequantizes(const Kernel& f) const {
  return layer_gemm(f) && nf4_of_node.count(f.node) != 0;
}

Kernel nf4_dequantize(const Kernel& f, const std::string& weight, Phase phase) {
  // bitsandbytes' kDequantizeBlockwise: reads the packed 4-bit values and their scales, writes
  // the weight in the compute dtype for the GEMM (one element an output, a table lookup and a
  // multiply).
  const int64_t elems = f.gemm.k * f.gemm.n;
  Kernel k = adapter_kernel(f, KernelClass::elementwise, phase, kNf4DequantizeOp, "");
  k.lora_adapter = false;  // the frozen weight's, not the adapter's
  k.rows = f.gemm.n;
  k.cols = f.gemm.k;
  k.inputs = 1;
  k.flops = 2.0 * double(elems);
  k.bytes = double(elems) * (kNf4BitsPerParameter / 8.0 + element_bytes(k.dtype));
  k.operand_elems = {elems};
  k.weight = weight;
  k.note = "QLoRA: the NF4 weight dequantized to " + std::string(dtype_name(k.dtype));
  return k;
}

bool LoraTargets::adapts(const Kernel& f) const {
  return layer_gemm(f) && weight_of_node.count(f.node) != 0;
}

std::vector<Kernel> with_lora_forward(const std::vector<Kernel>& fwd, const LoraTargets& t,
                                      const LoweringOptions& opt) {
  if (t.rank <= 0) return fwd;
  std::vector<Kernel> out;
  out.reserve(fwd.size() + 4 * t.weight_of_node.size());
  for (const Kernel& f : fwd) {
    if (t.dequantizes(f)) out.push_back(nf4_dequantize(f, t.nf4_of_node.at(f.node), Phase::forward));
    out.push_back(f);
    if (!t.adapts(f)) continue;
    LinearDims d = dims_of(f);
    const int64_t r = t.rank;
    int64_t shrink = r;  // the columns of x A: every adapted slice's rank
    if (const auto sl = t.slices_of_node.find(f.node); sl != t.slices_of_node.end()) {
      shrink = sl->second.count * r;
      d.out = sl->second.columns;
    }
    // Several adapters served at once: the tokens grouped by the adapters they reach, each
    // group's GEMM reading its adapter's weights (a grouped GEMM; vLLM's SGMV kernels).
    const int64_t groups =
        opt.lora.adapters <= 1
            ? 1
            : std::max<int64_t>(1, std::llround(lora_adapters_reached(
                                       opt.lora.adapters, opt.lora.sequences > 0 ? std::min(opt.lora.sequences, d.tokens)
                                                                                 : d.tokens)));
    const int64_t rows = (d.tokens + groups - 1) / groups;
    const auto grouped = [&](Kernel k) {
      if (groups <= 1) return k;
      const GemmShape before = k.gemm;
      k.gemm.batch = groups;
      k.gemm.m = rows;
      k.gemm.batched = true;
      const Work w = work_of_gemm(k.gemm, element_bytes(k.dtype));
      k.flops = w.flops;
      k.bytes += w.bytes - work_of_gemm(before, element_bytes(k.dtype)).bytes;
      k.operand_elems = {groups * rows * k.gemm.k, groups * k.gemm.k * k.gemm.n};
      k.note += " over " + std::to_string(groups) + " of " + std::to_string(opt.lora.adapters) + " adapters";
      return k;
    };
    // Under serving kernels vLLM's punica kernels: lora_shrink (x A over every slice) and
    // lora_expand, which adds (x A) B into the layer's output in place (a read and a write of
    // those columns); otherwise PEFT's two GEMMs, then the scale and the add.
    const bool punica = opt.serving_kernels;
    out.push_back(grouped(adapter_gemm(f, Phase::forward, GemmShape{1, d.tokens, shrink, d.in}, "lora_a",
                                       "LoRA: x A (rank " + std::to_string(r) + (punica ? "; vLLM's lora_shrink)" : ")"))));
    out.push_back(grouped(adapter_gemm(f, Phase::forward, GemmShape{1, d.tokens, d.out, r}, "lora_b",
                                       punica ? "LoRA: (x A) B added into the output (vLLM's lora_expand)"
                                              : "LoRA: (x A) B")));
    if (punica) {
      out.back().bytes += 2.0 * double(d.tokens) * double(d.out) * element_bytes(out.back().dtype);
      continue;
    }
    // PEFT: result + lora_B(lora_A(x)) * scaling, a multiply and an add (one kernel fused).
    if (opt.fusion == Fusion::full) {
      out.push_back(
          adapter_vector(f, Phase::forward, "add", 2, d.tokens, d.out, "LoRA: scaled and added to the output"));
    } else {
      out.push_back(adapter_vector(f, Phase::forward, "mul", 1, d.tokens, d.out, "LoRA: scaled"));
      out.push_back(adapter_vector(f, Phase::forward, "add", 2, d.tokens, d.out, "LoRA: added to the output"));
    }
  }
  return out;
}

void lora_backward(const Kernel& f, bool input_needs_grad, const LoweringOptions& opt, int64_t rank,
                   std::vector<Kernel>& out) {
  const LinearDims d = dims_of(f);
  const int64_t r = rank;
  const Phase b = Phase::backward;
  // The output's gradient scaled (the forward's multiply; fused into the add's gradient under full).
  if (opt.fusion != Fusion::full)
    out.push_back(adapter_vector(f, b, "mul", 1, d.tokens, d.out, "grad of LoRA's scaling"));
  out.push_back(adapter_gemm(f, b, GemmShape{1, r, d.out, d.tokens}, "lora_b", "grad LoRA B: (x A)^T dy"));
  out.push_back(adapter_gemm(f, b, GemmShape{1, d.tokens, r, d.out}, "lora_b", "grad of x A: dy B^T"));
  out.push_back(adapter_gemm(f, b, GemmShape{1, d.in, r, d.tokens}, "lora_a", "grad LoRA A: x^T d(x A)"));
  if (!input_needs_grad) return;
  out.push_back(adapter_gemm(f, b, GemmShape{1, d.tokens, d.in, r}, "lora_a", "grad input through LoRA: d(x A) A^T"));
  out.push_back(adapter_vector(f, b, "add", 2, d.tokens, d.in, "grad input: the base layer's and LoRA's summed"));
}

std::vector<AdapterParameter> lora_parameters(const std::vector<Kernel>& fwd, const LoraTargets& t) {
  std::vector<AdapterParameter> p;
  for (const Kernel& f : fwd) {
    if (!t.adapts(f)) continue;
    const LinearDims d = dims_of(f);
    const std::string& w = t.weight_of_node.at(f.node);
    p.push_back({w + ".lora_A", d.in * t.rank, f.node, f.dtype});
    p.push_back({w + ".lora_B", t.rank * d.out, f.node, f.dtype});
  }
  return p;
}

}  // namespace neusight::lowering_detail

namespace neusight {

double lora_adapters_reached(int64_t adapters, int64_t sequences) {
  if (adapters <= 1 || sequences <= 1) return 1;
  const double n = double(adapters);
  const double reached = n * (1.0 - std::pow(1.0 - 1.0 / n, double(sequences)));
  return std::clamp(reached, 1.0, std::min(n, double(sequences)));
}

std::set<std::string> nf4_weights(const std::vector<Kernel>& kernels) {
  std::set<std::string> names;
  for (const Kernel& k : kernels)
    if (k.phase == Phase::forward && k.op == kNf4DequantizeOp && !k.weight.empty()) names.insert(k.weight);
  return names;
}

}  // namespace neusight
