// bart.cpp - the BART family of encoder-decoders in eager mode (HF BartForConditionalGeneration,
// MarianMTModel, MBartForConditionalGeneration, PegasusForConditionalGeneration,
// M2M100ForConditionalGeneration: NLLB): token embeddings scaled by embed_scale plus a position
// table (learned from row 2: BART, mBART; sinusoidal: Marian and Pegasus an embedding weight, M2M100
// a buffer from row 2, its positions counted over the non-padding token ids), BART's and mBART's
// LayerNorm over them; post-LayerNorm layers (BART,
// Marian) or pre-LayerNorm ones with a final LayerNorm per stack (mBART, Pegasus, M2M100):
// self-attention, the decoder's cross-attention, fc1, activation, fc2; the head tied to the
// shared embedding, plus final_logits_bias but in M2M100. The forward pass, a generation's
// prefill (the encoder over the prompt and the decoder over its start token) and a decode step
// with the self-attention and cross-attention caches. No attention mask is added: the all-ones
// mask of an unpadded batch.
#include <cmath>
#include <functional>

#include "common.h"
#include "families.h"

namespace neusight::builder {

namespace {

// One block added to the residual with its LayerNorm `norm`: after the sum (post-LayerNorm:
// BART, Marian) or on the block's input (pre_norm: mBART, Pegasus, M2M100). `block` maps the
// (normed) input to the block's output.
std::string residual(Net& n, const std::string& p, const std::string& norm, const std::string& x, const ModelConfig& c,
                     const std::function<std::string(const std::string&)>& block) {
  const std::string in = c.pre_norm ? layer_norm(n, p + "." + norm, x, c.hidden, c.layer_norm_eps) : x;
  const std::string sum =
      n.b.node("Add", p + "/" + norm + "_residual_Add", {x, dropout(n, p + "/" + norm + "_dropout", block(in), c.dropout)});
  return c.pre_norm ? sum : layer_norm(n, p + "." + norm, sum, c.hidden, c.layer_norm_eps);
}

// fc1, the activation, fc2, as a residual block of final_layer_norm.
std::string mlp(Net& n, const std::string& p, const std::string& x, const ModelConfig& c) {
  return residual(n, p, "final_layer_norm", x, c, [&](const std::string& h) {
    const std::string f = activation(n, p + ".activation_fn", linear(n, p + ".fc1", h, c.hidden, c.ffn, true), c.activation);
    return linear(n, p + ".fc2", f, c.ffn, c.hidden, true);
  });
}

// A pre-LayerNorm stack's final LayerNorm (`stack`.layer_norm).
std::string stack_norm(Net& n, const ModelConfig& c, const std::string& stack, const std::string& x) {
  return c.pre_norm ? layer_norm(n, stack + ".layer_norm", x, c.hidden, c.layer_norm_eps) : x;
}

// embed_tokens(ids) * embed_scale plus the positions past .. past + sequence - 1 (rows from
// position_offset), BART's layernorm_embedding, dropout. `stack`: "model.encoder" or
// "model.decoder"; `past` / `total` scalars of a decode step, else empty.
std::string embed(Net& n, const ModelConfig& c, const std::string& stack, const std::string& table,
                  const std::string& ids, const std::string& past, const std::string& total) {
  const int64_t d = c.hidden;
  std::string x = n.b.node("Gather", stack + ".embed_tokens/Gather", {table, ids});
  const float scale = c.scale_embedding ? static_cast<float>(std::sqrt(double(d))) : 1.0f;
  x = n.b.node("Mul", stack + ".embed_tokens/embed_scale", {x, f32(n, stack + "/embed_scale", scale)});
  std::string positions;
  if (c.model_type == "m2m_100") {  // counted over the non-padding token ids
    positions = padding_positions(n, stack + ".embed_positions", ids, c.position_offset - 1, past);
  } else {
    const std::string first = past.empty() ? n.b.ints(stack + "/pos_zero", {0}, true) : past;
    const std::string last = total.empty() ? n.seq_scalar : total;
    positions = n.b.node("Range", stack + ".embed_positions/positions", {first, last, n.b.ints(stack + "/pos_one", {1}, true)});
    if (c.position_offset > 0)
      positions = n.b.node("Add", stack + ".embed_positions/offset",
                           {positions, n.b.ints(stack + "/pos_offset", {c.position_offset}, true)});
  }
  const std::string rows = n.b.weight(stack + ".embed_positions.weight", {c.max_positions + c.position_offset, d});
  x = n.b.node("Add", stack + "/embed_positions_Add", {x, n.b.node("Gather", stack + ".embed_positions/Gather", {rows, positions})});
  if (c.embedding_norm) x = layer_norm(n, stack + ".layernorm_embedding", x, d, c.layer_norm_eps);
  return dropout(n, stack + ".dropout", x, c.dropout);
}

// The encoder over `ids` (the Net's sequence): its last hidden state.
std::string encoder(Net& n, const ModelConfig& c, const std::string& shared, const std::string& ids) {
  std::string x = embed(n, c, "model.encoder", shared, ids, "", "");
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.encoder.layers." + std::to_string(l);
    x = residual(n, p, "self_attn_layer_norm", x, c,
                 [&](const std::string& h) { return seq2seq_attention(n, p + ".self_attn", h, c, "", {}, "", true); });
    x = mlp(n, p, x, c);
  }
  return stack_norm(n, c, "model.encoder", x);
}

// The decoder over `ids` (the Net's sequence) at positions past .. past + sequence - 1: the
// layers and the head (logits [batch, sequence, vocab]). `enc_out` / `enc`: the encoder's
// output and length; a decode step (`past` given) reads the caches instead.
void decoder(Net& n, const ModelConfig& c, const std::string& shared, const std::string& ids,
             const std::string& enc_out, const SequenceLength& enc, const std::string& past) {
  const int64_t d = c.hidden;
  const int64_t vocab = c.decoder_vocab > 0 ? c.decoder_vocab : c.vocab;
  const std::string table =
      c.decoder_vocab > 0 ? n.b.weight("model.decoder.embed_tokens.weight", {vocab, d}) : shared;
  const std::string total = past.empty() ? "" : n.b.node("Add", "decoder/total_length", {past, n.seq_scalar});
  std::string x = embed(n, c, "model.decoder", table, ids, past, total);
  const std::string mask = decoder_causal_mask(n, past, total);
  const bool step = !past.empty();
  for (int64_t l = 0; l < c.decoder_layers; ++l) {
    const std::string p = "model.decoder.layers." + std::to_string(l);
    x = residual(n, p, "self_attn_layer_norm", x, c, [&](const std::string& h) {
      return seq2seq_attention(n, p + ".self_attn", h, c, "", {step ? "decoder" : "", l, {}}, mask, true);
    });
    x = residual(n, p, "encoder_attn_layer_norm", x, c, [&](const std::string& h) {
      return seq2seq_attention(n, p + ".encoder_attn", h, c, enc_out, {step ? "encoder" : "", l, step ? SequenceLength{} : enc}, "", true);
    });
    x = mlp(n, p, x, c);
  }
  x = stack_norm(n, c, "model.decoder", x);
  // lm_head, tied to the token table: its own matrix here, held once by a generation.
  std::string logits = linear(n, "lm_head", x, d, vocab, false);
  if (c.final_logits_bias)
    logits = n.b.node("Add", "final_logits_bias/Add", {logits, n.b.weight("final_logits_bias", {1, vocab})});
  n.rename_last("logits");
  n.output("logits", {"batch", "sequence"}, {vocab});
}

std::string model_doc(const ModelConfig& c) {
  if (c.model_type == "marian") return "Marian encoder-decoder (MarianMTModel)";
  if (c.model_type == "mbart") return "mBART encoder-decoder (MBartForConditionalGeneration)";
  if (c.model_type == "pegasus") return "Pegasus encoder-decoder (PegasusForConditionalGeneration)";
  if (c.model_type == "m2m_100") return "M2M100 / NLLB encoder-decoder (M2M100ForConditionalGeneration)";
  return "BART encoder-decoder (BartForConditionalGeneration)";
}

}  // namespace

LoadedModel build_bart(const ModelConfig& c) {
  Net n(c, model_doc(c));
  const std::string ids = n.token_input("input_ids");
  const std::string dec_ids = n.token_input("decoder_input_ids");
  const std::string shared = n.b.weight("model.shared.weight", {c.vocab, c.hidden});
  decoder(n, c, shared, dec_ids, encoder(n, c, shared, ids), {}, "");
  return n.finish(c);
}

LoadedModel build_bart_generation(const ModelConfig& c, const BuildOptions& o) {
  Net n(c, model_doc(c) + (o.kv_cache ? ", one decode step with the self-attention and cross-attention cache"
                                      : ", the prefill: the encoder over the prompt and the decoder's start token"));
  const std::string shared = n.b.weight("model.shared.weight", {c.vocab, c.hidden});
  if (!o.kv_cache) {
    // generate(): the encoder reads the prompt once; the decoder starts from its start token.
    const std::string enc_out = encoder(n, c, shared, n.token_input("input_ids"));
    const SequenceLength enc{n.seq, n.seq_scalar};
    const std::string dec_ids = n.b.input("decoder_input_ids", kI64, {-1, 1}, {"batch"});
    const std::string shape = n.b.node("Shape", "decoder_input/shape", {dec_ids});
    const std::string len = n.b.node("Gather", "decoder_input/length", {shape, n.b.ints("decoder_input/axis", {1}, true)});
    n.b.attr_i("axis", 0);
    SequenceScope scope(n, {n.b.node("Unsqueeze", "decoder_input/length_1d", {len, n.b.ints("decoder_input/ax0", {0})}), len});
    decoder(n, c, shared, dec_ids, enc_out, enc, "");
    return n.finish(c);
  }
  const std::string ids = n.token_input("decoder_input_ids");
  decoder(n, c, shared, ids, "", {}, encoder_decoder_cache_inputs(n, c.decoder_layers, c.heads, c.head_dim));
  return n.finish(c);
}

}  // namespace neusight::builder
