// gemm.cpp - matrix-product ops to GEMM kernels: MatMul (broadcast batch dims), Gemm,
// Conv/ConvTranspose as implicit GEMM, Einsum contractions, quantized matmuls.
#include <algorithm>
#include <map>
#include <set>

#include "internal.h"

namespace neusight::lowering_detail {

void emit_gemm(const LowerCtx& c, const std::string& op, GemmShape s, double a_elems, double b_elems, int a_input,
               int b_input, const std::string& note) {
  Kernel kr = c.base(KernelClass::gemm, op);
  kr.dtype = c.dtype(a_input >= 0 ? c.in(static_cast<size_t>(a_input)) : c.in(0));
  kr.gemm = s;
  const Work w = work_of_gemm(s, a_elems, b_elems, element_bytes(kr.dtype));
  kr.flops = w.flops;
  kr.bytes = w.bytes;
  kr.operand_elems = {static_cast<int64_t>(a_elems), static_cast<int64_t>(b_elems)};
  // --dtype fp4 / int8: a GEMM of a weight runs NVFP4 or INT8 W8A8 (lowering.h): both operands
  // narrow, the output in the activations' dtype.
  const TensorInfo* wa = a_input >= 0 ? c.in(static_cast<size_t>(a_input)) : nullptr;
  const TensorInfo* wb = b_input >= 0 ? c.in(static_cast<size_t>(b_input)) : nullptr;
  const DType narrow = c.opt.compute_dtype;
  if (narrow_weight_gemms(narrow) && kr.dtype == activation_dtype(narrow) &&
      ((wa && c.held(static_cast<size_t>(a_input))) || (wb && c.held(static_cast<size_t>(b_input))))) {
    kr.dtype = narrow;
    kr.bytes = narrow_gemm_bytes(a_elems + b_elems, double(s.batch) * s.m * s.n, narrow);
  }
  kr.a_input = a_input;
  kr.b_input = b_input;
  kr.note = note;
  c.out.push_back(kr);
}

void apply_quantized_operands(const LowerCtx& c, Kernel& k, bool matrix_math) {
  const DType qa = k.a_input >= 0 ? c.quantized_operand(static_cast<size_t>(k.a_input)) : DType::undefined;
  const DType qb = k.b_input >= 0 ? c.quantized_operand(static_cast<size_t>(k.b_input)) : DType::undefined;
  if (qa == DType::undefined && qb == DType::undefined) return;
  const double eb = element_bytes(k.dtype);
  const DType q[2] = {qa, qb};
  for (size_t i = 0; i < 2 && i < k.operand_elems.size(); ++i)
    if (q[i] != DType::undefined) k.bytes -= double(k.operand_elems[i]) * (eb - element_bytes(q[i]));
  auto family = [](DType t) {
    if (t == DType::i8 || t == DType::u8) return 1;
    if (is_fp8(t)) return 2;
    return 0;  // 4-bit: dequantized to the activations' precision in the kernel
  };
  std::string what;
  if (family(qa) != 0 && family(qa) == family(qb)) {
    if (matrix_math) k.dtype = family(qa) == 1 ? DType::i8 : qa;
    what = std::string(dtype_name(qa)) + " x " + dtype_name(qb) + " operands (QDQ)";
  } else {
    what = std::string(dtype_name(qb != DType::undefined ? qb : qa)) + (qb != DType::undefined ? " weights" : " input") +
           " dequantized in the kernel (QDQ)";
  }
  k.note = k.note.empty() ? what : k.note + "; " + what;
}

namespace {

// Shared by MatMul-like ops: A[..., m, k] x B[..., k, n] with numpy broadcasting of the
// batch dims. A B operand without (non-unit) batch dims shared by every batch folds the
// batch into m: one linear layer (PyTorch runs x @ W as one GEMM over all rows).
void matmul_like(LowerCtx& c, const std::string& op_hint, int a_in, int b_in) {
  const TensorInfo* a = c.in(static_cast<size_t>(a_in));
  const TensorInfo* b = c.in(static_cast<size_t>(b_in));
  if (!c.all_known({a, b}) || a->shape.empty() || b->shape.empty()) {
    c.unknown("shapes not inferred");
    return;
  }
  const Shape& sa = a->shape;
  const Shape& sb = b->shape;
  const int64_t m = sa.size() >= 2 ? sa[sa.size() - 2].value : 1;
  const int64_t k = sa.back().value;
  const int64_t n = sb.size() >= 2 ? sb.back().value : 1;
  // Broadcast batch dims.
  const size_t ra = sa.size() >= 2 ? sa.size() - 2 : 0, rb = sb.size() >= 2 ? sb.size() - 2 : 0;
  const size_t r = std::max(ra, rb);
  int64_t batch = 1, a_batch = 1, b_batch = 1;
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i + ra >= r ? sa[i + ra - r].value : 1;
    const int64_t db = i + rb >= r ? sb[i + rb - r].value : 1;
    batch *= da == 1 ? db : da;  // broadcasting: 1 takes the other dim (0 too)
    a_batch *= da;
    b_batch *= db;
  }
  const double a_elems = double(numel(a));
  const double b_elems = double(numel(b));
  std::string note;
  GemmShape s;
  std::string op = op_hint;
  if (b_batch == 1 && batch > 1) {
    s = {1, batch * m, n, k};  // weight shared by every row: fold the batch into m
    if (op.empty()) op = "linear";
  } else {
    s = {batch, m, n, k};
    if (op.empty()) op = batch > 1 ? "bmm" : "linear";
    s.batched = gemm_runs_batched(op, batch);
    if (a_batch == 1 && batch > 1) note = "A broadcast over the batch";
  }
  // torch.matmul of 4-D or higher operands folds the batch dims into one for bmm with a
  // reshape, which copies a permuted operand whose batch strides do not nest (q, k and v
  // after `.permute(0, 2, 1, 3)` at batch > 1): a copy kernel first, counted on this node,
  // then the bmm reads the contiguous copy. PyTorch's eager view; not at --fusion full.
  bool copied[2] = {false, false};
  if (c.opt.fusion == Fusion::eager && s.batch > 1)
    for (int j = 0; j < 2; ++j) {
      const size_t i = static_cast<size_t>(j == 0 ? a_in : b_in);
      if (!c.batch_fold_copies(i)) continue;
      copied[j] = true;
      const TensorInfo* t = c.in(i);
      Kernel cp = c.base(KernelClass::memory, "transpose");
      rows_cols(t, cp.rows, cp.cols);
      cp.dtype = c.dtype(t);
      cp.bytes = 2 * tensor_bytes(c, t);
      cp.operand_elems = {numel(t)};
      cp.note = "torch.matmul's reshape copies the permuted operand";
      c.out.push_back(cp);
    }
  emit_gemm(c, op, s, a_elems, b_elems, a_in, b_in, note);
  Kernel& kr = c.out.back();
  kr.trans_a = !copied[0] && c.transposed_view(static_cast<size_t>(a_in));
  kr.trans_b = !copied[1] && c.transposed_view(static_cast<size_t>(b_in));
  apply_quantized_operands(c, kr);
}

void lower_matmul_integer(LowerCtx& c) {
  // Integer GEMM: the dtype is the weights' (int8/uint8); int32 accumulators written out.
  matmul_like(c, "", 0, 1);
  if (c.out.empty() || c.out.back().cls != KernelClass::gemm) return;
  Kernel& k = c.out.back();
  const TensorInfo* b = c.in(1);
  k.dtype = b ? b->dtype : DType::i8;
  const GemmShape& s = k.gemm;
  k.bytes = double(k.operand_elems[0]) * element_bytes(c.in(0)->dtype) + double(k.operand_elems[1]) * element_bytes(k.dtype) +
            double(s.batch) * s.m * s.n * element_bytes(c.outp(0) ? c.outp(0)->dtype : DType::i32);
  k.note = "integer GEMM";
}

void lower_qlinear_matmul(LowerCtx& c) {
  // QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp).
  matmul_like(c, "", 0, 3);
  if (c.out.empty() || c.out.back().cls != KernelClass::gemm) return;
  Kernel& k = c.out.back();
  const TensorInfo* b = c.in(3);
  k.dtype = b ? b->dtype : DType::i8;
  const GemmShape& s = k.gemm;
  k.bytes = (double(k.operand_elems[0]) + double(k.operand_elems[1]) + double(s.batch) * s.m * s.n) * element_bytes(k.dtype);
  k.note = "quantized GEMM";
}

// com.microsoft MatMulNBits(A, B packed [N, blocks, blob], scales, zero_points, ...):
// Y[..., N] = A[..., K] x dequant(B)^T. Weight bytes are the packed bits plus the scales.
void lower_matmul_nbits(LowerCtx& c) {
  const TensorInfo* a = c.in(0);
  const TensorInfo* y = c.outp(0);
  const int64_t K = c.n.attr_i("K", -1), N = c.n.attr_i("N", -1), bits = c.n.attr_i("bits", 4);
  const int64_t block = std::max<int64_t>(c.n.attr_i("block_size", 32), 1);
  if (!c.all_known({a}) || K <= 0 || N <= 0 || a->shape.empty()) {
    c.unknown("shapes not inferred");
    return;
  }
  if (bits < 2 || bits > 8)
    throw InputError("node '" + c.n.name + "' (MatMulNBits): bits must be 2 to 8, got " + std::to_string(bits));
  const int64_t rows = numel(a) / K;
  Kernel kr = c.base(KernelClass::gemm, "linear");
  kr.dtype = bits == 8 ? DType::u8 : DType::u4;
  kr.weight_only = true;
  kr.gemm = {1, rows, N, K};
  kr.flops = 2.0 * double(rows) * double(N) * double(K);
  const double act = element_bytes(c.dtype(a));
  const double weight_bytes = double(N) * K * bits / 8.0 + double(N) * ((K + block - 1) / block) * act;
  kr.bytes = double(numel(a)) * act + weight_bytes + double(rows) * N * element_bytes(c.dtype(y ? y : a));
  kr.operand_elems = {numel(a), N * K};
  kr.a_input = 0;
  kr.b_input = 1;
  kr.note = std::to_string(bits) + "-bit weights, " + std::string(dtype_name(c.dtype(a))) + " activations";
  c.out.push_back(kr);
}

void lower_gemm_op(LowerCtx& c) {
  const TensorInfo* a = c.in(0);
  const TensorInfo* b = c.in(1);
  if (!c.all_known({a, b}) || a->shape.size() != 2 || b->shape.size() != 2) {
    c.unknown("shapes not inferred");
    return;
  }
  const bool ta = c.n.attr_i("transA", 0), tb = c.n.attr_i("transB", 0);
  const int64_t m = a->shape[ta ? 1 : 0].value, k = a->shape[ta ? 0 : 1].value;
  const int64_t n = b->shape[tb ? 0 : 1].value;
  emit_gemm(c, "linear", {1, m, n, k}, double(numel(a)), double(numel(b)), 0, 1);
  Kernel& kr = c.out.back();
  kr.trans_a = ta || c.transposed_view(0);
  kr.trans_b = tb || c.transposed_view(1);
  if (const TensorInfo* bias = c.in(2)) {
    kr.epilogue = "bias";
    kr.note = "bias epilogue";
    kr.bytes += double(numel(bias)) * element_bytes(kr.dtype);
  }
  apply_quantized_operands(c, kr);
}

// Conv / ConvTranspose as implicit GEMM. Depthwise (group == channels, one filter per
// channel) is no GEMM: it is a memory-bound stencil, lowered as an elementwise kernel with
// R*S multiply-adds per output.
void lower_conv(LowerCtx& c) {
  const bool transposed = c.n.op_type == "ConvTranspose";
  const bool integer = c.n.op_type == "ConvInteger" || c.n.op_type == "QLinearConv";
  const size_t xi = 0, wi = c.n.op_type == "QLinearConv" ? 3 : 1;
  const TensorInfo* x = c.in(xi);
  const TensorInfo* w = c.in(wi);
  const TensorInfo* y = c.outp(0);
  if (!c.all_known({x, w, y}) || y->shape.size() < 3 || x->shape.size() < 3) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t group = std::max<int64_t>(1, c.n.attr_i("group", 1));
  const int64_t nb = y->shape[0].value;
  int64_t spatial_out = 1, spatial_in = 1, ksz = 1;
  for (size_t i = 2; i < y->shape.size(); ++i) spatial_out *= y->shape[i].value;
  for (size_t i = 2; i < x->shape.size(); ++i) spatial_in *= x->shape[i].value;
  for (size_t i = 2; i < w->shape.size(); ++i) ksz *= w->shape[i].value;
  const int64_t cin = x->shape[1].value, cout = y->shape[1].value;
  const DType dt = integer ? w->dtype : c.dtype(x);
  const double eb = element_bytes(dt);
  if (!transposed && group > 1 && group == cin && cout % cin == 0 && cout / cin <= 4) {
    Kernel k = c.base(KernelClass::elementwise, "depthwise_conv");
    k.dtype = dt;
    rows_cols(y, k.rows, k.cols);
    k.inputs = 2;
    k.flops = 2.0 * double(numel(y)) * double(ksz);
    k.bytes = (double(numel(x)) + double(numel(w)) + double(numel(y)) + double(numel(c.in(2)))) * eb;
    k.operand_elems = {numel(x), numel(w)};
    k.note = "depthwise: memory-bound stencil, " + std::to_string(ksz) + " taps";
    if (!integer) {
      k.a_input = static_cast<int>(xi);
      k.b_input = static_cast<int>(wi);
      apply_quantized_operands(c, k, /*matrix_math=*/false);  // a stencil on the SIMT units
    }
    c.out.push_back(k);
    return;
  }
  GemmShape s;
  std::string note;
  if (transposed) {
    // The adjoint of a conv: M over input pixels, N = Cout/group * R*S, K = Cin/group.
    s = {group, nb * spatial_in, cout / group * ksz, cin / group};
    note = "implicit GEMM (transposed)";
  } else {
    // M = N*P*Q, N = Cout/group, K = Cin/group * R*S; one GEMM per group.
    s = {group, nb * spatial_out, cout / group, cin / group * ksz};
    note = group > 1 ? "grouped implicit GEMM" : "implicit GEMM";
  }
  emit_gemm(c, "conv", s, double(numel(x)), double(numel(w)), static_cast<int>(xi), static_cast<int>(wi), note);
  Kernel& kr = c.out.back();
  // --dtype int8 / fp8 in inference: a convolution of a weight runs on the narrow matrix units
  // as TensorRT's INT8 and FP8 engines run it (its image and weights narrow, the output in the
  // activations' dtype; emit_gemm narrowed it). FP4 and training keep convolutions 16-bit
  // (NVFP4 and Transformer Engine's FP8 recipes quantize linear layers).
  const DType narrow = c.opt.compute_dtype;
  const bool narrowed = !integer && kr.dtype == narrow && (narrow == DType::i8 || is_fp8(narrow)) &&
                        c.opt.mode == Mode::inference;
  kr.dtype = narrowed ? narrow : dt;
  kr.bytes = narrowed ? narrow_gemm_bytes(double(numel(x)) + double(numel(w)), double(numel(y)), narrow)
                      : (double(numel(x)) + double(numel(w)) + double(numel(y))) * eb;
  if (!integer) {
    if (const TensorInfo* bias = c.in(2)) {
      kr.epilogue = "bias";
      kr.bytes += double(numel(bias)) * eb;
    }
    apply_quantized_operands(c, kr);
  }
}

bool has_label(const std::string& s, char ch) { return s.find(ch) != std::string::npos; }
std::set<char> distinct(const std::string& s) { return std::set<char>(s.begin(), s.end()); }

// Parses an einsum equation into one label string per operand and the output's, "..."
// expanded to fresh labels (the implicit output: the ellipsis dims, then the letters seen
// once, sorted). False, after an unknown kernel saying why, when it cannot be lowered.
bool einsum_labels(LowerCtx& c, const std::string& eq, std::vector<std::string>& ins, std::string& outs) {
  const auto arrow = eq.find("->");
  std::string lhs = arrow == std::string::npos ? eq : eq.substr(0, arrow);
  outs = arrow == std::string::npos ? "" : eq.substr(arrow + 2);
  for (size_t p = 0;;) {
    const size_t q = lhs.find(',', p);
    ins.push_back(lhs.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  if (ins.size() != c.n.inputs.size() || ins.size() > 2 || ins.empty()) {
    c.unknown("einsum '" + eq + "' not supported (more than two operands)");
    return false;
  }
  for (size_t i = 0; i < ins.size(); ++i)
    if (!c.all_known({c.in(i)})) {
      c.unknown("shapes not inferred");
      return false;
    }
  // Implicit output: the ellipsis dims, then the letters seen once, sorted.
  if (arrow == std::string::npos) {
    std::map<char, int> cnt;
    for (const auto& s : ins)
      for (char ch : s)
        if (ch != '.') ++cnt[ch];
    outs = lhs.find("...") != std::string::npos ? "..." : "";
    for (const auto& [ch, n] : cnt)
      if (n == 1) outs += ch;
  }
  // Expand "...": operand i covers rank_i - letters_i dims, the last ones of the K fresh labels.
  const std::string pool = "0123456789!#$%&*+/:;<=>?@^_|~";
  std::string fresh;
  for (char ch : pool)
    if (eq.find(ch) == std::string::npos) fresh += ch;
  std::vector<size_t> ell(ins.size(), 0);
  size_t kmax = 0;
  for (size_t i = 0; i < ins.size(); ++i) {
    const size_t dots = ins[i].find("...");
    const size_t letters = ins[i].size() - (dots == std::string::npos ? 0 : 3);
    const size_t rank = c.in(i)->shape.size();
    if (dots == std::string::npos) {
      if (rank != letters) {
        c.unknown("einsum '" + eq + "': operand " + std::to_string(i) + " rank does not match its labels");
        return false;
      }
      continue;
    }
    if (rank < letters) {
      c.unknown("einsum '" + eq + "': operand " + std::to_string(i) + " rank does not match its labels");
      return false;
    }
    ell[i] = rank - letters;
    kmax = std::max(kmax, ell[i]);
  }
  if (kmax > fresh.size()) {
    c.unknown("einsum '" + eq + "': too many ellipsis dims");
    return false;
  }
  for (size_t i = 0; i < ins.size(); ++i) {
    const size_t dots = ins[i].find("...");
    if (dots != std::string::npos) ins[i].replace(dots, 3, fresh.substr(kmax - ell[i], ell[i]));
  }
  if (const size_t dots = outs.find("..."); dots != std::string::npos) outs.replace(dots, 3, fresh.substr(0, kmax));
  return true;
}

// One operand: a permutation or diagonal (memory), or a reduction of the distinct elements read.
void lower_einsum_single(LowerCtx& c, const std::string& in, const std::string& outs,
                         std::map<char, int64_t>& size) {
  const std::set<char> in_set = distinct(in);
  const bool diagonal = in_set.size() < in.size();
  double reads = 1;  // the distinct elements the operand contributes (the diagonal only)
  for (char ch : in_set) reads *= double(size[ch]);
  const double eb = element_bytes(c.dtype(c.in(0)));
  if (distinct(outs).size() == in_set.size()) {
    Kernel k = c.base(KernelClass::memory, diagonal ? "diagonal" : "transpose");
    rows_cols(c.outp(0), k.rows, k.cols);
    k.bytes = 2.0 * reads * eb;
    k.note = diagonal ? "einsum diagonal" : "einsum permutation";
    c.out.push_back(k);
  } else {
    Kernel k = c.base(KernelClass::reduce, "reduce_sum");
    k.rows = std::max<int64_t>(numel(c.outp(0)), 1);
    k.cols = static_cast<int64_t>(reads) / k.rows;
    k.flops = reads;
    k.bytes = (reads + double(k.rows)) * eb;
    k.note = diagonal ? "einsum reduction of a diagonal" : "einsum reduction";
    c.out.push_back(k);
  }
}

// Einsum with one or two operands. "..." stands for the operand's leading dims beyond its
// letters; they are named with fresh labels, right-aligned across operands (numpy
// broadcasting), and lead the output. Two operands: letters in both inputs and the output
// are batch, in both inputs only are contracted, in one input and the output are that
// side's free dims -> one (batched) GEMM. One operand: a permutation (memory), a diagonal
// (a letter repeated in the operand: a strided gather of the diagonal elements, memory) or
// a reduction of the distinct elements it reads.
void lower_einsum(LowerCtx& c) {
  std::string eq = c.n.attr_s("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  std::vector<std::string> ins;
  std::string outs;
  if (!einsum_labels(c, eq, ins, outs)) return;
  std::map<char, int64_t> size;
  for (size_t i = 0; i < ins.size(); ++i) {
    const TensorInfo* t = c.in(i);
    for (size_t d = 0; d < ins[i].size(); ++d) size[ins[i][d]] = std::max(size[ins[i][d]], t->shape[d].value);
  }
  if (ins.size() == 1) {
    lower_einsum_single(c, ins[0], outs, size);
    return;
  }
  for (const auto& s : ins)
    if (distinct(s).size() < s.size()) {
      c.unknown("einsum '" + eq + "': a diagonal (repeated label) inside a product is not supported");
      return;
    }
  int64_t batch = 1, m = 1, n = 1, k = 1;
  for (const auto& [ch, sz] : size) {
    const bool a = has_label(ins[0], ch), b = has_label(ins[1], ch), o = has_label(outs, ch);
    if (a && b && o) batch *= sz;
    else if (a && b) k *= sz;
    else if (a && o) m *= sz;
    else if (b && o) n *= sz;
    // a letter summed away inside one operand only is a reduction folded into the read
  }
  GemmShape s = {batch, m, n, k};
  s.batched = batch > 1;
  emit_gemm(c, batch > 1 ? "bmm" : "linear", s, double(numel(c.in(0))), double(numel(c.in(1))), 0, 1,
            "einsum " + eq);
}

}  // namespace

void emit_matmul(LowerCtx& c) { matmul_like(c, "", 0, 1); }

void add_gemm_rules(RuleTable& r) {
  r["MatMul"] = emit_matmul;
  r["com.microsoft:FusedMatMul"] = emit_matmul;  // com.microsoft: MatMul with transposes and alpha
  r["MatMulInteger"] = lower_matmul_integer;
  r["com.microsoft:MatMulIntegerToFloat"] = lower_matmul_integer;
  r["com.microsoft:DynamicQuantizeMatMul"] = lower_matmul_integer;
  r["QLinearMatMul"] = lower_qlinear_matmul;
  r["com.microsoft:MatMulNBits"] = lower_matmul_nbits;
  r["Gemm"] = lower_gemm_op;
  r["Conv"] = lower_conv;
  r["ConvTranspose"] = lower_conv;
  r["ConvInteger"] = lower_conv;
  r["QLinearConv"] = lower_conv;
  r["Einsum"] = lower_einsum;
}

}  // namespace neusight::lowering_detail
