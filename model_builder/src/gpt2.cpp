// gpt2.cpp - GPT-2 (and GPT-3 configs written in GPT-2 form): HF GPT2LMHeadModel in eager mode.
#include <cmath>

#include "common.h"
#include "families.h"

namespace neusight::builder {

namespace {

// GPT2Attention: c_attn (addmm), split, heads, q k^T, / full(sqrt(hd)), causal where,
// softmax, dropout, @ v, merge heads (contiguous copy), c_proj, resid dropout.
std::string attention(Net& n, const std::string& p, const std::string& x, const ModelConfig& c,
                      const std::string& causal_mask) {
  const int64_t h = c.hidden, nh = c.heads, hd = c.hidden / c.heads;
  const std::string qkv = linear(n, p + ".c_attn", x, h, 3 * h);
  auto parts = n.b.node_n("Split", p + "/Split", {qkv, n.b.ints(p + "/split_sizes", {h, h, h})}, 3);
  n.b.attr_i("axis", 2);
  const std::string q = split_heads(n, p + "/q", parts[0], nh, hd);
  const std::string k = split_heads(n, p + "/k", parts[1], nh, hd);
  const std::string v = split_heads(n, p + "/v", parts[2], nh, hd);
  std::string s = n.b.node("MatMul", p + "/attn/MatMul", {q, transpose_last(n, p + "/kT", k)});
  s = n.b.node("Div", p + "/attn/Div", {s, f32(n, p + "/attn/scale", static_cast<float>(std::sqrt(double(hd))))});
  s = n.b.node("Where", p + "/attn/Where", {causal_mask, s, f32(n, p + "/attn/min", kFloatMin)});
  s = n.b.node("Softmax", p + "/attn/Softmax", {s});
  n.b.attr_i("axis", -1);
  s = dropout(n, p + ".attn_dropout", s, c.attn_dropout);
  std::string o = n.b.node("MatMul", p + "/attn/MatMul_1", {s, v});
  o = merge_heads(n, p + "/merge", o, h);
  o = linear(n, p + ".c_proj", o, h, h);
  return dropout(n, p + ".resid_dropout", o, c.dropout);
}

}  // namespace

LoadedModel build_gpt2(const ModelConfig& c) {
  Net n(c, "GPT-2 style decoder (GPT2LMHeadModel)");
  const std::string ids = n.token_input("input_ids");
  const int64_t h = c.hidden;
  const std::string wte = n.b.weight("transformer.wte.weight", {c.vocab, h});
  const std::string wpe = n.b.weight("transformer.wpe.weight", {c.max_positions, h});
  std::string x = n.b.node("Gather", "transformer.wte/Gather", {wte, ids});
  const std::string pos = sequence_arange(n, "position_ids");
  const std::string pos2 = n.b.node("Unsqueeze", "position_ids_2d", {pos, n.b.ints("const_axes0b", {0})});
  const std::string pe = n.b.node("Gather", "transformer.wpe/Gather", {wpe, pos2});
  x = n.b.node("Add", "transformer/embed_Add", {x, pe});
  x = dropout(n, "transformer.drop", x, c.dropout);

  // Causal mask: each layer slices its registered `bias` buffer to [1, 1, seq, seq].
  const std::string ends = n.b.node("Concat", "transformer/causal_ends", {n.seq, n.seq});
  n.b.attr_i("axis", 0);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "transformer.h." + std::to_string(l);
    const std::string bias = n.b.weight(p + ".attn.bias", {1, 1, c.max_positions, c.max_positions}, kBool);
    const std::string mask = n.b.node("Slice", p + ".attn/causal_Slice",
                                      {bias, n.b.ints(p + "/causal_starts", {0, 0}), ends,
                                       n.b.ints(p + "/causal_axes", {2, 3})});
    const std::string ln1 = layer_norm(n, p + ".ln_1", x, h, c.layer_norm_eps);
    const std::string attn = attention(n, p + ".attn", ln1, c, mask);
    x = n.b.node("Add", p + "/residual_Add", {x, attn});
    const std::string ln2 = layer_norm(n, p + ".ln_2", x, h, c.layer_norm_eps);
    std::string f = linear(n, p + ".mlp.c_fc", ln2, h, c.ffn);
    f = activation(n, p + ".mlp.act", f, c.activation);
    f = linear(n, p + ".mlp.c_proj", f, c.ffn, h);
    f = dropout(n, p + ".mlp.dropout", f, c.dropout);
    x = n.b.node("Add", p + "/residual_Add_1", {x, f});
  }
  x = layer_norm(n, "transformer.ln_f", x, h, c.layer_norm_eps);
  // lm_head (tied to wte in HF; a separate [hidden, vocab] stub here so the GEMM reads it
  // as nn.Linear does, without a transpose copy).
  linear(n, "lm_head", x, h, c.vocab, false);
  n.rename_last("logits");
  n.output("logits", {"batch", "sequence"}, {c.vocab});
  return n.finish(c);
}

}  // namespace neusight::builder
