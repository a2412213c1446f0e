// modernbert.cpp - ModernBERT (HF ModernBertModel, ModernBertForMaskedLM,
// ModernBertForSequenceClassification) as its eager attention runs: token embeddings, LayerNorm;
// pre-LayerNorm layers (the first without one before its attention) whose attention projects
// q, k and v in one Wqkv GEMM, rotates q and k (the rotary tables recomputed in every layer, as
// each layer's rotary_emb does), and masks every third layer's scores with the padding mask
// (global) and the others' with the sliding window of local_attention tokens; a GeGLU MLP (Wi to
// twice the intermediate size, chunked, GELU of one half times the other, Wo); no biases but
// where the config sets them; a final LayerNorm.
#include "common.h"
#include "families.h"

namespace neusight::builder {

namespace {

// The masks ModernBertModel._update_attention_mask builds for an all-ones attention mask:
// the global one (_prepare_4d_attention_mask: [batch, 1, s, s], 0 where a key is kept, finfo.min
// where masked) and the sliding-window one (the global mask filled with finfo.min where
// |i - j| > local_attention / 2).
std::pair<std::string, std::string> modernbert_masks(Net& n, const ModelConfig& c, const std::string& bs_shape) {
  const std::string m = "model";
  const std::string ones = fill(n, m + "/attention_mask", bs_shape, kF32, 1.0);
  const std::string m4 = n.b.node("Unsqueeze", m + "/mask_Unsqueeze", {ones, n.b.ints("const_axes12", {1, 2})});
  const std::string shape = n.b.node("Concat", m + "/mask_shape", {n.batch, n.b.ints(m + "/mask_one", {1}), n.seq, n.seq});
  n.b.attr_i("axis", 0);
  const std::string expanded = n.b.node("Expand", m + "/mask_Expand", {m4, shape});
  const std::string inverted = n.b.node("Sub", m + "/mask_Sub", {f32(n, m + "/c_one", 1.0f), expanded});
  const std::string masked = n.b.node("Cast", m + "/mask_Cast", {inverted});
  n.b.attr_i("to", kBool);
  const std::string min = f32(n, m + "/c_min", kFloatMin);
  const std::string global = n.b.node("Where", m + "/mask_masked_fill", {masked, min, inverted});
  const std::string rows = sequence_arange(n, m + "/rows");
  const std::string row = n.b.node("Unsqueeze", m + "/rows_Unsqueeze", {rows, n.b.ints("const_axes0b", {0})});
  const std::string col = n.b.node("Transpose", m + "/rows_T", {row});
  n.b.attr_ints("perm", {1, 0});
  const std::string distance = n.b.node("Abs", m + "/distance", {n.b.node("Sub", m + "/distance_Sub", {row, col})});
  const std::string window = n.b.node("LessOrEqual", m + "/window_mask",
                                      {distance, n.b.ints(m + "/half_window", {c.sliding_window / 2}, true)});
  const std::string outside = n.b.node("Not", m + "/window_Not", {window});
  const std::string sliding = n.b.node("Where", m + "/sliding_window_mask", {outside, min, global});
  return {global, sliding};
}

// The rotary tables one layer's rotary_emb computes: inv_freq [head_dim / 2, 1] @ the positions
// [1, s], transposed, concatenated with itself; cos and sin [s, head_dim].
std::pair<std::string, std::string> layer_rotary(Net& n, const std::string& p, int64_t hd, const std::string& positions) {
  const std::string freqs = n.b.node("MatMul", p + ".rotary_emb/MatMul", {n.b.weight(p + ".rotary_emb.inv_freq", {hd / 2, 1}), positions});
  const std::string freqs_t = n.b.node("Transpose", p + ".rotary_emb/Transpose", {freqs});
  n.b.attr_ints("perm", {1, 0});
  const std::string emb = n.b.node("Concat", p + ".rotary_emb/Concat", {freqs_t, freqs_t});
  n.b.attr_i("axis", -1);
  return {n.b.node("Cos", p + ".rotary_emb/Cos", {emb}), n.b.node("Sin", p + ".rotary_emb/Sin", {emb})};
}

// The `part`-th of `parts` equal slices of x's last axis (a view in PyTorch: chunk, unbind).
std::string last_axis_part(Net& n, const std::string& p, const std::string& x, int64_t width, int part) {
  return n.b.node("Slice", p, {x, n.b.ints(p + "/start", {width * part}), n.b.ints(p + "/end", {width * (part + 1)}),
                               n.b.ints(p + "/axis", {-1})});
}

// ModernBertEncoderLayer `l` over x.
std::string modernbert_layer(Net& n, const ModelConfig& c, int64_t l, const std::string& x, const std::string& mask,
                             const std::string& positions) {
  const int64_t h = c.hidden, nh = c.heads, hd = c.head_dim, w = nh * hd;
  const std::string p = "model.layers." + std::to_string(l);
  const std::string normed = l == 0 ? x : layer_norm(n, p + ".attn_norm", x, h, c.layer_norm_eps, c.norm_bias);
  const std::string a = p + ".attn";
  const std::string qkv = linear(n, a + ".Wqkv", normed, h, 3 * w, c.qkv_bias);
  const auto [cos, sin] = layer_rotary(n, a, hd, positions);
  const std::string q = rotate_half_embedding(n, a + "/rotary_q", split_heads(n, a + "/q", last_axis_part(n, a + "/q_part", qkv, w, 0), nh, hd), hd, cos, sin);
  const std::string k = rotate_half_embedding(n, a + "/rotary_k", split_heads(n, a + "/k", last_axis_part(n, a + "/k_part", qkv, w, 1), nh, hd), hd, cos, sin);
  const std::string v = split_heads(n, a + "/v", last_axis_part(n, a + "/v_part", qkv, w, 2), nh, hd);
  std::string o = masked_attention(n, a, q, k, v, hd, mask, a + ".attention_dropout", c.attn_dropout, w);
  o = dropout(n, a + ".out_drop", linear(n, a + ".Wo", o, w, h, c.o_bias), c.attn_dropout);
  const std::string r = n.b.node("Add", p + "/residual_Add", {x, o});
  const std::string m = p + ".mlp";
  const std::string wi = linear(n, m + ".Wi", layer_norm(n, p + ".mlp_norm", r, h, c.layer_norm_eps, c.norm_bias), h, 2 * c.ffn, c.mlp_bias);
  const std::string act = activation(n, m + ".act", last_axis_part(n, m + "/input", wi, c.ffn, 0), c.activation);
  std::string f = n.b.node("Mul", m + "/Mul_gate", {act, last_axis_part(n, m + "/gate", wi, c.ffn, 1)});
  f = linear(n, m + ".Wo", dropout(n, m + ".drop", f, c.dropout), c.ffn, h, c.mlp_bias);
  return n.b.node("Add", p + "/residual_Add_1", {r, f});
}

// ModernBertPredictionHead: dense (classifier_bias), the classifier activation, LayerNorm.
std::string prediction_head(Net& n, const ModelConfig& c, const std::string& x) {
  const std::string d = linear(n, "head.dense", x, c.hidden, c.hidden, c.encoder_head.dense_bias);
  return layer_norm(n, "head.norm", activation(n, "head.act", d, c.encoder_head.activation), c.hidden, c.layer_norm_eps, c.norm_bias);
}

}  // namespace

LoadedModel build_modernbert(const ModelConfig& c) {
  Net n(c, "ModernBERT encoder (ModernBertModel)");
  const int64_t h = c.hidden;
  const std::string ids = n.token_input("input_ids");
  const std::string bs_shape = n.shape_bs("model/bs_shape", {});
  std::string x = n.b.node("Gather", "model.embeddings.tok_embeddings/Gather",
                           {n.b.weight("model.embeddings.tok_embeddings.weight", {c.vocab, h}), ids});
  x = dropout(n, "model.embeddings.drop", layer_norm(n, "model.embeddings.norm", x, h, c.layer_norm_eps, c.norm_bias),
              c.encoder_head.embedding_dropout);
  const auto [global, sliding] = modernbert_masks(n, c, bs_shape);
  std::string positions = sequence_arange(n, "model/position_ids");
  positions = n.b.node("Cast", "model/position_ids_float", {positions});
  n.b.attr_i("to", kF32);
  positions = n.b.node("Unsqueeze", "model/position_row", {positions, n.b.ints("const_axes0b", {0})});
  for (int64_t l = 0; l < c.layers; ++l)
    x = modernbert_layer(n, c, l, x, c.sliding_layers[static_cast<size_t>(l)] ? sliding : global, positions);
  x = layer_norm(n, "model.final_norm", x, h, c.layer_norm_eps, c.norm_bias);
  const std::string head = c.head.empty() ? "base" : c.head;
  if (head == "base") {
    n.rename_last("last_hidden_state");
    n.output("last_hidden_state", {"batch", "sequence"}, {h});
    return n.finish(c);
  }
  if (head == "lm") {  // the prediction head over every token, the decoder (decoder_bias)
    linear(n, "decoder", prediction_head(n, c, x), h, c.vocab, c.encoder_head.decoder_bias);
    n.rename_last("logits");
    n.output("logits", {"batch", "sequence"}, {c.vocab});
    return n.finish(c);
  }
  if (head != "classification") throw InputError("modernbert: head must be base, lm or classification, got '" + head + "'");
  std::string pooled;
  if (c.encoder_head.mean_pooling) {  // (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    const std::string ones = fill(n, "model/pool_mask", bs_shape, kF32, 1.0);
    const std::string w = n.b.node("Unsqueeze", "model/pool_Unsqueeze", {ones, n.b.ints("const_axes_last", {-1})});
    const std::string sum = n.b.node("ReduceSum", "model/pool_sum", {n.b.node("Mul", "model/pool_Mul", {x, w}), n.b.ints("const_axes1", {1})});
    n.b.attr_i("keepdims", 0);
    const std::string count = n.b.node("ReduceSum", "model/pool_count", {ones, n.b.ints("const_axes1", {1})});
    pooled = n.b.node("Div", "model/pool_Div", {sum, count});
  } else {  // the first token
    pooled = n.b.node("Gather", "model/pool_first_token", {x, n.b.ints("const_idx0b", {0}, true)});
    n.b.attr_i("axis", 1);
  }
  const std::string t = dropout(n, "drop", prediction_head(n, c, pooled), c.encoder_head.classifier_dropout);
  linear(n, "classifier", t, h, c.num_labels);
  n.rename_last("logits");
  n.output("logits", {"batch"}, {c.num_labels});
  return n.finish(c);
}

}  // namespace neusight::builder
