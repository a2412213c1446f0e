// common.h - building blocks shared by the model families (model_builder only).
//
// Every helper adds the ONNX nodes that mirror one PyTorch eager operator sequence, one node
// per kernel PyTorch launches where standard ONNX (opset 17) allows it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph_builder.h"
#include "neusight/model_builder.h"

namespace neusight::builder {

constexpr int kF32 = onnx::TensorProto::FLOAT;
constexpr int kI64 = onnx::TensorProto::INT64;
constexpr int kU8 = onnx::TensorProto::UINT8;
constexpr int kBool = onnx::TensorProto::BOOL;
constexpr float kFloatMin = -3.4028234663852886e38f;  // torch.finfo(torch.float32).min

// One model under construction: the proto, its builder, and the batch/sequence plumbing.
struct Net {
  onnx::ModelProto model;
  GraphBuilder b;
  // 1-element int64 tensors holding the batch and sequence sizes (Shape -> Gather ->
  // Unsqueeze of the first input, the way PyTorch exports compute them), and the scalar
  // sequence length.
  std::string batch, seq, batch_scalar, seq_scalar;
  // The config built (outlives the Net): linear() reads its quantized weights from it.
  const ModelConfig& config;

  Net(const ModelConfig& c, const std::string& doc);
  // Declares `name` [batch, sequence] int64 and derives batch/seq from the first one.
  std::string token_input(const std::string& name);
  // Declares a float graph output with symbolic leading dims plus fixed trailing dims.
  void output(const std::string& tensor, const std::vector<std::string>& sym_dims, const std::vector<int64_t>& dims);
  LoadedModel finish(const ModelConfig& c);
  // Renames the first output of the node added last (e.g. to "logits"); returns the name.
  std::string rename_last(const std::string& name);

  // Shape tensor [batch, sequence, extra...] for Reshape / Expand.
  std::string shape_bs(const std::string& name, const std::vector<int64_t>& extra);
};

// A sequence's length as the graph holds it: a 1-element tensor and a scalar.
struct SequenceLength {
  std::string len, scalar;
};

// The Net's sequence set to `length` while in scope: an encoder's positions where the Net's
// sequence is a decoder's tokens (Whisper's audio, a T5 prefill's prompt), so that
// split_heads, merge_heads and shape_bs see the encoder's.
class SequenceScope {
 public:
  SequenceScope(Net& n, const SequenceLength& length) : n_(n), saved_{n.seq, n.seq_scalar} {
    n.seq = length.len;
    n.seq_scalar = length.scalar;
  }
  ~SequenceScope() {
    n_.seq = saved_.len;
    n_.seq_scalar = saved_.scalar;
  }
  SequenceScope(const SequenceScope&) = delete;
  SequenceScope& operator=(const SequenceScope&) = delete;

 private:
  Net& n_;
  SequenceLength saved_;
};

// y = x W (+ bias): PyTorch nn.Linear / Conv1D (addmm); W stored [in, out]. Under a
// quantized config (ModelConfig::weight_bits) a layer's projection is MatMulNBits(x, the packed
// weight [out, groups, group x bits / 8], scales [out x groups], zero points) instead.
std::string linear(Net& n, const std::string& prefix, const std::string& x, int64_t in, int64_t out,
                   bool bias = true);
// nn.LayerNorm over the last dim; `bias` false: a LayerNorm without its bias (MPT's no_bias).
std::string layer_norm(Net& n, const std::string& prefix, const std::string& x, int64_t hidden, double eps,
                       bool bias = true);
// RMSNorm as eager PyTorch runs it (T5LayerNorm, LlamaRMSNorm): pow, mean, add eps, rsqrt,
// mul, mul weight; rsqrt+mul are written Sqrt+Div (same kernel count and sizes).
std::string rms_norm(Net& n, const std::string& prefix, const std::string& x, int64_t hidden, double eps,
                     bool weighted = true);
// The Mamba-2 mixer of layer `layer` (mamba.cpp; ModelConfig::block_pattern) on its normed
// input; with `cache` a decode step's, reading and writing the layer's convolution and scan
// states (past_conv_state.N, past_ssm_state.N -> present_...).
std::string mamba2_mixer(Net& n, const std::string& p, const std::string& x, const ModelConfig& c, int64_t layer,
                         bool cache);
// The gated DeltaNet token mixer of layer `layer` (mamba.cpp; ModelConfig::delta_layers), likewise.
std::string gated_deltanet_mixer(Net& n, const std::string& p, const std::string& x, const ModelConfig& c, int64_t layer,
                                 bool cache);
// The patches an image of `image` x `image` pixels in `channels` channels is cut into by
// `patch` x `patch` patches (at most 1024 a side); InputError naming `what` when those sizes
// cannot be an image encoder's (vit.cpp; the ViT and vision-tower configs).
int64_t image_patches(int64_t image, int64_t patch, int64_t channels, const std::string& what);
// The Net's batch and sequence as an image encoder's, from its graph input `pixels`: the
// input's first dim (the text's batch) times `views` (the images, crops or tiles each sequence
// holds), and `tokens` (the encoder's sequence, over which its heads split), named under
// `scope` as a PyTorch export computes them from the input's shape.
void image_batch(Net& n, const std::string& scope, const std::string& pixels, int64_t views, int64_t tokens);
// The pixel_values input of an image encoder: [batch, channels, height, width], or [batch,
// views, channels, height, width] (a sequence's images, LLaVA-NeXT's crops, Llama 4's tiles)
// viewed as [batch x views, channels, height, width]; image_batch's batch and sequence.
std::string image_input(Net& n, const std::string& scope, int64_t channels, int64_t height, int64_t width, int64_t tokens,
                        int64_t views = 1);
// LLaVA's image features (vit.cpp; ModelConfig::vision): graph input pixel_values [batch, channels,
// side, side] through the CLIP vision tower and the projector -> [batch, image tokens, hidden].
std::string llava_image_features(Net& n, const ModelConfig& c);
// Qwen2-VL's, Qwen2.5-VL's and Qwen3-VL's image features (qwen_vl.cpp; ModelConfig::vision with
// merge_size): graph input pixel_values [batch, patches, channels x temporal x patch x patch]
// through the tower and its merger -> [batch, image tokens, hidden]; Qwen3-VL's DeepStack
// features (each [batch, image tokens, hidden]) into `deepstack`.
std::string qwen_vl_image_features(Net& n, const ModelConfig& c, std::vector<std::string>* deepstack = nullptr);
// Llama 4's image features (llama4_vision.cpp; ModelConfig::vision with llama4): graph input
// pixel_values [batch, images x tiles, channels, image, image] through the vision model and the
// projector -> [batch, image tokens, hidden].
std::string llama4_image_features(Net& n, const ModelConfig& c);
// Mistral 3's image features (pixtral.cpp; ModelConfig::vision with pixtral): graph input
// pixel_values [batch, channels, height, width] through the Pixtral tower and the projector ->
// [batch, image tokens, hidden].
std::string pixtral_image_features(Net& n, const ModelConfig& c);
// Unmasked self-attention with a rotary embedding on the queries and keys (the vision towers of
// Pixtral and Llama 4): q_proj, k_proj, v_proj (biased or not), the heads split, rotate_half
// with cos / sin, the eager core, o_proj. Nodes under `s`.
std::string rotary_self_attention(Net& n, const std::string& s, const std::string& x, int64_t hidden, int64_t heads,
                                  bool bias, const std::string& cos, const std::string& sin);
// The image features of a sequence's `images` images, [batch x images, tokens, hidden], as
// [batch, images x tokens, hidden] (a view); unchanged for one image.
std::string images_per_sequence(Net& n, const std::string& p, const std::string& features, int64_t images, int64_t tokens,
                                int64_t hidden);
// rotate_half(x) = cat(-x2, x1) over the last of 4 axes (head_dim `hd`); x * cos + rotate_half(x)
// * sin: the rotary embedding as HF applies it.
std::string rotate_half_embedding(Net& n, const std::string& p, const std::string& x, int64_t hd,
                                  const std::string& cos, const std::string& sin);
// nn.Dropout: identity in inference, a mask-and-scale kernel in training.
std::string dropout(Net& n, const std::string& prefix, const std::string& x, float ratio);
// HF gelu_new (tanh approximation) as eager PyTorch runs it: 8 elementwise kernels.
std::string gelu_new(Net& n, const std::string& prefix, const std::string& x);
// F.gelu (erf form): one fused kernel in PyTorch -> com.microsoft.Gelu.
std::string gelu(Net& n, const std::string& prefix, const std::string& x);
// The activation named in a config ("gelu_new", "gelu", "relu", "relu2", "silu"/"swish",
// "quick_gelu").
std::string activation(Net& n, const std::string& prefix, const std::string& x, const std::string& act);

// [b, s, h] -> [b, heads, s, hd] (view + permute + contiguous copy: one Transpose).
std::string split_heads(Net& n, const std::string& prefix, const std::string& x, int64_t heads, int64_t hd);
// [b, heads, s, hd] -> [b, s, heads*hd] (permute + contiguous copy + view).
std::string merge_heads(Net& n, const std::string& prefix, const std::string& x, int64_t hidden);
// k [b, heads, s, hd] -> k^T [b, heads, hd, s] (a view in PyTorch; the matmul reads it
// transposed).
std::string transpose_last(Net& n, const std::string& prefix, const std::string& k);

// An encoder-decoder attention's keys and values (T5, Whisper). `cached`: "" in a forward pass
// or a prefill (projected from the attention's input by `project`, under `length` where that
// input is not of the Net's sequence: the encoder's output read by the decoder); "decoder" in a
// decode step's self-attention (projected, then appended to past_key_values.L.decoder.key /
// .value, the concatenation output as present.L.decoder.*); "encoder" in a decode step's
// cross-attention (past_key_values.L.encoder.key / .value, which the prefill projected).
struct EncoderDecoderKeys {
  std::string cached;
  int64_t layer = 0;
  SequenceLength length;
};
// WhisperAttention and BartAttention (eager): q_proj scaled by head_dim^-0.5, k_proj (biased
// where `k_bias`: BART's, not Whisper's), v_proj and out_proj biased; the scores plus `mask`
// when given, softmax, dropout, the values. Keys and values as `keys` says
// (encoder_decoder_keys): from `kv` (the encoder's output: cross-attention) or from `x`.
std::string seq2seq_attention(Net& n, const std::string& p, const std::string& x, const ModelConfig& c,
                              const std::string& kv, const EncoderDecoderKeys& keys, const std::string& mask,
                              bool k_bias);
// T5's relative position buckets and bias (MPNet's are the same), as stored: the embedding
// lookup's [1, q, k, heads] (`p`.relative_attention_bias.weight [rel_buckets, heads]); PyTorch's
// `values.permute([2, 0, 1]).unsqueeze(0)` is a view of it. Bidirectional (an encoder) or
// causal buckets; queries and keys at positions 0..s-1 (the Net's sequence), or (`past`, a
// decode step's cached length, and `total`, past + the step's tokens; scalars) queries at
// past..total-1 against keys 0..total-1, as T5Attention.compute_bias does with cache_position.
std::string relative_position_bias(Net& n, const std::string& p, const ModelConfig& c, bool bidirectional,
                                   const std::string& past = "", const std::string& total = "");
// HF's create_position_ids_from_input_ids (RoBERTa, M2M100): mask = ids != padding_idx;
// positions = (cumsum(mask) + past) * mask + padding_idx, the first token at padding_idx + 1
// (+ past: a decode step's cached length, a scalar; empty: 0), [batch, sequence].
std::string padding_positions(Net& n, const std::string& p, const std::string& ids, int64_t padding_idx,
                              const std::string& past = "");
// An encoder-decoder's decoder causal mask [1, 1, queries, keys] as HF's
// _prepare_4d_causal_attention_mask builds it for an all-ones attention mask (Whisper, BART,
// Marian): key j hidden from query i (at position past + i) where j > past + i, as finfo.min.
// `past` / `total`: scalars (a decode step), or empty (a forward pass over the Net's sequence).
std::string decoder_causal_mask(Net& n, const std::string& past, const std::string& total);
// A decode step's caches: for each of `layers` decoder layers, past_key_values.L.decoder.key /
// .value [batch, heads, past_sequence, head_dim] and .encoder.key / .value [batch, heads,
// encoder_sequence, head_dim] as graph inputs. Returns the decoder's cached length (a scalar).
std::string encoder_decoder_cache_inputs(Net& n, int64_t layers, int64_t heads, int64_t head_dim);
// [batch, heads, keys, head_dim] keys and values as `keys` says; `project` returns them
// split into heads.
std::pair<std::string, std::string> encoder_decoder_keys(
    Net& n, const std::string& prefix, const EncoderDecoderKeys& keys, int64_t heads, int64_t head_dim,
    const std::function<std::pair<std::string, std::string>()>& project);

// Eager attention core on split heads (BertSelfAttention, LlamaAttention): q k^T / sqrt(hd)
// (soft-capped when softcap > 0, Gemma 2) [+ an additive bias, ALiBi's] + mask, softmax,
// dropout, @ v, heads merged (no mask: mask empty) ->
// [b, s, merged]. Nodes are named under `p` ("p/MatMul", "p/Div", ...), the dropout under
// `dropout_prefix`.
std::string masked_attention(Net& n, const std::string& p, const std::string& q, const std::string& k,
                             const std::string& v, int64_t hd, const std::string& mask,
                             const std::string& dropout_prefix, float attn_dropout, int64_t merged,
                             double softcap = 0, const std::string& bias = "");
// cap * tanh(x / cap) (Gemma 2's soft-capping of attention scores and logits), named under `p`.
std::string soft_cap(Net& n, const std::string& p, const std::string& x, double cap);
std::string f32(Net& n, const std::string& name, float v);
// torch.arange(sequence): the int64 positions 0 .. s-1 of the Net's sequence, named `name`.
std::string sequence_arange(Net& n, const std::string& name);
// ConstantOfShape(shape) filled with `value` (torch.ones / zeros / full: one fill kernel).
std::string fill(Net& n, const std::string& name, const std::string& shape, int elem_type, double value);

}  // namespace neusight::builder
