// bert.cpp - BERT and RoBERTa / XLM-RoBERTa encoders in eager mode: HF
// BertForSequenceClassification (the form NeuSight traced and measured), BertForPreTraining,
// BertLMHeadModel / BertForMaskedLM, BertModel (the pooler, the embedding models' form), and
// the RoBERTa equivalents (RobertaForSequenceClassification's head on the first token without a
// pooler; positions counted from the padding index over the non-padding tokens).
#include <cmath>
#include <map>

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

namespace {

// x[:, 0]: the first token's row of [batch, sequence, hidden] (a Gather on axis 1), named `p`.
std::string first_token(Net& n, const std::string& p, const std::string& x, const std::string& zero) {
  const std::string t = n.b.node("Gather", p, {x, n.b.ints(zero, {0}, true)});
  n.b.attr_i("axis", 1);
  return t;
}

// A sequence classifier's last linear `p` over `t`: logits [batch, num_labels], the output.
LoadedModel classifier_logits(Net& n, const ModelConfig& c, const std::string& p, const std::string& t) {
  linear(n, p, t, c.hidden, c.num_labels);
  n.rename_last("logits");
  n.output("logits", {"batch"}, {c.num_labels});
  return n.finish(c);
}

// A masked-LM head's names: the transform's dense, its activation and LayerNorm, the decoder.
struct MlmNames {
  const char* dense;
  const char* act;
  const char* norm;
  const char* decoder;
};

// The masked-LM head over `x`: dense (hidden -> `width`), the activation `act`, LayerNorm, the
// vocabulary decoder; logits [batch, sequence, vocab], the output.
void mlm_logits(Net& n, const ModelConfig& c, const std::string& x, const MlmNames& names, int64_t width,
                const std::string& act) {
  std::string t = activation(n, names.act, linear(n, names.dense, x, c.hidden, width), act);
  t = layer_norm(n, names.norm, t, width, c.layer_norm_eps);
  linear(n, names.decoder, t, width, c.vocab);
  n.rename_last("logits");
  n.output("logits", {"batch", "sequence"}, {c.vocab});
}

// RoBERTa's (and MPNet's; ELECTRA's with GELU) classification head on the first token without
// a pooler: dropout, dense, `act`, dropout, out_proj.
LoadedModel first_token_classifier(Net& n, const ModelConfig& c, const std::string& x, const std::string& act) {
  std::string t = dropout(n, "classifier.dropout", first_token(n, "classifier/first_token", x, "const_idx0b"), c.dropout);
  const std::string d = linear(n, "classifier.dense", t, c.hidden, c.hidden);
  t = act == "tanh" ? n.b.node("Tanh", "classifier/Tanh", {d}) : activation(n, "classifier.activation", d, act);
  return classifier_logits(n, c, "classifier.out_proj", dropout(n, "classifier.dropout_1", t, c.dropout));
}

// A pretraining head's two-way classifier `p` on the pooled output (BERT's next-sentence
// prediction, ALBERT's sentence order): logits [batch, 2], the output `name`.
void pair_logits(Net& n, const std::string& p, const std::string& pooled, int64_t hidden, const std::string& name) {
  linear(n, p, pooled, hidden, 2);
  n.rename_last(name);
  n.output(name, {"batch"}, {2});
}

// BertModel, RobertaModel, AlbertModel, MPNetModel: the pooled output (the last node built)
// and the last hidden state `x` as the graph's outputs.
LoadedModel pooled_outputs(Net& n, const ModelConfig& c, const std::string& x) {
  n.rename_last("pooler_output");
  n.output("pooler_output", {"batch"}, {c.hidden});
  n.output(x, {"batch", "sequence"}, {c.hidden});
  return n.finish(c);
}

// BertEmbeddings under `m` at width `w` (the hidden size; ELECTRA's embedding_size): word +
// token type (buffered zeros; none where type_vocab is 0) + position (RoBERTa's from the
// padding index), LayerNorm, dropout.
std::string bert_embeddings(Net& n, const ModelConfig& c, const std::string& m, const std::string& ids,
                            const std::string& bs_shape, int64_t w) {
  std::string x = n.b.node("Gather", m + ".embeddings.word_embeddings/Gather",
                           {n.b.weight(m + ".embeddings.word_embeddings.weight", {c.vocab, w}), ids});
  if (c.type_vocab > 0) {  // MPNet has none
    const std::string tt_ids = fill(n, m + ".embeddings/token_type_ids", bs_shape, kI64, 0);
    const std::string tt = n.b.node("Gather", m + ".embeddings.token_type_embeddings/Gather",
                                    {n.b.weight(m + ".embeddings.token_type_embeddings.weight", {c.type_vocab, w}), tt_ids});
    x = n.b.node("Add", m + ".embeddings/Add", {x, tt});
  }
  std::string pos;
  if (c.position_offset > 0) {
    pos = padding_positions(n, m + ".embeddings/position_ids", ids, c.position_offset - 1);
  } else {
    pos = sequence_arange(n, m + ".embeddings/position_ids");
    pos = n.b.node("Unsqueeze", m + ".embeddings/position_ids_2d", {pos, n.b.ints("const_axes0b", {0})});
  }
  const std::string pe = n.b.node("Gather", m + ".embeddings.position_embeddings/Gather",
                                  {n.b.weight(m + ".embeddings.position_embeddings.weight", {c.max_positions + c.position_offset, w}), pos});
  x = n.b.node("Add", m + ".embeddings/Add_1", {x, pe});
  x = layer_norm(n, m + ".embeddings.LayerNorm", x, w, c.layer_norm_eps);
  return dropout(n, m + ".embeddings.dropout", x, c.dropout);
}

// The extended attention mask of an all-ones mask, (1 - mask[:, None, None, :]) * finfo.min,
// named under `m`. `bs_shape`: [batch, sequence].
std::string extended_attention_mask(Net& n, const std::string& m, const std::string& bs_shape) {
  const std::string ones = fill(n, m + "/attention_mask", bs_shape, kF32, 1.0);
  const std::string m4 = n.b.node("Unsqueeze", m + "/mask_Unsqueeze", {ones, n.b.ints("const_axes12", {1, 2})});
  const std::string inv = n.b.node("Sub", m + "/mask_Sub", {f32(n, m + "/c_one", 1.0f), m4});
  return n.b.node("Mul", m + "/mask_Mul", {inv, f32(n, m + "/c_min", kFloatMin)});
}

// BertLayer after BertLayer over `x` (extended_attention_mask's mask): the last hidden state.
std::string bert_encoder(Net& n, const ModelConfig& c, const std::string& m, const std::string& bs_shape, std::string x) {
  const int64_t h = c.hidden;
  const std::string ext = extended_attention_mask(n, m, bs_shape);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = m + ".encoder.layer." + std::to_string(l);
    x = attention(n, p + ".attention", x, c, ext);
    std::string f = linear(n, p + ".intermediate.dense", x, h, c.ffn);
    f = activation(n, p + ".intermediate.act", f, c.activation);
    f = linear(n, p + ".output.dense", f, c.ffn, h);
    f = dropout(n, p + ".output.dropout", f, c.dropout);
    f = n.b.node("Add", p + ".output/residual_Add", {f, x});
    x = layer_norm(n, p + ".output.LayerNorm", f, h, c.layer_norm_eps);
  }
  return x;
}

}  // namespace

LoadedModel build_bert(const ModelConfig& c) {
  const bool roberta = c.position_offset > 0;
  const std::string m = roberta ? "roberta" : "bert";
  Net n(c, roberta ? "RoBERTa encoder (RobertaForSequenceClassification)" : "BERT encoder (BertForSequenceClassification)");
  const int64_t h = c.hidden;
  const std::string ids = n.token_input("input_ids");
  const std::string bs_shape = n.shape_bs(m + "/bs_shape", {});
  const std::string x = bert_encoder(n, c, m, bs_shape, bert_embeddings(n, c, m, ids, bs_shape, h));
  const std::string head = c.head.empty() ? "classification" : c.head;
  if (head != "classification" && head != "pretraining" && head != "lm" && head != "base")
    throw InputError("bert: head must be classification, pretraining, lm or base, got '" + head + "'");
  if (roberta && head == "classification") return first_token_classifier(n, c, x, "tanh");  // no pooler
  std::string pooled;
  if (head != "lm") {  // pooler: first token, dense, tanh
    pooled = linear(n, m + ".pooler.dense", first_token(n, m + ".pooler/first_token", x, "const_idx0b"), h, h);
    pooled = n.b.node("Tanh", m + ".pooler/Tanh", {pooled});
  }
  if (head == "base") return pooled_outputs(n, c, x);  // BertModel / RobertaModel
  if (head == "classification") return classifier_logits(n, c, "classifier", dropout(n, "dropout", pooled, c.dropout));
  // Masked-LM head: transform (dense, activation, LayerNorm) and the vocabulary decoder
  // (RoBERTa's lm_head: dense, GELU, layer_norm, decoder).
  if (roberta) mlm_logits(n, c, x, {"lm_head.dense", "lm_head.gelu", "lm_head.layer_norm", "lm_head.decoder"}, h, "gelu");
  else
    mlm_logits(n, c, x, {"cls.predictions.transform.dense", "cls.predictions.transform.act",
                         "cls.predictions.transform.LayerNorm", "cls.predictions.decoder"}, h, c.activation);
  if (head == "pretraining") pair_logits(n, "cls.seq_relationship", pooled, h, "seq_relationship_logits");
  return n.finish(c);
}

// ELECTRA (HF ElectraModel, ElectraForPreTraining, ElectraForSequenceClassification,
// ElectraForMaskedLM): BERT's embeddings at embedding_size, projected to the hidden size where
// they differ (embeddings_project), BERT's layers, no pooler; the discriminator's head (dense,
// activation, one logit per token), ElectraClassificationHead on the first token (dense, GELU,
// out_proj) or the generator's (dense to embedding_size, GELU, LayerNorm, the vocabulary).
LoadedModel build_electra(const ModelConfig& c) {
  Net n(c, "ELECTRA encoder (ElectraForPreTraining)");
  const int64_t h = c.hidden, e = c.embed_dim > 0 ? c.embed_dim : h;
  const std::string ids = n.token_input("input_ids");
  const std::string bs_shape = n.shape_bs("electra/bs_shape", {});
  std::string x = bert_embeddings(n, c, "electra", ids, bs_shape, e);
  if (e != h) x = linear(n, "electra.embeddings_project", x, e, h);
  x = bert_encoder(n, c, "electra", bs_shape, x);
  const std::string head = c.head.empty() ? "pretraining" : c.head;
  if (head == "base") {
    n.output(x, {"batch", "sequence"}, {h});
    return n.finish(c);
  }
  if (head == "pretraining") {
    const std::string p = "discriminator_predictions";
    const std::string t = activation(n, p + ".activation", linear(n, p + ".dense", x, h, h), c.activation);
    linear(n, p + ".dense_prediction", t, h, 1);
    n.rename_last("logits");
    n.output("logits", {"batch", "sequence"}, {1});
    return n.finish(c);
  }
  if (head == "lm") {
    mlm_logits(n, c, x, {"generator_predictions.dense", "generator_predictions.activation", "generator_predictions.LayerNorm",
                         "generator_lm_head"}, e, "gelu");
    return n.finish(c);
  }
  if (head != "classification") throw InputError("electra: head must be pretraining, classification, lm or base, got '" + head + "'");
  return first_token_classifier(n, c, x, "gelu");
}

namespace {

// ALBERT's one layer whose weights every repetition reads: its linears and LayerNorms by
// name, created once (`w`: weight name -> initializer), run under each repetition's node names.
struct SharedLayer {
  Net& n;
  std::string weights;  // the layer's parameter prefix
  std::map<std::string, std::string> w;
  std::string weight(const std::string& name, const std::vector<int64_t>& dims) {
    auto it = w.find(name);
    if (it == w.end()) it = w.emplace(name, n.b.weight(weights + "." + name, dims)).first;
    return it->second;
  }
  std::string linear(const std::string& p, const std::string& name, const std::string& x, int64_t in, int64_t out) {
    const std::string y = n.b.node("MatMul", p + "." + name + "/MatMul", {x, weight(name + ".weight", {in, out})});
    return n.b.node("Add", p + "." + name + "/Add", {y, weight(name + ".bias", {out})});
  }
  std::string layer_norm(const std::string& p, const std::string& name, const std::string& x, int64_t h, double eps) {
    const std::string y = n.b.node("LayerNormalization", p + "." + name + "/LayerNormalization",
                                   {x, weight(name + ".weight", {h}), weight(name + ".bias", {h})});
    n.b.attr_i("axis", -1);
    n.b.attr_f("epsilon", static_cast<float>(eps));
    return y;
  }
};

}  // namespace

// ALBERT (HF AlbertModel, AlbertForSequenceClassification, AlbertForMaskedLM,
// AlbertForPreTraining): BERT's embeddings at embedding_size, embedding_hidden_mapping_in to
// the hidden size, then one layer's weights run num_hidden_layers times (the parameters held
// once, the work done every time): attention (query, key, value, dense, LayerNorm) and the
// feed-forward (ffn, the activation, ffn_output, full_layer_layer_norm); the pooler; the heads.
LoadedModel build_albert(const ModelConfig& c) {
  Net n(c, "ALBERT encoder (AlbertForSequenceClassification)");
  const int64_t h = c.hidden, e = c.embed_dim > 0 ? c.embed_dim : h, nh = c.heads, hd = c.head_dim;
  const std::string ids = n.token_input("input_ids");
  const std::string bs_shape = n.shape_bs("albert/bs_shape", {});
  std::string x = bert_embeddings(n, c, "albert", ids, bs_shape, e);
  x = linear(n, "albert.encoder.embedding_hidden_mapping_in", x, e, h);
  const std::string ext = extended_attention_mask(n, "albert", bs_shape);
  SharedLayer shared{n, "albert.encoder.albert_layer_groups.0.albert_layers.0", {}};
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "albert.encoder.layer." + std::to_string(l);
    const std::string a = p + ".attention";
    const std::string q = split_heads(n, a + "/q", shared.linear(a, "attention.query", x, h, h), nh, hd);
    const std::string k = split_heads(n, a + "/k", shared.linear(a, "attention.key", x, h, h), nh, hd);
    const std::string v = split_heads(n, a + "/v", shared.linear(a, "attention.value", x, h, h), nh, hd);
    std::string o = masked_attention(n, a, q, k, v, hd, ext, a + ".attention_dropout", c.attn_dropout, h);
    o = dropout(n, a + ".output_dropout", shared.linear(a, "attention.dense", o, h, h), c.dropout);
    x = shared.layer_norm(a, "attention.LayerNorm", n.b.node("Add", a + "/residual_Add", {x, o}), h, c.layer_norm_eps);
    std::string f = activation(n, p + ".activation", shared.linear(p, "ffn", x, h, c.ffn), c.activation);
    f = dropout(n, p + ".dropout", shared.linear(p, "ffn_output", f, c.ffn, h), c.dropout);
    x = shared.layer_norm(p, "full_layer_layer_norm", n.b.node("Add", p + "/residual_Add", {f, x}), h, c.layer_norm_eps);
  }
  const std::string head = c.head.empty() ? "classification" : c.head;
  if (head != "classification" && head != "pretraining" && head != "lm" && head != "base")
    throw InputError("albert: head must be classification, pretraining, lm or base, got '" + head + "'");
  std::string pooled;
  if (head != "lm") {
    pooled = linear(n, "albert.pooler", first_token(n, "albert.pooler/first_token", x, "const_idx0b"), h, h);
    pooled = n.b.node("Tanh", "albert.pooler_activation/Tanh", {pooled});
  }
  if (head == "base") return pooled_outputs(n, c, x);
  if (head == "classification") return classifier_logits(n, c, "classifier", dropout(n, "dropout", pooled, c.dropout));
  // AlbertMLMHead: dense to embedding_size, the activation, LayerNorm, the vocabulary decoder.
  mlm_logits(n, c, x, {"predictions.dense", "predictions.activation", "predictions.LayerNorm", "predictions.decoder"}, e,
             c.activation);
  if (head == "pretraining") pair_logits(n, "sop_classifier.classifier", pooled, h, "sop_logits");  // sentence order
  return n.finish(c);
}

// MPNet (HF MPNetModel, the form of sentence-transformers' all-mpnet-base-v2;
// MPNetForSequenceClassification, MPNetForMaskedLM): BERT's embeddings without token types,
// positions from the padding index; a T5-style bidirectional relative position bias computed
// once ([1, q, k, heads] permuted, expanded to the batch and made contiguous) and added to every
// layer's scaled scores before the mask; BERT's layer with attn.q / k / v / o; the pooler.
LoadedModel build_mpnet(const ModelConfig& c) {
  Net n(c, "MPNet encoder (MPNetModel)");
  const int64_t h = c.hidden, nh = c.heads, hd = c.head_dim;
  const std::string ids = n.token_input("input_ids");
  const std::string bs_shape = n.shape_bs("mpnet/bs_shape", {});
  std::string x = bert_embeddings(n, c, "mpnet", ids, bs_shape, h);
  const std::string ext = extended_attention_mask(n, "mpnet", bs_shape);
  std::string bias = n.b.node("Transpose", "mpnet.encoder/permute",
                              {relative_position_bias(n, "mpnet.encoder", c, true)});
  n.b.attr_ints("perm", {0, 3, 1, 2});
  const std::string bias_shape = n.b.node("Concat", "mpnet.encoder/bias_shape",
                                          {n.batch, n.b.ints("mpnet.encoder/heads", {nh}), n.seq, n.seq});
  n.b.attr_i("axis", 0);
  bias = n.b.node("Expand", "mpnet.encoder/expand_contiguous", {bias, bias_shape});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "mpnet.encoder.layer." + std::to_string(l);
    const std::string a = p + ".attention.attn";
    const std::string q = split_heads(n, a + "/q", linear(n, a + ".q", x, h, h), nh, hd);
    const std::string k = split_heads(n, a + "/k", linear(n, a + ".k", x, h, h), nh, hd);
    const std::string v = split_heads(n, a + "/v", linear(n, a + ".v", x, h, h), nh, hd);
    std::string o = masked_attention(n, a, q, k, v, hd, ext, a + ".dropout", c.attn_dropout, h, 0, bias);
    o = dropout(n, p + ".attention.dropout", linear(n, a + ".o", o, h, h), c.dropout);
    x = layer_norm(n, p + ".attention.LayerNorm", n.b.node("Add", p + ".attention/residual_Add", {o, x}), h, c.layer_norm_eps);
    std::string f = activation(n, p + ".intermediate.act", linear(n, p + ".intermediate.dense", x, h, c.ffn), c.activation);
    f = dropout(n, p + ".output.dropout", linear(n, p + ".output.dense", f, c.ffn, h), c.dropout);
    x = layer_norm(n, p + ".output.LayerNorm", n.b.node("Add", p + ".output/residual_Add", {f, x}), h, c.layer_norm_eps);
  }
  const std::string head = c.head.empty() ? "base" : c.head;
  if (head == "lm") {  // MPNetLMHead: dense, GELU, layer_norm, decoder
    mlm_logits(n, c, x, {"lm_head.dense", "lm_head.gelu", "lm_head.layer_norm", "lm_head.decoder"}, h, "gelu");
    return n.finish(c);
  }
  if (head == "classification") return first_token_classifier(n, c, x, "tanh");  // no pooler
  if (head != "base") throw InputError("mpnet: head must be base, classification or lm, got '" + head + "'");
  const std::string pooled = linear(n, "mpnet.pooler.dense", first_token(n, "mpnet.pooler/first_token", x, "const_idx0b"), h, h);
  n.b.node("Tanh", "mpnet.pooler/Tanh", {pooled});
  return pooled_outputs(n, c, x);
}

// DistilBERT (HF DistilBertModel, DistilBertForSequenceClassification, DistilBertForMaskedLM):
// word and learned position embeddings (no token types), LayerNorm; post-LayerNorm layers
// whose attention scales the queries by head_dim^-0.5 before the product and fills the masked
// scores (masked_fill of an all-ones mask: a where over the scores), q_lin / k_lin / v_lin /
// out_lin, sa_layer_norm, lin1, the activation, lin2, output_layer_norm.
LoadedModel build_distilbert(const ModelConfig& c) {
  Net n(c, "DistilBERT encoder (DistilBertForSequenceClassification)");
  const std::string ids = n.token_input("input_ids");
  const int64_t h = c.hidden, nh = c.heads, hd = c.head_dim;
  const std::string bs_shape = n.shape_bs("distilbert/bs_shape", {});
  std::string x = bert_embeddings(n, c, "distilbert", ids, bs_shape, h);  // no token types
  // (attention_mask == 0) as [batch, 1, 1, keys]: the scores' masked_fill condition.
  std::string masked = n.b.node("Equal", "distilbert/mask_Equal",
                                {fill(n, "distilbert/attention_mask", bs_shape, kI64, 1.0), n.b.ints("distilbert/zero", {0}, true)});
  masked = n.b.node("Unsqueeze", "distilbert/mask_4d", {masked, n.b.ints("distilbert/ax12", {1, 2})});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "distilbert.transformer.layer." + std::to_string(l);
    const std::string a = p + ".attention";
    std::string q = split_heads(n, a + "/q", linear(n, a + ".q_lin", x, h, h), nh, hd);
    q = n.b.node("Div", a + "/q_scale", {q, f32(n, a + "/sqrt_hd", static_cast<float>(std::sqrt(double(hd))))});
    const std::string k = split_heads(n, a + "/k", linear(n, a + ".k_lin", x, h, h), nh, hd);
    const std::string v = split_heads(n, a + "/v", linear(n, a + ".v_lin", x, h, h), nh, hd);
    std::string s = n.b.node("MatMul", a + "/MatMul", {q, transpose_last(n, a + "/kT", k)});
    s = n.b.node("Where", a + "/masked_fill", {masked, f32(n, a + "/min", kFloatMin), s});
    s = n.b.node("Softmax", a + "/Softmax", {s});
    n.b.attr_i("axis", -1);
    s = dropout(n, a + ".dropout", s, c.attn_dropout);
    std::string o = merge_heads(n, a + "/merge", n.b.node("MatMul", a + "/MatMul_1", {s, v}), h);
    o = linear(n, a + ".out_lin", o, h, h);
    x = layer_norm(n, p + ".sa_layer_norm", n.b.node("Add", p + "/sa_residual_Add", {o, x}), h, c.layer_norm_eps);
    std::string f = activation(n, p + ".ffn.activation", linear(n, p + ".ffn.lin1", x, h, c.ffn), c.activation);
    f = dropout(n, p + ".ffn.dropout", linear(n, p + ".ffn.lin2", f, c.ffn, h), c.dropout);
    x = layer_norm(n, p + ".output_layer_norm", n.b.node("Add", p + "/ffn_residual_Add", {f, x}), h, c.layer_norm_eps);
  }
  const std::string head = c.head.empty() ? "classification" : c.head;
  if (head == "base") {  // DistilBertModel: the last hidden state (no pooler)
    n.output(x, {"batch", "sequence"}, {h});
    return n.finish(c);
  }
  if (head == "lm") {  // vocab_transform, GELU, vocab_layer_norm, vocab_projector (tied)
    mlm_logits(n, c, x, {"vocab_transform", "activation", "vocab_layer_norm", "vocab_projector"}, h, c.activation);
    return n.finish(c);
  }
  if (head != "classification") throw InputError("distilbert: head must be classification, lm or base, got '" + head + "'");
  const std::string t = first_token(n, "pre_classifier/first_token", x, "distilbert/idx0");
  return classifier_logits(n, c, "classifier",
                           dropout(n, "dropout", n.b.node("Relu", "pre_classifier/Relu", {linear(n, "pre_classifier", t, h, h)}), c.dropout));
}

}  // namespace neusight::builder
