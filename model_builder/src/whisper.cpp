// whisper.cpp - Whisper speech recognition in eager mode (HF WhisperForConditionalGeneration):
// an encoder over 30 s of log-mel frames (two 1-D convolutions, the second of stride 2, with
// GELU; fixed sinusoidal positions; pre-LayerNorm transformer layers) and a decoder over text
// tokens (learned positions, causal self-attention, cross-attention over the encoder's output,
// a GELU MLP; the head tied to the token embedding). The forward pass, a generation's prefill
// (the encoder and the decoder over the prompt's tokens) and a decode step with the
// self-attention and cross-attention caches.
#include <cmath>

#include "common.h"
#include "families.h"

namespace neusight::builder {

namespace {

// LayerNorm, fc1, GELU, fc2, dropout, added to the residual.
std::string mlp(Net& n, const std::string& p, const std::string& x, const ModelConfig& c) {
  const std::string h = layer_norm(n, p + ".final_layer_norm", x, c.hidden, c.layer_norm_eps);
  std::string f = activation(n, p + ".activation_fn", linear(n, p + ".fc1", h, c.hidden, c.ffn, true), c.activation);
  f = linear(n, p + ".fc2", f, c.ffn, c.hidden, true);
  return n.b.node("Add", p + "/mlp_residual_Add", {x, dropout(n, p + ".dropout", f, c.dropout)});
}

// Pre-LayerNorm attention added to the residual.
std::string attention_block(Net& n, const std::string& p, const std::string& x, const ModelConfig& c,
                            const std::string& name, const std::string& kv, const EncoderDecoderKeys& keys,
                            const std::string& mask) {
  const std::string h = layer_norm(n, p + "." + name + "_layer_norm", x, c.hidden, c.layer_norm_eps);
  const std::string a =
      dropout(n, p + "." + name + ".dropout_out", seq2seq_attention(n, p + "." + name, h, c, kv, keys, mask, false), c.dropout);
  return n.b.node("Add", p + "/" + name + "_residual_Add", {x, a});
}

// The encoder over input_features [batch, mel bins, 2 x source positions]: its output
// [batch, source positions, d_model], with the Net's sequence the encoder's while it runs.
std::string encoder(Net& n, const ModelConfig& c, const SequenceLength& enc) {
  const int64_t d = c.hidden, frames = 2 * c.source_positions;
  const std::string features = n.b.input("input_features", kF32, {-1, c.mel_bins, frames}, {"batch"});
  auto conv = [&](const std::string& name, const std::string& x, int64_t in, int64_t stride) {
    const std::string y = n.b.node("Conv", "model.encoder." + name + "/Conv",
                                   {x, n.b.weight("model.encoder." + name + ".weight", {d, in, 3}),
                                    n.b.weight("model.encoder." + name + ".bias", {d})});
    n.b.attr_ints("kernel_shape", {3});
    n.b.attr_ints("pads", {1, 1});
    n.b.attr_ints("strides", {stride});
    return activation(n, "model.encoder." + name + "/gelu", y, c.activation);
  };
  std::string x = conv("conv2", conv("conv1", features, c.mel_bins, 1), d, 2);
  x = n.b.node("Transpose", "model.encoder/permute", {x});
  n.b.attr_ints("perm", {0, 2, 1});
  x = n.b.node("Add", "model.encoder/embed_positions_Add",
               {x, n.b.weight("model.encoder.embed_positions.weight", {c.source_positions, d})});
  x = dropout(n, "model.encoder.dropout", x, c.dropout);
  SequenceScope scope(n, enc);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.encoder.layers." + std::to_string(l);
    x = attention_block(n, p, x, c, "self_attn", "", {}, "");
    x = mlp(n, p, x, c);
  }
  return layer_norm(n, "model.encoder.layer_norm", x, d, c.layer_norm_eps);
}

// The decoder over `ids` (the Net's sequence) at positions past .. past + sequence - 1: token
// and learned position embeddings, the layers, the final LayerNorm and the tied head (logits
// [batch, sequence, vocab]). `enc_out` / `enc`: the encoder's output and length; a decode step
// (`past` given) reads the caches instead.
void decoder(Net& n, const ModelConfig& c, const std::string& ids, const std::string& enc_out, const SequenceLength& enc,
             const std::string& past) {
  const int64_t d = c.hidden;
  const std::string embed = n.b.weight("model.decoder.embed_tokens.weight", {c.vocab, d});
  std::string x = n.b.node("Gather", "model.decoder.embed_tokens/Gather", {embed, ids});
  const std::string total = past.empty() ? "" : n.b.node("Add", "decoder/total_length", {past, n.seq_scalar});
  const std::string zero = n.b.ints("decoder/pos_zero", {0}, true);
  const std::string positions = n.b.node("Range", "model.decoder.embed_positions/positions",
                                         {past.empty() ? zero : past, total.empty() ? n.seq_scalar : total,
                                          n.b.ints("decoder/pos_one", {1}, true)});
  x = n.b.node("Add", "model.decoder/embed_positions_Add",
               {x, n.b.node("Gather", "model.decoder.embed_positions/Gather",
                            {n.b.weight("model.decoder.embed_positions.weight", {c.max_positions, d}), positions})});
  x = dropout(n, "model.decoder.dropout", x, c.dropout);
  const std::string mask = decoder_causal_mask(n, past, total);
  const bool step = !past.empty();
  for (int64_t l = 0; l < c.decoder_layers; ++l) {
    const std::string p = "model.decoder.layers." + std::to_string(l);
    x = attention_block(n, p, x, c, "self_attn", "", {step ? "decoder" : "", l, {}}, mask);
    x = attention_block(n, p, x, c, "encoder_attn", enc_out, {step ? "encoder" : "", l, step ? SequenceLength{} : enc}, "");
    x = mlp(n, p, x, c);
  }
  x = layer_norm(n, "model.decoder.layer_norm", x, d, c.layer_norm_eps);
  // proj_out, tied to the token embedding: its own matrix here, held once by a generation
  // (Decoder::tied_head_weight), as every tied head.
  linear(n, "proj_out", x, d, c.vocab, false);
  n.rename_last("logits");
  n.output("logits", {"batch", "sequence"}, {c.vocab});
}

SequenceLength encoder_length(Net& n, const ModelConfig& c) {
  return {n.b.ints("encoder/length_1d", {c.source_positions}), n.b.ints("encoder/length", {c.source_positions}, true)};
}

// The forward pass over decoder_input_ids: the encoder over the audio, the decoder over the tokens
// (a generation's prefill is this pass over the prompt).
LoadedModel forward(const ModelConfig& c, const std::string& doc) {
  Net n(c, doc);
  const std::string ids = n.token_input("decoder_input_ids");
  const SequenceLength enc = encoder_length(n, c);
  decoder(n, c, ids, encoder(n, c, enc), enc, "");
  return n.finish(c);
}

constexpr const char* kWhisperDoc = "Whisper encoder-decoder (WhisperForConditionalGeneration)";

}  // namespace

LoadedModel build_whisper(const ModelConfig& c) { return forward(c, kWhisperDoc); }

LoadedModel build_whisper_generation(const ModelConfig& c, const BuildOptions& o) {
  if (!o.kv_cache)
    return forward(c, std::string(kWhisperDoc) +
                          ", the prefill: the encoder over 30 s of audio and the decoder over the prompt's tokens");
  Net n(c, std::string(kWhisperDoc) + ", one decode step with the self-attention and cross-attention cache");
  const std::string ids = n.token_input("decoder_input_ids");
  decoder(n, c, ids, "", {}, encoder_decoder_cache_inputs(n, c.decoder_layers, c.heads, c.head_dim));
  return n.finish(c);
}

}  // namespace neusight::builder
