// vector.cpp - vector ops: elementwise (unary/binary with broadcasting), softmax, layer /
// RMS / group / instance norms, reductions, pooling.
#include <algorithm>

#include "internal.h"
#include "neusight/op_traits.h"

namespace neusight::lowering_detail {

void emit_elementwise(const LowerCtx& c, const std::string& op, double ops_per_elem) {
  const TensorInfo* y = c.outp(0);
  Kernel k = c.base(KernelClass::elementwise, op);
  if (!y || !y->fully_known()) {
    c.unknown("shapes not inferred");
    return;
  }
  rows_cols(y, k.rows, k.cols);
  const double eb = element_bytes(k.dtype);
  const double streams = stream_bytes_per_output(c, y);
  double in_bytes = 0;
  int inputs = 0;
  for (size_t i = 0; i < c.n.inputs.size(); ++i) {
    const TensorInfo* t = c.in(i);
    if (!t) continue;
    const int64_t e = numel(t);
    if (e > 1) ++inputs;
    k.operand_elems.push_back(e);
    const double own = element_bytes(c.dtype(t));
    const double once = double(e) * own;
    in_bytes += once;
    if (e <= 1) continue;  // a scalar stays in cache
    // Read through a permuted view, one 32-byte sector per element: the sector's other
    // elements are read reuse_elems output elements later.
    const LowerCtx::StridedRead sr = c.strided_read(i);
    if (sr.reuse_elems > 0 && sr.elem_bytes > own)
      k.l2_reuse.push_back({int(i), sr.reuse_elems * sr.elem_bytes, double(e) * (sr.elem_bytes - own)});
    add_broadcast_reuse(k, int(i), t, y, own, streams);
  }
  k.inputs = std::max(inputs, 1);
  k.flops = ops_per_elem * double(numel(y));
  k.bytes = in_bytes + double(numel(y)) * eb;
  c.out.push_back(k);
}

namespace {

int64_t norm_axis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

// Row-wise kernel over x: rows x cols with cols = product of dims [axis, end) (`flatten`)
// or the one dim `axis` (softmax at opset >= 13).
void emit_rowwise(LowerCtx& c, KernelClass cls, const std::string& op, double ops_per_elem, int64_t axis,
                  bool flatten, size_t extra_tensor_inputs_from = 1) {
  const TensorInfo* x = c.in(0);
  if (!c.all_known({x})) {
    c.unknown("shapes not inferred");
    return;
  }
  Kernel k = c.base(cls, op);
  const size_t r = x->shape.size();
  if (r == 0) {
    k.rows = k.cols = 1;
  } else {
    axis = std::clamp<int64_t>(norm_axis(axis, r), 0, static_cast<int64_t>(r) - 1);
    int64_t cols = 1;
    if (flatten)
      for (size_t i = static_cast<size_t>(axis); i < r; ++i) cols *= x->shape[i].value;
    else
      cols = x->shape[static_cast<size_t>(axis)].value;
    k.cols = cols;
    k.rows = cols > 0 ? x->num_elements() / cols : 0;
  }
  const Work w = work_of_rowwise(k.rows, k.cols, ops_per_elem, element_bytes(k.dtype));
  k.flops = w.flops;
  double extra = 0;
  for (size_t i = extra_tensor_inputs_from; i < c.n.inputs.size(); ++i) extra += tensor_bytes(c, c.in(i));
  k.bytes = w.bytes + extra;
  k.operand_elems = {numel(x)};
  c.out.push_back(k);
}

void lower_softmax(LowerCtx& c, const std::string& op, bool flatten) {
  emit_rowwise(c, KernelClass::softmax, op, kSoftmaxOpsPerElement, c.n.attr_i("axis", flatten ? 1 : -1), flatten);
}

void lower_layernorm(LowerCtx& c, const std::string& op, double ops) {
  emit_rowwise(c, KernelClass::layernorm, op, ops, c.n.attr_i("axis", -1), true);
}

// com.microsoft SkipLayerNormalization(input, skip, gamma, beta, bias): residual add and
// layernorm in one kernel (it also reads the skip tensor).
void lower_skip_layernorm(LowerCtx& c, const std::string& op, double ops) {
  emit_rowwise(c, KernelClass::layernorm, op, ops + 1, -1, false);
  if (!c.out.empty() && c.out.back().cls == KernelClass::layernorm) {
    c.out.back().note = "residual add fused";
    c.out.back().residual_add = true;
  }
}

// com.microsoft EmbedLayerNormalization(input_ids, segment_ids, word_embedding,
// position_embedding, segment_embedding, gamma, beta, mask, position_ids) -> output,
// mask_index, embedding_sum: onnxruntime runs one kernel that gathers the word, position and
// (when given) segment rows of each token, adds them and layer-normalises the sum. One
// layernorm-class kernel over (B*S, H) that reads the gathered rows (not whole tables), the
// ids, gamma and beta, and writes the output (and the sum and mask index when requested).
void lower_embed_layernorm(LowerCtx& c) {
  const TensorInfo* ids = c.in(0);
  const TensorInfo* y = c.outp(0);
  if (!c.all_known({ids, y}) || y->shape.empty()) {
    c.unknown("shapes not inferred");
    return;
  }
  Kernel k = c.base(KernelClass::layernorm, "ln");
  rows_cols(y, k.rows, k.cols);
  const double e = double(numel(y)), eb = element_bytes(k.dtype);
  const bool segments = c.in(1) && c.in(4);
  const double tables = segments ? 3 : 2;  // gathered rows per token: word, position, segment
  double ids_bytes = 0;
  for (size_t i : {size_t(0), size_t(1), size_t(7), size_t(8)})
    ids_bytes += tensor_bytes(c, c.in(i));
  const double params = (double(numel(c.in(5))) + double(numel(c.in(6)))) * eb;
  double writes = e * eb;
  writes += tensor_bytes(c, c.outp(1));
  if (c.outp(2)) writes += e * eb;
  k.flops = (6 + tables - 1) * e;
  k.bytes = tables * e * eb + ids_bytes + params + writes;
  k.operand_elems = {numel(y)};
  k.note = "embedding gathers and adds fused";
  c.out.push_back(k);
}

// GroupNormalization(x, scale, bias, num_groups) / InstanceNormalization: normalise each
// (sample, group) over its channels x spatial elements.
void lower_group_norm(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  if (!c.all_known({x}) || x->shape.size() < 2) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t groups = c.n.op_type == "InstanceNormalization" ? x->shape[1].value
                                                                 : std::max<int64_t>(c.n.attr_i("num_groups", 1), 1);
  Kernel k = c.base(KernelClass::layernorm, c.n.op_type == "InstanceNormalization" ? "instancenorm" : "groupnorm");
  k.rows = x->shape[0].value * groups;
  k.cols = k.rows > 0 ? x->num_elements() / k.rows : 0;
  const double e = double(numel(x)), eb = element_bytes(k.dtype);
  k.flops = 6 * e;
  k.bytes = 2 * e * eb + (double(numel(c.in(1))) + double(numel(c.in(2)))) * eb;
  c.out.push_back(k);
}

// com.microsoft GroupNorm / SkipGroupNorm (NHWC input [N, H, W, C], gamma, beta[, skip,
// bias]; attribute groups): normalise each (sample, group) over H x W x C / groups; the
// skip variant also reads the residual (and bias) and may write their sum.
void lower_nhwc_group_norm(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  if (!c.all_known({x}) || x->shape.size() < 2) {
    c.unknown("shapes not inferred");
    return;
  }
  const bool skip = c.n.op_type == "SkipGroupNorm";
  const int64_t groups = std::max<int64_t>(c.n.attr_i("groups", 1), 1);
  Kernel k = c.base(KernelClass::layernorm, "groupnorm");
  k.rows = x->shape[0].value * groups;
  k.cols = k.rows > 0 ? x->num_elements() / k.rows : 0;
  const double e = double(numel(x)), eb = element_bytes(k.dtype);
  k.flops = (skip ? 8 : 6) * e;
  double extra = 0;
  for (size_t i = 1; i < c.n.inputs.size(); ++i) extra += tensor_bytes(c, c.in(i));
  k.bytes = 2 * e * eb + extra + (skip && c.outp(1) ? e * eb : 0);
  k.operand_elems = {numel(x)};
  if (skip) k.note = "residual add fused";
  k.residual_add = skip;
  c.out.push_back(k);
}

void lower_reduce(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* y = c.outp(0);
  if (!c.all_known({x, y})) {
    c.unknown("shapes not inferred");
    return;
  }
  std::string op = c.n.op_type;
  std::transform(op.begin(), op.end(), op.begin(), ::tolower);
  Kernel k = c.base(KernelClass::reduce, op);
  k.dtype = c.dtype(x);
  k.rows = std::max<int64_t>(numel(y), 1);
  k.cols = k.rows > 0 ? numel(x) / k.rows : 0;
  k.flops = double(numel(x));
  k.bytes = double(numel(x)) * element_bytes(k.dtype) + double(numel(y)) * element_bytes(c.dtype(y));
  k.operand_elems = {numel(x)};
  c.out.push_back(k);
}

// MaxPool / AveragePool / LpPool: each output reads its window. A reduction of `window`
// elements per output (rows = outputs, cols = window).
void lower_pool(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* y = c.outp(0);
  if (!c.all_known({x, y})) {
    c.unknown("shapes not inferred");
    return;
  }
  int64_t window = 1;
  for (int64_t v : c.n.attr_ints("kernel_shape")) window *= std::max<int64_t>(v, 1);
  std::string op = c.n.op_type;
  std::transform(op.begin(), op.end(), op.begin(), ::tolower);
  Kernel k = c.base(KernelClass::reduce, op);
  k.rows = numel(y);
  k.cols = window;
  k.flops = double(numel(y)) * double(window);
  k.bytes = (double(numel(x)) + double(numel(y))) * element_bytes(k.dtype);
  k.note = "window " + std::to_string(window);
  c.out.push_back(k);
}

// The loss of NegativeLogLikelihoodLoss (and of SoftmaxCrossEntropyLoss after its
// log-softmax): each of the N*d1..dk targets gathers one value of `logp` (and of the class
// weights), negates (and weighs) it. reduction none: a gather kernel writing the per-target
// losses; sum/mean: one reduce kernel over the N*d1..dk gathered values to a scalar (mean
// with weights also sums the gathered weights). PyTorch's nll_loss{,2d}_forward is this one
// kernel.
void emit_nll(LowerCtx& c, const TensorInfo* target, const TensorInfo* weight, const TensorInfo* loss) {
  const int64_t t = numel(target);
  const std::string red = c.n.attr_s("reduction", "mean");
  const double eb = element_bytes(c.dtype(c.in(0)));
  const double per = weight ? 2 : 1;  // negate (and weigh) each gathered value
  const double gathered = double(t) * eb * (weight ? 2 : 1) + double(t) * element_bytes(target->dtype);
  if (red == "none") {
    Kernel k = c.base(KernelClass::memory, "nll_loss");
    rows_cols(loss, k.rows, k.cols);
    k.flops = per * double(t);
    k.bytes = gathered + double(numel(loss)) * eb;
    k.note = "gather of the target class per element";
    c.out.push_back(k);
    return;
  }
  Kernel k = c.base(KernelClass::reduce, "nll_loss");
  k.rows = 1;
  k.cols = t;
  k.flops = (per + 1) * double(t) + (red == "mean" && weight ? double(t) : 0);
  k.bytes = gathered + eb;
  k.operand_elems = {t};
  k.note = "gather of the target class + " + red + " reduction";
  c.out.push_back(k);
}

// NegativeLogLikelihoodLoss(input [N,C,d..], target [N,d..], weight [C]).
void lower_nll_loss(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* target = c.in(1);
  const TensorInfo* y = c.outp(0);
  if (!c.all_known({x, target, y})) {
    c.unknown("shapes not inferred");
    return;
  }
  emit_nll(c, target, c.in(2), y);
}

// SoftmaxCrossEntropyLoss(scores [N,C,d..], labels [N,d..], weights [C]) -> loss, log_prob:
// a log-softmax over C for each of the N*d1..dk positions (softmax class, rows = N*d..,
// cols = C; the log-probabilities are written whether or not log_prob is an output, as
// PyTorch's cross_entropy = log_softmax + nll_loss writes them), then the NLL kernel.
void lower_softmax_cross_entropy(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* labels = c.in(1);
  const TensorInfo* y = c.outp(0);
  if (!c.all_known({x, labels, y}) || x->shape.size() < 2) {
    c.unknown("shapes not inferred");
    return;
  }
  Kernel k = c.base(KernelClass::softmax, "logsoftmax");
  k.dtype = c.dtype(x);
  k.cols = x->shape[1].value;
  k.rows = k.cols > 0 ? numel(x) / k.cols : 0;
  k.flops = 5.0 * double(numel(x));
  k.bytes = 2.0 * double(numel(x)) * element_bytes(k.dtype);
  k.operand_elems = {numel(x)};
  k.note = "log-softmax over the class axis (1)";
  c.out.push_back(k);
  emit_nll(c, labels, c.in(2), y);
}

// LRN: each output squares and sums `size` neighbouring channels, then scales:
// (2*size + 3) ops per element (size multiply-adds, bias add, pow, divide). An elementwise
// stencil: the window's reads hit the cache, so bytes are the input and the output.
void lower_lrn(LowerCtx& c) {
  const int64_t size = std::max<int64_t>(c.n.attr_i("size", 1), 1);
  emit_elementwise(c, "lrn", 2.0 * double(size) + 3);
  if (!c.out.empty() && c.out.back().op == "lrn") c.out.back().note = "stencil over " + std::to_string(size) + " channels";
}

// MeanVarianceNormalization(X), axes (default [0,2,3]): (x - mean) / sqrt(var) over the
// axes. A layernorm-class kernel: cols = product of the axes' dims, rows = the rest;
// 5 ops per element (sum, subtract, square-accumulate, scale), no affine parameters.
void lower_mvn(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  if (!c.all_known({x})) {
    c.unknown("shapes not inferred");
    return;
  }
  std::vector<int64_t> axes = c.n.attr_ints("axes");
  if (axes.empty() && !c.n.attr("axes")) axes = {0, 2, 3};
  const size_t r = x->shape.size();
  std::vector<bool> on(r, false);
  for (int64_t a : axes) {
    const int64_t ax = norm_axis(a, r);
    if (ax >= 0 && ax < static_cast<int64_t>(r)) on[static_cast<size_t>(ax)] = true;
  }
  Kernel k = c.base(KernelClass::layernorm, "mvn");
  k.cols = 1;
  for (size_t i = 0; i < r; ++i)
    if (on[i]) k.cols *= x->shape[i].value;
  k.rows = k.cols > 0 ? numel(x) / k.cols : 0;
  const double e = double(numel(x));
  k.flops = 5 * e;
  k.bytes = 2 * e * element_bytes(k.dtype);
  k.operand_elems = {numel(x)};
  c.out.push_back(k);
}

}  // namespace

void add_vector_rules(RuleTable& r) {
  // Elementwise ops (op_traits.h): one kernel each, named and priced by their traits.
  for (const auto& [domain, op] : op_traits().ops())
    for (int64_t since : op_traits().versions(domain, op)) {
      const OpTraits& t = *op_traits().find(domain, op, since);
      if (!t.elementwise) continue;
      const std::string name = t.kernel;
      const double ops = t.flops_per_element;
      r.add(domain, op, [name, ops](LowerCtx& c) { emit_elementwise(c, name, ops); }, since);
    }
  // Before opset 13 the input is flattened to 2-D at `axis` (default 1) and each row of the
  // flattened trailing dims is normalised; from 13 on, the one dim `axis` (default -1).
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) {
    std::string name = op;
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    r.add("", op, [name](LowerCtx& c) { lower_softmax(c, name, true); }, 1);
    r.add("", op, [name](LowerCtx& c) { lower_softmax(c, name, false); }, 13);
  }
  r["LayerNormalization"] = [](LowerCtx& c) { lower_layernorm(c, "ln", kLayerNormOpsPerElement); };
  r["SimplifiedLayerNormalization"] = [](LowerCtx& c) { lower_layernorm(c, "rmsnorm", kRmsNormOpsPerElement); };
  r["RMSNormalization"] = r["SimplifiedLayerNormalization"];
  r["com.microsoft:SkipLayerNormalization"] = [](LowerCtx& c) { lower_skip_layernorm(c, "ln", 6); };
  r["com.microsoft:SkipSimplifiedLayerNormalization"] = [](LowerCtx& c) { lower_skip_layernorm(c, "rmsnorm", 4); };
  r["com.microsoft:EmbedLayerNormalization"] = lower_embed_layernorm;
  r["GroupNormalization"] = lower_group_norm;
  r["MeanVarianceNormalization"] = lower_mvn;
  r["LRN"] = lower_lrn;
  r["NegativeLogLikelihoodLoss"] = lower_nll_loss;
  r["SoftmaxCrossEntropyLoss"] = lower_softmax_cross_entropy;
  // LpNormalization: x / ||x||_p along `axis` (default -1): a row-wise kernel.
  r["LpNormalization"] = [](LowerCtx& c) {
    emit_rowwise(c, KernelClass::layernorm, "lpnorm", 3, c.n.attr_i("axis", -1), false);
  };
  // com.microsoft BiasSoftmax(data, bias): softmax(data + bias) over the dims from `axis`
  // (default 1) in one kernel that also reads the broadcast bias.
  r["com.microsoft:BiasSoftmax"] = [](LowerCtx& c) {
    emit_rowwise(c, KernelClass::softmax, "softmax", 6, c.n.attr_i("axis", 1), true);
  };
  // com.microsoft BiasDropout(data, bias, residual, ratio, training_mode): bias add, dropout
  // (identity in inference) and residual add in one pass.
  r["com.microsoft:BiasDropout"] = [](LowerCtx& c) { emit_elementwise(c, "bias_dropout", 2); };
  r["com.microsoft:GroupNorm"] = lower_nhwc_group_norm;
  r["com.microsoft:SkipGroupNorm"] = lower_nhwc_group_norm;
  r["InstanceNormalization"] = lower_group_norm;
  for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "GlobalAveragePool",
                         "GlobalMaxPool", "GlobalLpPool", "TopK", "CumSum"})
    r[op] = lower_reduce;
  for (const char* op : {"MaxPool", "AveragePool", "LpPool"}) r[op] = lower_pool;
  r["Dropout"] = [](LowerCtx& c) {
    // Inference: identity (no kernel). Training: a mask-and-scale pass, which the traced
    // opgraphs count as a memory op; PyTorch's native_dropout also writes the keep mask
    // (torch.bool, one byte per element) that the backward pass reads.
    if (c.opt.mode != Mode::training) return;
    Kernel k = c.base(KernelClass::memory, "dropout");
    rows_cols(c.outp(0), k.rows, k.cols);
    k.bytes = (2.0 * element_bytes(k.dtype) + 1.0) * double(numel(c.outp(0)));
    c.out.push_back(k);
  };
}

}  // namespace neusight::lowering_detail
