// deberta.cpp - DeBERTa (v1: HF DebertaModel, DebertaForSequenceClassification,
// DebertaForMaskedLM) and DeBERTa-v2 / v3 (DebertaV2Model, ...) in eager mode: word embeddings
// (projected where embedding_size differs, absolute positions added only with
// position_biased_input), LayerNorm, times the mask; post-LayerNorm layers whose
// DisentangledSelfAttention adds to the content scores the content-to-position and
// position-to-content terms: the relative embeddings through query and key projections,
// multiplied with the queries or keys and gathered at each pair's relative position; XSoftmax.
// v2 / v3: the relative embeddings LayerNorm'd once, through each layer's own query and key
// projections (share_att_key), repeated over the batch, relative positions in log buckets.
// v1: q, k and v out of one in_proj GEMM with q_bias and v_bias, the embeddings' rows within
// min(sequence, max_relative_positions) through pos_proj and pos_q_proj, DebertaLayerNorm.
#include <cmath>

#include "common.h"
#include "families.h"

namespace neusight::builder {

namespace {

// build_relative_position with make_log_bucket_position: q_ids[:, None] - k_ids[None, :] over
// the sequence (v1 repeats k_ids over the queries first, a copy), beyond +-buckets/2 on a log
// scale up to max_relative, as int64 [s, s].
std::string relative_positions(Net& n, const ModelConfig& c) {
  const std::string p = "deberta.encoder/rel_pos";
  const auto& d = c.deberta;
  // torch.arange(sequence), under names of its own: the embeddings' position ids may take one too.
  const std::string ids = n.b.node("Range", p + "/ids", {n.b.ints(p + "/zero", {0}, true), n.seq_scalar, n.b.ints(p + "/one", {1}, true)});
  const std::string q = n.b.node("Unsqueeze", p + "/q_ids", {ids, n.b.ints(p + "/axes1", {1})});
  std::string k = n.b.node("Unsqueeze", p + "/k_ids", {ids, n.b.ints(p + "/axes0", {0})});
  if (d.v1) {
    const std::string reps = n.b.node("Concat", p + "/k_reps", {n.seq, n.b.ints(p + "/one_1d", {1})});
    n.b.attr_i("axis", 0);
    k = n.b.node("Tile", p + "/k_repeat", {k, reps});
  }
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

// What every layer's relative terms read: the relative positions [s, s], the relative
// embeddings [2 x max span, hidden] (v2: LayerNorm'd), the gather's offset `span` and last
// index `last` (int64 scalars), v1's rows of the embeddings within the span [rows_from,
// rows_to), and the gathers' shape [batch, heads, s, s].
struct Relative {
  std::string pos, emb, span, last, rows_from, rows_to, bhss;
};

// DebertaEncoder's relative positions and embeddings, built once. v2: the span is the bucket
// count. v1: att_span = min(sequence, max_relative_positions), a host value each layer computes
// alike; its rows are [max_relative - span, max_relative + span).
Relative relative_inputs(Net& n, const ModelConfig& c) {
  const auto& d = c.deberta;
  const std::string e = "deberta.encoder";
  Relative r;
  r.pos = relative_positions(n, c);
  r.emb = n.b.weight(e + ".rel_embeddings.weight", {2 * d.span, c.hidden});
  if (d.norm_rel) r.emb = layer_norm(n, e + ".LayerNorm", r.emb, c.hidden, c.layer_norm_eps);
  r.bhss = n.b.node("Concat", e + "/bhss", {n.batch, n.b.ints(e + "/heads", {c.heads}), n.seq, n.seq});
  n.b.attr_i("axis", 0);
  if (!d.v1) {
    r.span = n.b.ints(e + "/rel_span", {d.span}, true);
    r.last = n.b.ints(e + "/rel_last", {2 * d.span - 1}, true);
    return r;
  }
  r.span = n.b.node("Min", e + "/att_span", {n.seq_scalar, n.b.ints(e + "/max_relative", {d.span}, true)});
  r.last = n.b.node("Sub", e + "/att_last", {n.b.node("Add", e + "/att_width", {r.span, r.span}), n.b.ints(e + "/one", {1}, true)});
  const std::string span1 = n.b.node("Unsqueeze", e + "/att_span_1d", {r.span, n.b.ints(e + "/axes0", {0})});
  const std::string middle = n.b.ints(e + "/rel_middle", {d.span});
  r.rows_from = n.b.node("Sub", e + "/rel_rows_from", {middle, span1});
  r.rows_to = n.b.node("Add", e + "/rel_rows_to", {middle, span1});
  return r;
}

// The gather index of one term: clamp(pos + span, 0, 2 span - 1) ([s, s]; `neg`: -pos, the
// position-to-content term), expanded over [batch, heads, s, s] (a view the gather reads).
std::string bucket_index(Net& n, const std::string& p, const Relative& r, bool neg) {
  std::string pos = neg ? n.b.node("Neg", p + "/Neg", {r.pos}) : r.pos;
  pos = n.b.node("Add", p + "/Add_span", {pos, r.span});
  pos = n.b.node("Clip", p + "/Clip", {pos, n.b.ints(p + "/lo", {0}, true), r.last});
  return n.b.node("Expand", p + "/Expand", {pos, r.bhss});
}

// torch.gather of the product `att` ([b, h, s, 2 span]) at `index` along the last axis.
std::string gather_term(Net& n, const std::string& p, const std::string& att, const std::string& index) {
  const std::string g = n.b.node("GatherElements", p + "/gather", {att, index});
  n.b.attr_i("axis", -1);
  return g;
}

// One v2 relative term: `x` (queries or keys, [b, h, s, d]) times the projected relative
// embeddings `pos` ([b, h, 2 span, d]) transposed, gathered at `index`, divided by `scale`; the
// position-to-content term transposed.
std::string relative_term(Net& n, const std::string& p, const std::string& x, const std::string& pos,
                          const std::string& index, const std::string& scale, bool transpose) {
  const std::string att = n.b.node("MatMul", p + "/MatMul", {x, transpose_last(n, p + "/pos_T", pos)});
  // PyTorch divides the transposed view (one kernel, which keeps its strides); the score's Add
  // reads it through them.
  const std::string g = n.b.node("Div", p + "/Div", {gather_term(n, p, att, index), scale});
  return transpose ? transpose_last(n, p + "/transpose", g) : g;
}

// DebertaV2's DisentangledSelfAttention up to its scores: query_proj, key_proj and value_proj
// split into heads (the values into `v`), q k^T with the keys divided by `scale`, plus the
// relative terms through the same projections (share_att_key), each divided by `scale`.
std::string v2_scores(Net& n, const ModelConfig& c, const std::string& a, const std::string& x, const Relative& r,
                      const std::string& scale, std::string& v) {
  const int64_t h = c.hidden, nh = c.heads, hd = c.head_dim, w = nh * hd;
  const auto& d = c.deberta;
  const std::string q = split_heads(n, a + "/q", linear(n, a + ".query_proj", x, h, w), nh, hd);
  const std::string k = split_heads(n, a + "/k", linear(n, a + ".key_proj", x, h, w), nh, hd);
  v = split_heads(n, a + "/v", linear(n, a + ".value_proj", x, h, w), nh, hd);
  // key.transpose(-1, -2) / scale: one division of the keys, the product reading it transposed.
  std::string scores = n.b.node("MatMul", a + "/MatMul", {q, transpose_last(n, a + "/k_T", n.b.node("Div", a + "/Div_k", {k, scale}))});
  // The relative embeddings through this layer's projections, [1, h, 2 span, d] repeated to [b, ...].
  const std::string reps = n.b.node("Concat", a + "/reps", {n.batch, n.b.ints(a + "/ones3", {1, 1, 1})});
  n.b.attr_i("axis", 0);
  // The projections' own weights (linear() above declared them) applied to the embeddings.
  auto project = [&](const char* which, const char* tag) {
    const std::string proj = a + "." + which;
    std::string y = n.b.node("MatMul", a + "/pos_" + tag + "/MatMul", {r.emb, proj + ".weight"});
    y = n.b.node("Add", a + "/pos_" + tag + "/Add", {y, proj + ".bias"});
    const std::string rs = n.b.node("Reshape", a + "/pos_" + tag + "/Reshape",
                                    {y, n.b.ints(a + "/pos_" + tag + "_shape", {1, 2 * d.span, nh, hd})});
    const std::string t = n.b.node("Transpose", a + "/pos_" + tag + "/Transpose", {rs});
    n.b.attr_ints("perm", {0, 2, 1, 3});
    return n.b.node("Tile", a + "/pos_" + tag + "/repeat", {t, reps});
  };
  if (d.c2p)
    scores = n.b.node("Add", a + "/Add_c2p", {scores, relative_term(n, a + "/c2p", q, project("key_proj", "key"),
                                                                   bucket_index(n, a + "/c2p_pos", r, false), scale, false)});
  if (d.p2c)
    scores = n.b.node("Add", a + "/Add_p2c", {scores, relative_term(n, a + "/p2c", k, project("query_proj", "query"),
                                                                   bucket_index(n, a + "/p2c_pos", r, true), scale, true)});
  return scores;
}

// The query, key or value of v1's in_proj output viewed as [b, s, heads, 3 head_dim]: the
// `i`-th head_dim of each head's row (chunk(3, dim=-1): a view).
std::string in_proj_part(Net& n, const std::string& a, const std::string& qkv, int64_t hd, const std::string& name, int64_t i) {
  return n.b.node("Slice", a + "/" + name, {qkv, n.b.ints(a + "/" + name + "_s", {i * hd}), n.b.ints(a + "/" + name + "_e", {(i + 1) * hd}),
                                            n.b.ints(a + "/" + name + "_ax", {3})});
}

// [b, s, heads, d] -> [b, heads, s, d]: the order transpose_for_scores' permute gives the heads.
// PyTorch's elementwise kernels on the permuted view (the biases, the scale) write outputs of the
// view's layout, so they are applied before it here; the matmuls read it through its strides.
std::string heads_first(Net& n, const std::string& p, const std::string& x) {
  const std::string t = n.b.node("Transpose", p + "/Transpose", {x});
  n.b.attr_ints("perm", {0, 2, 1, 3});
  return t;
}

// v1's relative terms for queries `q` (already scaled) and keys `k`: the relative embeddings
// (pos_dropout) at the span's rows (a view), through pos_proj (c2p; no bias) and pos_q_proj
// (p2c; divided by `scale` in place), each viewed as [1, heads, head_dim, 2 span]; the products
// gathered. score = 0, score += c2p_att, score += p2c_att: the first a kernel of its own (0 +
// c2p_att). Empty without terms.
std::string v1_relative(Net& n, const ModelConfig& c, const std::string& a, const std::string& q, const std::string& k,
                        const Relative& r, const std::string& scale) {
  const int64_t h = c.hidden, nh = c.heads, hd = c.head_dim, w = nh * hd;
  const auto& d = c.deberta;
  if (!d.c2p && !d.p2c) return "";
  const std::string emb = n.b.node("Slice", a + "/rel_rows", {dropout(n, a + ".pos_dropout", r.emb, c.dropout), r.rows_from, r.rows_to,
                                                               n.b.ints(a + "/rel_rows_axis", {0})});
  const auto project = [&](const std::string& name, bool bias) {
    std::string y = n.b.node("Reshape", a + "/" + name + "_heads", {linear(n, a + "." + name, emb, h, w, bias),
                                                                      n.b.ints(a + "/" + name + "_shape", {1, -1, nh, hd})});
    if (bias) y = n.b.node("Div", a + "/" + name + "_Div", {y, scale});  // pos_q_proj's /= scale
    const std::string t = n.b.node("Transpose", a + "/" + name + "_T", {y});
    n.b.attr_ints("perm", {0, 2, 3, 1});
    return t;
  };
  std::string score;
  const std::string zero = f32(n, a + "/score_zero", 0.0f);
  if (d.c2p) {
    const std::string att = n.b.node("MatMul", a + "/c2p/MatMul", {q, project("pos_proj", false)});
    score = n.b.node("Add", a + "/score_c2p", {gather_term(n, a + "/c2p", att, bucket_index(n, a + "/c2p_pos", r, false)), zero});
  }
  if (d.p2c) {
    const std::string att = n.b.node("MatMul", a + "/p2c/MatMul", {k, project("pos_q_proj", true)});
    const std::string g = transpose_last(n, a + "/p2c/transpose", gather_term(n, a + "/p2c", att, bucket_index(n, a + "/p2c_pos", r, true)));
    score = n.b.node("Add", a + "/score_p2c", {score.empty() ? g : score, score.empty() ? zero : g});
  }
  return score;
}

// v1's DisentangledSelfAttention up to its scores: in_proj (one GEMM, no bias), q_bias added to
// the queries and divided by `scale`, v_bias added to the values (into `v`), q k^T, plus the
// relative terms where relative_attention (rel_att; an integer 0 without terms, added all the
// same).
std::string v1_scores(Net& n, const ModelConfig& c, const std::string& a, const std::string& x, const Relative& r,
                      const std::string& scale, std::string& v) {
  const int64_t h = c.hidden, nh = c.heads, hd = c.head_dim, w = nh * hd;
  const std::string qkv = n.b.node("Reshape", a + "/qkv_heads", {linear(n, a + ".in_proj", x, h, 3 * w, false),
                                                                  n.shape_bs(a + "/qkv_shape", {nh, 3 * hd})});
  const auto biased = [&](const std::string& part, const std::string& name) {
    const std::string b = n.b.node("Reshape", a + "/" + name + "_heads", {n.b.weight(a + "." + name, {w}),
                                                                           n.b.ints(a + "/" + name + "_shape", {nh, hd})});
    return n.b.node("Add", a + "/Add_" + name, {part, b});
  };
  const std::string q = heads_first(n, a + "/q", n.b.node("Div", a + "/Div_q", {biased(in_proj_part(n, a, qkv, hd, "q", 0), "q_bias"), scale}));
  const std::string k = heads_first(n, a + "/k", in_proj_part(n, a, qkv, hd, "k", 1));
  v = heads_first(n, a + "/v", biased(in_proj_part(n, a, qkv, hd, "v", 2), "v_bias"));
  const std::string scores = n.b.node("MatMul", a + "/MatMul", {q, transpose_last(n, a + "/k_T", k)});
  if (!c.deberta.relative) return scores;
  const std::string rel = v1_relative(n, c, a, q, k, r, scale);
  return n.b.node("Add", a + "/Add_rel", {scores, rel.empty() ? f32(n, a + "/rel_zero", 0.0f) : rel});
}

// DebertaLayerNorm (v1) as eager runs it, each step a kernel: the mean; the variance, the mean of
// (x - mean)^2; (x - mean), computed again, over sqrt(variance + eps); times the weight, plus
// the bias. nn.LayerNorm (v2) is one kernel.
std::string deberta_norm(Net& n, const ModelConfig& c, const std::string& p, const std::string& x) {
  const int64_t h = c.hidden;
  if (!c.deberta.v1) return layer_norm(n, p, x, h, c.layer_norm_eps);
  const auto mean = [&](const std::string& name, const std::string& t) {
    const std::string m = n.b.node("ReduceMean", p + "/" + name, {t});
    n.b.attr_ints("axes", {-1});
    n.b.attr_i("keepdims", 1);
    return m;
  };
  const std::string mu = mean("ReduceMean", x);
  const std::string var = mean("ReduceMean_1", n.b.node("Pow", p + "/Pow", {n.b.node("Sub", p + "/Sub", {x, mu}), f32(n, p + "/c_two", 2.0f)}));
  const std::string sd = n.b.node("Sqrt", p + "/Sqrt", {n.b.node("Add", p + "/Add_eps", {var, f32(n, p + "/c_eps", float(c.layer_norm_eps))})});
  const std::string y = n.b.node("Div", p + "/Div", {n.b.node("Sub", p + "/Sub_1", {x, mu}), sd});
  return n.b.node("Add", p + "/Add", {n.b.node("Mul", p + "/Mul", {n.b.weight(p + ".weight", {h}), y}), n.b.weight(p + ".bias", {h})});
}

// DebertaLayer: the attention's scores (v1 or v2), XSoftmax, the context, the output projection
// and the post-LayerNorm MLP, as BERT's.
std::string deberta_layer(Net& n, const ModelConfig& c, int64_t l, const std::string& x, const Relative& r,
                          const std::string& rmask) {
  const int64_t h = c.hidden, w = c.heads * c.head_dim;
  const std::string p = "deberta.encoder.layer." + std::to_string(l);
  const std::string a = p + ".attention.self";
  const auto& d = c.deberta;
  // sqrt(head_dim x (1 + the relative terms listed)).
  const std::string scale = f32(n, a + "/scale", float(std::sqrt(double(c.head_dim) * (1 + int(d.c2p) + int(d.p2c)))));
  std::string v;
  std::string scores = d.v1 ? v1_scores(n, c, a, x, r, scale, v) : v2_scores(n, c, a, x, r, scale, v);
  // XSoftmax: the masked scores filled with finfo.min, softmax, the masked probabilities zeroed.
  scores = n.b.node("Where", a + "/masked_fill", {rmask, f32(n, a + "/c_min", kFloatMin), scores});
  std::string probs = n.b.node("Softmax", a + "/Softmax", {scores});
  n.b.attr_i("axis", -1);
  probs = dropout(n, a + ".dropout", n.b.node("Where", a + "/masked_fill_zero", {rmask, f32(n, a + "/c_zero", 0.0f), probs}), c.attn_dropout);
  std::string o = merge_heads(n, a + "/context", n.b.node("MatMul", a + "/MatMul_1", {probs, v}), w);
  o = dropout(n, p + ".attention.output.dropout", linear(n, p + ".attention.output.dense", o, w, h), c.dropout);
  const std::string attn = deberta_norm(n, c, p + ".attention.output.LayerNorm", n.b.node("Add", p + ".attention.output/residual_Add", {o, x}));
  std::string f = activation(n, p + ".intermediate.act", linear(n, p + ".intermediate.dense", attn, h, c.ffn), c.activation);
  f = dropout(n, p + ".output.dropout", linear(n, p + ".output.dense", f, c.ffn, h), c.dropout);
  return deberta_norm(n, c, p + ".output.LayerNorm", n.b.node("Add", p + ".output/residual_Add", {f, attn}));
}

// DebertaEmbeddings / DebertaV2Embeddings: words, and positions and token types where configured
// (token_type_ids = torch.zeros(...) and, without a position table, position_embeddings =
// torch.zeros_like(...) are filled all the same), the projection to the hidden size, LayerNorm,
// times the mask, dropout.
std::string deberta_embeddings(Net& n, const ModelConfig& c, const std::string& ids, const std::string& mask) {
  const int64_t e = c.embed_dim > 0 ? c.embed_dim : c.hidden;
  const std::string m = "deberta.embeddings";
  std::string x = n.b.node("Gather", m + ".word_embeddings/Gather", {n.b.weight(m + ".word_embeddings.weight", {c.vocab, e}), ids});
  const std::string tt = fill(n, m + "/token_type_ids", n.shape_bs(m + "/tt_shape", {}), kI64, 0);
  if (c.deberta.position_input) {
    std::string pos = sequence_arange(n, m + "/position_ids");
    pos = n.b.node("Unsqueeze", m + "/position_ids_2d", {pos, n.b.ints("const_axes0b", {0})});
    x = n.b.node("Add", m + "/Add_position", {x, n.b.node("Gather", m + ".position_embeddings/Gather",
                                                           {n.b.weight(m + ".position_embeddings.weight", {c.max_positions, e}), pos})});
  } else {
    fill(n, m + "/position_zeros", n.shape_bs(m + "/zeros_shape", {e}), kF32, 0);
  }
  if (c.type_vocab > 0)
    x = n.b.node("Add", m + "/Add_token_type", {x, n.b.node("Gather", m + ".token_type_embeddings/Gather",
                                                             {n.b.weight(m + ".token_type_embeddings.weight", {c.type_vocab, e}), tt})});
  if (e != c.hidden) x = linear(n, m + ".embed_proj", x, e, c.hidden, false);
  x = deberta_norm(n, c, m + ".LayerNorm", x);
  const std::string m3 = n.b.node("Unsqueeze", m + "/mask_Unsqueeze", {mask, n.b.ints(m + "/axes2", {2})});
  x = n.b.node("Mul", m + "/Mul_mask", {x, m3});
  return dropout(n, m + ".dropout", x, c.dropout);
}

// The model's head on the encoder's output `x`: none (the last hidden state), the masked-LM head
// or the sequence classifier.
LoadedModel deberta_head(Net& n, const ModelConfig& c, const std::string& x) {
  const int64_t h = c.hidden;
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
  if (head != "classification") throw InputError(c.model_type + ": head must be base, classification or lm, got '" + head + "'");
  // ContextPooler: the first token, dropout, dense, the pooler activation; dropout, classifier.
  std::string t = n.b.node("Gather", "pooler/first_token", {x, n.b.ints("const_idx0b", {0}, true)});
  n.b.attr_i("axis", 1);
  t = activation(n, "pooler.act", linear(n, "pooler.dense", dropout(n, "pooler.dropout", t, c.dropout), h, h), c.encoder_head.activation);
  linear(n, "classifier", dropout(n, "dropout", t, c.dropout), h, c.num_labels);
  n.rename_last("logits");
  n.output("logits", {"batch"}, {c.num_labels});
  return n.finish(c);
}

}  // namespace

LoadedModel build_deberta_v2(const ModelConfig& c) {
  Net n(c, c.deberta.v1 ? "DeBERTa encoder (DebertaForSequenceClassification)" : "DeBERTa-v2 encoder (DebertaV2ForSequenceClassification)");
  const std::string ids = n.token_input("input_ids");
  const std::string bs_shape = n.shape_bs("deberta/bs_shape", {});
  const std::string mask = fill(n, "deberta/attention_mask", bs_shape, kF32, 1.0);
  std::string x = deberta_embeddings(n, c, ids, mask);
  // get_attention_mask: mask[:, None, None, :] * mask[:, None, :, None] -> [b, 1, s, s]; each
  // layer's XSoftmax masks where it is 0.
  const std::string row = n.b.node("Unsqueeze", "deberta.encoder/mask_row", {mask, n.b.ints("const_axes12", {1, 2})});
  const std::string col = n.b.node("Unsqueeze", "deberta.encoder/mask_col", {mask, n.b.ints("deberta.encoder/axes13", {1, 3})});
  const std::string pair = n.b.node("Mul", "deberta.encoder/mask_Mul", {row, col});
  const Relative r = c.deberta.relative ? relative_inputs(n, c) : Relative{};
  for (int64_t l = 0; l < c.layers; ++l) {
    // XSoftmax's rmask = ~mask.bool(), per layer.
    const std::string b = n.b.node("Cast", "deberta.encoder.layer." + std::to_string(l) + ".attention.self/mask_bool", {pair});
    n.b.attr_i("to", kBool);
    const std::string rmask = n.b.node("Not", "deberta.encoder.layer." + std::to_string(l) + ".attention.self/rmask", {b});
    x = deberta_layer(n, c, l, x, r, rmask);
  }
  return deberta_head(n, c, x);
}

}  // namespace neusight::builder
