// attention.cpp - fused attention ops (com.microsoft Attention, MultiHeadAttention,
// GroupQueryAttention, PackedAttention, PackedMultiHeadAttention,
// DecoderMaskedMultiHeadAttention, SparseAttention; opset-23 Attention) to their projection
// GEMM, QK^T and AV BMMs and the softmax between them; recurrent ops (LSTM, GRU, RNN) to
// their GEMMs per step.
#include <algorithm>
#include <cmath>

#include "internal.h"

namespace neusight::lowering_detail {
namespace {

int64_t dim(const TensorInfo* t, size_t i) {
  return t && t->has_shape && i < t->shape.size() && t->shape[i].known() ? t->shape[i].value : -1;
}

// The core of every attention op: S queries attend to L keys in `bh` (batch x heads)
// independent problems. K/V heads shared by several query heads (GQA) are read once.
void emit_attention_core(LowerCtx& c, int64_t bh, int64_t s, int64_t l, int64_t hd, int64_t hd_v,
                         const std::string& note) {
  const DType dt = c.dtype(c.in(0));
  const double eb = element_bytes(dt);
  auto bmm = [&](int64_t m, int64_t n, int64_t k, const std::string& what) {
    Kernel kr = c.base(KernelClass::gemm, "bmm");
    kr.dtype = dt;
    kr.gemm = {bh, m, n, k, true};
    kr.flops = 2.0 * double(bh) * m * n * k;
    kr.bytes = double(bh) * (double(m) * k + double(k) * n + double(m) * n) * eb;
    kr.operand_elems = {bh * m * k, bh * k * n};
    kr.note = note + ": " + what;
    c.out.push_back(kr);
  };
  bmm(s, l, hd, "QK^T");
  Kernel sm = c.base(KernelClass::softmax, "softmax");
  sm.dtype = dt;
  sm.rows = bh * s;
  sm.cols = l;
  sm.flops = 5.0 * double(sm.rows) * double(l);
  sm.bytes = 2.0 * double(sm.rows) * double(l) * eb;
  sm.note = note;
  c.out.push_back(sm);
  bmm(s, hd_v, l, "AV");
}

int64_t scalar_value(const TensorInfo* t) {
  return t && t->int_value && t->int_value->size() == 1 ? (*t->int_value)[0] : -1;
}

// Rotary position embedding applied in the attention kernel's prologue (GroupQueryAttention
// and SparseAttention with do_rotary): one elementwise pass over the rotated Q and K heads
// reading the cos/sin rows of each token.
void emit_fused_rotary(LowerCtx& c, int64_t tokens, int64_t q_heads, int64_t kv_heads, int64_t hd) {
  const int64_t heads = q_heads + kv_heads;
  const DType dt = c.dtype(c.in(0));
  const double eb = element_bytes(dt);
  Kernel k = c.base(KernelClass::elementwise, "rotary");
  k.dtype = dt;
  k.rows = tokens;
  k.cols = heads * hd;
  const double e = double(tokens) * double(heads * hd);
  k.flops = 3 * e;
  k.bytes = 2 * e * eb + double(tokens) * double(hd) * eb;  // + cos and sin, hd / 2 each per token
  k.operand_elems = {static_cast<int64_t>(e)};
  k.note = "rotary embedding of Q and K";
  if (c.opt.serving_kernels && eb == 2) k.access = vllm_rotary_access(q_heads * hd);  // one block per token
  c.out.push_back(k);
}

// KV cache: present = concat(past, new) along the sequence, for K and V.
void emit_kv_concat(LowerCtx& c, const TensorInfo* past_k, const TensorInfo* present_k) {
  if (!past_k || numel(past_k) == 0) return;
  Kernel k = c.base(KernelClass::memory, "concat");
  const double eb = element_bytes(c.dtype(c.in(0)));
  const double present = present_k && present_k->fully_known() ? double(numel(present_k)) : double(numel(past_k));
  k.rows = 1;
  k.cols = static_cast<int64_t>(present);
  k.bytes = 2.0 * (double(numel(past_k)) + present) * eb;  // K and V: read past, write present
  k.note = "KV cache append";
  c.out.push_back(k);
}

// com.microsoft Attention(input, weights, bias, mask_index, past, attention_bias, ...).
void lower_ms_attention(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* w = c.in(1);
  const int64_t heads = c.n.attr_i("num_heads", 0);
  if (!c.all_known({x, w}) || x->shape.size() != 3 || w->shape.size() != 2 || heads <= 0) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t B = x->shape[0].value, S = x->shape[1].value, in_h = x->shape[2].value, out3 = w->shape[1].value;
  auto sizes = c.n.attr_ints("qkv_hidden_sizes");
  const int64_t qh = sizes.size() == 3 ? sizes[0] : out3 / 3, vh = sizes.size() == 3 ? sizes[2] : out3 / 3;
  emit_gemm(c, "linear", {1, B * S, out3, in_h}, double(numel(x)), double(numel(w)), 0, 1, "QKV projection");
  if (const TensorInfo* bias = c.in(2)) {
    c.out.back().epilogue = "bias";
    c.out.back().bytes += double(numel(bias)) * element_bytes(c.out.back().dtype);
  }
  const TensorInfo* past = c.in(4);
  const int64_t P = dim(past, 3) > 0 ? dim(past, 3) : 0;
  emit_kv_concat(c, past, c.outp(1));
  emit_attention_core(c, B * heads, S, P + S, qh / heads, vh / heads, "fused Attention");
}

// com.microsoft MultiHeadAttention(query, key, value, bias, key_padding_mask,
// attention_bias, past_key, past_value, ...).
void lower_mha(LowerCtx& c) {
  const TensorInfo* q = c.in(0);
  const TensorInfo* k = c.in(1);
  const TensorInfo* v = c.in(2);
  const int64_t heads = c.n.attr_i("num_heads", 0);
  if (!c.all_known({q}) || heads <= 0 || q->shape.size() < 3) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t B = q->shape[0].value, S = q->shape[1].value;
  int64_t hd = 0, hd_v = 0, L = 0;
  if (q->shape.size() == 5) {  // packed QKV: (B, S, N, 3, H)
    hd = hd_v = q->shape[4].value;
    L = S;
  } else {
    hd = q->shape[2].value / heads;
    if (k && k->fully_known() && k->shape.size() == 4) {  // (B, N, L, H) already projected/cached
      L = k->shape[2].value;
      hd_v = v && v->fully_known() && v->shape.size() == 4 ? v->shape[3].value : hd;
    } else if (k && k->fully_known() && k->shape.size() == 5) {  // packed KV (B, L, N, 2, H)
      L = k->shape[1].value;
      hd_v = hd;
    } else if (k && k->fully_known()) {
      L = k->shape[1].value;
      hd_v = v && v->fully_known() ? v->shape.back().value / heads : hd;
    } else {
      c.unknown("shapes not inferred");
      return;
    }
    const TensorInfo* past = c.in(6);
    if (past && past->fully_known() && k && k->shape.size() == 3) {
      L += dim(past, 2);
      emit_kv_concat(c, past, c.outp(1));
    }
  }
  emit_attention_core(c, B * heads, S, L, hd, hd_v, "fused MultiHeadAttention");
}

// com.microsoft GroupQueryAttention(query, key, value, past_key, past_value, seqlens_k,
// total_sequence_length, cos_cache, sin_cache, ...).
void lower_gqa(LowerCtx& c) {
  const TensorInfo* q = c.in(0);
  const int64_t heads = c.n.attr_i("num_heads", 0), kv_heads = c.n.attr_i("kv_num_heads", heads);
  if (!c.all_known({q}) || heads <= 0 || kv_heads <= 0 || q->shape.size() != 3) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t B = q->shape[0].value, S = q->shape[1].value;
  const bool packed = !c.in(1);
  const int64_t hd = packed ? q->shape[2].value / (heads + 2 * kv_heads) : q->shape[2].value / heads;
  const TensorInfo* past = c.in(3);
  const TensorInfo* present = c.outp(1);
  int64_t L = dim(present, 2);
  if (L <= 0) L = (dim(past, 2) > 0 ? dim(past, 2) : 0) + S;
  if (c.n.attr_i("do_rotary", 0)) emit_fused_rotary(c, B * S, heads, kv_heads, hd);
  if (flash_attention_applies(c.opt, c.dtype(q))) {  // fused attention: as onnxruntime's flash kernel runs it (causal)
    FlashProblem f{c.dtype(q), B, heads, kv_heads, S, L, hd, hd, true, 0, false, 0.0, "GroupQueryAttention: "};
    // local_window_size: the sliding window (-1: none).
    f.window = std::max<int64_t>(0, c.n.attr_i("local_window_size", -1));
    if (past && numel(past) > 0) {  // a decode step's cache: --kv-dtype's element type
      if (c.opt.kv_cache_dtype != DType::undefined) f.kv_dtype = c.opt.kv_cache_dtype;
      f.appended_bytes = 2.0 * double(B * kv_heads * S * hd) * element_bytes(f.cache_dtype());
    }
    emit_flash_kernel(c, f, c.out);
    return;
  }
  emit_kv_concat(c, past, present);
  emit_attention_core(c, B * heads, S, L, hd, hd, "fused GroupQueryAttention");
}

// ai.onnx Attention (opset 23): Q, K, V as (B, N, S, H) or (B, S, N*H) with
// q_num_heads/kv_num_heads; optional attn_mask, past_key, past_value.
void lower_onnx_attention(LowerCtx& c) {
  const TensorInfo* q = c.in(0);
  const TensorInfo* k = c.in(1);
  const TensorInfo* v = c.in(2);
  if (!c.all_known({q, k, v}) || q->shape.size() < 3) {
    c.unknown("shapes not inferred");
    return;
  }
  int64_t B = q->shape[0].value, N, S, hd, L, hd_v;
  if (q->shape.size() == 4) {
    N = q->shape[1].value;
    S = q->shape[2].value;
    hd = q->shape[3].value;
    L = k->shape.size() == 4 ? k->shape[2].value : k->shape[1].value;
    hd_v = v->shape.size() == 4 ? v->shape[3].value : v->shape[2].value / std::max<int64_t>(c.n.attr_i("kv_num_heads", 1), 1);
  } else {
    N = c.n.attr_i("q_num_heads", 0);
    const int64_t kvn = c.n.attr_i("kv_num_heads", N);
    if (N <= 0 || kvn <= 0) {
      c.unknown("3-D Attention inputs need q_num_heads and kv_num_heads");
      return;
    }
    S = q->shape[1].value;
    hd = q->shape[2].value / N;
    L = k->shape[1].value;
    hd_v = v->shape[2].value / kvn;
  }
  const TensorInfo* past = c.in(4);
  const int64_t total = dim(c.outp(1), 2);
  if (total > 0) L = total;
  else if (dim(past, 2) > 0) L += dim(past, 2);
  emit_kv_concat(c, past, c.outp(1));
  emit_attention_core(c, B * N, S, L, hd, hd_v, "fused Attention");
}

// com.microsoft PackedAttention(input [T, Din], weights [Din, 3D], bias, token_offset [B, S],
// cumulative_sequence_length [B + 1], attention_bias): the QKV projection over the T packed
// tokens (no padding), then attention per sequence of the padded [B, S] layout.
void lower_packed_attention(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* w = c.in(1);
  const TensorInfo* off = c.in(3);
  const int64_t heads = c.n.attr_i("num_heads", 0);
  if (!c.all_known({x, w, off}) || x->shape.size() != 2 || w->shape.size() != 2 || off->shape.size() != 2 ||
      heads <= 0) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t T = x->shape[0].value, din = x->shape[1].value, out3 = w->shape[1].value;
  auto sizes = c.n.attr_ints("qkv_hidden_sizes");
  const int64_t qh = sizes.size() == 3 ? sizes[0] : out3 / 3, vh = sizes.size() == 3 ? sizes[2] : out3 / 3;
  emit_gemm(c, "linear", {1, T, out3, din}, double(numel(x)), double(numel(w)), 0, 1, "QKV projection, packed tokens");
  if (const TensorInfo* bias = c.in(2)) {
    c.out.back().epilogue = "bias";
    c.out.back().bytes += double(numel(bias)) * element_bytes(c.out.back().dtype);
  }
  const int64_t B = off->shape[0].value, S = off->shape[1].value;
  emit_attention_core(c, B * heads, S, S, qh / heads, vh / heads, "fused PackedAttention");
}

// com.microsoft PackedMultiHeadAttention(query [T, D] or packed QKV [T, N, 3, H], key [T, D],
// value [T, Dv], bias, token_offset [B, S], cumulative_sequence_length, attention_bias).
void lower_packed_mha(LowerCtx& c) {
  const TensorInfo* q = c.in(0);
  const TensorInfo* v = c.in(2);
  const TensorInfo* off = c.in(4);
  const int64_t heads = c.n.attr_i("num_heads", 0);
  if (!c.all_known({q, off}) || off->shape.size() != 2 || heads <= 0 ||
      (q->shape.size() != 2 && q->shape.size() != 4)) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t hd = q->shape.size() == 4 ? q->shape[3].value : q->shape[1].value / heads;
  const int64_t hd_v = v && v->fully_known() && v->shape.size() == 2 ? v->shape[1].value / heads : hd;
  emit_attention_core(c, off->shape[0].value * heads, off->shape[1].value, off->shape[1].value, hd, hd_v,
                      "fused PackedMultiHeadAttention");
}

// com.microsoft DecoderMaskedMultiHeadAttention(query [B, S, D], key, value, mask_index,
// attention_bias, past_key [B, N, max_len, H], past_value, past_sequence_length, ...): one
// decoding step. Self-attention appends K/V in place into the past buffers (shared with
// present) and attends to past_sequence_length + S keys; cross-attention reads key/value
// [B, N, L, H] as given.
void lower_dmmha(LowerCtx& c) {
  const TensorInfo* q = c.in(0);
  const TensorInfo* k = c.in(1);
  const TensorInfo* past_k = c.in(5);
  const TensorInfo* past_v = c.in(6);
  const int64_t heads = c.n.attr_i("num_heads", 0);
  if (!c.all_known({q}) || q->shape.size() != 3 || heads <= 0) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t B = q->shape[0].value, S = q->shape[1].value, hd = q->shape[2].value / heads;
  int64_t L = -1, hd_v = hd;
  std::string note = "fused DecoderMaskedMultiHeadAttention";
  if (past_k && past_k->fully_known() && past_k->shape.size() == 4) {
    const int64_t past = scalar_value(c.in(7));
    if (past >= 0) {
      L = past + S;
    } else {
      L = past_k->shape[2].value;
      note += " (past length not known: the whole cache)";
    }
    if (past_v && past_v->fully_known() && past_v->shape.size() == 4) hd_v = past_v->shape[3].value;
  } else if (k && k->fully_known() && k->shape.size() == 4) {
    L = k->shape[2].value;
    const TensorInfo* v = c.in(2);
    if (v && v->fully_known() && v->shape.size() == 4) hd_v = v->shape[3].value;
  } else if (k && k->fully_known() && k->shape.size() == 3) {
    L = k->shape[1].value;
  }
  if (L <= 0) {
    c.unknown("shapes not inferred");
    return;
  }
  emit_attention_core(c, B * heads, S, L, hd, hd_v, note);
}

// com.microsoft SparseAttention(query, key, value, past_key, past_value, block_row_indices
// [layouts, R + 1], block_col_indices [layouts, nnz], total_sequence_length, ...): each query
// attends only to the key blocks of its layout row: on average nnz / R blocks of
// sparse_block_size keys (at most the total length).
void lower_sparse_attention(LowerCtx& c) {
  const TensorInfo* q = c.in(0);
  const TensorInfo* rows = c.in(5);
  const TensorInfo* cols = c.in(6);
  const int64_t n = c.n.attr_i("num_heads", 0), nkv = c.n.attr_i("kv_num_heads", n);
  const int64_t block = c.n.attr_i("sparse_block_size", 0);
  if (!c.all_known({q, rows, cols}) || q->shape.size() != 3 || rows->shape.size() != 2 || cols->shape.size() != 2 ||
      n <= 0 || nkv <= 0 || block <= 0 || rows->shape[1].value < 2) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t B = q->shape[0].value, S = q->shape[1].value;
  const bool packed = !c.in(1);
  const int64_t hd = q->shape[2].value / (packed ? n + 2 * nkv : n);
  int64_t total = scalar_value(c.in(7));
  if (total <= 0) total = dim(c.outp(1), 2);
  if (total <= 0) total = S;
  const double per_row = double(cols->shape[1].value) / double(rows->shape[1].value - 1);
  const int64_t L = std::max<int64_t>(1, std::min<int64_t>(total, static_cast<int64_t>(std::ceil(per_row)) * block));
  if (c.n.attr_i("do_rotary", 0)) emit_fused_rotary(c, B * S, n, nkv, hd);
  emit_attention_core(c, B * n, S, L, hd, hd, "SparseAttention, block-sparse keys");
}

// LSTM / GRU / RNN (X, W, R, B, sequence_lens, initial_h, ...). cuDNN's schedule: one
// GEMM for the input projection of every step, then per step the recurrent GEMM and one
// pointwise gate kernel.
void lower_rnn(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* w = c.in(1);
  const int64_t hidden = c.n.attr_i("hidden_size", -1);
  if (!c.all_known({x, w}) || x->shape.size() != 3 || w->shape.size() != 3 || hidden <= 0) {
    c.unknown("shapes not inferred");
    return;
  }
  const bool batch_first = c.n.attr_i("layout", 0) == 1;
  const int64_t S = x->shape[batch_first ? 1 : 0].value, B = x->shape[batch_first ? 0 : 1].value;
  const int64_t I = x->shape[2].value;
  const int64_t dirs = w->shape[0].value, gates = w->shape[1].value / hidden;
  const std::string cell = c.n.op_type == "LSTM" ? "lstm" : c.n.op_type == "GRU" ? "gru" : "rnn";
  const double gate_ops = cell == "lstm" ? 12 : cell == "gru" ? 10 : 2;  // per hidden unit
  const DType dt = c.dtype(x);
  const double eb = element_bytes(dt);
  for (int64_t d = 0; d < dirs; ++d) {
    const std::string dir = dirs == 2 ? (d == 0 ? "forward " : "reverse ") : "";
    emit_gemm(c, "linear", {1, S * B, gates * hidden, I}, double(S * B * I), double(gates * hidden * I), 0, 1,
              dir + cell + " input projection, all steps");
    for (int64_t t = 0; t < S; ++t) {
      emit_gemm(c, "linear", {1, B, gates * hidden, hidden}, double(B * hidden), double(gates * hidden * hidden), -1, 2,
                dir + cell + " recurrent GEMM");
      c.out.back().steps = t + 1;
      Kernel g = c.base(KernelClass::elementwise, cell + "_cell");
      g.dtype = dt;
      g.rows = B;
      g.cols = gates * hidden;
      g.inputs = 3;
      g.flops = gate_ops * double(B) * double(hidden);
      g.bytes = (2.0 * B * gates * hidden + 3.0 * B * hidden) * eb;
      g.steps = t + 1;
      g.note = dir + "gates";
      c.out.push_back(g);
    }
  }
}

}  // namespace

void add_attention_rules(RuleTable& r) {
  r.add("", "Attention", lower_onnx_attention, 23);
  r["com.microsoft:Attention"] = lower_ms_attention;
  r["com.microsoft:MultiHeadAttention"] = lower_mha;
  r["com.microsoft:GroupQueryAttention"] = lower_gqa;
  r["com.microsoft:PackedAttention"] = lower_packed_attention;
  r["com.microsoft:PackedMultiHeadAttention"] = lower_packed_mha;
  r["com.microsoft:DecoderMaskedMultiHeadAttention"] = lower_dmmha;
  r["com.microsoft:SparseAttention"] = lower_sparse_attention;
  r["LSTM"] = lower_rnn;
  r["GRU"] = lower_rnn;
  r["RNN"] = lower_rnn;
}

}  // namespace neusight::lowering_detail
