// vit.cpp - image encoders as eager PyTorch runs them: the Vision Transformer (HF
// ViTForImageClassification / ViTModel: patch embedding, class token and learned positions,
// pre-norm encoder layers, the class token's classifier or ViTModel's pooler) and the vision
// towers of LLaVA (CLIP) and PaliGemma (SigLIP) with their projectors.
#include <cmath>

#include "common.h"
#include "families.h"

namespace neusight::builder {

namespace {

// The pixel_values input of an image encoder: [batch, channels, image, image]. The Net's batch
// (and sequence, the encoder's `tokens`, over which its heads split) become the image's, named
// under `scope`, as a PyTorch export computes them from the input's shape.
std::string image_input(Net& n, const std::string& scope, int64_t channels, int64_t image, int64_t tokens) {
  const std::string pixels = n.b.input("pixel_values", kF32, {-1, channels, image, image}, {"batch"});
  const std::string shape = n.b.node("Shape", scope + "/input_shape", {pixels});
  const std::string images = n.b.node("Gather", scope + "/batch", {shape, n.b.ints(scope + "/idx0", {0}, true)});
  n.b.attr_i("axis", 0);
  n.batch = n.b.node("Unsqueeze", scope + "/batch_1d", {images, n.b.ints(scope + "/axes0", {0})});
  n.seq = n.b.ints(scope + "/seq_1d", {tokens});
  return pixels;
}

// The patch tokens of HF's vision embeddings: a `patch` convolution of stride `patch` (weights
// under `conv`, with or without a bias) flattened to [batch, patches, hidden]; with a class token
// (its weight named `class_token`), that token expanded over the batch and concatenated first
// (torch.cat copies both). Nodes named under `scope`.
std::string patch_tokens(Net& n, const std::string& scope, const std::string& pixels, const std::string& conv, bool bias,
                         const std::string& class_token, int64_t hidden, int64_t channels, int64_t patch, int64_t patches) {
  std::vector<std::string> in = {pixels, n.b.weight(conv + ".weight", {hidden, channels, patch, patch})};
  if (bias) in.push_back(n.b.weight(conv + ".bias", {hidden}));
  std::string x = n.b.node("Conv", conv + "/Conv", in);
  n.b.attr_ints("kernel_shape", {patch, patch});
  n.b.attr_ints("strides", {patch, patch});
  const std::string flat = n.b.node("Concat", scope + "/flat_shape", {n.batch, n.b.ints(scope + "/h_patches", {hidden, patches})});
  n.b.attr_i("axis", 0);
  x = n.b.node("Transpose", scope + "/transpose", {n.b.node("Reshape", scope + "/flatten", {x, flat})});
  n.b.attr_ints("perm", {0, 2, 1});
  if (class_token.empty()) return x;
  const std::string cls_shape = n.b.node("Concat", scope + "/cls_shape", {n.batch, n.b.ints(scope + "/one_h", {1, hidden})});
  n.b.attr_i("axis", 0);
  const std::string cls = n.b.node("Expand", scope + "/cls_expand", {n.b.weight(class_token, {1, 1, hidden}), cls_shape});
  x = n.b.node("Concat", scope + "/cat", {cls, x});
  n.b.attr_i("axis", 1);
  return x;
}

// One pre-norm encoder layer: a norm, unmasked self-attention (q, k, v projections, the core
// under `attention`) and its output projection added to the input; a norm, fc1, the activation
// and fc2 added to that. Sizes, and the names of ViTLayer's or CLIP's and SigLIP's modules
// (relative to the layer; a dropout of "" is no module).
struct EncoderLayer {
  int64_t hidden = 0, heads = 0, ffn = 0;
  std::string activation;
  double eps = 1e-5;
  bool qkv_bias = true;
  float dropout = 0, attn_dropout = 0;
  const char *norm1, *attention, *q, *k, *v, *out, *out_dropout, *norm2, *fc1, *act, *fc2, *fc_dropout, *fc_residual;
};

EncoderLayer vit_layer(const ModelConfig& c) {
  return {c.hidden, c.heads, c.ffn, c.activation, c.layer_norm_eps, c.qkv_bias, c.dropout, c.attn_dropout,
          ".layernorm_before", ".attention.attention", ".query", ".key", ".value", ".attention.output.dense",
          ".attention.output.dropout", ".layernorm_after", ".intermediate.dense", ".intermediate.act", ".output.dense",
          ".output.dropout", "/output_residual_Add"};
}

EncoderLayer clip_layer(const ModelConfig::VisionTower& v) {
  return {v.hidden, v.heads, v.ffn, v.activation, v.layer_norm_eps, true, 0.0f, 0.0f,
          ".layer_norm1", ".self_attn", ".q_proj", ".k_proj", ".v_proj", ".self_attn.out_proj",
          "", ".layer_norm2", ".mlp.fc1", ".mlp.act", ".mlp.fc2", "", "/mlp_residual_Add"};
}

std::string encoder_layer(Net& n, const std::string& p, const std::string& x, const EncoderLayer& e) {
  const int64_t h = e.hidden, nh = e.heads, hd = e.hidden / e.heads;
  const std::string a = layer_norm(n, p + e.norm1, x, h, e.eps);
  const std::string s = p + e.attention;
  const std::string q = split_heads(n, s + "/q", linear(n, s + e.q, a, h, h, e.qkv_bias), nh, hd);
  const std::string k = split_heads(n, s + "/k", linear(n, s + e.k, a, h, h, e.qkv_bias), nh, hd);
  const std::string v = split_heads(n, s + "/v", linear(n, s + e.v, a, h, h, e.qkv_bias), nh, hd);
  std::string o = linear(n, p + e.out, masked_attention(n, s, q, k, v, hd, "", s + ".dropout", e.attn_dropout, h), h, h);
  if (*e.out_dropout) o = dropout(n, p + e.out_dropout, o, e.dropout);
  const std::string y = n.b.node("Add", p + "/attention_residual_Add", {o, x});
  std::string f = layer_norm(n, p + e.norm2, y, h, e.eps);
  f = linear(n, p + e.fc2, activation(n, p + e.act, linear(n, p + e.fc1, f, h, e.ffn), e.activation), e.ffn, h);
  if (*e.fc_dropout) f = dropout(n, p + e.fc_dropout, f, e.dropout);
  return n.b.node("Add", p + e.fc_residual, {f, y});
}

}  // namespace

int64_t image_patches(int64_t image, int64_t patch, int64_t channels, const std::string& what) {
  if (image <= 0 || patch <= 0 || channels <= 0 || image % patch != 0 || image / patch > 1024)
    throw InputError(what + ": image_size must be a positive multiple of patch_size (at most 1024 patches a side), "
                            "and num_channels positive");
  return (image / patch) * (image / patch);
}

std::string llava_image_features(Net& n, const ModelConfig& c) {
  const ModelConfig::VisionTower& v = c.vision;
  const int64_t h = v.hidden, patches = image_patches(v.image_size, v.patch_size, v.channels, "vision tower");
  const int64_t seq = patches + (v.siglip ? 0 : 1);  // SigLIP has no class token
  // The tower's heads split over its own sequence (the class token and the patches): the Net's
  // batch and sequence plumbing is the image's while it is built.
  const std::string text_batch = n.batch, text_seq = n.seq;
  const std::string pixels = image_input(n, "vision_tower", v.channels, v.image_size, seq);

  // The embeddings: the patch convolution (CLIP's without a bias), CLIP's class embedding, the
  // position embedding looked up (nn.Embedding) and added.
  const std::string pe = "vision_tower.vision_model.embeddings";
  std::string x = patch_tokens(n, pe, pixels, pe + ".patch_embedding", v.siglip, v.siglip ? "" : pe + ".class_embedding",
                               h, v.channels, v.patch_size, patches);
  std::vector<int64_t> ids(static_cast<size_t>(seq));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i);
  const std::string pos = n.b.node("Gather", pe + ".position_embedding/Gather",
                                   {n.b.weight(pe + ".position_embedding.weight", {seq, h}), n.b.ints(pe + "/position_ids", ids)});
  x = n.b.node("Add", pe + "/position_Add", {x, pos});
  const std::string vm = "vision_tower.vision_model";
  if (!v.siglip) x = layer_norm(n, vm + ".pre_layrnorm", x, h, v.layer_norm_eps);
  // Every layer runs (eager HF returns all hidden states); the features are one layer's output.
  const int64_t pick = v.feature_layer;  // hidden_states[i] is layer i - 1's output
  std::string features = pick == 0 ? x : "";
  const EncoderLayer layer = clip_layer(v);
  for (int64_t l = 0; l < v.layers; ++l) {
    x = encoder_layer(n, vm + ".encoder.layers." + std::to_string(l), x, layer);
    if (l + 1 == pick) features = x;
  }
  if (v.siglip) {  // post_layernorm over the last hidden state: the features
    features = layer_norm(n, vm + ".post_layernorm", x, h, v.layer_norm_eps);
  } else {  // the pooled class token's post_layernorm (computed, unused by LLaVA)
    const std::string pooled = n.b.node("Gather", vm + "/pooled", {x, n.b.ints(vm + "/idx0b", {0}, true)});
    n.b.attr_i("axis", 1);
    layer_norm(n, vm + ".post_layernorm", pooled, h, v.layer_norm_eps);
  }
  n.batch = text_batch;
  n.seq = text_seq;

  const std::string mp = "multi_modal_projector";
  if (v.siglip)  // PaliGemma: one projection, the features divided by sqrt(hidden)
    return n.b.node("Div", mp + "/scale", {linear(n, mp + ".linear", features, h, c.hidden),
                                           f32(n, mp + "/sqrt_hidden", static_cast<float>(std::sqrt(double(c.hidden))))});
  // LLaVA's "default" strategy drops the class token (a strided view the projector copies).
  if (!v.keep_class_token) {
    features = n.b.node("Slice", "vision_tower/select",
                        {features, n.b.ints("vision_tower/starts", {1}), n.b.ints("vision_tower/ends", {patches + 1}),
                         n.b.ints("vision_tower/axes1", {1})});
  }
  const std::string y = activation(n, mp + ".act", linear(n, mp + ".linear_1", features, h, c.hidden), v.projector_activation);
  return linear(n, mp + ".linear_2", y, c.hidden, c.hidden);
}

LoadedModel build_vit(const ModelConfig& c) {
  const int64_t h = c.hidden, patches = image_patches(c.image_size, c.patch_size, c.num_channels, "vit");
  Net n(c, "Vision Transformer (ViTForImageClassification)");
  const std::string pixels = image_input(n, "vit", c.num_channels, c.image_size, patches + 1);
  // The patch embedding, the class token put first, then the learned positions.
  std::string x = patch_tokens(n, "vit.embeddings", pixels, "vit.embeddings.patch_embeddings.projection", true,
                               "vit.embeddings.cls_token", h, c.num_channels, c.patch_size, patches);
  x = n.b.node("Add", "vit.embeddings/position_Add", {x, n.b.weight("vit.embeddings.position_embeddings", {1, patches + 1, h})});
  x = dropout(n, "vit.embeddings.dropout", x, c.dropout);

  const EncoderLayer layer = vit_layer(c);
  for (int64_t l = 0; l < c.layers; ++l) x = encoder_layer(n, "vit.encoder.layer." + std::to_string(l), x, layer);
  x = layer_norm(n, "vit.layernorm", x, h, c.layer_norm_eps);

  // The class token's state: the classifier (ViTForImageClassification) or the pooler (ViTModel).
  std::string first = n.b.node("Gather", "vit/first_token", {x, n.b.ints("const_idx0b", {0}, true)});
  n.b.attr_i("axis", 1);
  if (c.head == "pooler") {
    first = linear(n, "vit.pooler.dense", first, h, h);
    n.b.node("Tanh", "vit.pooler/Tanh", {first});
    n.rename_last("pooler_output");
    n.output("pooler_output", {"batch"}, {h});
    return n.finish(c);
  }
  linear(n, "classifier", first, h, c.num_labels);
  n.rename_last("logits");
  n.output("logits", {"batch"}, {c.num_labels});
  return n.finish(c);
}

}  // namespace neusight::builder
