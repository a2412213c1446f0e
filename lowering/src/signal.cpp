// signal.cpp - signal processing (DFT, STFT), linear algebra (Det), detection
// post-processing (NonMaxSuppression), and the ops that have no GPU kernel at all (string
// ops, the training meta-op Gradient): those stay "unknown" with a note saying why.
#include <algorithm>
#include <cmath>

#include "internal.h"

namespace neusight::lowering_detail {
namespace {

int64_t known_scalar(const TensorInfo* t, int64_t fallback) {
  return t && t->int_value && t->int_value->size() == 1 ? (*t->int_value)[0] : fallback;
}

// FFT work of one complex transform of length n: 5 n log2 n (the radix-2 count).
double fft_flops(int64_t n) { return n > 1 ? 5.0 * double(n) * std::log2(double(n)) : 0.0; }

// DFT(input [.., n, 1|2], dft_length, axis): one FFT of length n (dft_length, else the
// input's dim on the axis) per position of the other dims (the last dim holds the real /
// imaginary parts). Elementwise class: rows = transforms, cols = n, FLOPs 5 n log2 n per
// transform, bytes the input and the output.
void lower_dft(LowerCtx& c, bool axis_input) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* y = c.outp(0);
  if (!c.all_known({x, y}) || x->shape.size() < 2) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t r = static_cast<int64_t>(x->shape.size());
  int64_t axis = 0;
  if (!axis_input) axis = c.n.attr_i("axis", 1);  // opset 17: an attribute, default 1
  else axis = known_scalar(c.in(2), -2);         // opset 20: an input, default -2
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r - 1) {
    c.unknown("DFT axis out of range");
    return;
  }
  const int64_t len = x->shape[static_cast<size_t>(axis)].value;
  const int64_t n = std::max<int64_t>(known_scalar(c.in(1), len), 1);
  Kernel k = c.base(KernelClass::elementwise, "fft");
  k.cols = n;
  k.rows = len > 0 ? numel(x) / (len * x->shape.back().value) : 0;
  k.flops = double(k.rows) * fft_flops(n);
  k.bytes = tensor_bytes(c, x) + tensor_bytes(c, y);
  k.operand_elems = {numel(x)};
  k.note = std::string(c.n.attr_i("inverse", 0) ? "inverse " : "") + "FFT of length " + std::to_string(n);
  c.out.push_back(k);
}

// STFT(signal [B, L, 1|2], frame_step, window [n], frame_length) -> [B, frames, bins, 2]:
// one windowed FFT per frame: B*frames transforms of 5 n log2 n + n (the window multiply)
// FLOPs; bytes the signal, the window and the output.
void lower_stft(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* w = c.in(2);
  const TensorInfo* y = c.outp(0);
  if (!c.all_known({x, y}) || y->shape.size() < 3) {
    c.unknown("shapes not inferred");
    return;
  }
  int64_t n = known_scalar(c.in(3), -1);
  if (n <= 0 && w && w->fully_known() && w->shape.size() == 1) n = w->shape[0].value;
  if (n <= 0) {
    const int64_t bins = y->shape[2].value;
    n = c.n.attr_i("onesided", 1) ? 2 * (bins - 1) : bins;
  }
  n = std::max<int64_t>(n, 1);
  Kernel k = c.base(KernelClass::elementwise, "stft");
  k.rows = y->shape[0].value * y->shape[1].value;
  k.cols = n;
  k.flops = double(k.rows) * (fft_flops(n) + (w ? double(n) : 0.0));
  k.bytes = tensor_bytes(c, x) + tensor_bytes(c, w) + tensor_bytes(c, y);
  k.operand_elems = {numel(x)};
  k.note = "windowed FFT of length " + std::to_string(n) + " per frame";
  c.out.push_back(k);
}

// Det(X [.., n, n]): a batched LU factorisation (2/3 n^3 FLOPs per matrix) and the product
// of the n diagonal entries. Elementwise class: rows = matrices, cols = n*n.
void lower_det(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* y = c.outp(0);
  if (!c.all_known({x, y}) || x->shape.size() < 2) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t n = x->shape.back().value;
  Kernel k = c.base(KernelClass::elementwise, "lu_det");
  k.rows = std::max<int64_t>(numel(y), 1);
  k.cols = n * n;
  const double dn = double(n);
  k.flops = double(k.rows) * (2.0 * dn * dn * dn / 3.0 + dn);
  k.bytes = tensor_bytes(c, x) + tensor_bytes(c, y);
  k.operand_elems = {numel(x)};
  k.note = "batched LU, " + std::to_string(k.rows) + " matrices of " + std::to_string(n) + "x" + std::to_string(n);
  c.out.push_back(k);
}

// NonMaxSuppression(boxes [B, N, 4], scores [B, C, N], ...) -> selected [M, 3]: per (batch,
// class) the IoU of every box pair, N^2 pairs of 13 FLOPs (4 min/max, 2 subtractions, 2
// clamps and a multiply for the intersection, 2 add/sub for the union, a multiply and a
// compare against the threshold). Elementwise class: rows = B*C, cols = N^2; bytes the
// boxes, the scores and the selected indices (when their count is known). The score sort
// is not counted.
void lower_nms(LowerCtx& c) {
  const TensorInfo* boxes = c.in(0);
  const TensorInfo* scores = c.in(1);
  if (!c.all_known({boxes, scores}) || scores->shape.size() != 3) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t n = scores->shape[2].value;
  Kernel k = c.base(KernelClass::elementwise, "nms");
  k.dtype = c.dtype(boxes);
  k.rows = scores->shape[0].value * scores->shape[1].value;
  k.cols = n * n;
  k.flops = 13.0 * double(k.rows) * double(n) * double(n);
  const TensorInfo* y = c.outp(0);
  k.bytes = tensor_bytes(c, boxes) + tensor_bytes(c, scores) + (y && y->fully_known() ? tensor_bytes(c, y) : 0);
  k.operand_elems = {numel(boxes), numel(scores)};
  k.note = "IoU of " + std::to_string(n) + "^2 box pairs per (batch, class)";
  c.out.push_back(k);
}

}  // namespace

void add_signal_rules(RuleTable& r) {
  r.add("", "DFT", [](LowerCtx& c) { lower_dft(c, false); }, 17);
  r.add("", "DFT", [](LowerCtx& c) { lower_dft(c, true); }, 20);
  r["STFT"] = lower_stft;
  r["Det"] = lower_det;
  r["NonMaxSuppression"] = lower_nms;
  // No GPU kernel exists for these: kept as unknown, with the reason.
  r["StringNormalizer"] = [](LowerCtx& c) { c.unknown("string op: runs on the host; no GPU kernel"); };
  r["RegexFullMatch"] = r["StringNormalizer"];
  r["StringConcat"] = r["StringNormalizer"];
  r["StringSplit"] = r["StringNormalizer"];
  r["TfIdfVectorizer"] = [](LowerCtx& c) {
    c.unknown("n-gram counting op: runs on the host (onnxruntime has only a CPU kernel); no GPU kernel");
  };
  r["Gradient"] = [](LowerCtx& c) {
    c.unknown("training meta-op: a runtime expands it into the backward kernels of its subgraph; no kernel of its own");
  };
}

}  // namespace neusight::lowering_detail
