// switch.cpp - T5 encoder-decoders in eager mode: T5 and mT5 (HF T5ForConditionalGeneration,
// MT5ForConditionalGeneration; RMS layer norms, relative position bias, a ReLU or gated-GELU
// feed-forward) and Switch Transformer (SwitchTransformersForConditionalGeneration: every
// `sparse_step`-th feed-forward replaced by a top-1 mixture of experts with a fixed capacity).
#include <cmath>

#include "common.h"
#include "families.h"

namespace neusight::builder {

namespace {

// The [*, heads, q, k] view of a bias stored [*, q, k, heads]. `position_bias + mask`
// (first layer) keeps the permuted operand's layout (TensorIterator allocates the output in
// the order of its first operand), so the masked bias PyTorch adds to every layer's scores
// is stored heads-innermost too: each layer's `scores += position_bias` reads it through
// these strides (the lowering prices the strided read; no copy runs).
std::string bias_view(Net& n, const std::string& p, const std::string& stored) {
  const std::string v = n.b.node("Transpose", p + "/permute", {stored});
  n.b.attr_ints("perm", {0, 3, 1, 2});
  return v;
}

// T5Attention (no score scaling) with a precomputed bias [*, heads, q, k]; kv from `kv`.
std::string attention(Net& n, const std::string& p, const std::string& x, const std::string& kv,
                      const ModelConfig& c, const std::string& bias, const EncoderDecoderKeys& cache = {}) {
  const int64_t d = c.hidden, nh = c.heads, hd = c.head_dim, inner = nh * hd;
  const std::string q = split_heads(n, p + "/q", linear(n, p + ".q", x, d, inner, false), nh, hd);
  const auto [k, v] = encoder_decoder_keys(n, p, cache, nh, hd, [&] {
    return std::pair{split_heads(n, p + "/k", linear(n, p + ".k", kv, d, inner, false), nh, hd),
                     split_heads(n, p + "/v", linear(n, p + ".v", kv, d, inner, false), nh, hd)};
  });
  std::string s = n.b.node("MatMul", p + "/MatMul", {q, transpose_last(n, p + "/kT", k)});
  s = n.b.node("Add", p + "/bias_Add", {s, bias});
  s = n.b.node("Softmax", p + "/Softmax", {s});
  n.b.attr_i("axis", -1);
  s = dropout(n, p + ".dropout", s, c.attn_dropout);
  std::string o = n.b.node("MatMul", p + "/MatMul_1", {s, v});
  o = merge_heads(n, p + "/merge", o, inner);
  return linear(n, p + ".o", o, inner, d, false);
}

// T5DenseActDense (wi, activation, wo) or, gated (T5 v1.1, mT5, Flan-T5), T5DenseGatedActDense:
// activation(wi_0 x) * wi_1 x, then wo.
std::string dense_mlp(Net& n, const std::string& p, const std::string& x, const ModelConfig& c) {
  std::string f = activation(n, p + ".act", linear(n, c.gated_act ? p + ".wi_0" : p + ".wi", x, c.hidden, c.ffn, false),
                             c.activation);
  if (c.gated_act) f = n.b.node("Mul", p + "/gate_Mul", {f, linear(n, p + ".wi_1", x, c.hidden, c.ffn, false)});
  f = dropout(n, p + ".dropout", f, c.dropout);
  return linear(n, p + ".wo", f, c.ffn, c.hidden, false);
}

// SwitchTransformersSparseMLP: top-1 router with expert capacity, then for each expert the
// routed tokens (at most `capacity` per sequence) are gathered, run through the expert MLP
// and written back; the result is scaled by the router probability.
struct RouterLogs {
  std::vector<std::string> logits, index;  // per sparse layer: [b, s, E] and [b, s, 1]
};

std::string sparse_mlp(Net& n, const std::string& p, const std::string& x, const ModelConfig& c, RouterLogs& logs) {
  const int64_t d = c.hidden, E = c.experts, C = c.expert_capacity;
  const std::string logits = linear(n, p + ".router.classifier", x, d, E, false);
  const std::string probs = n.b.node("Softmax", p + ".router/Softmax", {logits});
  n.b.attr_i("axis", -1);
  const std::string top = n.b.node("ArgMax", p + ".router/ArgMax", {probs});
  n.b.attr_i("axis", -1);
  n.b.attr_i("keepdims", 1);
  logs.logits.push_back(logits);
  logs.index.push_back(top);
  std::vector<int64_t> ids;
  for (int64_t e = 0; e < E; ++e) ids.push_back(e);
  std::string onehot = n.b.node("Cast", p + ".router/one_hot", {n.b.node("Equal", p + ".router/Equal", {top, n.b.ints(p + "/expert_ids", ids)})});
  n.b.attr_i("to", kF32);
  const std::string prio = n.b.node("CumSum", p + ".router/token_priority", {onehot, n.b.ints(p + "/axis_seq", {1}, true)});
  std::string keep = n.b.node("Cast", p + ".router/capacity_mask",
                              {n.b.node("LessOrEqual", p + ".router/LessOrEqual", {prio, f32(n, p + "/capacity", float(C))})});
  n.b.attr_i("to", kF32);
  const std::string routed = n.b.node("Mul", p + ".router/Mul", {onehot, keep});  // [b, s, E]
  const std::string rprob = n.b.node("ReduceMax", p + ".router/ReduceMax", {probs});
  n.b.attr_ints("axes", {-1});
  n.b.attr_i("keepdims", 1);

  // Flat token rows and per-sequence row offsets.
  const std::string x_flat = n.b.node("Reshape", p + "/tokens_flat", {x, n.b.ints(p + "/flat_shape", {-1, d})});
  const std::string rows = n.b.node("Range", p + "/batch_rows", {n.b.ints(p + "/r0", {0}, true), n.batch_scalar,
                                                                 n.b.ints(p + "/r1", {1}, true)});
  const std::string rows2 = n.b.node("Unsqueeze", p + "/batch_rows_2d", {rows, n.b.ints(p + "/ax1", {1})});
  const std::string tok_off = n.b.node("Mul", p + "/token_offset", {rows2, n.seq});
  std::vector<int64_t> slots;
  for (int64_t j = 1; j <= C; ++j) slots.push_back(j);
  const std::string slot_ids = n.b.node("Cast", p + "/slot_ids_f", {n.b.ints(p + "/slot_ids", slots)});
  n.b.attr_i("to", kF32);
  const std::string slot_off = n.b.node("Mul", p + "/slot_offset", {rows2, n.b.ints(p + "/capacity_i", {C}, true)});

  std::string next = x;  // hidden_states.clone(): tokens no expert takes pass through
  const std::string ax2 = n.b.ints(p + "/ax2", {2});
  for (int64_t e = 0; e < E; ++e) {
    const std::string q = p + ".experts.expert_" + std::to_string(e);
    const std::string ei = n.b.ints(q + "/index", {e}, true);
    const std::string sel = n.b.node("Gather", q + "/token_mask", {routed, ei});  // [b, s]
    n.b.attr_i("axis", 2);
    const std::string pe = n.b.node("Gather", q + "/priority", {prio, ei});
    n.b.attr_i("axis", 2);
    const std::string pr = n.b.node("Mul", q + "/routed_priority", {pe, sel});  // 1..C for routed tokens
    // Token of each capacity slot: argmax over the sequence of (priority == slot).
    const std::string hit = n.b.node("Cast", q + "/slot_hit",
                                     {n.b.node("Equal", q + "/slot_Equal", {n.b.node("Unsqueeze", q + "/priority_3d", {pr, ax2}), slot_ids})});
    n.b.attr_i("to", kF32);
    const std::string tok = n.b.node("ArgMax", q + "/slot_token", {hit});  // [b, 1, C]
    n.b.attr_i("axis", 1);
    n.b.attr_i("keepdims", 1);
    const std::string tok_flat = n.b.node("Reshape", q + "/slot_token_flat",
                                          {n.b.node("Add", q + "/slot_token_Add", {n.b.node("Squeeze", q + "/slot_token_2d", {tok, n.b.ints(q + "/ax1", {1})}), tok_off}),
                                           n.b.ints(q + "/minus1", {-1})});
    const std::string xin = n.b.node("Gather", q + "/dispatch", {x_flat, tok_flat});  // [b*C, d]
    n.b.attr_i("axis", 0);
    const std::string y = dense_mlp(n, q, xin, c);
    // Write back: each routed token reads its slot's output row.
    std::string slot = n.b.node("Sub", q + "/slot_Sub", {pr, f32(n, q + "/c_one", 1.0f)});
    slot = n.b.node("Max", q + "/slot_Max", {slot, f32(n, q + "/c_zero", 0.0f)});
    slot = n.b.node("Cast", q + "/slot_long", {slot});
    n.b.attr_i("to", kI64);
    slot = n.b.node("Add", q + "/slot_Add", {slot, slot_off});
    const std::string back = n.b.node("Gather", q + "/combine", {y, slot});  // [b, s, d]
    n.b.attr_i("axis", 0);
    const std::string selb = n.b.node("Cast", q + "/token_mask_bool", {n.b.node("Unsqueeze", q + "/token_mask_3d", {sel, ax2})});
    n.b.attr_i("to", kBool);
    next = n.b.node("Where", q + "/setitem", {selb, back, next});
  }
  return n.b.node("Mul", p + "/router_prob_Mul", {rprob, next});
}

// A generation's decoder sparse MLP (its start token, then one token per sequence and step):
// SwitchTransformersSparseMLP runs only the experts its router mask activates, each on the
// tokens routed to it, and a few tokens reach a few experts, so no expert's capacity slots
// are padded out. It is priced as serving engines run a mixture, one routed MoE operator
// (onnxruntime's com.microsoft.MoE: top-1, the output scaled by the router probability, not
// renormalised): the lowering reads the weights of the experts the step's tokens reach on
// average (moe_experts_reached) and runs its tokens through them. Every token is kept: a
// step's one token per sequence never exceeds an expert's capacity. The experts' weights are
// held stacked ([experts, in, out]; the checkpoint's experts.expert_N.wi / wo, as many).
std::string routed_mlp(Net& n, const std::string& p, const std::string& x, const ModelConfig& c) {
  const int64_t d = c.hidden, E = c.experts;
  const std::string rows = n.b.node("Reshape", p + "/rows", {x, n.b.ints(p + "/rows_shape", {-1, d})});
  const std::string logits = linear(n, p + ".router.classifier", rows, d, E, false);
  const std::string wi = n.b.weight(p + ".experts.wi", {E, d, c.ffn});
  const std::string wo = n.b.weight(p + ".experts.wo", {E, c.ffn, d});
  // A gated feed-forward's second input projection is the operator's FC3: act(FC1 x) * FC3 x.
  const std::string wi_1 = c.gated_act ? n.b.weight(p + ".experts.wi_1", {E, d, c.ffn}) : std::string();
  const std::string y = n.b.node("MoE", p + "/MoE", {x, logits, wi, "", wo, "", wi_1}, 1, "com.microsoft");
  n.b.attr_i("k", 1);
  n.b.attr_s("activation_type", c.activation);
  n.b.attr_i("normalize_routing_weights", 0);
  return y;
}

// Router z-loss and load-balancing loss over all sparse layers of a stack, as the HF model
// computes them in every forward (output_router_logits): a scalar.
std::string router_loss(Net& n, const std::string& p, const ModelConfig& c, const RouterLogs& logs) {
  const int64_t E = c.experts;
  const std::string logits = n.b.node("Concat", p + "/router_logits_cat", logs.logits);
  n.b.attr_i("axis", 1);
  const std::string index = n.b.node("Concat", p + "/expert_index_cat", logs.index);
  n.b.attr_i("axis", 1);
  // z-loss: mean(logsumexp(logits)^2).
  std::string lse = n.b.node("ReduceLogSumExp", p + "/z_logsumexp", {logits});
  n.b.attr_ints("axes", {-1});
  n.b.attr_i("keepdims", 0);
  lse = n.b.node("Pow", p + "/z_Pow", {lse, f32(n, p + "/two", 2.0f)});
  const std::string z = n.b.node("ReduceMean", p + "/z_mean", {lse});
  n.b.attr_i("keepdims", 0);
  // Load balancing: mean(tokens per expert) * mean(router prob per expert) * E^2.
  const std::string probs = n.b.node("Softmax", p + "/aux_Softmax", {logits});
  n.b.attr_i("axis", -1);
  std::vector<int64_t> ids;
  for (int64_t e = 0; e < E; ++e) ids.push_back(e);
  std::string mask = n.b.node("Cast", p + "/aux_one_hot", {n.b.node("Equal", p + "/aux_Equal", {index, n.b.ints(p + "/expert_ids", ids)})});
  n.b.attr_i("to", kF32);
  const std::string tokens = n.b.node("ReduceMean", p + "/aux_tokens_per_expert", {mask});
  n.b.attr_ints("axes", {-2});
  n.b.attr_i("keepdims", 0);
  const std::string prob = n.b.node("ReduceMean", p + "/aux_prob_per_expert", {probs});
  n.b.attr_ints("axes", {-2});
  n.b.attr_i("keepdims", 0);
  std::string aux = n.b.node("Mul", p + "/aux_Mul", {tokens, prob});
  aux = n.b.node("ReduceMean", p + "/aux_mean", {aux});
  n.b.attr_i("keepdims", 0);
  aux = n.b.node("Mul", p + "/aux_scale", {aux, f32(n, p + "/e2", float(E * E))});
  return n.b.node("Add", p + "/router_loss", {z, aux});
}

// `routed`: a sparse layer as routed_mlp (a generation's decoder), else sparse_mlp.
std::string ff_layer(Net& n, const std::string& p, const std::string& x, const ModelConfig& c, bool sparse,
                     RouterLogs& logs, bool routed = false) {
  const std::string h = rms_norm(n, p + ".layer_norm", x, c.hidden, c.layer_norm_eps);
  std::string f = !sparse ? dense_mlp(n, p + ".mlp", h, c)
                  : routed ? routed_mlp(n, p + ".mlp", h, c)
                           : sparse_mlp(n, p + ".mlp", h, c, logs);
  f = dropout(n, p + ".dropout", f, c.dropout);
  return n.b.node("Add", p + "/residual_Add", {x, f});
}

std::string attn_layer(Net& n, const std::string& p, const std::string& x, const std::string& kv_src,
                       const ModelConfig& c, const std::string& bias, const std::string& attn_name,
                       const EncoderDecoderKeys& cache = {}) {
  const std::string h = rms_norm(n, p + ".layer_norm", x, c.hidden, c.layer_norm_eps);
  std::string a = attention(n, p + "." + attn_name, h, kv_src.empty() ? h : kv_src, c, bias, cache);
  a = dropout(n, p + ".dropout", a, c.dropout);
  return n.b.node("Add", p + "/residual_Add", {x, a});
}

// (1 - mask) * finfo.min for an all-ones mask of [b, 1, 1, s] (`axes` {1, 2}), or of
// [b, 1, s, 1] (`axes` {1, 3}: the same values in the [b, q, k, heads] layout of the bias);
// s the Net's sequence, or the 1-element length `len`.
std::string padding_mask(Net& n, const std::string& p, const std::vector<int64_t>& axes = {1, 2},
                         const std::string& len = "") {
  std::string shape;
  if (len.empty()) {
    shape = n.shape_bs(p + "/bs_shape", {});
  } else {
    shape = n.b.node("Concat", p + "/bs_shape", {n.batch, len});
    n.b.attr_i("axis", 0);
  }
  const std::string ones = fill(n, p + "/attention_mask", shape, kF32, 1.0);
  const std::string m4 = n.b.node("Unsqueeze", p + "/mask_4d", {ones, n.b.ints(p + "/mask_axes", axes)});
  const std::string inv = n.b.node("Sub", p + "/mask_Sub", {f32(n, p + "/one", 1.0f), m4});
  return n.b.node("Mul", p + "/mask_Mul", {inv, f32(n, p + "/min", kFloatMin)});
}

bool is_sparse(const ModelConfig& c, int64_t layer) {
  return c.experts > 0 && (c.sparse_step <= 1 || layer % c.sparse_step == 1);
}

// Where a decoder's keys come from. A forward pass: the encoder's output, of the Net's sequence
// as the decoder's. A generation's prefill: the encoder's output of length `enc` while the
// Net's sequence is the decoder's tokens. A decode step (`step`): the KV cache, the step's
// tokens at positions `past` .. `total` - 1 (scalars) and the encoder's cached keys of `enc`.
// A generation's decoder (`routed`) runs its sparse layers as routed_mlp.
struct DecoderKeys {
  std::string enc_out;
  SequenceLength enc;
  std::string past, total;
  bool step = false;
  bool routed = false;
};

// (seq_ids[None, None, :] <= seq_ids[None, :, None]) * mask[:, None, None, :], then (1 - m) *
// finfo.min, in the bias's stored [b, q, k, 1] layout: keys 0..k-1 against queries 0..q-1 (a
// forward pass) or past..total-1 (a decode step).
std::string causal_mask(Net& n, const DecoderKeys& dk) {
  const std::string zero = n.b.ints("decoder/r0", {0}, true), one = n.b.ints("decoder/r1", {1}, true);
  const std::string keys = n.b.node("Range", "decoder/seq_ids", {zero, dk.step ? dk.total : n.seq_scalar, one});
  const std::string queries = dk.step ? n.b.node("Range", "decoder/query_ids", {dk.past, dk.total, one}) : keys;
  const std::string le = n.b.node("LessOrEqual", "decoder/causal_LessOrEqual",
                                  {n.b.node("Unsqueeze", "decoder/seq_row", {keys, n.b.ints("decoder/ax01", {0, 1})}),
                                   n.b.node("Unsqueeze", "decoder/seq_col", {queries, n.b.ints("decoder/ax02", {0, 2})})});
  std::string causal = n.b.node("Cast", "decoder/causal_float", {le});
  n.b.attr_i("to", kF32);
  causal = n.b.node("Unsqueeze", "decoder/causal_4d", {causal, n.b.ints("decoder/ax3", {3})});
  std::string shape;
  if (dk.step) {
    const std::string total = n.b.node("Unsqueeze", "decoder/total_1d", {dk.total, n.b.ints("decoder/ax0t", {0})});
    shape = n.b.node("Concat", "decoder/bs_shape", {n.batch, total});
    n.b.attr_i("axis", 0);
  } else {
    shape = n.shape_bs("decoder/bs_shape", {});
  }
  const std::string ones = fill(n, "decoder/attention_mask", shape, kF32, 1.0);
  const std::string ones4 = n.b.node("Unsqueeze", "decoder/mask_4d", {ones, n.b.ints("decoder/ax13", {1, 3})});
  const std::string ext = n.b.node("Mul", "decoder/causal_Mul", {causal, ones4});
  const std::string inv = n.b.node("Sub", "decoder/mask_Sub", {f32(n, "decoder/one", 1.0f), ext});
  return n.b.node("Mul", "decoder/mask_Mul", {inv, f32(n, "decoder/min", kFloatMin)});
}

// The decoder stack over the token ids `ids` (causal self-attention with its own relative bias,
// cross-attention over the encoder with a zero bias + padding mask), its final norm, the LM
// head (tied: scaled by d_model^-0.5 first, reading the shared table as its own matrix, as
// nn.Linear does; Switch, T5; not T5 v1.1 or mT5): logits [batch, sequence, vocab].
std::string decoder(Net& n, const ModelConfig& c, const std::string& shared, const std::string& ids,
                    const DecoderKeys& dk, RouterLogs& logs) {
  const int64_t d = c.hidden;
  std::string y = n.b.node("Gather", "decoder.embed_tokens/Gather", {shared, ids});
  y = dropout(n, "decoder.dropout", y, c.dropout);
  const std::string mask = causal_mask(n, dk);
  const std::string dec_bias =
      bias_view(n, "decoder.block.0.layer.0.SelfAttention",
                n.b.node("Add", "decoder/position_bias_Add",
                         {relative_position_bias(n, "decoder.block.0.layer.0.SelfAttention", c, false, dk.past, dk.total), mask}));
  const std::string enc_len = dk.enc.len.empty() ? n.seq : dk.enc.len;
  const std::string zshape = n.b.node("Concat", "decoder/cross_bias_shape",
                                      {n.b.ints("decoder/one_h", {1, c.heads}), n.seq, enc_len});
  n.b.attr_i("axis", 0);
  const std::string cross_bias =
      n.b.node("Add", "decoder/cross_bias_Add",
               {fill(n, "decoder/cross_bias_zeros", zshape, kF32, 0.0), padding_mask(n, "decoder_cross", {1, 2}, dk.enc.len)});
  const int64_t dl = c.decoder_layers > 0 ? c.decoder_layers : c.layers;
  for (int64_t l = 0; l < dl; ++l) {
    const std::string p = "decoder.block." + std::to_string(l);
    y = attn_layer(n, p + ".layer.0", y, "", c, dec_bias, "SelfAttention", {dk.step ? "decoder" : "", l, {}});
    y = attn_layer(n, p + ".layer.1", y, dk.enc_out, c, cross_bias, "EncDecAttention",
                   {dk.step ? "encoder" : "", l, dk.enc});
    y = ff_layer(n, p + ".layer.2", y, c, is_sparse(c, l), logs, dk.routed);
  }
  y = rms_norm(n, "decoder.final_layer_norm", y, d, c.layer_norm_eps);
  y = dropout(n, "decoder.dropout_1", y, c.dropout);
  if (c.tie_embeddings)
    y = n.b.node("Mul", "lm_head/scale_Mul", {y, f32(n, "lm_head/scale", static_cast<float>(1.0 / std::sqrt(double(d))))});
  linear(n, "lm_head", y, d, c.vocab, false);
  n.rename_last("logits");
  n.output("logits", {"batch", "sequence"}, {c.vocab});
  return "logits";
}

// The encoder stack over `ids` (the Net's sequence): its final norm's output.
std::string encoder(Net& n, const ModelConfig& c, const std::string& shared, const std::string& ids, RouterLogs& logs) {
  std::string x = n.b.node("Gather", "encoder.embed_tokens/Gather", {shared, ids});
  x = dropout(n, "encoder.dropout", x, c.dropout);
  // position_bias + mask in the bias's stored [b, q, k, heads] layout, then its view.
  const std::string enc_mask = padding_mask(n, "encoder", {1, 3});
  const std::string enc_bias =
      bias_view(n, "encoder.block.0.layer.0.SelfAttention",
                n.b.node("Add", "encoder/position_bias_Add",
                         {relative_position_bias(n, "encoder.block.0.layer.0.SelfAttention", c, true), enc_mask}));
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "encoder.block." + std::to_string(l);
    x = attn_layer(n, p + ".layer.0", x, "", c, enc_bias, "SelfAttention");
    x = ff_layer(n, p + ".layer.1", x, c, is_sparse(c, l), logs);
  }
  x = rms_norm(n, "encoder.final_layer_norm", x, c.hidden, c.layer_norm_eps);
  return dropout(n, "encoder.dropout_1", x, c.dropout);
}

std::string model_doc(const ModelConfig& c) {
  const bool encoder_only = c.head == "encoder";
  return c.experts > 0 ? (encoder_only ? "Switch Transformer encoder (SwitchTransformersEncoderModel)"
                                       : "Switch Transformer encoder-decoder (SwitchTransformersForConditionalGeneration)")
                       : (encoder_only ? "T5 encoder (T5EncoderModel)" : "T5 encoder-decoder (T5ForConditionalGeneration)");
}

// The length of dim `axis` of `tensor`, named under `p`.
SequenceLength length_of(Net& n, const std::string& p, const std::string& tensor, int64_t axis) {
  const std::string shape = n.b.node("Shape", p + "/shape", {tensor});
  const std::string scalar = n.b.node("Gather", p + "/length", {shape, n.b.ints(p + "/axis", {axis}, true)});
  n.b.attr_i("axis", 0);
  return {n.b.node("Unsqueeze", p + "/length_1d", {scalar, n.b.ints(p + "/ax0", {0})}), scalar};
}

}  // namespace

LoadedModel build_switch(const ModelConfig& c) {
  const bool encoder_only = c.head == "encoder";
  Net n(c, model_doc(c));
  const std::string ids = n.token_input("input_ids");
  const std::string dec_ids = encoder_only ? "" : n.token_input("decoder_input_ids");
  const std::string shared = n.b.weight("shared.weight", {c.vocab, c.hidden});
  RouterLogs enc_logs, dec_logs;
  const std::string enc_out = encoder(n, c, shared, ids, enc_logs);
  if (encoder_only) {  // T5EncoderModel (the text encoder of Flux and Stable Diffusion 3)
    n.rename_last("last_hidden_state");
    n.output("last_hidden_state", {"batch", "sequence"}, {c.hidden});
    if (!enc_logs.logits.empty()) n.output(router_loss(n, "encoder", c, enc_logs), {}, {});
    return n.finish(c);
  }
  decoder(n, c, shared, dec_ids, DecoderKeys{enc_out, {}, "", "", false}, dec_logs);
  if (!enc_logs.logits.empty()) n.output(router_loss(n, "encoder", c, enc_logs), {}, {});
  if (!dec_logs.logits.empty()) n.output(router_loss(n, "decoder", c, dec_logs), {}, {});
  return n.finish(c);
}

LoadedModel build_t5_generation(const ModelConfig& c, const BuildOptions& o) {
  const std::string what = c.source.empty() ? std::string("config") : c.source;
  if (c.head == "encoder") throw InputError(what + ": an encoder alone (" + model_doc(c) + ") generates no tokens");
  Net n(c, model_doc(c) + (o.kv_cache ? ", one decode step with the self-attention and cross-attention cache"
                                      : ", the prefill: the encoder over the prompt and the decoder's first token"));
  const std::string shared = n.b.weight("shared.weight", {c.vocab, c.hidden});
  RouterLogs logs;
  const int64_t dl = c.decoder_layers > 0 ? c.decoder_layers : c.layers;
  if (!o.kv_cache) {
    // generate(): the encoder reads the prompt once; the decoder starts from its start token.
    const std::string enc_out = encoder(n, c, shared, n.token_input("input_ids"), logs);
    const SequenceLength enc{n.seq, n.seq_scalar};
    const std::string dec_ids = n.b.input("decoder_input_ids", kI64, {-1, 1}, {"batch"});
    {
      SequenceScope scope(n, length_of(n, "decoder_input", dec_ids, 1));
      decoder(n, c, shared, dec_ids, DecoderKeys{enc_out, enc, "", "", false, true}, logs);
    }
    return n.finish(c);
  }
  const std::string dec_ids = n.token_input("decoder_input_ids");
  DecoderKeys dk;
  dk.step = true;
  dk.routed = true;
  dk.past = encoder_decoder_cache_inputs(n, dl, c.heads, c.head_dim);
  dk.total = n.b.node("Add", "past/total_length", {dk.past, n.seq_scalar});
  dk.enc = length_of(n, "encoder_cache", "past_key_values.0.encoder.key", 2);
  decoder(n, c, shared, dec_ids, dk, logs);
  return n.finish(c);
}

}  // namespace neusight::builder
