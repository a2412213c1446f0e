// training.cpp - backward kernels of every forward kernel (reverse order) and the
// optimizer's update kernels, following METHOD.md and the BwOps/AccOps columns of the
// traced opgraphs in neusight-data/e2e/opgraph.
#include <algorithm>
#include <cmath>
#include <set>

#include "internal.h"
#include "neusight/parameters.h"

namespace neusight::lowering_detail {

// Each optimizer's update kernel: its name, its op (the predictor's elementwise op; SGD's is
// the add the NeuSight method counts), its FP32 state buffers per parameter and its operations
// per element. The one table the kernels, the state they keep and the names follow.
struct UpdateWork {
  Optimizer optimizer;
  const char* name;
  const char* op;
  int buffers;
  double ops;
};
constexpr UpdateWork kUpdates[] = {{Optimizer::sgd, "sgd", "add", 0, 1},
                                   {Optimizer::momentum, "momentum", "momentum", 1, 3},
                                   {Optimizer::adam, "adam", "adam", 2, 14}};
const UpdateWork& update_work(Optimizer o) {
  for (const UpdateWork& u : kUpdates)
    if (u.optimizer == o) return u;
  return kUpdates[0];
}
// The entry whose update kernel runs `op`; nullptr for another op.
const UpdateWork* update_of_op(const std::string& op) {
  for (const UpdateWork& u : kUpdates)
    if (op == u.op) return &u;
  return nullptr;
}

namespace {


// Parameters: float initializers with more than one element that some op computes with, and
// float Constant-node values of more than one element that an op reads as its weights
// (parameters.h parameter_inputs): exporters that fold weights into Constant nodes (Paddle2ONNX, some
// tf2onnx graphs) hold every weight so. A Constant read only otherwise (a mask added to the
// scores, a position table) stays a constant. In order: the initializers in theirs, then the
// Constant-held weights in their Constant nodes'.
std::vector<std::string> trainable(const Graph& g) {
  std::set<std::string> used;
  for (const auto& n : g.nodes) {
    if (n.op_type == "Shape" || n.op_type == "Size" || n.op_type == "ConstantOfShape") continue;
    for (const auto& in : n.inputs) used.insert(in);
  }
  auto learnable = [&](const std::string& name) {
    const TensorInfo* t = name.empty() ? nullptr : g.find(name);
    return t && is_float(t->dtype) && t->num_elements() > 1;
  };
  std::vector<std::string> p;
  std::set<std::string> listed;  // each name once, whatever a malformed graph repeats
  for (const auto& name : g.initializers)
    if (learnable(name) && used.count(name) && listed.insert(name).second) p.push_back(name);
  std::set<std::string> weights;  // the values ops read as their weights
  for (const auto& n : g.nodes)
    for (int i : parameter_inputs(n))
      if (static_cast<size_t>(i) < n.inputs.size()) weights.insert(n.inputs[static_cast<size_t>(i)]);
  for (const auto& n : g.nodes)
    if (n.op_type == "Constant" && n.domain.empty() && n.outputs.size() == 1 && weights.count(n.outputs[0]) &&
        learnable(n.outputs[0]) && listed.insert(n.outputs[0]).second)
      p.push_back(n.outputs[0]);
  return p;
}

// Tensors that need a gradient: parameters and every float value computed from one.
std::set<std::string> requires_grad(const Graph& g, const std::set<std::string>& params) {
  std::set<std::string> rg = params;
  for (const auto& n : g.nodes) {
    bool any = false;
    for (const auto& in : n.inputs) any = any || (!in.empty() && rg.count(in));
    if (!any) continue;
    for (const auto& o : n.outputs) {
      const TensorInfo* t = o.empty() ? nullptr : g.find(o);
      if (t && (is_float(t->dtype) || t->dtype == DType::undefined)) rg.insert(o);
    }
  }
  return rg;
}

struct Backward {
  const Graph& g;
  const LoweringOptions& opt;
  const std::set<std::string>& rg;
  std::vector<Kernel>& out;
  const LoraTargets& lora;

  bool needs(const Node& n, int input) const {
    return input >= 0 && static_cast<size_t>(input) < n.inputs.size() && rg.count(n.inputs[static_cast<size_t>(input)]);
  }
  bool node_needs(const Kernel& f) const {
    auto check = [&](int ni) {
      for (const auto& in : g.nodes[static_cast<size_t>(ni)].inputs)
        if (!in.empty() && rg.count(in)) return true;
      return false;
    };
    if (check(f.node)) return true;
    for (int ni : f.fused_nodes)
      if (check(ni)) return true;
    return false;
  }
  void push(const Kernel& f, Kernel k, const std::string& note) {
    k.phase = Phase::backward;
    k.node = f.node;
    k.note = note;
    k.fused_nodes.clear();
    k.l2_reuse.clear();  // its own operands, read contiguously
    out.push_back(k);
  }
  // A vector kernel shaped like f: `inputs` tensors read, one written.
  Kernel vec(const Kernel& f, KernelClass cls, const std::string& op, int inputs, int64_t rows, int64_t cols) const {
    Kernel k;
    k.cls = cls;
    k.op = op;
    k.dtype = f.dtype;
    k.rows = rows;
    k.cols = cols;
    k.inputs = inputs;
    const double e = double(rows) * double(cols);
    k.flops = cls == KernelClass::memory ? 0 : e;
    k.bytes = (inputs + 1) * e * element_bytes(f.dtype);
    return k;
  }

  void gemm(const Kernel& f, const Node& n) {
    const bool internal = node_needs(f);
    const bool a_needs = f.a_input >= 0 ? needs(n, f.a_input) : internal;
    const bool b_needs = f.b_input >= 0 ? needs(n, f.b_input) : internal;
    const GemmShape& s = f.gemm;
    // A GEMM of a weight under --dtype fp8 / fp4 (lowering.h): its backward GEMMs read narrow
    // operands too (the gradient as E5M2) and write the activations' dtype, as the gradients
    // outside the GEMMs are held.
    const bool narrow = narrow_weight_gemms(f.dtype) && f.dtype == opt.compute_dtype;
    const DType act = narrow ? activation_dtype(f.dtype) : f.dtype;
    const double eb = element_bytes(act);
    auto make = [&](GemmShape g2, const std::string& what) {
      Kernel k = f;
      k.gemm = g2;
      k.gemm.batched = s.batched;
      const Work w = work_of_gemm(g2, eb);
      k.flops = w.flops;
      k.bytes = w.bytes;
      if (narrow) {
        const double b = double(g2.batch);
        k.bytes = narrow_gemm_bytes(b * double(g2.k) * double(g2.m + g2.n), b * double(g2.m) * double(g2.n), f.dtype);
      }
      k.epilogue.clear();
      k.trans_a = k.trans_b = false;
      push(f, k, what);
    };
    // dA[m x k] = dC[m x n] B^T.
    if (a_needs) make({s.batch, s.m, s.k, s.n}, "grad input");
    // dB: for a weight shared by all rows (linear, batch 1) PyTorch computes
    // dW[n x k] = dC^T A (dataset order K, M, N); for a BMM dB[k x n] = A^T dC.
    if (b_needs) {
      if (s.batch == 1) make({1, s.n, s.k, s.m}, "grad weight");
      else make({s.batch, s.k, s.n, s.m}, "grad B");
    }
    // addmm's bias gradient: autograd sums the output gradient over the rows (sum_to the
    // bias shape), one reduction kernel reading dC and writing the bias gradient. Unfused,
    // the bias Add's broadcast operand gives the same kernel (elementwise()).
    if (f.epilogue == "bias" && reads_param(f)) {
      Kernel k = vec(f, KernelClass::reduce, "sum", 1, s.n, s.batch * s.m);
      k.dtype = act;
      k.bytes = (double(s.batch) * s.m * s.n + double(s.n)) * eb;
      push(f, k, "grad bias (sum over rows)");
    }
  }

  // Does the kernel (or a node fused into it) read a trainable parameter directly?
  bool reads_param(const Kernel& f) const {
    auto check = [&](int ni) {
      if (ni < 0 || static_cast<size_t>(ni) >= g.nodes.size()) return false;
      for (const auto& in : g.nodes[static_cast<size_t>(ni)].inputs) {
        const TensorInfo* t = in.empty() ? nullptr : g.find(in);
        if (t && t->is_initializer && rg.count(in)) return true;
      }
      return false;
    };
    if (check(f.node)) return true;
    for (int ni : f.fused_nodes)
      if (check(ni)) return true;
    return false;
  }

  void elementwise(const Kernel& f, const Node& n) {
    const int64_t r = f.rows, c = f.cols;
    // Tensor operands (more than one element) of the node that need a gradient.
    int grads = 0;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const TensorInfo* t = n.inputs[i].empty() ? nullptr : g.find(n.inputs[i]);
      if (t && numel(t) > 1 && rg.count(n.inputs[i])) ++grads;
    }
    if (!f.fused_nodes.empty()) grads = 1;  // a fused chain: the gradient w.r.t. its input
    const std::string& op = f.op;
    const bool scalar_form = f.inputs <= 1;
    if (op == "add" || op == "sub") {
      // Autograd hands the output gradient itself to a full-size operand: no kernel (the
      // traces list MEM ops, but the per-op CSVs measure 0.01 ms for them whatever the size,
      // e.g. BERT's 134 MB mask add). A broadcast operand sums the gradient over the
      // broadcast dims; a subtrahend negates it.
      const int64_t out_elems = r * c;
      for (size_t i = 0; i < n.inputs.size() && f.fused_nodes.empty(); ++i) {
        const TensorInfo* t = n.inputs[i].empty() ? nullptr : g.find(n.inputs[i]);
        if (!t || numel(t) <= 1 || !rg.count(n.inputs[i])) continue;
        if (numel(t) < out_elems) push(f, vec(f, KernelClass::reduce, "sum", 1, r, c), "grad of broadcast " + op);
        else if (op == "sub" && i == 1) push(f, vec(f, KernelClass::elementwise, "neg", 1, r, c), "grad of sub");
      }
    } else if (op == "mul" || op == "div") {
      for (int i = 0; i < grads; ++i)
        push(f, vec(f, KernelClass::elementwise, op, scalar_form ? 1 : 2, r, c), "grad of " + op);
    } else if (op == "pow") {  // d(x^p) = p * x^(p-1) * dy
      push(f, vec(f, KernelClass::elementwise, "pow", 1, r, c), "grad of pow");
      push(f, vec(f, KernelClass::elementwise, "mul", 2, r, c), "grad of pow");
      push(f, vec(f, KernelClass::elementwise, "mul", 1, r, c), "grad of pow");
    } else if (op == "tanh" || op == "sigmoid") {  // (1 - y^2) dy, y (1 - y) dy
      push(f, vec(f, KernelClass::elementwise, "mul", 1, r, c), "grad of " + op);
      push(f, vec(f, KernelClass::elementwise, "add", 1, r, c), "grad of " + op);
    } else if (op == "depthwise_conv") {
      Kernel k = f;
      push(f, k, "grad input");
      push(f, k, "grad weight");
    } else {  // one <op>_backward kernel reading dy and x
      push(f, vec(f, KernelClass::elementwise, op + "_grad", 2, r, c), "grad of " + op);
    }
  }

  void memory(const Kernel& f, const Node& n) {
    if (f.op == "embedding") {
      // embedding_dense_backward: zero the table gradient, then accumulate the rows (the
      // opgraphs count both over the whole table).
      const TensorInfo* table = g.find(n.inputs[0]);
      if (!table || !rg.count(n.inputs[0])) return;
      int64_t rows = 0, cols = 0;
      rows_cols(table, rows, cols);
      Kernel k = vec(f, KernelClass::memory, "embedding_grad", 0, rows, cols);
      push(f, k, "zero table gradient");
      k.bytes = double(numel(table)) * element_bytes(f.dtype);
      push(f, k, "accumulate rows");
      return;
    }
    if (f.op == "where") {
      for (size_t i = 1; i < n.inputs.size(); ++i) {
        const TensorInfo* t = n.inputs[i].empty() ? nullptr : g.find(n.inputs[i]);
        if (t && numel(t) > 1 && rg.count(n.inputs[i])) {
          // where(cond, dy, 0): reads the output gradient and the (broadcast, 1-byte)
          // condition, writes the operand's gradient.
          Kernel k = vec(f, KernelClass::memory, "where_grad", 1, f.rows, f.cols);
          const TensorInfo* cond = g.find(n.inputs[0]);
          if (cond) k.bytes += double(numel(cond)) * element_bytes(cond->dtype);
          push(f, k, "grad of where");
        }
      }
      return;
    }
    // permute + contiguous: the gradient goes back through a view (the per-op CSVs measure
    // no backward time for 'contiguous').
    if (f.op == "transpose") return;
    Kernel k = f;  // the reverse data movement
    k.op = f.op + "_grad";
    k.trans_a = k.trans_b = false;
    push(f, k, "grad of " + f.op);
    // Dropout's backward is two kernels (the traces list two MEM ops; measured about twice
    // the forward time).
    if (f.op == "dropout") push(f, k, "grad of dropout");
  }

  // FlashAttention-2's backward (flash_attn's _flash_attn_backward): a pass computing
  // D = rowsum(dO * O) per query row, then one kernel per (batch x head, block of keys) that
  // recomputes the scores and probabilities from Q, K and the saved log-sum-exp and runs five
  // products over the visible pairs (QK^T, dP = dO V^T, dV += P^T dO, dQ += dS K, dK += dS^T Q):
  // 2.5 times the forward's two. It reads Q, K, V, O and dO, writes dK and dV, and accumulates
  // dQ in FP32 (read and written), beside the rows' log-sum-exp and D.
  void flash_attention(const Kernel& f) {
    const GemmShape& s = f.gemm;  // {batch x heads, queries, head_dim_v, the forward's reduction}
    const double rows = double(s.batch) * double(s.m), eb = element_bytes(f.dtype);
    Kernel d = vec(f, KernelClass::reduce, "flash_bwd_dot", 2, static_cast<int64_t>(rows), s.n);
    d.flops = 2.0 * rows * double(s.n);
    d.bytes = 2.0 * rows * double(s.n) * eb + rows * 4.0;
    push(f, d, "grad of flash attention: rowsum(dO * O)");
    Kernel k = f;
    k.op = "flash_attention_bwd";
    k.flops = 2.5 * f.flops;
    k.gemm.k = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(2.5 * double(s.k))));
    const double q_bytes = f.operand_elems.empty() ? 0.0 : double(f.operand_elems[0]) * eb;
    k.bytes = 2.0 * f.bytes + 2.0 * q_bytes * 4.0 / eb + 2.0 * rows * 4.0;
    k.a_input = k.b_input = -1;
    push(f, k, "grad of flash attention (FlashAttention-2 backward: scores recomputed, 5 products)");
  }

  void run(const Kernel& f) {
    if (f.node < 0 || static_cast<size_t>(f.node) >= g.nodes.size()) return;
    // An adapted layer's adapters train whatever its inputs need (the first one's x does not).
    if (lora.adapts(f)) {
      const bool x_needs = f.a_input >= 0 ? needs(g.nodes[static_cast<size_t>(f.node)], f.a_input) : node_needs(f);
      lora_backward(f, x_needs, opt, lora.rank, out);
    }
    if (!node_needs(f)) return;
    const Node& n = g.nodes[static_cast<size_t>(f.node)];
    // QLoRA: the input's gradient reads the weight dequantized again.
    if (lora.dequantizes(f) && f.a_input >= 0 && needs(n, f.a_input))
      out.push_back(nf4_dequantize(f, lora.nf4_of_node.at(f.node), Phase::backward));
    if (f.op == "flash_attention") {
      flash_attention(f);
      return;
    }
    switch (f.cls) {
      case KernelClass::gemm: gemm(f, n); break;
      case KernelClass::elementwise: elementwise(f, n); break;
      case KernelClass::softmax:  // a mul and a softmax-sized op
        push(f, vec(f, KernelClass::elementwise, "mul", 2, f.rows, f.cols), "grad of softmax");
        {
          Kernel k = vec(f, KernelClass::softmax, "softmax_grad", 2, f.rows, f.cols);
          k.flops = f.flops;
          push(f, k, "grad of softmax");
        }
        break;
      case KernelClass::layernorm:
        // PyTorch's layer_norm backward: the input gradient (a pass reading dy and x, traced
        // as a VECmul) and, when the norm has an affine weight/bias, GammaBetaBackward, a
        // column reduction of dy and dy*x-hat over the rows (reads dy and x, writes one
        // gradient row per affine parameter).
        push(f, vec(f, KernelClass::elementwise, "mul", 2, f.rows, f.cols), "grad of " + f.op);
        if (reads_param(f)) {
          Kernel k = vec(f, KernelClass::reduce, "sum", 2, f.cols, f.rows);
          k.flops = 2.0 * double(f.rows) * double(f.cols);
          k.bytes = (2.0 * double(f.rows) * double(f.cols) + 2.0 * double(f.cols)) * element_bytes(f.dtype);
          push(f, k, "grad of " + f.op + " weight and bias");
        }
        break;
      case KernelClass::reduce:  // the gradient broadcast back over the input
        push(f, vec(f, KernelClass::elementwise, "expand", 1, f.rows, f.cols), "grad of " + f.op);
        break;
      case KernelClass::memory: memory(f, n); break;
      default: break;
    }
  }
};

}  // namespace

namespace {

// ai.onnx.preview.training optimizer nodes (R, T, X_1..X_n, G_1..G_n, then `state` more
// tensors per parameter) -> updated X and state: one elementwise update kernel per
// parameter tensor, reading X, G and the state and writing X and the state (as a fused
// optimizer step does). Ops per element: Momentum 5 (v = alpha v + beta g, x -= r v;
// nesterov 7), Adagrad 8 (g += norm x, h += g^2, x -= r g / (sqrt(h) + eps)), Adam 14
// (g += norm x, v and h moving averages, x -= r v / (sqrt(h) + eps), post-decay).
void lower_optimizer(LowerCtx& c, const std::string& op, size_t state, double ops) {
  const size_t ins = c.n.inputs.size();
  if (ins < 2 + 2 + state) {
    c.unknown("optimizer node without parameters");
    return;
  }
  const size_t per = 2 + state;  // X, G and the state tensors
  const size_t n = (ins - 2) / per;
  for (size_t p = 0; p < n; ++p) {
    const TensorInfo* x = c.in(2 + p);
    if (!c.all_known({x})) {
      c.unknown("shapes not inferred");
      continue;
    }
    Kernel k = c.base(KernelClass::elementwise, op);
    k.dtype = c.dtype(x);
    k.rows = 1;
    k.cols = numel(x);
    k.inputs = static_cast<int>(per);
    const double e = double(k.cols);
    k.flops = ops * e;
    k.bytes = double(per + 1 + state) * e * element_bytes(k.dtype);  // read X, G, state; write X, state
    k.operand_elems.assign(per, k.cols);
    k.note = "optimizer update of " + c.n.inputs[2 + p];
    c.out.push_back(k);
  }
}

}  // namespace

void add_optimizer_rules(RuleTable& r) {
  r["Momentum"] = [](LowerCtx& c) {
    lower_optimizer(c, "momentum", 1, c.n.attr_s("mode", "standard") == "nesterov" ? 7 : 5);
  };
  r["Adagrad"] = [](LowerCtx& c) { lower_optimizer(c, "adagrad", 1, 8); };
  r["Adam"] = [](LowerCtx& c) { lower_optimizer(c, "adam", 2, 14); };
}

// The optimizer's update of one parameter of `elems` elements held in `dtype` (the compute
// dtype when forced), reported under `node`.
Kernel update_kernel(const LoweringOptions& opt, const std::string& name, int64_t elems, DType dtype, int node) {
  const UpdateWork& uw = update_work(opt.optimizer);
  Kernel k;
  k.cls = KernelClass::elementwise;
  k.phase = Phase::update;
  k.op = uw.op;
  k.node = node;
  k.dtype = opt.compute_dtype != DType::undefined ? activation_dtype(opt.compute_dtype) : dtype;
  k.rows = 1;
  k.cols = elems;
  k.inputs = 2 + uw.buffers;
  k.flops = uw.ops * double(k.cols);
  k.bytes = (3.0 * element_bytes(k.dtype) + 2.0 * optimizer_state_bytes(uw.op)) * double(k.cols);
  k.operand_elems.assign(static_cast<size_t>(k.inputs), k.cols);
  k.note = "weight update " + name;
  k.weight = name;
  return k;
}

// LoRA: the adapters' updates, each under its layer's node, in the layer's dtype.
void add_adapter_updates(const std::vector<Kernel>& fwd, const LoweringOptions& opt, const LoraTargets& lora,
                         std::vector<Kernel>& out) {
  for (const AdapterParameter& p : lora_parameters(fwd, lora))
    out.push_back(update_kernel(opt, p.name, p.elems, p.dtype, p.node));
}

void add_training_kernels(const Graph& g, const std::vector<Kernel>& fwd, const LoweringOptions& opt,
                          const LoraTargets& lora, std::vector<Kernel>& out, std::vector<std::string>& warnings) {
  const bool adapters = lora.rank > 0;
  // Under LoRA the graph's parameters are frozen: what needs a gradient is what the adapted
  // layers' outputs (their adapters' sums) reach.
  std::vector<std::string> order = adapters ? std::vector<std::string>{} : trainable(g);
  std::set<std::string> seeds(order.begin(), order.end());
  for (const auto& [node, weight] : lora.weight_of_node)
    for (const auto& o : g.nodes[static_cast<size_t>(node)].outputs) seeds.insert(o);
  if (seeds.empty())
    warnings.push_back(
        "--mode training: the graph has no trainable parameter (a float initializer of more than one element "
        "that an op computes with, or a Constant node's float values that an op reads as its weights; weights "
        "inside a subgraph are not), so the step is its forward pass alone");
  const std::set<std::string> rg = requires_grad(g, seeds);
  Backward bw{g, opt, rg, out, lora};
  for (auto it = fwd.rbegin(); it != fwd.rend(); ++it) bw.run(*it);
  if (adapters) {
    add_adapter_updates(fwd, opt, lora, out);
    return;
  }
  // Optimizer update: one elementwise pass over each parameter (AccOps: VECadd [1, numel]),
  // reported under the first node that reads it, in trainable's order. SGD reads the parameter
  // and its gradient and writes the parameter, one add per element; momentum and Adam also read
  // and write their FP32 state (a momentum buffer; two moments) and do more per element (3 and
  // 14 operations; Adam's include a square root and a division).
  for (const auto& name : order) {
    const TensorInfo* t = g.find(name);
    int first = -1;
    for (size_t i = 0; i < g.nodes.size() && first < 0; ++i)
      if (std::find(g.nodes[i].inputs.begin(), g.nodes[i].inputs.end(), name) != g.nodes[i].inputs.end())
        first = static_cast<int>(i);
    out.push_back(update_kernel(opt, name, t->num_elements(), t->dtype, first));
  }
}

}  // namespace neusight::lowering_detail

namespace neusight {

const char* optimizer_of_update(const std::string& update_op) {
  const lowering_detail::UpdateWork* u = lowering_detail::update_of_op(update_op);
  return u ? u->name : "";
}

double optimizer_state_bytes(const std::string& update_op) {
  const lowering_detail::UpdateWork* u = lowering_detail::update_of_op(update_op);
  return u ? 4.0 * u->buffers : 0.0;
}

}  // namespace neusight
