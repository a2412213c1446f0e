// opt.cpp - OPT decoder (HF OPTForCausalLM in eager mode).
#include <cmath>

#include "common.h"
#include "families.h"

namespace neusight::builder {

namespace {

// OPTAttention: q (scaled), k, v projections, heads, q k^T, + mask, max(finfo.min), softmax,
// dropout, @ v, merge (reshape copy), out_proj. HF's _shape() is view + transpose(1, 2) +
// contiguous() and the bmm operands are then viewed as (bsz * heads, seq, head_dim): the
// three head splits are copies (the traced `contiguous`, `contiguous_1`, `contiguous_2`, MEM
// ops of 0.11 ms each on the V100 at batch 2), not strided views as in GPT-2 or BERT. Here
// the Reshape to the 3-D proj_shape after each Transpose makes the Transpose a copy.
std::string attention(Net& n, const std::string& p, const std::string& x, const ModelConfig& c,
                      const std::string& mask, const std::string& fmin) {
  const int64_t h = c.hidden, nh = c.heads, hd = c.head_dim;
  auto proj = [&](const std::string& name, const std::string& heads) {
    const std::string shape = n.b.node("Concat", p + "/" + name + "/proj_shape",
                                       {n.b.ints(p + "/" + name + "/proj_bh", {-1}), n.seq,
                                        n.b.ints(p + "/" + name + "/proj_hd", {hd})});
    n.b.attr_i("axis", 0);
    return n.b.node("Reshape", p + "/" + name + "/proj_view", {heads, shape});
  };
  // (bsz * heads, s, s) <-> (bsz, heads, s, s) views around the mask.
  auto view4 = [&](const std::string& name, const std::string& t, int64_t last) {
    std::vector<std::string> parts = {n.batch, n.b.ints(p + "/" + name + "_heads", {nh}), n.seq};
    parts.push_back(last > 0 ? n.b.ints(p + "/" + name + "_last", {last}) : n.seq);
    const std::string shape = n.b.node("Concat", p + "/" + name + "_shape", parts);
    n.b.attr_i("axis", 0);
    return n.b.node("Reshape", p + "/" + name, {t, shape});
  };
  auto view3 = [&](const std::string& name, const std::string& t) {
    const std::string shape = n.b.node("Concat", p + "/" + name + "_shape",
                                       {n.b.ints(p + "/" + name + "_bh", {-1}), n.seq, n.seq});
    n.b.attr_i("axis", 0);
    return n.b.node("Reshape", p + "/" + name, {t, shape});
  };
  std::string q = linear(n, p + ".q_proj", x, h, h);
  q = n.b.node("Mul", p + "/scale_Mul", {q, f32(n, p + "/scaling", static_cast<float>(1.0 / std::sqrt(double(hd))))});
  const std::string k = proj("k", split_heads(n, p + "/k", linear(n, p + ".k_proj", x, h, h), nh, hd));
  const std::string v = proj("v", split_heads(n, p + "/v", linear(n, p + ".v_proj", x, h, h), nh, hd));
  q = proj("q", split_heads(n, p + "/q", q, nh, hd));
  const std::string kT = n.b.node("Transpose", p + "/kT/Transpose", {k});
  n.b.attr_ints("perm", {0, 2, 1});
  std::string s = n.b.node("MatMul", p + "/bmm", {q, kT});
  s = view4("scores_view", s, 0);
  s = n.b.node("Add", p + "/mask_Add", {s, mask});
  s = n.b.node("Max", p + "/Max", {s, fmin});
  s = view3("probs_view", s);
  s = n.b.node("Softmax", p + "/Softmax", {s});
  n.b.attr_i("axis", -1);
  s = dropout(n, p + ".attn_dropout", s, c.attn_dropout);
  std::string o = n.b.node("MatMul", p + "/bmm_1", {s, v});
  o = view4("out_view", o, hd);
  o = merge_heads(n, p + "/merge", o, h);
  return linear(n, p + ".out_proj", o, h, h);
}

}  // namespace

LoadedModel build_opt(const ModelConfig& c) {
  Net n(c, "OPT decoder (OPTForCausalLM)");
  const std::string ids = n.token_input("input_ids");
  const int64_t h = c.hidden;
  const std::string p0 = "model.decoder";
  const int64_t e = c.embed_dim > 0 ? c.embed_dim : h;
  std::string x = n.b.node("Gather", p0 + ".embed_tokens/Gather", {n.b.weight(p0 + ".embed_tokens.weight", {c.vocab, e}), ids});
  if (e != h) x = linear(n, p0 + ".project_in", x, e, h, false);

  // attention_mask = ones(b, s); causal mask = full(min) masked to 0 on and below the
  // diagonal; both expanded to [b, 1, s, s] and combined with masked_fill.
  const std::string fmin = f32(n, p0 + "/finfo_min", kFloatMin);
  const std::string amask = fill(n, p0 + "/attention_mask", n.shape_bs(p0 + "/bs_shape", {}), kF32, 1.0);
  const std::string ss_shape = n.b.node("Concat", p0 + "/ss_shape", {n.seq, n.seq});
  n.b.attr_i("axis", 0);
  const std::string full = fill(n, p0 + "/causal_full", ss_shape, kF32, kFloatMin);
  const std::string ar = sequence_arange(n, p0 + "/causal_arange");
  const std::string ar1 = n.b.node("Add", p0 + "/causal_arange_Add", {ar, n.b.ints("const_one_1d", {1})});
  const std::string col = n.b.node("Unsqueeze", p0 + "/causal_col", {ar1, n.b.ints("const_axes1", {1})});
  const std::string lt = n.b.node("Less", p0 + "/causal_Less", {ar, col});
  const std::string causal = n.b.node("Where", p0 + "/causal_masked_fill", {lt, f32(n, p0 + "/c_zero", 0.0f), full});
  const std::string b1ss = n.b.node("Concat", p0 + "/b1ss_shape", {n.batch, n.b.ints(p0 + "/one_dim", {1}), n.seq, n.seq});
  n.b.attr_i("axis", 0);
  const std::string causal4 = n.b.node("Expand", p0 + "/causal_expand",
                                       {n.b.node("Unsqueeze", p0 + "/causal_4d", {causal, n.b.ints("const_axes01", {0, 1})}), b1ss});
  const std::string am4 = n.b.node("Expand", p0 + "/mask_expand",
                                   {n.b.node("Unsqueeze", p0 + "/mask_4d", {amask, n.b.ints("const_axes12", {1, 2})}), b1ss});
  const std::string inv = n.b.node("Sub", p0 + "/mask_Sub", {f32(n, p0 + "/c_one", 1.0f), am4});
  const std::string inv_b = n.b.node("Cast", p0 + "/mask_Cast", {inv});
  n.b.attr_i("to", kBool);
  const std::string exp_mask = n.b.node("Where", p0 + "/mask_masked_fill", {inv_b, fmin, inv});
  const std::string exp_b = n.b.node("Cast", p0 + "/mask_Cast_1", {exp_mask});
  n.b.attr_i("to", kBool);
  const std::string mask = n.b.node("Where", p0 + "/mask_masked_fill_1", {exp_b, fmin, causal4});

  // Learned positions: (cumsum(mask) * mask).long() - 1 + offset 2, then an embedding lookup.
  std::string pos = n.b.node("CumSum", p0 + "/positions_CumSum", {amask, n.b.ints("const_axis1", {1}, true)});
  pos = n.b.node("Mul", p0 + "/positions_Mul", {pos, amask});
  pos = n.b.node("Cast", p0 + "/positions_Cast", {pos});
  n.b.attr_i("to", kI64);
  pos = n.b.node("Add", p0 + "/positions_Add", {pos, n.b.ints("const_offset", {1}, true)});  // -1 + offset 2
  const std::string pe =
      n.b.node("Gather", p0 + ".embed_positions/Gather", {n.b.weight(p0 + ".embed_positions.weight", {c.max_positions + 2, h}), pos});
  x = n.b.node("Add", p0 + "/embed_Add", {x, pe});

  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = p0 + ".layers." + std::to_string(l);
    std::string a = c.pre_norm ? layer_norm(n, p + ".self_attn_layer_norm", x, h, c.layer_norm_eps) : x;
    a = attention(n, p + ".self_attn", a, c, mask, fmin);
    a = dropout(n, p + ".dropout", a, c.dropout);
    x = n.b.node("Add", p + "/residual_Add", {x, a});
    if (!c.pre_norm) x = layer_norm(n, p + ".self_attn_layer_norm", x, h, c.layer_norm_eps);
    std::string f = c.pre_norm ? layer_norm(n, p + ".final_layer_norm", x, h, c.layer_norm_eps) : x;
    f = linear(n, p + ".fc1", f, h, c.ffn);
    f = activation(n, p + ".activation_fn", f, c.activation);
    f = linear(n, p + ".fc2", f, c.ffn, h);
    f = dropout(n, p + ".dropout_1", f, c.dropout);
    x = n.b.node("Add", p + "/residual_Add_1", {x, f});
    if (!c.pre_norm) x = layer_norm(n, p + ".final_layer_norm", x, h, c.layer_norm_eps);
  }
  if (c.pre_norm) x = layer_norm(n, p0 + ".final_layer_norm", x, h, c.layer_norm_eps);
  // (HF's logits.contiguous() is a no-op on the already contiguous GEMM output.)
  if (e != h) x = linear(n, p0 + ".project_out", x, h, e, false);
  linear(n, "lm_head", x, e, c.vocab, false);
  n.rename_last("logits");
  n.output("logits", {"batch", "sequence"}, {c.vocab});
  return n.finish(c);
}

}  // namespace neusight::builder
