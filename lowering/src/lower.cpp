// lower.cpp - ONNX nodes to kernels: one rule per op family, training kernels derived after.
#include <algorithm>
#include <functional>
#include <set>
#include <unordered_map>

#include "neusight/lowering.h"

namespace neusight {

const char* kernel_class_name(KernelClass c) {
  switch (c) {
    case KernelClass::gemm: return "gemm";
    case KernelClass::elementwise: return "elementwise";
    case KernelClass::softmax: return "softmax";
    case KernelClass::layernorm: return "layernorm";
    case KernelClass::reduce: return "reduce";
    case KernelClass::memory: return "memory";
    case KernelClass::collective: return "collective";
    case KernelClass::unknown: return "unknown";
  }
  return "unknown";
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::update: return "update";
  }
  return "forward";
}

namespace {

struct LowerCtx {
  const Graph& g;
  const LoweringOptions& opt;
  const Node& n;
  int index;
  std::vector<Kernel>& out;

  const TensorInfo* in(size_t i) const {
    if (i >= n.inputs.size() || n.inputs[i].empty()) return nullptr;
    return g.find(n.inputs[i]);
  }
  const TensorInfo* outp(size_t i) const {
    if (i >= n.outputs.size() || n.outputs[i].empty()) return nullptr;
    return g.find(n.outputs[i]);
  }
  DType dtype(const TensorInfo* t) const {
    if (opt.compute_dtype != DType::undefined && t && is_float(t->dtype)) return opt.compute_dtype;
    return t && t->dtype != DType::undefined ? t->dtype : DType::f32;
  }
};

double elem_bytes(DType t) {
  const int bits = dtype_bits(t == DType::tf32 ? DType::f32 : t);
  return bits > 0 ? bits / 8.0 : 4.0;
}

int64_t numel(const TensorInfo* t) { return t ? std::max<int64_t>(t->num_elements(), 0) : 0; }

// rows x cols view of a tensor: cols = last dim.
void rows_cols(const TensorInfo* t, int64_t& rows, int64_t& cols) {
  rows = 0;
  cols = 0;
  if (!t || !t->fully_known()) return;
  if (t->shape.empty()) { rows = 1; cols = 1; return; }
  cols = t->shape.back().value;
  rows = cols > 0 ? t->num_elements() / cols : 0;
}

Kernel base(const LowerCtx& c, KernelClass cls, const std::string& op) {
  Kernel k;
  k.cls = cls;
  k.op = op;
  k.node = c.index;
  k.dtype = c.dtype(c.outp(0) ? c.outp(0) : c.in(0));
  return k;
}

void add_gemm(const LowerCtx& c, const std::string& op, int64_t batch, int64_t m, int64_t n, int64_t k,
              double a_elems, double b_elems, const std::string& note = "") {
  Kernel kr = base(c, KernelClass::gemm, op);
  kr.dtype = c.dtype(c.in(0));
  kr.gemm = {batch, m, n, k};
  kr.flops = 2.0 * batch * m * n * k;
  const double eb = elem_bytes(kr.dtype);
  kr.bytes = (a_elems + b_elems + double(batch) * m * n) * eb;
  kr.note = note;
  c.out.push_back(kr);
}

void lower_matmul(LowerCtx& c) {
  const TensorInfo* a = c.in(0);
  const TensorInfo* b = c.in(1);
  const TensorInfo* y = c.outp(0);
  if (!a || !b || !y || !a->fully_known() || !b->fully_known() || !y->fully_known()) {
    Kernel k = base(c, KernelClass::unknown, c.n.op_type);
    k.note = "shapes not inferred";
    c.out.push_back(k);
    return;
  }
  const Shape& sa = a->shape;
  const Shape& sb = b->shape;
  const int64_t m = sa.size() >= 2 ? sa[sa.size() - 2].value : 1;
  const int64_t k = sa.back().value;
  const int64_t n = sb.size() >= 2 ? sb.back().value : 1;
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < y->shape.size(); ++i) batch *= y->shape[i].value;
  if (sa.size() == 1 || sb.size() == 1) batch = std::max<int64_t>(1, numel(y) / std::max<int64_t>(1, m * n));
  // A weight (2-D, constant) shared by every batch folds the batch into M: one linear layer.
  const bool b_is_weight = sb.size() == 2 && (b->is_initializer || b->int_value);
  if (sb.size() <= 2 && batch > 1 && (b_is_weight || sb.size() == 2)) {
    add_gemm(c, "linear", 1, batch * m, n, k, double(numel(a)), double(numel(b)));
    return;
  }
  add_gemm(c, batch > 1 ? "bmm" : "linear", batch, m, n, k, double(numel(a)), double(numel(b)));
}

void lower_gemm(LowerCtx& c) {
  const TensorInfo* a = c.in(0);
  const TensorInfo* b = c.in(1);
  if (!a || !b || !a->fully_known() || !b->fully_known() || a->shape.size() != 2 || b->shape.size() != 2) {
    Kernel k = base(c, KernelClass::unknown, "Gemm");
    k.note = "shapes not inferred";
    c.out.push_back(k);
    return;
  }
  const bool ta = c.n.attr_i("transA", 0), tb = c.n.attr_i("transB", 0);
  const int64_t m = a->shape[ta ? 1 : 0].value, k = a->shape[ta ? 0 : 1].value;
  const int64_t n = b->shape[tb ? 0 : 1].value;
  add_gemm(c, "linear", 1, m, n, k, double(numel(a)), double(numel(b)), c.in(2) ? "bias epilogue" : "");
}

void lower_conv(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* w = c.in(1);
  const TensorInfo* y = c.outp(0);
  if (!x || !w || !y || !x->fully_known() || !w->fully_known() || !y->fully_known() || y->shape.size() < 3) {
    Kernel k = base(c, KernelClass::unknown, c.n.op_type);
    k.note = "shapes not inferred";
    c.out.push_back(k);
    return;
  }
  const int64_t group = std::max<int64_t>(1, c.n.attr_i("group", 1));
  const int64_t nb = y->shape[0].value;
  int64_t spatial_out = 1;
  for (size_t i = 2; i < y->shape.size(); ++i) spatial_out *= y->shape[i].value;
  int64_t ksz = 1;
  for (size_t i = 2; i < w->shape.size(); ++i) ksz *= w->shape[i].value;
  int64_t cin = x->shape[1].value, cout = y->shape[1].value;
  if (c.n.op_type == "ConvTranspose") {
    // Transposed conv as the implicit GEMM of its adjoint: M over input pixels.
    int64_t spatial_in = 1;
    for (size_t i = 2; i < x->shape.size(); ++i) spatial_in *= x->shape[i].value;
    add_gemm(c, "conv", group, nb * spatial_in, cout / group * ksz, cin / group, double(numel(x)),
             double(numel(w)), "implicit GEMM (transposed)");
    return;
  }
  // Implicit GEMM: M = N*P*Q, N = Cout/group, K = Cin/group * R*S, one GEMM per group.
  add_gemm(c, "conv", group, nb * spatial_out, cout / group, cin / group * ksz, double(numel(x)),
           double(numel(w)), group > 1 ? (group == cin ? "depthwise implicit GEMM" : "grouped implicit GEMM") : "implicit GEMM");
}

void lower_elementwise(LowerCtx& c, const std::string& op, double ops_per_elem = 1) {
  const TensorInfo* y = c.outp(0);
  Kernel k = base(c, KernelClass::elementwise, op);
  rows_cols(y, k.rows, k.cols);
  const double eb = elem_bytes(k.dtype);
  double in_bytes = 0;
  int inputs = 0;
  for (size_t i = 0; i < c.n.inputs.size(); ++i) {
    const TensorInfo* t = c.in(i);
    if (!t) continue;
    const int64_t e = numel(t);
    if (e > 1) ++inputs;
    in_bytes += double(e) * elem_bytes(c.dtype(t));
  }
  k.inputs = std::max(inputs, 1);
  k.flops = ops_per_elem * double(numel(y));
  k.bytes = in_bytes + double(numel(y)) * eb;
  c.out.push_back(k);
}

void lower_rowwise(LowerCtx& c, KernelClass cls, const std::string& op, double ops_per_elem) {
  const TensorInfo* x = c.in(0);
  Kernel k = base(c, cls, op);
  if (x && x->fully_known() && !x->shape.empty()) {
    const int64_t r = static_cast<int64_t>(x->shape.size());
    int64_t axis = c.n.attr_i("axis", -1);
    if (axis < 0) axis += r;
    if (c.n.op_type == "Softmax" || c.n.op_type == "LogSoftmax") {
      // opset < 13 flattens at axis; opset >= 13 normalises along one axis. Both: row = the
      // dims from axis to the end for the common case axis = last.
    }
    int64_t cols = 1;
    for (int64_t i = std::max<int64_t>(axis, 0); i < r; ++i) cols *= x->shape[i].value;
    k.cols = cols;
    k.rows = cols > 0 ? x->num_elements() / cols : 0;
  }
  const double e = double(k.rows) * double(k.cols);
  const double eb = elem_bytes(k.dtype);
  k.flops = ops_per_elem * e;
  double extra = 0;
  for (size_t i = 1; i < c.n.inputs.size(); ++i) extra += double(numel(c.in(i))) * eb;
  k.bytes = 2 * e * eb + extra;
  c.out.push_back(k);
}

void lower_reduce(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* y = c.outp(0);
  Kernel k = base(c, KernelClass::reduce, c.n.op_type);
  k.rows = std::max<int64_t>(numel(y), 1);
  k.cols = k.rows > 0 ? numel(x) / k.rows : 0;
  k.flops = double(numel(x));
  k.bytes = (double(numel(x)) + double(numel(y))) * elem_bytes(k.dtype);
  c.out.push_back(k);
}

void lower_memory(LowerCtx& c, const std::string& op) {
  Kernel k = base(c, KernelClass::memory, op);
  const TensorInfo* y = c.outp(0);
  double out_bytes = 0;
  for (size_t i = 0; i < c.n.outputs.size(); ++i) out_bytes += double(numel(c.outp(i))) * elem_bytes(c.dtype(c.outp(i)));
  // Reads: what the output needs (gather reads as many rows as it writes; copy-like ops read
  // their input once).
  double in_bytes = out_bytes;
  if (c.n.op_type == "Concat" || c.n.op_type == "Transpose" || c.n.op_type == "Cast" || c.n.op_type == "Pad") {
    in_bytes = 0;
    for (size_t i = 0; i < c.n.inputs.size(); ++i) in_bytes += double(numel(c.in(i))) * elem_bytes(c.dtype(c.in(i)));
  }
  rows_cols(y, k.rows, k.cols);
  k.bytes = in_bytes + out_bytes;
  c.out.push_back(k);
}

void lower_view(LowerCtx&) {}

using Rule = std::function<void(LowerCtx&)>;

const std::unordered_map<std::string, Rule>& rules() {
  static const std::unordered_map<std::string, Rule> t = [] {
    std::unordered_map<std::string, Rule> r;
    r["MatMul"] = lower_matmul;
    r["MatMulInteger"] = lower_matmul;
    r["Gemm"] = lower_gemm;
    r["Conv"] = lower_conv;
    r["ConvTranspose"] = lower_conv;
    const std::pair<const char*, const char*> ew[] = {
        {"Add", "add"}, {"Sub", "sub"}, {"Mul", "mul"}, {"Div", "div"}, {"Pow", "pow"},
        {"Relu", "relu"}, {"Gelu", "gelu"}, {"FastGelu", "gelu"}, {"BiasGelu", "gelu"}, {"Tanh", "tanh"},
        {"Sigmoid", "sigmoid"}, {"Exp", "exp"}, {"Log", "log"}, {"Sqrt", "sqrt"}, {"Erf", "erf"},
        {"Neg", "neg"}, {"Abs", "abs"}, {"Reciprocal", "reciprocal"}, {"Max", "max"}, {"Min", "min"},
        {"Clip", "clip"}, {"LeakyRelu", "leakyrelu"}, {"Elu", "elu"}, {"Selu", "selu"},
        {"HardSigmoid", "hardsigmoid"}, {"HardSwish", "hardswish"}, {"Softplus", "softplus"},
        {"Mish", "mish"}, {"Sin", "sin"}, {"Cos", "cos"}, {"Floor", "floor"}, {"Ceil", "ceil"},
        {"Round", "round"}, {"Sign", "sign"}, {"Equal", "equal"}, {"Less", "less"},
        {"Greater", "greater"}, {"LessOrEqual", "lessequal"}, {"GreaterOrEqual", "greaterequal"},
        {"And", "and"}, {"Or", "or"}, {"Xor", "xor"}, {"Not", "not"}, {"Mod", "mod"},
        {"PRelu", "prelu"}, {"Sum", "add"}, {"Mean", "mean"}, {"BatchNormalization", "batchnorm"},
        {"QuickGelu", "gelu"}, {"BiasAdd", "add"}, {"IsNaN", "isnan"}, {"IsInf", "isinf"},
    };
    for (const auto& [onnx_op, name] : ew) {
      std::string nm = name;
      r[onnx_op] = [nm](LowerCtx& c) { lower_elementwise(c, nm); };
    }
    r["Softmax"] = [](LowerCtx& c) { lower_rowwise(c, KernelClass::softmax, "softmax", 5); };
    r["LogSoftmax"] = [](LowerCtx& c) { lower_rowwise(c, KernelClass::softmax, "logsoftmax", 5); };
    r["LayerNormalization"] = [](LowerCtx& c) { lower_rowwise(c, KernelClass::layernorm, "ln", 6); };
    r["SimplifiedLayerNormalization"] = [](LowerCtx& c) { lower_rowwise(c, KernelClass::layernorm, "rmsnorm", 4); };
    r["RMSNormalization"] = r["SimplifiedLayerNormalization"];
    for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                           "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin",
                           "GlobalAveragePool", "GlobalMaxPool"})
      r[op] = lower_reduce;
    for (const char* op : {"Transpose", "Gather", "GatherElements", "GatherND", "Concat", "Slice", "Split",
                           "Pad", "Expand", "Where", "Cast", "CastLike", "Tile", "ScatterND", "ScatterElements",
                           "Resize", "Upsample", "DepthToSpace", "SpaceToDepth", "ConstantOfShape", "Range",
                           "Trilu", "CumSum", "MaxPool", "AveragePool", "LpPool", "OneHot", "TopK", "NonZero"})
      r[op] = [](LowerCtx& c) {
        std::string nm = c.n.op_type;
        std::transform(nm.begin(), nm.end(), nm.begin(), ::tolower);
        lower_memory(c, nm);
      };
    r["Dropout"] = [](LowerCtx& c) {
      // Inference: identity (no kernel). Training: mask-and-scale elementwise.
      if (c.opt.mode == Mode::training) lower_elementwise(c, "dropout");
    };
    for (const char* op : {"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Shape", "Size",
                           "Constant", "Optional", "OptionalGetElement"})
      r[op] = lower_view;
    return r;
  }();
  return t;
}

// Training: backward kernels of one forward kernel (METHOD.md "End to end").
void add_backward(const Graph& g, const Kernel& f, std::vector<Kernel>& out) {
  auto bw = [&](Kernel k) {
    k.phase = Phase::backward;
    k.node = f.node;
    out.push_back(k);
  };
  const double eb = elem_bytes(f.dtype);
  switch (f.cls) {
    case KernelClass::gemm: {
      const auto& s = f.gemm;
      // grad input: dA[m x k] = dC[m x n] * B^T ; grad weight: dB[k x n] = A^T * dC.
      const Node& node = g.nodes.at(static_cast<size_t>(f.node));
      const TensorInfo* a = node.inputs.size() > 0 ? g.find(node.inputs[0]) : nullptr;
      const TensorInfo* b = node.inputs.size() > 1 ? g.find(node.inputs[1]) : nullptr;
      // The graph's own inputs (token data) need no gradient; everything else does.
      const bool a_needs = !(a && a->is_graph_input);
      const bool b_needs = !(b && b->is_graph_input);
      if (a_needs) {
        Kernel k = f;
        k.gemm = {s.batch, s.m, s.k, s.n};
        k.note = "grad input";
        k.bytes = (double(s.batch) * s.m * s.n + double(s.batch) * s.n * s.k + double(s.batch) * s.m * s.k) * eb;
        bw(k);
      }
      if (b_needs && b) {
        Kernel k = f;
        k.gemm = {s.batch, s.k, s.n, s.m};
        k.note = "grad weight";
        k.bytes = (double(s.batch) * s.m * s.k + double(s.batch) * s.m * s.n + double(s.batch) * s.k * s.n) * eb;
        bw(k);
      }
      break;
    }
    case KernelClass::elementwise: {
      Kernel k = f;
      k.op = f.op + "_grad";
      bw(k);
      if (f.inputs > 1) bw(k);
      break;
    }
    case KernelClass::softmax: {
      Kernel mul = f;
      mul.cls = KernelClass::elementwise;
      mul.op = "mul";
      mul.flops = double(f.rows) * f.cols;
      mul.bytes = 3 * double(f.rows) * f.cols * eb;
      bw(mul);
      Kernel k = f;
      k.op = "softmax_grad";
      k.bytes = 3 * double(f.rows) * f.cols * eb;
      bw(k);
      break;
    }
    case KernelClass::layernorm: {
      Kernel k = f;
      k.op = f.op + "_grad";
      k.bytes = 3 * double(f.rows) * f.cols * eb;
      bw(k);
      Kernel mul = f;
      mul.cls = KernelClass::elementwise;
      mul.op = "mul";
      mul.flops = double(f.rows) * f.cols;
      mul.bytes = 3 * double(f.rows) * f.cols * eb;
      bw(mul);
      break;
    }
    case KernelClass::reduce:
    case KernelClass::memory: {
      Kernel k = f;
      k.op = f.op + "_grad";
      bw(k);
      break;
    }
    default:
      break;
  }
}

}  // namespace

KernelList lower(const Graph& graph, const LoweringOptions& options) {
  KernelList result;
  std::set<std::string> unknown;
  std::vector<Kernel> fwd;
  fwd.reserve(graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    LowerCtx c{graph, options, n, static_cast<int>(i), fwd};
    auto it = rules().find(n.op_type);
    if (it != rules().end()) {
      it->second(c);
    } else {
      Kernel k = base(c, KernelClass::unknown, n.op_type);
      k.note = "no lowering rule for " + (n.domain.empty() ? n.op_type : n.domain + "." + n.op_type);
      fwd.push_back(k);
      unknown.insert(n.domain.empty() ? n.op_type : n.domain + "." + n.op_type);
    }
  }
  result.kernels = fwd;
  if (options.mode == Mode::training) {
    for (auto it = fwd.rbegin(); it != fwd.rend(); ++it) add_backward(graph, *it, result.kernels);
    // Optimizer update (SGD/Adam-style elementwise pass) per trainable float initializer.
    for (const auto& name : graph.initializers) {
      const TensorInfo* t = graph.find(name);
      if (!t || !is_float(t->dtype) || t->num_elements() <= 1) continue;
      bool used_by_compute = false;
      for (const auto& n : graph.nodes) {
        if (n.op_type == "Reshape" || n.op_type == "Shape" || n.op_type == "Constant") continue;
        if (std::find(n.inputs.begin(), n.inputs.end(), name) != n.inputs.end()) { used_by_compute = true; break; }
      }
      if (!used_by_compute) continue;
      Kernel k;
      k.cls = KernelClass::elementwise;
      k.phase = Phase::update;
      k.op = "add";
      k.dtype = options.compute_dtype != DType::undefined ? options.compute_dtype : t->dtype;
      k.rows = 1;
      k.cols = t->num_elements();
      k.inputs = 2;
      k.flops = double(k.cols);
      k.bytes = 3.0 * double(k.cols) * elem_bytes(k.dtype);
      k.note = "weight update " + name;
      result.kernels.push_back(k);
    }
  }
  result.unknown_ops.assign(unknown.begin(), unknown.end());
  return result;
}

}  // namespace neusight
