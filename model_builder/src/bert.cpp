// bert.cpp - BERT encoder with pooler and sequence-classification head (HF
// BertForSequenceClassification in eager mode, the form NeuSight traced and measured).
#include "common.h"
#include "families.h"

namespace neusight::builder {

namespace {

// BertSelfAttention + BertSelfOutput.
std::string attention(Net& n, const std::string& p, const std::string& x, const ModelConfig& c,
                      const std::string& ext_mask) {
  const int64_t h = c.hidden, nh = c.heads, hd = c.head_dim;
  const std::string q = split_heads(n, p + ".self/q", linear(n, p + ".self.query", x, h, nh * hd), nh, hd);
  const std::string k = split_heads(n, p + ".self/k", linear(n, p + ".self.key", x, h, nh * hd), nh, hd);
  const std::string v = split_heads(n, p + ".self/v", linear(n, p + ".self.value", x, h, nh * hd), nh, hd);
  std::string o = masked_attention(n, p + ".self", q, k, v, hd, ext_mask, p + ".self.dropout", c.attn_dropout, nh * hd);
  o = linear(n, p + ".output.dense", o, nh * hd, h);
  o = dropout(n, p + ".output.dropout", o, c.dropout);
  o = n.b.node("Add", p + ".output/residual_Add", {o, x});
  return layer_norm(n, p + ".output.LayerNorm", o, h, c.layer_norm_eps);
}

}  // namespace

LoadedModel build_bert(const ModelConfig& c) {
  Net n(c, "BERT encoder (BertForSequenceClassification)");
  const std::string ids = n.token_input("input_ids");
  const int64_t h = c.hidden;
  const std::string bs_shape = n.shape_bs("bert/bs_shape", {});

  // Embeddings: word + token type (buffered zeros) + position, LayerNorm, dropout.
  std::string x = n.b.node("Gather", "bert.embeddings.word_embeddings/Gather",
                           {n.b.weight("bert.embeddings.word_embeddings.weight", {c.vocab, h}), ids});
  const std::string tt_ids = fill(n, "bert.embeddings/token_type_ids", bs_shape, kI64, 0);
  const std::string tt = n.b.node("Gather", "bert.embeddings.token_type_embeddings/Gather",
                                  {n.b.weight("bert.embeddings.token_type_embeddings.weight", {c.type_vocab, h}), tt_ids});
  x = n.b.node("Add", "bert.embeddings/Add", {x, tt});
  const std::string pos = n.b.node("Range", "bert.embeddings/position_ids",
                                   {n.b.ints("const_zero", {0}, true), n.seq_scalar, n.b.ints("const_one", {1}, true)});
  const std::string pos2 = n.b.node("Unsqueeze", "bert.embeddings/position_ids_2d", {pos, n.b.ints("const_axes0b", {0})});
  const std::string pe = n.b.node("Gather", "bert.embeddings.position_embeddings/Gather",
                                  {n.b.weight("bert.embeddings.position_embeddings.weight", {c.max_positions, h}), pos2});
  x = n.b.node("Add", "bert.embeddings/Add_1", {x, pe});
  x = layer_norm(n, "bert.embeddings.LayerNorm", x, h, c.layer_norm_eps);
  x = dropout(n, "bert.embeddings.dropout", x, c.dropout);

  // Extended attention mask from an all-ones mask: (1 - mask[:, None, None, :]) * finfo.min.
  const std::string ones = fill(n, "bert/attention_mask", bs_shape, kF32, 1.0);
  const std::string m4 = n.b.node("Unsqueeze", "bert/mask_Unsqueeze", {ones, n.b.ints("const_axes12", {1, 2})});
  const std::string inv = n.b.node("Sub", "bert/mask_Sub", {f32(n, "bert/c_one", 1.0f), m4});
  const std::string ext = n.b.node("Mul", "bert/mask_Mul", {inv, f32(n, "bert/c_min", kFloatMin)});

  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "bert.encoder.layer." + std::to_string(l);
    x = attention(n, p + ".attention", x, c, ext);
    std::string f = linear(n, p + ".intermediate.dense", x, h, c.ffn);
    f = activation(n, p + ".intermediate.act", f, c.activation);
    f = linear(n, p + ".output.dense", f, c.ffn, h);
    f = dropout(n, p + ".output.dropout", f, c.dropout);
    f = n.b.node("Add", p + ".output/residual_Add", {f, x});
    x = layer_norm(n, p + ".output.LayerNorm", f, h, c.layer_norm_eps);
  }
  const std::string head = c.head.empty() ? "classification" : c.head;
  if (head != "classification" && head != "pretraining" && head != "lm")
    throw InputError("bert: head must be classification, pretraining or lm, got '" + head + "'");
  std::string pooled;
  if (head != "lm") {  // pooler: first token, dense, tanh
    pooled = n.b.node("Gather", "bert.pooler/first_token", {x, n.b.ints("const_idx0b", {0}, true)});
    n.b.attr_i("axis", 1);
    pooled = linear(n, "bert.pooler.dense", pooled, h, h);
    pooled = n.b.node("Tanh", "bert.pooler/Tanh", {pooled});
  }
  if (head == "classification") {
    pooled = dropout(n, "dropout", pooled, c.dropout);
    linear(n, "classifier", pooled, h, c.num_labels);
    n.rename_last("logits");
    n.output("logits", {"batch"}, {c.num_labels});
    return n.finish(c);
  }
  // Masked-LM head: transform (dense, activation, LayerNorm) and the vocabulary decoder.
  std::string t = linear(n, "cls.predictions.transform.dense", x, h, h);
  t = activation(n, "cls.predictions.transform.act", t, c.activation);
  t = layer_norm(n, "cls.predictions.transform.LayerNorm", t, h, c.layer_norm_eps);
  linear(n, "cls.predictions.decoder", t, h, c.vocab);
  n.rename_last("logits");
  n.output("logits", {"batch", "sequence"}, {c.vocab});
  if (head == "pretraining") {
    linear(n, "cls.seq_relationship", pooled, h, 2);
    n.rename_last("seq_relationship_logits");
    n.output("seq_relationship_logits", {"batch"}, {2});
  }
  return n.finish(c);
}

}  // namespace neusight::builder
