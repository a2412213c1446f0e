// rules_contrib.cpp - shape rules for the com.microsoft ops that onnxruntime's transformer
// optimizer emits (fused attention, fused normalizations, fused activations, 4-bit MatMul).
#include <algorithm>
#include <functional>

#include "rules.h"

namespace neusight::shape_rules {
namespace {

const char* const kMs = "com.microsoft:";
std::string ms_op(const char* op) { return std::string(kMs) + op; }

void like_input(Ctx& c, size_t out, size_t in, DType dt = DType::undefined) {
  const TensorInfo* x = c.in(in);
  if (!x) return;
  if (x->has_shape) set_out(c, out, dt == DType::undefined ? x->dtype : dt, x->shape);
  else set_dtype(c, out, dt == DType::undefined ? x->dtype : dt);
}

Dim add(const Dim& a, const Dim& b) { return a.known() && b.known() ? Dim::of(a.value + b.value) : Dim{}; }
Dim div(const Dim& a, int64_t b) { return a.known() && b > 0 ? Dim::of(a.value / b) : Dim{}; }
Dim mul(const Dim& a, int64_t b, const Ctx& c) { return a.known() && b >= 0 ? Dim::of(checked_mul(a.value, b, c.where())) : Dim{}; }
const Dim& dim_or(const TensorInfo* t, size_t i, const Dim& fallback) {
  return t && t->has_shape && i < t->shape.size() ? t->shape[i] : fallback;
}

// Attention: input [B, S, Din], weights [Din, 3*D] (or qkv_hidden_sizes), past [2, B, N, P, H].
// Outputs: output [B, S, Dv], present [2, B, N, P+S, H].
void rule_attention(Ctx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* w = c.in(1);
  if (!x) return;
  if (!x->has_shape || x->shape.size() != 3) { for (size_t i = 0; i < c.num_out(); ++i) set_dtype(c, i, x->dtype); return; }
  const int64_t heads = c.n.attr_i("num_heads", 0);
  std::vector<int64_t> qkv = c.n.attr_ints("qkv_hidden_sizes");
  Dim dq{}, dv{};
  if (qkv.size() == 3) { dq = Dim::of(qkv[0]); dv = Dim::of(qkv[2]); }
  else if (w && w->has_shape && w->shape.size() == 2) { dq = div(w->shape[1], 3); dv = dq; }
  set_out(c, 0, x->dtype, {x->shape[0], x->shape[1], dv});
  if (c.num_out() > 1) {
    const TensorInfo* past = c.in(4);
    const Dim unknown{};
    Dim total = x->shape[1];
    if (past) total = add(dim_or(past, 3, unknown), x->shape[1]);
    const Dim h = div(dv, heads);
    set_out(c, 1, x->dtype, {Dim::of(2), x->shape[0], heads > 0 ? Dim::of(heads) : Dim{}, total, h});
  }
}

// MultiHeadAttention: query [B, S, D] (packed QKV [B, S, N, 3, H]), key [B, L, D] or
// [B, N, L, H], value likewise; past_key/past_value [B, N, P, H] (inputs 6, 7).
void rule_mha(Ctx& c) {
  const TensorInfo* q = c.in(0);
  if (!q) return;
  const int64_t heads = c.n.attr_i("num_heads", 0);
  if (!q->has_shape) { for (size_t i = 0; i < c.num_out(); ++i) set_dtype(c, i, q->dtype); return; }
  const TensorInfo* k = c.in(1);
  const TensorInfo* v = c.in(2);
  const Dim b = q->shape.empty() ? Dim{} : q->shape[0];
  const Dim s = q->shape.size() > 1 ? q->shape[1] : Dim{};
  Dim dv{}, hv{}, kv_len{};
  if (q->shape.size() == 5) {  // packed QKV
    hv = q->shape[4];
    dv = mul(hv, heads, c);
    kv_len = s;
  } else if (v && v->has_shape && v->shape.size() == 3) {
    dv = v->shape[2];
    hv = div(dv, heads);
    kv_len = v->shape[1];
  } else if (v && v->has_shape && v->shape.size() == 4) {
    hv = v->shape[3];
    dv = mul(hv, heads, c);
    kv_len = v->shape[2];
  } else if (k && k->has_shape && k->shape.size() == 5) {  // packed KV [B, L, N, 2, H]
    hv = k->shape[4];
    dv = mul(hv, heads, c);
    kv_len = k->shape[1];
  } else if (q->shape.size() == 3 && !k) {
    dv = q->shape[2];
    hv = div(dv, heads);
    kv_len = s;
  }
  set_out(c, 0, q->dtype, {b, s, dv});
  const TensorInfo* past_k = c.in(6);
  Dim total = kv_len;
  const bool kv_is_past = v && v->has_shape && v->shape.size() == 4;  // cross attention with cached K/V
  if (past_k && !kv_is_past) total = add(dim_or(past_k, 2, Dim{}), kv_len);
  Dim hk = hv;
  if (k && k->has_shape && k->shape.size() == 3 && q->shape.size() == 3) hk = div(q->shape[2], heads);
  const Dim n = heads > 0 ? Dim::of(heads) : Dim{};
  if (c.num_out() > 1) set_out(c, 1, q->dtype, {b, n, total, hk});
  if (c.num_out() > 2) set_out(c, 2, q->dtype, {b, n, total, hv});
}

// GroupQueryAttention: query [B, S, N*H] (or packed [B, S, (N + 2*Nkv)*H] without key/value),
// past_key/past_value [B, Nkv, P, H]; total_sequence_length (input 6) a scalar.
// The KV-cache attentions' common part (GroupQueryAttention, SparseAttention): output 0
// [B, S, N*H] from the query (packed [B, S, (N + 2 Nkv) H] when key is absent), present_key /
// present_value [B, Nkv, T, H] with T from `total_length(query, past)`. A query of unknown shape
// sets the dtypes only.
void kv_cache_attention(Ctx& c, const std::function<Dim(const TensorInfo& q, const TensorInfo* past)>& total_length) {
  const TensorInfo* q = c.in(0);
  if (!q) return;
  const int64_t n = c.n.attr_i("num_heads", 0), nkv = c.n.attr_i("kv_num_heads", 0);
  if (!q->has_shape || q->shape.size() != 3) { for (size_t i = 0; i < c.num_out(); ++i) set_dtype(c, i, q->dtype); return; }
  const bool packed = !c.has_in(1);
  const Dim h = div(q->shape[2], packed ? n + 2 * nkv : n);
  set_out(c, 0, q->dtype, {q->shape[0], q->shape[1], mul(h, n, c)});
  const TensorInfo* past = c.in(3);
  const Dim total = total_length(*q, past && past->has_shape && past->shape.size() == 4 ? past : nullptr);
  const Dim kvn = nkv > 0 ? Dim::of(nkv) : Dim{};
  for (size_t o = 1; o < 3 && o < c.num_out(); ++o) set_out(c, o, q->dtype, {q->shape[0], kvn, total, h});
}

// A scalar input's value as a dim, unknown when absent.
Dim scalar_dim(Ctx& c, size_t input) {
  const auto* v = c.value(input);
  return v && v->size() == 1 ? Dim::of((*v)[0]) : Dim{};
}

void rule_gqa(Ctx& c) {
  // total_sequence_length (input 6), else past + new tokens, else the query's length.
  kv_cache_attention(c, [&](const TensorInfo& q, const TensorInfo* past) {
    Dim total = scalar_dim(c, 6);
    if (past) {
      const Dim& p = past->shape[2];
      if (total.known() && p.known()) total = Dim::of(std::max(total.value, p.value));
      else if (!total.known()) total = p.known() && q.shape[1].known() && q.shape[1].value > 1 ? add(p, q.shape[1]) : p;
    } else if (!total.known()) {
      total = q.shape[1];
    }
    return total;
  });
}

// Skip(Simplified)LayerNormalization: output and input_skip_bias_sum like input; mean and
// inv_std_var (float) reduced over the last axis.
void rule_skip_layernorm(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  like_input(c, 0, 0);
  Shape red = x->shape;
  if (!red.empty()) red.back() = Dim::of(1);
  constexpr size_t kSumOut = 3;  // input_skip_bias_sum, in both ops
  for (size_t o = 1; o < c.num_out(); ++o) {
    if (o == kSumOut) like_input(c, o, 0);
    else if (x->has_shape) set_out(c, o, DType::f32, red);
    else set_dtype(c, o, DType::f32);
  }
}

// EmbedLayerNormalization: input_ids [B, S], word_embedding [V, H] -> output [B, S, H],
// mask_index [B] (int32), embedding_sum [B, S, H].
void rule_embed_layernorm(Ctx& c) {
  const TensorInfo* ids = c.in(0);
  const TensorInfo* word = c.in(2);
  const DType dt = word ? word->dtype : DType::f32;
  Dim b{}, s{}, h{};
  if (ids && ids->has_shape && ids->shape.size() == 2) { b = ids->shape[0]; s = ids->shape[1]; }
  if (word && word->has_shape && word->shape.size() == 2) h = word->shape[1];
  set_out(c, 0, dt, {b, s, h});
  if (c.num_out() > 1) set_out(c, 1, DType::i32, {b});
  if (c.num_out() > 2) set_out(c, 2, dt, {b, s, h});
}

// MatMulNBits: A [..., K] x quantized B (attributes K, N) -> [..., N].
void rule_matmul_nbits(Ctx& c) {
  const TensorInfo* a = c.in(0);
  if (!a) return;
  const int64_t n = c.n.attr_i("N", -1);
  if (!a->has_shape || a->shape.empty()) { set_dtype(c, 0, a->dtype); return; }
  Shape s = a->shape;
  s.back() = n >= 0 ? Dim::of(n) : Dim{};
  set_out(c, 0, a->dtype, s);
}

// FusedMatMul: MatMul with optional transposes of the last two axes of A and B.
void rule_fused_matmul(Ctx& c) {
  const TensorInfo* a = c.in(0);
  const TensorInfo* b = c.in(1);
  if (!a || !b) return;
  if (!a->has_shape || !b->has_shape || a->shape.size() < 2 || b->shape.size() < 2) { set_dtype(c, 0, a->dtype); return; }
  TensorInfo ta = *a, tb = *b;
  if (c.n.attr_i("transA", 0)) std::swap(ta.shape[ta.shape.size() - 1], ta.shape[ta.shape.size() - 2]);
  if (c.n.attr_i("transB", 0)) std::swap(tb.shape[tb.shape.size() - 1], tb.shape[tb.shape.size() - 2]);
  Graph scratch;
  scratch.tensors["a"] = ta;
  scratch.tensors["b"] = tb;
  Node n = c.n;
  n.op_type = "MatMul";
  n.inputs = {"a", "b"};
  n.outputs = {"y"};
  Ctx c2{scratch, c.model, n, c.result, nullptr, c.depth};
  rule_matmul(c2);
  const TensorInfo* y = scratch.find("y");
  if (y && y->has_shape) set_out(c, 0, a->dtype, y->shape);
  else set_dtype(c, 0, a->dtype);
}

// RotaryEmbedding (contrib): output like input.
void rule_first_input(Ctx& c) { like_input(c, 0, 0); }

// BiasSplitGelu: [B, HW, 2D] -> [B, HW, D].
void rule_bias_split_gelu(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  if (!x->has_shape || x->shape.empty()) { set_dtype(c, 0, x->dtype); return; }
  Shape s = x->shape;
  s.back() = div(s.back(), 2);
  set_out(c, 0, x->dtype, s);
}

// PackedAttention: input [T, Din], weights [Din, 3D] (or qkv_hidden_sizes) -> [T, Dv].
void rule_packed_attention(Ctx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* w = c.in(1);
  if (!x) return;
  if (!x->has_shape || x->shape.size() != 2) { set_dtype(c, 0, x->dtype); return; }
  std::vector<int64_t> qkv = c.n.attr_ints("qkv_hidden_sizes");
  Dim dv{};
  if (qkv.size() == 3) dv = Dim::of(qkv[2]);
  else if (w && w->has_shape && w->shape.size() == 2) dv = div(w->shape[1], 3);
  set_out(c, 0, x->dtype, {x->shape[0], dv});
}

// PackedMultiHeadAttention: query [T, D] (packed QKV [T, N, 3, H]), value [T, Dv] -> [T, Dv].
void rule_packed_mha(Ctx& c) {
  const TensorInfo* q = c.in(0);
  const TensorInfo* v = c.in(2);
  if (!q) return;
  const int64_t heads = c.n.attr_i("num_heads", 0);
  if (!q->has_shape || (q->shape.size() != 2 && q->shape.size() != 4)) { set_dtype(c, 0, q->dtype); return; }
  Dim dv = q->shape.size() == 4 ? mul(q->shape[3], heads, c) : q->shape[1];
  if (q->shape.size() == 2 && v && v->has_shape && v->shape.size() == 2) dv = v->shape[1];
  set_out(c, 0, q->dtype, {q->shape[0], dv});
}

// DecoderMaskedMultiHeadAttention: query [B, S, D] -> output [B, S, Dv]; present_key /
// present_value share the past buffers (inputs 5, 6: [B, N, max_len, H]).
void rule_dmmha(Ctx& c) {
  const TensorInfo* q = c.in(0);
  if (!q) return;
  if (!q->has_shape || q->shape.size() != 3) { for (size_t i = 0; i < c.num_out(); ++i) set_dtype(c, i, q->dtype); return; }
  const TensorInfo* v = c.in(2);
  const TensorInfo* past_v = c.in(6);
  const int64_t heads = c.n.attr_i("num_heads", 0);
  Dim dv = q->shape[2];
  if (past_v && past_v->has_shape && past_v->shape.size() == 4) dv = mul(past_v->shape[3], heads, c);
  else if (v && v->has_shape && v->shape.size() == 4) dv = mul(v->shape[3], heads, c);
  else if (v && v->has_shape && v->shape.size() == 3) dv = v->shape[2];
  set_out(c, 0, q->dtype, {q->shape[0], q->shape[1], dv});
  for (size_t o = 1; o < 3 && o < c.num_out(); ++o)
    if (c.in(4 + o)) like_input(c, o, 4 + o);
}

// SparseAttention: query [B, S, N*H] (packed [B, S, (N + 2 Nkv) H]) -> [B, S, N*H];
// present_key / present_value [B, Nkv, max(past length, total_sequence_length), H].
void rule_sparse_attention(Ctx& c) {
  // max(past length, total_sequence_length (input 7)); the past's length when either is unknown.
  kv_cache_attention(c, [&](const TensorInfo&, const TensorInfo* past) {
    const Dim total = scalar_dim(c, 7);
    if (!past) return total;
    const Dim& p = past->shape[2];
    return total.known() && p.known() ? Dim::of(std::max(total.value, p.value)) : p;
  });
}

// GatherBlockQuantized: a Gather along gather_axis of data's logical shape (a uint8 holding
// 8 / bits quantized values widens its last dim) -> the scales' dtype.
void rule_gather_block_quantized(Ctx& c) {
  const TensorInfo* data = c.in(0);
  const TensorInfo* idx = c.in(1);
  const TensorInfo* scales = c.in(2);
  if (!data) return;
  const DType dt = scales ? scales->dtype : DType::f32;
  if (!data->has_shape || !idx || !idx->has_shape || data->shape.empty()) { set_dtype(c, 0, dt); return; }
  Shape logical = data->shape;
  const int64_t bits = c.n.attr_i("bits", 4);
  if (data->dtype == DType::u8 && bits > 0 && bits < 8) logical.back() = mul(logical.back(), 8 / bits, c);
  const int64_t axis = norm_axis(c.n.attr_i("gather_axis", 0), static_cast<int64_t>(logical.size()), c);
  Shape out(logical.begin(), logical.begin() + axis);
  out.insert(out.end(), idx->shape.begin(), idx->shape.end());
  out.insert(out.end(), logical.begin() + axis + 1, logical.end());
  set_out(c, 0, dt, out);
}

// A recurrent scan of the ai.neusight domain: output 0 like input `heads_in` ([b, L, heads, d]),
// output 1 (the final state) [b, heads, rows_in's last dim, cols_in's last dim], all three 4-D.
void rule_recurrent_scan(Ctx& c, size_t heads_in, size_t rows_in, size_t cols_in) {
  const TensorInfo* x = c.in(heads_in);
  const TensorInfo* r = c.in(rows_in);
  const TensorInfo* k = c.in(cols_in);
  if (!x) return;
  like_input(c, 0, heads_in);
  if (c.num_out() < 2) return;
  for (const TensorInfo* t : {x, r, k})
    if (!t || !t->has_shape || t->shape.size() != 4) {
      set_dtype(c, 1, x->dtype);
      return;
    }
  set_out(c, 1, x->dtype, {x->shape[0], x->shape[2], r->shape[3], k->shape[3]});
}

// ai.neusight StateSpaceScan (Mamba-2's chunked scan): X [b, L, heads, head_dim], dt [b, L,
// heads], A [heads], B and C [b, L, groups, state], D, dt_bias [heads], initial state [b,
// heads, head_dim, state]. Outputs: Y like X; the final state [b, heads, head_dim, state].
void rule_state_space_scan(Ctx& c) { rule_recurrent_scan(c, 0, 0, 3); }

// ai.neusight CausalConv1d(x [b, L, channels], weight [channels, kernel], bias, state [b,
// channels, kernel - 1]) -> y like x, the new state like the state.
void rule_causal_conv1d(Ctx& c) {
  like_input(c, 0, 0);
  if (c.num_out() > 1) like_input(c, 1, 3);
}

// ai.neusight GatedDeltaRule(q, k [b, L, heads, key_dim], v [b, L, heads, value_dim], g, beta
// [b, L, heads], initial state [b, heads, key_dim, value_dim]) -> output like v, the final
// state [b, heads, key_dim, value_dim].
void rule_gated_delta_rule(Ctx& c) { rule_recurrent_scan(c, 2, 1, 2); }

}  // namespace

void add_contrib_rules(RuleTable& t) {
  t["ai.neusight:StateSpaceScan"] = rule_state_space_scan;
  t["ai.neusight:GatedDeltaRule"] = rule_gated_delta_rule;
  t["ai.neusight:CausalConv1d"] = rule_causal_conv1d;
  t["ai.neusight:GatedRMSNorm"] = rule_first_input;
  t[ms_op("PackedAttention")] = rule_packed_attention;
  t[ms_op("PackedMultiHeadAttention")] = rule_packed_mha;
  t[ms_op("SparseAttention")] = rule_sparse_attention;
  t[ms_op("GatherBlockQuantized")] = rule_gather_block_quantized;
  t[ms_op("MoE")] = rule_first_input;
  t[ms_op("QMoE")] = rule_first_input;
  const std::string ms = kMs;
  t[ms + "Attention"] = rule_attention;
  t[ms + "MultiHeadAttention"] = rule_mha;
  t[ms + "DecoderMaskedMultiHeadAttention"] = rule_dmmha;
  t[ms + "GroupQueryAttention"] = rule_gqa;
  t[ms + "SkipLayerNormalization"] = rule_skip_layernorm;
  t[ms + "SkipSimplifiedLayerNormalization"] = rule_skip_layernorm;
  t[ms + "EmbedLayerNormalization"] = rule_embed_layernorm;
  t[ms + "MatMulNBits"] = rule_matmul_nbits;
  t[ms + "FusedMatMul"] = rule_fused_matmul;
  t[ms + "RotaryEmbedding"] = rule_first_input;
  t[ms + "BiasSplitGelu"] = rule_bias_split_gelu;
  for (const char* op : {"FastGelu", "BiasGelu", "Gelu", "QuickGelu", "BiasAdd", "BiasDropout", "BiasSoftmax",
                         "SkipGroupNorm", "GroupNorm"})
    t[ms + op] = rule_first_input;
  t[ms + "GemmFastGelu"] = rule_matmul;
  t[ms + "MatMulIntegerToFloat"] = [](Ctx& c) {
    rule_matmul(c);
    const TensorInfo* s = c.in(2);
    set_dtype(c, 0, s ? s->dtype : DType::f32);
  };
  t[ms + "DynamicQuantizeMatMul"] = [](Ctx& c) {
    rule_matmul(c);
    set_dtype(c, 0, DType::f32);
  };
}

}  // namespace neusight::shape_rules
