// llama.cpp - Llama-style decoders (Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen2/3-MoE,
// gpt-oss, Gemma 1-3; with LayerNorms and a dense MLP Phi, GPT-NeoX, GPT-J, Falcon and
// StarCoder2): RMSNorm, rotary embedding, SwiGLU MLP (a top-k mixture of SwiGLU experts in the
// MoE families), grouped-query attention (Qwen3: each query and key head RMS-normalised;
// sliding-window layers where the config has them), as HF's eager modelling code runs them.
#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "common.h"
#include "families.h"

namespace neusight::builder {

namespace {

// The rotated dims of a head: Phi's partial_rotary_factor of it (even), all of it otherwise.
int64_t rotary_dims(const ModelConfig& c) {
  if (c.rotary_fraction >= 1) return c.head_dim;
  return std::max<int64_t>(2, static_cast<int64_t>(double(c.head_dim) * c.rotary_fraction) / 2 * 2);
}

// Rotary on the first `rd` of `hd` dims, the rest passed through (Phi: q_rot, q_pass, cat).
std::string partial_rotary(Net& n, const std::string& p, const std::string& x, int64_t hd, int64_t rd,
                           const std::string& cos, const std::string& sin) {
  if (rd >= hd) return rotate_half_embedding(n, p, x, hd, cos, sin);
  const std::string ax = n.b.ints(p + "/part_axis", {3});
  const std::string rot = n.b.node("Slice", p + "/x_rot", {x, n.b.ints(p + "/r0", {0}), n.b.ints(p + "/r1", {rd}), ax});
  const std::string pass = n.b.node("Slice", p + "/x_pass", {x, n.b.ints(p + "/p0", {rd}), n.b.ints(p + "/p1", {hd}), ax});
  const std::string y = n.b.node("Concat", p + "/Concat_pass", {rotate_half_embedding(n, p, rot, rd, cos, sin), pass});
  n.b.attr_i("axis", -1);
  return y;
}

// A decoder norm: RMSNorm, or Phi's LayerNorm (with bias unless norm_bias says not).
std::string norm(Net& n, const ModelConfig& c, const std::string& p, const std::string& x) {
  return c.layer_norm ? layer_norm(n, p, x, c.hidden, c.layer_norm_eps, c.norm_bias)
                      : rms_norm(n, p, x, c.hidden, c.layer_norm_eps);
}

// ALiBi's bias [batch, heads, 1, keys] (HF build_alibi_tensor): the positions from the
// attention mask's cumulative sum, ((mask.cumsum(-1) - 1) * mask), times each head's slope.
// `total` is the 1-element key length.
std::string alibi_bias(Net& n, const ModelConfig& c, const std::string& p, const std::string& total) {
  const std::string bk = n.b.node("Concat", p + "/mask_shape", {n.batch, total});
  n.b.attr_i("axis", 0);
  const std::string mask = fill(n, p + "/attention_mask", bk, kF32, 1.0);
  std::string pos = n.b.node("CumSum", p + "/cumsum", {mask, n.b.ints(p + "/last_axis", {1}, true)});
  pos = n.b.node("Sub", p + "/position_Sub", {pos, f32(n, p + "/one", 1.0f)});
  pos = n.b.node("Mul", p + "/position_Mul", {pos, mask});
  pos = n.b.node("Unsqueeze", p + "/position_4d", {pos, n.b.ints(p + "/axes12", {1, 2})});  // [b, 1, 1, keys]
  return n.b.node("Mul", p + "/slopes_Mul", {pos, n.b.weight(p + ".slopes", {1, c.heads, 1, 1})});
}

// repeat_kv: [b, kvh, len, hd] -> [b, kvh * rep, len, hd] (expand + reshape copy); `len` is
// the 1-element key length tensor.
std::string repeat_kv(Net& n, const std::string& p, const std::string& x, const ModelConfig& c, const std::string& len) {
  const int64_t rep = c.heads / c.kv_heads;
  if (rep == 1) return x;
  const std::string u = n.b.node("Unsqueeze", p + "/Unsqueeze", {x, n.b.ints(p + "/ax2", {2})});
  const std::string s5 = n.b.node("Concat", p + "/shape5",
                                  {n.batch, n.b.ints(p + "/kv_rep", {c.kv_heads, rep}), len, n.b.ints(p + "/hd", {c.head_dim})});
  n.b.attr_i("axis", 0);
  const std::string e = n.b.node("Expand", p + "/Expand", {u, s5});
  const std::string s4 = n.b.node("Concat", p + "/shape4",
                                  {n.batch, n.b.ints(p + "/h", {c.heads}), len, n.b.ints(p + "/hd2", {c.head_dim})});
  n.b.attr_i("axis", 0);
  return n.b.node("Reshape", p + "/Reshape", {e, s4});
}

// The KV cache of a decode step (HF DynamicCache): past_key_values.N.key / .value inputs
// [batch, kv_heads, past_sequence, head_dim] are concatenated with the step's keys and values
// into present.N.key / .value outputs, which the attention reads. Empty `total`: no cache.
struct Cache {
  int64_t layer = 0;
  std::string total;  // 1-element key length (past + sequence)
};

std::string attention(Net& n, const std::string& p, const std::string& x, const ModelConfig& c,
                      const std::string& mask, const std::string& cos, const std::string& sin, const Cache& cache,
                      const std::string& alibi, const std::string& q_scale = "") {
  const int64_t h = c.hidden, nh = c.heads, kvh = c.kv_heads, hd = c.head_dim;
  // Queries and keys [b, s, heads, hd] to [b, heads, s, hd]; Qwen3 normalises each head first
  // (Llama 4 those of its rotary layers, without a weight; it normalises after the rotary,
  // the same passes).
  const bool head_norm = c.qk_norm && !(c.qk_norm_rotary_only && cos.empty());
  auto heads = [&](const std::string& name, const std::string& y, int64_t count) {
    if (c.qk_norm_full)  // OLMo 2: the whole projection normalised, then split
      return split_heads(n, p + "/" + name, rms_norm(n, p + "." + name + "_norm", y, count * hd, c.layer_norm_eps), count, hd);
    if (!head_norm) return split_heads(n, p + "/" + name, y, count, hd);
    std::string r = n.b.node("Reshape", p + "/" + name + "/Reshape", {y, n.shape_bs(p + "/" + name + "/shape", {count, hd})});
    r = c.layer_norm ? layer_norm(n, p + "." + name + "_norm", r, hd, c.layer_norm_eps, c.norm_bias)  // Cohere
                     : rms_norm(n, p + "." + name + "_norm", r, hd, c.layer_norm_eps, !c.qk_norm_unweighted);
    const std::string t = n.b.node("Transpose", p + "/" + name + "/Transpose", {r});
    n.b.attr_ints("perm", {0, 2, 1, 3});
    return t;
  };
  std::string q, k, v, gate;
  if (c.fused_qkv) {  // GPT-NeoX: [b, s, heads, 3 hd], per head q | k | v, views of it per role
    const std::string qkv = n.b.node("Reshape", p + "/qkv_heads",
                                     {linear(n, p + ".query_key_value", x, h, 3 * nh * hd, c.qkv_bias), n.shape_bs(p + "/qkv_shape", {nh, 3 * hd})});
    const auto part = [&](const std::string& name, int64_t i) {
      const std::string sl = n.b.node("Slice", p + "/" + name, {qkv, n.b.ints(p + "/" + name + "_s", {i * hd}),
                                                                n.b.ints(p + "/" + name + "_e", {(i + 1) * hd}), n.b.ints(p + "/" + name + "_ax", {3})});
      const std::string t = n.b.node("Transpose", p + "/" + name + "_t", {sl});
      n.b.attr_ints("perm", {0, 2, 1, 3});
      return t;
    };
    q = part("q", 0), k = part("k", 1), v = part("v", 2);
  } else if (c.fused_qkv_blocks) {  // Phi-3: [b, s, (heads + 2 kv heads) hd] = [q | k | v]
    const std::string qkv = linear(n, p + ".qkv_proj", x, h, (nh + 2 * kvh) * hd, c.qkv_bias);
    const auto block = [&](const std::string& name, int64_t from, int64_t to) {
      return n.b.node("Slice", p + "/" + name + "_states", {qkv, n.b.ints(p + "/" + name + "_s", {from * hd}),
                                                            n.b.ints(p + "/" + name + "_e", {to * hd}), n.b.ints(p + "/" + name + "_ax", {2})});
    };
    q = heads("q", block("q", 0, nh), nh);
    k = heads("k", block("k", nh, nh + kvh), kvh);
    v = split_heads(n, p + "/v", block("v", nh + kvh, nh + 2 * kvh), kvh, hd);
  } else if (c.attn_output_gate) {  // Qwen3-Next: q_proj gives each head's query and gate, [q | gate]
    const std::string qg = n.b.node("Reshape", p + "/q_gate", {linear(n, p + ".q_proj", x, h, 2 * nh * hd, c.qkv_bias),
                                                              n.shape_bs(p + "/q_gate_shape", {nh, 2 * hd})});
    const auto half = [&](const std::string& name, int64_t from) {
      const std::string sl = n.b.node("Slice", p + "/" + name + "_half", {qg, n.b.ints(p + "/" + name + "_s", {from}),
                                                                          n.b.ints(p + "/" + name + "_e", {from + hd}),
                                                                          n.b.ints(p + "/" + name + "_ax", {3})});
      return n.b.node("Reshape", p + "/" + name + "_flat", {sl, n.shape_bs(p + "/" + name + "_flat_shape", {nh * hd})});
    };
    q = heads("q", half("q", 0), nh);
    gate = half("gate", hd);
    k = heads("k", linear(n, p + ".k_proj", x, h, kvh * hd, c.qkv_bias), kvh);
    v = split_heads(n, p + "/v", linear(n, p + ".v_proj", x, h, kvh * hd, c.qkv_bias), kvh, hd);
  } else {
    q = heads("q", linear(n, p + ".q_proj", x, h, nh * hd, c.qkv_bias), nh);
    k = heads("k", linear(n, p + ".k_proj", x, h, kvh * hd, c.qkv_bias), kvh);
    v = split_heads(n, p + "/v", linear(n, p + ".v_proj", x, h, kvh * hd, c.qkv_bias), kvh, hd);
  }
  if (!cos.empty()) {  // rotary (not ALiBi, learned positions or a NoPE layer)
    q = partial_rotary(n, p + "/rotary_q", q, hd, rotary_dims(c), cos, sin);
    k = partial_rotary(n, p + "/rotary_k", k, hd, rotary_dims(c), cos, sin);
  }
  if (!q_scale.empty()) q = n.b.node("Mul", p + "/attn_temperature", {q, q_scale});  // Llama 4's NoPE layers
  std::string len = n.seq;
  if (!cache.total.empty()) {
    const std::string l = std::to_string(cache.layer);
    for (auto* t : {&k, &v}) {
      const std::string which = t == &k ? "key" : "value";
      *t = n.b.node("Concat", p + "/cache_" + which, {"past_key_values." + l + "." + which, *t});
      n.b.attr_i("axis", 2);
      *t = n.rename_last("present." + l + "." + which);
      n.b.output(*t, kF32, {-1, c.kv_heads, -1, c.head_dim}, {"batch", "total_sequence"});
    }
    len = cache.total;
  }
  k = repeat_kv(n, p + "/repeat_k", k, c, len);
  v = repeat_kv(n, p + "/repeat_v", v, c, len);
  std::string o = masked_attention(n, p, q, k, v, hd, mask, p + ".attn_dropout", c.attn_dropout, nh * hd, c.attn_softcap, alibi);
  if (!gate.empty()) o = n.b.node("Mul", p + "/output_gate", {o, n.b.node("Sigmoid", p + "/output_gate_Sigmoid", {gate})});
  return linear(n, p + ".o_proj", o, nh * hd, h, c.o_bias);
}

// The sparse MoE block (Mixtral, Qwen2-MoE, Qwen3-MoE): the router's logits over the experts,
// then one MoE operator (onnxruntime's com.microsoft.MoE contrib operator): softmax top-k
// routing, each token through its k SwiGLU experts (w1 gate, w3 up, w2 down), the weighted
// sum; Qwen2-MoE adds its gated shared expert. It runs as serving engines run the block (vLLM's fused_moe; a grouped GEMM per
// projection over the experts the tokens reach), not as HF's eager loop over experts.
// A slice [from, to) of the last axis of a rank-`rank` tensor.
std::string last_axis(Net& n, const std::string& p, const std::string& x, int64_t from, int64_t to, int64_t rank) {
  return n.b.node("Slice", p, {x, n.b.ints(p + "/s", {from}), n.b.ints(p + "/e", {to}), n.b.ints(p + "/ax", {rank - 1})});
}

// DeepSeek-V3's multi-head latent attention. The prompt runs it as HF's modelling code does:
// keys and values expanded per head from the latent (kv_b_proj), the rotary key shared by the
// heads, attention over qk_nope + qk_rope wide query/key heads. A decode step runs it as
// serving engines do (vLLM's and SGLang's MLA, the weight absorption of the DeepSeek-V2
// paper): the cache is the normalised latent with the rotary key, [batch, 1, past,
// kv_lora_rank + qk_rope]; each head's query is taken into the latent through its slice of
// kv_b_proj (W_UK), attends to the cache as one shared KV head, and its output leaves the
// latent through the value slice (W_UV).
std::string mla_attention(Net& n, const std::string& p, const std::string& x, const ModelConfig& c,
                          const std::string& mask, const std::string& cos, const std::string& sin, const Cache& cache) {
  const int64_t h = c.hidden, H = c.heads, dn = c.qk_nope_dim, dr = c.qk_rope_dim, dv = c.v_head_dim, kvr = c.kv_lora_rank;
  std::string q = c.q_lora_rank > 0
                      ? linear(n, p + ".q_b_proj",
                               rms_norm(n, p + ".q_a_layernorm", linear(n, p + ".q_a_proj", x, h, c.q_lora_rank, false),
                                        c.q_lora_rank, c.layer_norm_eps),
                               c.q_lora_rank, H * (dn + dr), false)
                      : linear(n, p + ".q_proj", x, h, H * (dn + dr), false);
  q = split_heads(n, p + "/q", q, H, dn + dr);  // [b, H, s, dn + dr]
  const std::string q_nope = last_axis(n, p + "/q_nope", q, 0, dn, 4);
  const std::string q_pe = rotate_half_embedding(n, p + "/rotary_q", last_axis(n, p + "/q_pe", q, dn, dn + dr, 4), dr, cos, sin);
  const std::string kva = linear(n, p + ".kv_a_proj_with_mqa", x, h, kvr + dr, false);  // [b, s, kvr + dr]
  const std::string latent = rms_norm(n, p + ".kv_a_layernorm", last_axis(n, p + "/kv_latent", kva, 0, kvr, 3), kvr,
                                      c.layer_norm_eps);
  const std::string k_pe = rotate_half_embedding(n, p + "/rotary_k", split_heads(n, p + "/k_pe", last_axis(n, p + "/k_rope", kva, kvr, kvr + dr, 3), 1, dr),
                                  dr, cos, sin);  // [b, 1, s, dr]
  const std::string kv_b = p + ".kv_b_proj";
  if (cache.total.empty()) {
    const std::string kv = split_heads(n, p + "/kv", linear(n, kv_b, latent, kvr, H * (dn + dv), false), H, dn + dv);
    const std::string k_nope = last_axis(n, p + "/k_nope", kv, 0, dn, 4);
    const std::string v = last_axis(n, p + "/v", kv, dn, dn + dv, 4);
    const std::string hs = n.b.node("Concat", p + "/k_pe_shape", {n.batch, n.b.ints(p + "/k_pe_heads", {H}), n.seq, n.b.ints(p + "/k_pe_dr", {dr})});
    n.b.attr_i("axis", 0);
    const std::string k_pe_h = n.b.node("Expand", p + "/k_pe_expand", {k_pe, hs});
    const std::string k = n.b.node("Concat", p + "/k", {k_nope, k_pe_h});
    n.b.attr_i("axis", -1);
    const std::string qq = n.b.node("Concat", p + "/q_full", {q_nope, q_pe});
    n.b.attr_i("axis", -1);
    const std::string o = masked_attention(n, p, qq, k, v, dn + dr, mask, p + ".attn_dropout", c.attn_dropout, H * dv);
    return linear(n, p + ".o_proj", o, H * dv, h, c.o_bias);
  }
  // Decode: the latent cache and the absorbed projections.
  const std::string l = std::to_string(cache.layer);
  const std::string lat4 = n.b.node("Unsqueeze", p + "/latent_4d", {latent, n.b.ints(p + "/ax1", {1})});  // [b, 1, s, kvr]
  const std::string entry = n.b.node("Concat", p + "/cache_entry", {lat4, k_pe});
  n.b.attr_i("axis", -1);
  std::string kv = n.b.node("Concat", p + "/cache_key", {"past_key_values." + l + ".key", entry});
  n.b.attr_i("axis", 2);
  kv = n.rename_last("present." + l + ".key");
  n.b.output(kv, kF32, {-1, 1, -1, kvr + dr}, {"batch", "total_sequence"});
  // W_UK [H, dn, kvr] and W_UV [H, kvr, dv]: kv_b_proj's weight, viewed per head.
  const std::string w_uk = n.b.weight(kv_b + ".w_uk", {H, dn, kvr});
  const std::string w_uv = n.b.weight(kv_b + ".w_uv", {H, kvr, dv});
  const std::string q_lat = n.b.node("MatMul", p + "/q_absorb", {q_nope, w_uk});  // [b, H, s, kvr]
  const std::string qq = n.b.node("Concat", p + "/q_full", {q_lat, q_pe});
  n.b.attr_i("axis", -1);
  std::string s = n.b.node("MatMul", p + "/MatMul", {qq, transpose_last(n, p + "/kT", kv)});
  s = n.b.node("Div", p + "/Div", {s, f32(n, p + "/scale", static_cast<float>(std::sqrt(double(dn + dr))))});
  s = n.b.node("Add", p + "/mask_Add", {s, mask});
  s = n.b.node("Softmax", p + "/Softmax", {s});
  n.b.attr_i("axis", -1);
  const std::string o_lat = n.b.node("MatMul", p + "/MatMul_1", {s, last_axis(n, p + "/latent_values", kv, 0, kvr, 4)});
  const std::string o = n.b.node("MatMul", p + "/v_absorb", {o_lat, w_uv});  // [b, H, s, dv]
  return linear(n, p + ".o_proj", merge_heads(n, p + "/merge", o, H * dv), H * dv, h, c.o_bias);
}

// gpt-oss adds biases to the router and the experts, and may store the experts in MXFP4:
// then the block is onnxruntime's QMoE, each expert weight [E, out, in / 2] of packed 4-bit
// values with one 1-byte scale per block of 32 along `in` ([E, out, in / 32], E8M0 as the
// checkpoints store it).
std::string sparse_moe(Net& n, const std::string& p, const std::string& x, const ModelConfig& c) {
  const int64_t h = c.hidden, e = c.experts, f = c.expert_ffn > 0 ? c.expert_ffn : c.ffn;
  const std::string rows = n.b.node("Reshape", p + "/rows", {x, n.b.ints(p + "/rows_shape", {-1, h})});
  const std::string logits = linear(n, p + ".gate", rows, h, e, c.expert_bias);
  const int64_t bits = c.expert_weight_bits;
  std::string y;
  if (bits > 0) {
    const int64_t pack = 8 / bits, block = c.expert_block > 0 ? c.expert_block : 32;
    if (h % block != 0 || f % block != 0)
      throw InputError("model config: hidden and expert sizes must be multiples of the quantization block (" +
                       std::to_string(block) + ")");
    auto q = [&](const std::string& name, int64_t out, int64_t in) {
      return std::vector<std::string>{n.b.weight(p + ".experts." + name, {e, out, in / pack}, kU8),
                                      n.b.weight(p + ".experts." + name + "_scales", {e, out, in / block}, kU8),
                                      c.expert_bias ? n.b.weight(p + ".experts." + name + "_bias", {e, out}) : ""};
    };
    const auto w1 = q("w1", f, h), w2 = q("w2", h, f), w3 = q("w3", f, h);
    y = n.b.node("QMoE", p + "/QMoE",
                 {x, logits, w1[0], w1[1], w1[2], w2[0], w2[1], w2[2], w3[0], w3[1], w3[2]}, 1, "com.microsoft");
    n.b.attr_i("expert_weight_bits", bits);
    n.b.attr_i("block_size", block);
  } else {
    const std::string w1 = n.b.weight(p + ".experts.w1", {e, h, f});
    const std::string w2 = n.b.weight(p + ".experts.w2", {e, f, h});
    const std::string w3 = n.b.weight(p + ".experts.w3", {e, h, f});
    auto bias = [&](const std::string& name, int64_t size) {
      return c.expert_bias ? n.b.weight(p + ".experts." + name + "_bias", {e, size}) : std::string();
    };
    y = n.b.node("MoE", p + "/MoE", {x, logits, w1, bias("w1", f), w2, bias("w2", h), w3, bias("w3", f)}, 1,
                 "com.microsoft");
  }
  n.b.attr_i("k", c.experts_per_token);
  n.b.attr_s("activation_type", c.activation);
  n.b.attr_i("normalize_routing_weights", c.normalize_routing ? 1 : 0);
  if (c.shared_expert_ffn <= 0) return y;
  // Qwen2-MoE's shared expert: a dense SwiGLU MLP on every token, scaled by sigmoid(gate(x)).
  const std::string sp = p + ".shared_expert";
  const std::string gate = activation(n, sp + ".act_fn", linear(n, sp + ".gate_proj", x, h, c.shared_expert_ffn, false), c.activation);
  const std::string up = linear(n, sp + ".up_proj", x, h, c.shared_expert_ffn, false);
  const std::string shared = linear(n, sp + ".down_proj", n.b.node("Mul", sp + "/Mul", {gate, up}), c.shared_expert_ffn, h, false);
  if (!c.shared_expert_gate) return n.b.node("Add", p + "/Add_shared", {y, shared});  // DeepSeek: always on
  const std::string g = n.b.node("Sigmoid", p + ".shared_expert_gate/Sigmoid", {linear(n, p + ".shared_expert_gate", x, h, 1, false)});
  return n.b.node("Add", p + "/Add_shared", {y, n.b.node("Mul", p + "/Mul_shared", {g, shared})});
}

// The decoder's attention masks [b, 1, s, past + s]: causal, full(min).triu(past + 1),
// expanded; and for sliding-window layers (when the config has them) the causal mask without
// the keys more than sliding_window - 1 positions before each query: a band masking key j for
// query row i when j <= past + i - window, i.e. Trilu keeping the lower part at diagonal
// past - window. `past_scalar` and `diag` are empty without a KV cache.
struct Masks {
  std::string causal, sliding;
};

Masks decoder_masks(Net& n, const ModelConfig& c, const std::string& p0, const std::string& total,
                    const std::string& past_scalar, const std::string& diag) {
  Masks m;
  const std::string ss_shape = n.b.node("Concat", p0 + "/ss_shape", {n.seq, total});
  n.b.attr_i("axis", 0);
  std::string causal = fill(n, p0 + "/causal_full", ss_shape, kF32, kFloatMin);
  causal = n.b.node("Trilu", p0 + "/causal_triu", {causal, diag.empty() ? n.b.ints("const_one_k", {1}, true) : diag});
  n.b.attr_i("upper", 1);
  const std::string b1ss = n.b.node("Concat", p0 + "/b1ss_shape", {n.batch, n.b.ints(p0 + "/one_dim", {1}), n.seq, total});
  n.b.attr_i("axis", 0);
  m.causal = n.b.node("Expand", p0 + "/causal_expand",
                      {n.b.node("Unsqueeze", p0 + "/causal_4d", {causal, n.b.ints("const_axes01", {0, 1})}), b1ss});
  if (c.sliding_window <= 0 || std::find(c.sliding_layers.begin(), c.sliding_layers.end(), true) == c.sliding_layers.end())
    return m;
  const std::string w = n.b.ints(p0 + "/sliding_window", {c.sliding_window}, true);
  const std::string k = past_scalar.empty() ? n.b.node("Neg", p0 + "/sliding_diagonal", {w})
                                            : n.b.node("Sub", p0 + "/sliding_diagonal", {past_scalar, w});
  std::string band = fill(n, p0 + "/sliding_full", ss_shape, kF32, kFloatMin);
  band = n.b.node("Trilu", p0 + "/sliding_tril", {band, k});
  n.b.attr_i("upper", 0);
  const std::string both = n.b.node("Min", p0 + "/sliding_causal", {causal, band});
  m.sliding = n.b.node("Expand", p0 + "/sliding_expand",
                       {n.b.node("Unsqueeze", p0 + "/sliding_4d", {both, n.b.ints("const_axes01s", {0, 1})}), b1ss});
  return m;
}

// The SwiGLU MLP of its normed input `f` (gate_proj, up_proj or Phi-3's gate_up_proj chunked
// in two, the activation, down_proj), or the sparse MoE block in an MoE layer; Gemma's
// post-feedforward norm on its output.
std::string gated_mlp(Net& n, const ModelConfig& c, const std::string& p, int64_t l, const std::string& f) {
  const int64_t h = c.hidden;
  const bool sparse = c.experts > 0 && (l + 1) % std::max<int64_t>(1, c.sparse_step) == 0 &&
                      std::find(c.dense_layers.begin(), c.dense_layers.end(), l) == c.dense_layers.end();
  if (sparse) return sparse_moe(n, p + ".block_sparse_moe", f, c);
  std::string gate_in, up;
  if (c.fused_gate_up) {  // Phi-3: gate_up_proj, chunked in two along the last axis
    const std::string gu = linear(n, p + ".mlp.gate_up_proj", f, h, 2 * c.ffn, c.gated_mlp_bias);
    const auto half = [&](const std::string& name, int64_t from) {
      return n.b.node("Slice", p + ".mlp/" + name, {gu, n.b.ints(p + ".mlp/" + name + "_s", {from}),
                                                    n.b.ints(p + ".mlp/" + name + "_e", {from + c.ffn}), n.b.ints(p + ".mlp/" + name + "_ax", {2})});
    };
    gate_in = half("gate", 0);
    up = half("up", c.ffn);
  } else {
    gate_in = linear(n, p + ".mlp.gate_proj", f, h, c.ffn, c.gated_mlp_bias);
    up = linear(n, p + ".mlp.up_proj", f, h, c.ffn, c.gated_mlp_bias);
  }
  const std::string gate = activation(n, p + ".mlp.act_fn", gate_in, c.activation);
  const std::string gu = n.b.node("Mul", p + ".mlp/Mul", {gate, up});
  std::string down = linear(n, p + ".mlp.down_proj", gu, c.ffn, h, c.gated_mlp_bias);
  if (c.sandwich_norm) down = rms_norm(n, p + ".post_feedforward_layernorm", down, h, c.layer_norm_eps);
  return down;
}

// Layer `l`'s residual adds and MLP, given its input `x`, its normed input and its attention's
// output `a`: the parallel block (Phi, GPT-NeoX, GPT-J, Falcon, Cohere: attention + MLP of
// the same or their own normed inputs + residual); otherwise the attention's residual, the
// post-attention norm and the MLP, with Gemma's sandwich norms and Granite's residual scale.
std::string mlp_block(Net& n, const ModelConfig& c, const std::string& p, int64_t l, const std::string& x,
                      const std::string& normed, std::string a) {
  const int64_t h = c.hidden;
  // Gemma 2/3's sandwich: the attention's output normalised before the residual, and the MLP
  // between pre- and post-feedforward norms.
  if (c.sandwich_norm) a = rms_norm(n, p + ".post_attention_layernorm", a, h, c.layer_norm_eps);
  // The MLP of its normed input: dense (Phi, GPT-NeoX, ...) or gated.
  const auto mlp = [&](const std::string& in) {
    if (!c.dense_mlp) return gated_mlp(n, c, p, l, in);
    const std::string fc1 = activation(n, p + ".mlp.act", linear(n, p + ".mlp.fc1", in, h, c.ffn, c.mlp_bias), c.activation);
    return dropout(n, p + ".mlp_dropout", linear(n, p + ".mlp.fc2", fc1, c.ffn, h, c.mlp_bias), c.dropout);
  };
  // Granite: each branch times residual_multiplier before it joins the residual.
  const auto scaled = [&](const std::string& y, const std::string& name) {
    if (c.residual_multiplier <= 0) return y;
    return n.b.node("Mul", p + "/" + name + "_residual_scale",
                    {y, f32(n, p + "/" + name + "_residual_multiplier", static_cast<float>(c.residual_multiplier))});
  };
  if (c.parallel_block > 0) {
    const std::string in = c.parallel_block == 1 ? normed : norm(n, c, p + ".post_attention_layernorm", x);
    const std::string both = n.b.node("Add", p + "/Add_attn_mlp", {dropout(n, p + ".attention_dropout", a, c.dropout), mlp(in)});
    return n.b.node("Add", p + "/residual_Add", {both, x});
  }
  if (c.post_norm) {  // OLMo 2: x + norm(attn(x)), then r + norm(mlp(r))
    const std::string r = n.b.node("Add", p + "/residual_Add", {x, norm(n, c, p + ".post_attention_layernorm", a)});
    return n.b.node("Add", p + "/residual_Add_1", {r, norm(n, c, p + ".post_feedforward_layernorm", mlp(r))});
  }
  // GPT-NeoX's post_attention_dropout, StarCoder2's residual_dropout on the attention output.
  if (c.dense_mlp) a = dropout(n, p + ".attention_dropout", a, c.dropout);
  const std::string r = n.b.node("Add", p + "/residual_Add", {x, scaled(a, "attn")});
  const std::string f = norm(n, c, p + (c.sandwich_norm ? ".pre_feedforward_layernorm" : ".post_attention_layernorm"), r);
  return n.b.node("Add", p + "/residual_Add_1", {r, scaled(mlp(f), "mlp")});
}

// The step's positions past .. total - 1 (0 .. sequence - 1 without a cache).
std::string position_ids(Net& n, const std::string& p0, const std::string& past_scalar, const std::string& total_scalar) {
  return n.b.node("Range", p0 + "/position_ids",
                  {past_scalar.empty() ? n.b.ints(p0 + "/position_start", {0}, true) : past_scalar, total_scalar,
                   n.b.ints(p0 + "/position_step", {1}, true)});
}

// The rotary tables of `rd` rotated dims, once per forward: freqs = inv_freq[:, None] @
// positions[None, :]; (cos, sin) of cat(freqs, freqs).
std::pair<std::string, std::string> rotary_tables(Net& n, const std::string& p0, int64_t rd, const std::string& past_scalar,
                                                  const std::string& total_scalar) {
  const std::string pos = position_ids(n, p0, past_scalar, total_scalar);
  const std::string posf = n.b.node("Cast", p0 + "/position_ids_float", {pos});
  n.b.attr_i("to", kF32);
  const std::string pos_row = n.b.node("Unsqueeze", p0 + "/position_row", {posf, n.b.ints("const_axes0b", {0})});
  const std::string inv_freq = n.b.weight(p0 + ".rotary_emb.inv_freq", {rd / 2, 1});
  const std::string freqs = n.b.node("MatMul", p0 + ".rotary_emb/MatMul", {inv_freq, pos_row});
  const std::string freqs_t = n.b.node("Transpose", p0 + ".rotary_emb/Transpose", {freqs});
  n.b.attr_ints("perm", {1, 0});
  const std::string emb = n.b.node("Concat", p0 + ".rotary_emb/Concat", {freqs_t, freqs_t});
  n.b.attr_i("axis", -1);
  return {n.b.node("Cos", p0 + ".rotary_emb/Cos", {emb}), n.b.node("Sin", p0 + ".rotary_emb/Sin", {emb})};
}

}  // namespace

// A decode step's cache inputs, the past keys and values of the layers that attend (every
// layer, or a hybrid's '*' layers: a Mamba-2 layer's states are its mixer's inputs), and the
// lengths they give: the step's queries sit at positions past .. past + sequence - 1 and attend
// to past + sequence keys. Without a cache (or attention) the lengths are the sequence's.
struct StepLengths {
  std::string past_scalar, total, total_scalar, diag;
  bool attends = false;  // some layer attends
};
StepLengths cache_inputs(Net& n, const ModelConfig& c, const std::string& p0, bool kv_cache) {
  StepLengths s{"", n.seq, n.seq_scalar, "", false};
  int64_t first = -1;
  for (int64_t l = 0; l < c.layers; ++l) {
    if (!attention_layer(c, l)) continue;
    if (first < 0) first = l;
    if (!kv_cache) break;
    if (c.kv_lora_rank > 0) {  // MLA: the latent and the rotary key, one cache tensor
      n.b.input("past_key_values." + std::to_string(l) + ".key", kF32, {-1, 1, -1, c.kv_lora_rank + c.qk_rope_dim},
                {"batch", "past_sequence"});
      continue;
    }
    for (const char* which : {"key", "value"})
      n.b.input("past_key_values." + std::to_string(l) + "." + which, kF32, {-1, c.kv_heads, -1, c.head_dim},
                {"batch", "past_sequence"});
  }
  s.attends = first >= 0;
  if (!kv_cache || first < 0) return s;
  const std::string shape = n.b.node("Shape", p0 + "/past_shape", {"past_key_values." + std::to_string(first) + ".key"});
  s.past_scalar = n.b.node("Gather", p0 + "/past_length", {shape, n.b.ints("const_idx2", {2}, true)});
  n.b.attr_i("axis", 0);
  s.total_scalar = n.b.node("Add", p0 + "/total_length", {s.past_scalar, n.seq_scalar});
  s.total = n.b.node("Unsqueeze", p0 + "/total_length_1d", {s.total_scalar, n.b.ints("const_axes0t", {0})});
  s.diag = n.b.node("Add", p0 + "/causal_diagonal", {s.past_scalar, n.b.ints("const_one_d", {1}, true)});
  return s;
}

// Layer `l` of a hybrid or state-space decoder (ModelConfig::block_pattern): its one block, a
// Mamba-2 mixer, attention without positions or an MLP (up, activation, down), on the layer's
// RMS-normed input, added to the residual `x`.
std::string hybrid_block(Net& n, const ModelConfig& c, const std::string& p, int64_t l, const std::string& x,
                         const std::string& mask, const Cache& cache) {
  const char kind = c.block_pattern[static_cast<size_t>(l)];
  const int64_t h = c.hidden;
  const std::string in = norm(n, c, p + ".norm", x);
  std::string y;
  if (kind == 'M') y = mamba2_mixer(n, p + ".mixer", in, c, l, !cache.total.empty());
  else if (kind == '*') y = attention(n, p + ".mixer", in, c, mask, "", "", cache, "");
  else
    y = linear(n, p + ".mixer.down_proj",
               activation(n, p + ".mixer.act", linear(n, p + ".mixer.up_proj", in, h, c.ffn, c.mlp_bias), c.activation),
               c.ffn, h, c.mlp_bias);
  return n.b.node("Add", p + "/residual_Add", {x, y});
}

namespace {

// Of [batch, sequence, hidden], the image tokens (each sequence's first sequence_tokens()) or
// the text's after them: a Slice named under `p`.
std::string sequence_part(Net& n, const ModelConfig& c, const std::string& p, const std::string& x, bool image) {
  const int64_t t = c.vision.sequence_tokens();
  const std::string q = p + (image ? "/image_tokens" : "/text_tokens");
  return n.b.node("Slice", q, {x, n.b.ints(q + "_start", {image ? 0 : t}), n.b.ints(q + "_end", {image ? t : int64_t(1) << 62}),
                               n.b.ints(q + "_axis", {1})});
}

// `image` (the image tokens' states) and the text's after them, concatenated along the sequence.
std::string with_text(Net& n, const ModelConfig& c, const std::string& p, const std::string& image, const std::string& x) {
  const std::string y = n.b.node("Concat", p + "/merge_image", {image, sequence_part(n, c, p, x, false)});
  n.b.attr_i("axis", 1);
  return y;
}

// Qwen3-VL's DeepStack after a decoder layer: the image tokens' states plus the layer's visual
// features (HF's index, add and index_put over the image rows).
std::string deepstack_add(Net& n, const ModelConfig& c, const std::string& p, const std::string& x,
                          const std::string& features) {
  const std::string q = p + "/deepstack";
  return with_text(n, c, q, n.b.node("Add", q + "_Add", {sequence_part(n, c, q, x, true), features}), x);
}

}  // namespace

LoadedModel build_llama(const ModelConfig& c, const BuildOptions& o) {
  Net n(c, o.kv_cache ? "Llama-style decoder step with KV cache (RMSNorm, rotary, SwiGLU, grouped-query attention)"
                      : "Llama-style decoder (RMSNorm, rotary, SwiGLU, grouped-query attention)");
  const std::string ids = n.token_input("input_ids");
  const int64_t h = c.hidden, hd = c.kv_lora_rank > 0 ? c.qk_rope_dim : rotary_dims(c);  // the rotary dims
  const bool rotary = !c.alibi && !c.learned_positions && c.block_pattern.empty() && !c.no_positions;
  if (rotary && hd % 2 != 0) throw InputError("llama: head size must be even for rotary embeddings");
  const std::string p0 = "model";
  const StepLengths len = cache_inputs(n, c, p0, o.kv_cache);
  const std::string &past_scalar = len.past_scalar, &total = len.total, &total_scalar = len.total_scalar;
  std::string x = n.b.node("Gather", p0 + ".embed_tokens/Gather", {n.b.weight(p0 + ".embed_tokens.weight", {c.vocab, h}), ids});
  if (c.scale_embedding || c.embedding_multiplier > 0)  // Gemma: embeddings times sqrt(hidden); Granite's multiplier
    x = n.b.node("Mul", p0 + ".embed_tokens/scale",
                 {x, f32(n, p0 + "/embed_scale", c.scale_embedding ? std::sqrt(float(h)) : float(c.embedding_multiplier))});
  std::vector<std::string> deepstack;  // Qwen3-VL's features for the image tokens of the first layers
  if (c.image_in_sequence() && !o.kv_cache) {
    // LLaVA: the image's features replace its placeholder tokens' embeddings (masked_scatter;
    // the image taken as the first tokens of each sequence, one copy of the embeddings).
    const std::string img = c.vision.qwen()      ? qwen_vl_image_features(n, c, &deepstack)
                            : c.vision.pixtral() ? pixtral_image_features(n, c)
                            : c.vision.llama4()  ? llama4_image_features(n, c)
                                               : llava_image_features(n, c);
    x = with_text(n, c, p0, img, x);
  }
  if (c.mtp_module) {  // DeepSeek-V3's MTP module: [enorm(embedding), hnorm(previous hidden)] -> eh_proj
    n.b.input("hidden_states", kF32, {-1, -1, h}, {"batch", "sequence"});
    const std::string e = rms_norm(n, p0 + ".enorm", x, h, c.layer_norm_eps);
    const std::string hs = rms_norm(n, p0 + ".hnorm", "hidden_states", h, c.layer_norm_eps);
    const std::string eh = n.b.node("Concat", p0 + ".eh_proj/Concat", {e, hs});
    n.b.attr_i("axis", -1);
    x = linear(n, p0 + ".eh_proj", eh, 2 * h, h, false);
  }

  const Masks masks = len.attends ? decoder_masks(n, c, p0, total, past_scalar, len.diag) : Masks{};
  const std::string& mask = masks.causal;
  const std::string& sliding_mask = masks.sliding;

  if (c.embedding_norm) x = layer_norm(n, p0 + ".word_embeddings_layernorm", x, h, c.layer_norm_eps, c.norm_bias);
  const std::string alibi = c.alibi ? alibi_bias(n, c, p0 + ".alibi", total) : "";
  // Rotary tables, once per forward: freqs = inv_freq[:, None] @ positions[None, :].
  std::string cos, sin;
  if (rotary) std::tie(cos, sin) = rotary_tables(n, p0, hd, past_scalar, total_scalar);
  // Llama 4's query scale on its global (NoPE) layers, [1, 1, sequence, 1], once per forward:
  // log(floor((position + 1) / floor_scale) + 1) * attn_scale + 1.
  std::string temperature;
  if (c.attn_temperature_tuning && c.rotary_sliding_only) {
    const std::string tp = p0 + "/attn_temperature";
    const std::string pos = n.b.node("Cast", tp + "/positions", {position_ids(n, tp, past_scalar, total_scalar)});
    n.b.attr_i("to", kF32);
    const std::string f = n.b.node("Floor", tp + "/Floor",
                                   {n.b.node("Div", tp + "/Div", {n.b.node("Add", tp + "/Add", {pos, f32(n, tp + "/one", 1.0f)}),
                                                                  f32(n, tp + "/floor_scale", float(c.attn_floor_scale))})});
    const std::string lg = n.b.node("Log", tp + "/Log", {n.b.node("Add", tp + "/Add_1", {f, f32(n, tp + "/one_1", 1.0f)})});
    const std::string sc = n.b.node("Add", tp + "/Add_2", {n.b.node("Mul", tp + "/Mul", {lg, f32(n, tp + "/scale", float(c.attn_scale))}),
                                                          f32(n, tp + "/one_2", 1.0f)});
    temperature = n.b.node("Reshape", tp + "/Reshape", {sc, n.b.ints(tp + "/shape", {1, 1, -1, 1})});
  }
  if (c.learned_positions) {  // GPTBigCode: x + wpe(positions past .. total - 1); OPT's rows offset by 2
    std::string pos = position_ids(n, p0, past_scalar, total_scalar);
    if (c.position_offset > 0)
      pos = n.b.node("Add", p0 + "/position_offset_Add", {pos, n.b.ints(p0 + "/position_offset", {c.position_offset}, true)});
    const std::string pe =
        n.b.node("Gather", p0 + ".wpe/Gather", {n.b.weight(p0 + ".wpe.weight", {c.max_positions + c.position_offset, h}), pos});
    x = dropout(n, p0 + ".drop", n.b.node("Add", p0 + "/position_Add", {x, pe}), c.dropout);
  }

  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = p0 + ".layers." + std::to_string(l);
    if (!c.block_pattern.empty()) {  // one block: a Mamba-2 mixer, attention or an MLP, pre-normed
      x = hybrid_block(n, c, p, l, x, mask, Cache{l, o.kv_cache ? total : ""});
      continue;
    }
    const std::string normed = c.post_norm ? x : norm(n, c, p + ".input_layernorm", x);
    std::string a = normed;
    const bool sliding = !sliding_mask.empty() && static_cast<size_t>(l) < c.sliding_layers.size() &&
                         c.sliding_layers[static_cast<size_t>(l)];
    const Cache kc{l, o.kv_cache ? total : ""};
    a = mamba_layer(c, l)   ? mamba2_mixer(n, p + ".mamba", a, c, l, o.kv_cache)
        : delta_layer(c, l) ? gated_deltanet_mixer(n, p + ".linear_attn", a, c, l, o.kv_cache)
        : c.kv_lora_rank > 0 ? mla_attention(n, p + ".self_attn", a, c, sliding ? sliding_mask : mask, cos, sin, kc)
                           : c.rotary_sliding_only && !sliding  // Cohere 2's and Llama 4's global layers: no positions
                               ? attention(n, p + ".self_attn", a, c, mask, "", "", kc, alibi, temperature)
                               : attention(n, p + ".self_attn", a, c, sliding ? sliding_mask : mask, cos, sin, kc, alibi);
    x = mlp_block(n, c, p, l, x, normed, a);
    if (static_cast<size_t>(l) < deepstack.size()) x = deepstack_add(n, c, p, x, deepstack[static_cast<size_t>(l)]);
  }
  x = norm(n, c, p0 + (c.layer_norm ? ".final_layernorm" : ".norm"), x);
  if (o.last_logits)
    x = n.b.node("Slice", p0 + "/last_position",
                 {x, n.b.ints("const_last_start", {-1}), n.b.ints("const_last_end", {INT64_MAX}), n.b.ints("const_axes1", {1})});
  const std::string logits = linear(n, "lm_head", x, h, c.vocab, c.head_bias);
  if (c.final_softcap > 0) soft_cap(n, "lm_head/softcap", logits, c.final_softcap);
  if (c.logits_multiplier > 0)
    n.b.node("Mul", "lm_head/logits_scale", {logits, f32(n, "lm_head/logits_multiplier", float(c.logits_multiplier))});
  n.rename_last("logits");
  if (o.last_logits) n.output("logits", {"batch"}, {1, c.vocab});
  else n.output("logits", {"batch", "sequence"}, {c.vocab});
  return n.finish(c);
}

}  // namespace neusight::builder
