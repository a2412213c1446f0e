// deberta.cpp - DeBERTa-v2 and v3 (HF DebertaV2Model, DebertaV2ForSequenceClassification,
// DebertaV2ForMaskedLM) in eager mode: word embeddings (projected where embedding_size differs,
// absolute positions added only with position_biased_input), LayerNorm, times the mask; post-
// LayerNorm layers whose DisentangledSelfAttention adds to the content scores the content-to-
// position and position-to-content terms: the relative embeddings (LayerNorm'd once) through
// the layer's own query and key projections (share_att_key), repeated over the batch, multiplied
// with the keys or queries and gathered at each pair's relative-position bucket; XSoftmax.
#include <cmath>

#include "common.h"
#include "families.h"

namespace neusight::builder {

namespace {

// build_relative_position with make_log_bucket_position: q_ids[:, None] - k_ids[None, :] over
// the sequence, beyond +-buckets/2 on a log scale up to max_relative, as int64 [s, s].
std::string relative_positions(Net& n, const ModelConfig& c) {
  const std::string p = "deberta.encoder/rel_pos";
  const auto& d = c.deberta;
  const std::string ids = sequence_arange(n, p + "/ids");
  const std::string q = n.b.node("Unsqueeze", p + "/q_ids", {ids, n.b.ints(p + "/axes1", {1})});
  const std::string k = n.b.node("Unsqueeze", p + "/k_ids", {ids, n.b.ints("const_axes0b", {0})});
  std::string rel = n.b.node("Sub", p + "/Sub", {q, k});
  if (d.buckets <= 0) return rel;
  const double mid = double(d.buckets / 2);
  const std::string relf = n.b.node("Cast", p + "/Cast_float", {rel});
  n.b.attr_i("to", kF32);
  const std::string sign = n.b.node("Sign", p + "/Sign", {relf});
  const std::string inside = n.b.node("And", p + "/And", {n.b.node("Less", p + "/Less", {relf, f32(n, p + "/mid", float(mid))}),
                                                          n.b.node("Greater", p + "/Greater", {relf, f32(n, p + "/neg_mid", float(-mid))})});
  const std::string abs_pos = n.b.node("Where", p + "/abs_pos", {inside, f32(n, p + "/mid_1", float(mid - 1)),
                                                                 n.b.node("Abs", p + "/Abs", {relf})});
  const double scale = (mid - 1) / std::log((double(d.max_relative) - 1) / mid);
  std::string log_pos = n.b.node("Log", p + "/Log", {n.b.node("Div", p + "/Div", {abs_pos, f32(n, p + "/mid_div", float(mid))})});
  log_pos = n.b.node("Ceil", p + "/Ceil", {n.b.node("Mul", p + "/Mul_scale", {log_pos, f32(n, p + "/scale", float(scale))})});
  log_pos = n.b.node("Add", p + "/Add_mid", {log_pos, f32(n, p + "/mid_add", float(mid))});
  const std::string near = n.b.node("LessOrEqual", p + "/LessOrEqual", {abs_pos, f32(n, p + "/mid_le", float(mid))});
  const std::string bucket = n.b.node("Where", p + "/bucket_pos", {near, relf, n.b.node("Mul", p + "/Mul_sign", {log_pos, sign})});
  rel = n.b.node("Cast", p + "/Cast_long", {bucket});
  n.b.attr_i("to", kI64);
  return rel;
}

// The gather index of one term: clamp(pos + span, 0, 2 span - 1) ([s, s]; `neg`: -pos, the
// position-to-content term), expanded over [batch, heads, s, s] (a view the gather reads).
std::string bucket_index(Net& n, const std::string& p, const std::string& rel, int64_t span, bool neg,
                         const std::string& bhss) {
  std::string pos = neg ? n.b.node("Neg", p + "/Neg", {rel}) : rel;
  pos = n.b.node("Add", p + "/Add_span", {pos, n.b.ints(p + "/span", {span}, true)});
  pos = n.b.node("Clip", p + "/Clip", {pos, n.b.ints(p + "/lo", {0}, true), n.b.ints(p + "/hi", {2 * span - 1}, true)});
  return n.b.node("Expand", p + "/Expand", {pos, bhss});
}

// One relative term: `x` (queries or keys, [b, h, s, d]) times the projected relative embeddings
// `pos` ([b, h, 2 span, d]) transposed, gathered at `index` along the last axis, divided by
// `scale`; the position-to-content term transposed.
std::string relative_term(Net& n, const std::string& p, const std::string& x, const std::string& pos,
                          const std::string& index, const std::string& scale, bool transpose) {
  const std::string att = n.b.node("MatMul", p + "/MatMul", {x, transpose_last(n, p + "/pos_T", pos)});
  std::string g = n.b.node("GatherElements", p + "/gather", {att, index});
  n.b.attr_i("axis", -1);
  // PyTorch divides the transposed view (one kernel, which keeps its strides); the score's Add
  // reads it through them.
  g = n.b.node("Div", p + "/Div", {g, scale});
  return transpose ? transpose_last(n, p + "/transpose", g) : g;
}

// DebertaV2Attention + the layer's intermediate and output: post-LayerNorm.
std::string deberta_layer(Net& n, const ModelConfig& c, int64_t l, const std::string& x, const std::string& rel,
                          const std::string& rel_emb, const std::string& rmask, const std::string& bhss) {
  const int64_t h = c.hidden, nh = c.heads, hd = c.head_dim, w = nh * hd;
  const std::string p = "deberta.encoder.layer." + std::to_string(l);
  const std::string a = p + ".attention.self";
  const std::string q = split_heads(n, a + "/q", linear(n, a + ".query_proj", x, h, w), nh, hd);
  const std::string k = split_heads(n, a + "/k", linear(n, a + ".key_proj", x, h, w), nh, hd);
  const std::string v = split_heads(n, a + "/v", linear(n, a + ".value_proj", x, h, w), nh, hd);
  const auto& d = c.deberta;
  const int terms = 1 + int(d.c2p) + int(d.p2c);
  const std::string scale = f32(n, a + "/scale", float(std::sqrt(double(hd) * terms)));
  // key.transpose(-1, -2) / scale: one division of the keys, the product reading it transposed.
  std::string scores = n.b.node("MatMul", a + "/MatMul", {q, transpose_last(n, a + "/k_T", n.b.node("Div", a + "/Div_k", {k, scale}))});
  // The relative embeddings through this layer's projections, [1, h, 2 span, d] repeated to [b, ...].
  const std::string reps = n.b.node("Concat", a + "/reps", {n.batch, n.b.ints(a + "/ones3", {1, 1, 1})});
  n.b.attr_i("axis", 0);
  // The projections' own weights (linear() above declared them) applied to the embeddings.
  auto project = [&](const char* which, const char* tag) {
    const std::string proj = a + "." + which;
    std::string y = n.b.node("MatMul", a + "/pos_" + tag + "/MatMul", {rel_emb, proj + ".weight"});
    y = n.b.node("Add", a + "/pos_" + tag + "/Add", {y, proj + ".bias"});
    const std::string r = n.b.node("Reshape", a + "/pos_" + tag + "/Reshape", {y, n.b.ints(a + "/pos_shape", {1, 2 * d.span, nh, hd})});
    const std::string t = n.b.node("Transpose", a + "/pos_" + tag + "/Transpose", {r});
    n.b.attr_ints("perm", {0, 2, 1, 3});
    return n.b.node("Tile", a + "/pos_" + tag + "/repeat", {t, reps});
  };
  if (d.c2p)
    scores = n.b.node("Add", a + "/Add_c2p", {scores, relative_term(n, a + "/c2p", q, project("key_proj", "key"),
                                                                   bucket_index(n, a + "/c2p_pos", rel, d.span, false, bhss), scale, false)});
  if (d.p2c)
    scores = n.b.node("Add", a + "/Add_p2c", {scores, relative_term(n, a + "/p2c", k, project("query_proj", "query"),
                                                                   bucket_index(n, a + "/p2c_pos", rel, d.span, true, bhss), scale, true)});
  // XSoftmax: the masked scores filled with finfo.min, softmax, the masked probabilities zeroed.
  scores = n.b.node("Where", a + "/masked_fill", {rmask, f32(n, a + "/c_min", kFloatMin), scores});
  std::string probs = n.b.node("Softmax", a + "/Softmax", {scores});
  n.b.attr_i("axis", -1);
  probs = dropout(n, a + ".dropout", n.b.node("Where", a + "/masked_fill_zero", {rmask, f32(n, a + "/c_zero", 0.0f), probs}), c.attn_dropout);
  std::string o = merge_heads(n, a + "/context", n.b.node("MatMul", a + "/MatMul_1", {probs, v}), w);
  o = dropout(n, p + ".attention.output.dropout", linear(n, p + ".attention.output.dense", o, w, h), c.dropout);
  const std::string attn = layer_norm(n, p + ".attention.output.LayerNorm", n.b.node("Add", p + ".attention.output/residual_Add", {o, x}),
                                      h, c.layer_norm_eps);
  std::string f = activation(n, p + ".intermediate.act", linear(n, p + ".intermediate.dense", attn, h, c.ffn), c.activation);
  f = dropout(n, p + ".output.dropout", linear(n, p + ".output.dense", f, c.ffn, h), c.dropout);
  return layer_norm(n, p + ".output.LayerNorm", n.b.node("Add", p + ".output/residual_Add", {f, attn}), h, c.layer_norm_eps);
}

// DebertaV2Embeddings: words (and positions, token types where configured), the projection to
// the hidden size, LayerNorm, times the mask, dropout.
std::string deberta_embeddings(Net& n, const ModelConfig& c, const std::string& ids, const std::string& mask) {
  const int64_t e = c.embed_dim > 0 ? c.embed_dim : c.hidden;
  const std::string m = "deberta.embeddings";
  std::string x = n.b.node("Gather", m + ".word_embeddings/Gather", {n.b.weight(m + ".word_embeddings.weight", {c.vocab, e}), ids});
  if (c.deberta.position_input) {
    std::string pos = sequence_arange(n, m + "/position_ids");
    pos = n.b.node("Unsqueeze", m + "/position_ids_2d", {pos, n.b.ints("const_axes0b", {0})});
    x = n.b.node("Add", m + "/Add_position", {x, n.b.node("Gather", m + ".position_embeddings/Gather",
                                                           {n.b.weight(m + ".position_embeddings.weight", {c.max_positions, e}), pos})});
  }
  if (c.type_vocab > 0) {
    const std::string tt = fill(n, m + "/token_type_ids", n.shape_bs(m + "/tt_shape", {}), kI64, 0);
    x = n.b.node("Add", m + "/Add_token_type", {x, n.b.node("Gather", m + ".token_type_embeddings/Gather",
                                                             {n.b.weight(m + ".token_type_embeddings.weight", {c.type_vocab, e}), tt})});
  }
  if (e != c.hidden) x = linear(n, m + ".embed_proj", x, e, c.hidden, false);
  x = layer_norm(n, m + ".LayerNorm", x, c.hidden, c.layer_norm_eps);
  const std::string m3 = n.b.node("Unsqueeze", m + "/mask_Unsqueeze", {mask, n.b.ints(m + "/axes2", {2})});
  x = n.b.node("Mul", m + "/Mul_mask", {x, m3});
  return dropout(n, m + ".dropout", x, c.dropout);
}

}  // namespace

LoadedModel build_deberta_v2(const ModelConfig& c) {
  Net n(c, "DeBERTa-v2 encoder (DebertaV2ForSequenceClassification)");
  const int64_t h = c.hidden, nh = c.heads;
  const std::string ids = n.token_input("input_ids");
  const std::string bs_shape = n.shape_bs("deberta/bs_shape", {});
  const std::string mask = fill(n, "deberta/attention_mask", bs_shape, kF32, 1.0);
  std::string x = deberta_embeddings(n, c, ids, mask);
  // get_attention_mask: mask[:, None, None, :] * mask[:, None, :, None] -> [b, 1, s, s]; each
  // layer's XSoftmax masks where it is 0.
  const std::string row = n.b.node("Unsqueeze", "deberta.encoder/mask_row", {mask, n.b.ints("const_axes12", {1, 2})});
  const std::string col = n.b.node("Unsqueeze", "deberta.encoder/mask_col", {mask, n.b.ints("deberta.encoder/axes13", {1, 3})});
  const std::string pair = n.b.node("Mul", "deberta.encoder/mask_Mul", {row, col});
  const std::string rel = relative_positions(n, c);
  std::string rel_emb = n.b.weight("deberta.encoder.rel_embeddings.weight", {2 * c.deberta.span, h});
  if (c.deberta.norm_rel) rel_emb = layer_norm(n, "deberta.encoder.LayerNorm", rel_emb, h, c.layer_norm_eps);
  const std::string bhss = n.b.node("Concat", "deberta.encoder/bhss", {n.batch, n.b.ints("deberta.encoder/heads", {nh}), n.seq, n.seq});
  n.b.attr_i("axis", 0);
  for (int64_t l = 0; l < c.layers; ++l) {
    // XSoftmax's rmask = ~mask.bool(), per layer.
    const std::string b = n.b.node("Cast", "deberta.encoder.layer." + std::to_string(l) + ".attention.self/mask_bool", {pair});
    n.b.attr_i("to", kBool);
    const std::string rmask = n.b.node("Not", "deberta.encoder.layer." + std::to_string(l) + ".attention.self/rmask", {b});
    x = deberta_layer(n, c, l, x, rel, rel_emb, rmask, bhss);
  }
  const std::string head = c.head.empty() ? "classification" : c.head;
  if (head == "base") {
    n.rename_last("last_hidden_state");
    n.output("last_hidden_state", {"batch", "sequence"}, {h});
    return n.finish(c);
  }
  if (head == "lm") {  // the MLM head: transform (dense, activation, LayerNorm), the decoder (tied, biased)
    std::string t = activation(n, "cls.predictions.transform.act", linear(n, "cls.predictions.transform.dense", x, h, h), c.activation);
    t = layer_norm(n, "cls.predictions.transform.LayerNorm", t, h, c.layer_norm_eps);
    linear(n, "cls.predictions.decoder", t, h, c.vocab);
    n.rename_last("logits");
    n.output("logits", {"batch", "sequence"}, {c.vocab});
    return n.finish(c);
  }
  if (head != "classification") throw InputError("deberta-v2: head must be base, classification or lm, got '" + head + "'");
  // ContextPooler: the first token, dropout, dense, the pooler activation; dropout, classifier.
  std::string t = n.b.node("Gather", "pooler/first_token", {x, n.b.ints("const_idx0b", {0}, true)});
  n.b.attr_i("axis", 1);
  t = activation(n, "pooler.act", linear(n, "pooler.dense", dropout(n, "pooler.dropout", t, c.dropout), h, h), c.encoder_head.activation);
  linear(n, "classifier", dropout(n, "dropout", t, c.dropout), h, c.num_labels);
  n.rename_last("logits");
  n.output("logits", {"batch"}, {c.num_labels});
  return n.finish(c);
}

}  // namespace neusight::builder
