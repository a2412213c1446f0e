// vit.cpp - Vision Transformer (HF ViTForImageClassification / ViTModel in eager mode): patch
// embedding, class token and learned positions, pre-norm encoder layers, the class token's
// classifier (or ViTModel's pooler).
#include <cmath>

#include "common.h"
#include "families.h"

namespace neusight::builder {

namespace {

// ViTLayer: layernorm_before, self-attention (no mask) and its output projection added to the
// input; layernorm_after, intermediate (activation) and output added to that.
std::string vit_layer(Net& n, const std::string& p, const std::string& x, const ModelConfig& c) {
  const int64_t h = c.hidden, nh = c.heads, hd = c.head_dim;
  const std::string a = layer_norm(n, p + ".layernorm_before", x, h, c.layer_norm_eps);
  const std::string s = p + ".attention.attention";
  const std::string q = split_heads(n, s + "/q", linear(n, s + ".query", a, h, nh * hd, c.qkv_bias), nh, hd);
  const std::string k = split_heads(n, s + "/k", linear(n, s + ".key", a, h, nh * hd, c.qkv_bias), nh, hd);
  const std::string v = split_heads(n, s + "/v", linear(n, s + ".value", a, h, nh * hd, c.qkv_bias), nh, hd);
  std::string o = masked_attention(n, s, q, k, v, hd, "", s + ".dropout", c.attn_dropout, nh * hd);
  o = linear(n, p + ".attention.output.dense", o, nh * hd, h);
  o = dropout(n, p + ".attention.output.dropout", o, c.dropout);
  const std::string y = n.b.node("Add", p + "/attention_residual_Add", {o, x});
  std::string f = layer_norm(n, p + ".layernorm_after", y, h, c.layer_norm_eps);
  f = linear(n, p + ".intermediate.dense", f, h, c.ffn);
  f = activation(n, p + ".intermediate.act", f, c.activation);
  f = linear(n, p + ".output.dense", f, c.ffn, h);
  f = dropout(n, p + ".output.dropout", f, c.dropout);
  return n.b.node("Add", p + "/output_residual_Add", {f, y});
}

// CLIPEncoderLayer: layer_norm1, self-attention (no mask; q, k, v and out projections with
// biases) added to the input; layer_norm2, fc1, the activation, fc2 added to that.
std::string clip_layer(Net& n, const std::string& p, const std::string& x, const ModelConfig::VisionTower& v) {
  const int64_t h = v.hidden, nh = v.heads, hd = v.hidden / v.heads;
  const std::string a = layer_norm(n, p + ".layer_norm1", x, h, v.layer_norm_eps);
  const std::string s = p + ".self_attn";
  const std::string q = split_heads(n, s + "/q", linear(n, s + ".q_proj", a, h, h), nh, hd);
  const std::string k = split_heads(n, s + "/k", linear(n, s + ".k_proj", a, h, h), nh, hd);
  const std::string val = split_heads(n, s + "/v", linear(n, s + ".v_proj", a, h, h), nh, hd);
  const std::string o = linear(n, s + ".out_proj", masked_attention(n, s, q, k, val, hd, "", s + ".dropout", 0.0f, h), h, h);
  const std::string y = n.b.node("Add", p + "/attention_residual_Add", {o, x});
  std::string f = layer_norm(n, p + ".layer_norm2", y, h, v.layer_norm_eps);
  f = linear(n, p + ".mlp.fc2", activation(n, p + ".mlp.act", linear(n, p + ".mlp.fc1", f, h, v.ffn), v.activation), v.ffn, h);
  return n.b.node("Add", p + "/mlp_residual_Add", {f, y});
}

}  // namespace

std::string llava_image_features(Net& n, const ModelConfig& c) {
  const ModelConfig::VisionTower& v = c.vision;
  const int64_t h = v.hidden, side = v.image_size / v.patch_size, patches = side * side;
  const int64_t seq = patches + (v.siglip ? 0 : 1);  // SigLIP has no class token
  const std::string pixels = n.b.input("pixel_values", kF32, {-1, v.channels, v.image_size, v.image_size}, {"batch"});
  // The tower's heads split over its own sequence (the class token and the patches): the Net's
  // batch and sequence plumbing is the image's while it is built.
  const std::string text_batch = n.batch, text_seq = n.seq;
  const std::string shape = n.b.node("Shape", "vision_tower/input_shape", {pixels});
  const std::string images = n.b.node("Gather", "vision_tower/batch", {shape, n.b.ints("vision_tower/idx0", {0}, true)});
  n.b.attr_i("axis", 0);
  n.batch = n.b.node("Unsqueeze", "vision_tower/batch_1d", {images, n.b.ints("vision_tower/axes0", {0})});
  n.seq = n.b.ints("vision_tower/seq_1d", {seq});

  // The embeddings: the patch convolution (CLIP's without a bias), CLIP's class embedding
  // expanded and concatenated first, the position embedding looked up (nn.Embedding) and added.
  const std::string pe = "vision_tower.vision_model.embeddings";
  std::vector<std::string> conv_in = {pixels, n.b.weight(pe + ".patch_embedding.weight", {h, v.channels, v.patch_size, v.patch_size})};
  if (v.siglip) conv_in.push_back(n.b.weight(pe + ".patch_embedding.bias", {h}));
  std::string x = n.b.node("Conv", pe + ".patch_embedding/Conv", conv_in);
  n.b.attr_ints("kernel_shape", {v.patch_size, v.patch_size});
  n.b.attr_ints("strides", {v.patch_size, v.patch_size});
  const std::string flat = n.b.node("Concat", pe + "/flat_shape", {n.batch, n.b.ints(pe + "/h_patches", {h, patches})});
  n.b.attr_i("axis", 0);
  x = n.b.node("Transpose", pe + "/transpose", {n.b.node("Reshape", pe + "/flatten", {x, flat})});
  n.b.attr_ints("perm", {0, 2, 1});
  if (!v.siglip) {
    const std::string cls_shape = n.b.node("Concat", pe + "/cls_shape", {n.batch, n.b.ints(pe + "/one_h", {1, h})});
    n.b.attr_i("axis", 0);
    const std::string cls = n.b.node("Expand", pe + "/cls_expand", {n.b.weight(pe + ".class_embedding", {1, 1, h}), cls_shape});
    x = n.b.node("Concat", pe + "/cat", {cls, x});
    n.b.attr_i("axis", 1);
  }
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
  for (int64_t l = 0; l < v.layers; ++l) {
    x = clip_layer(n, vm + ".encoder.layers." + std::to_string(l), x, v);
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
  if (c.image_size <= 0 || c.patch_size <= 0 || c.num_channels <= 0 || c.image_size % c.patch_size != 0)
    throw InputError("vit: image_size must be a positive multiple of patch_size");
  Net n(c, "Vision Transformer (ViTForImageClassification)");
  const int64_t h = c.hidden, side = c.image_size / c.patch_size, patches = side * side;
  const std::string pixels = n.b.input("pixel_values", kF32, {-1, c.num_channels, c.image_size, c.image_size}, {"batch"});
  // The batch from the image's shape (as a PyTorch export computes it), the sequence fixed: the
  // class token and the patches.
  const std::string shape = n.b.node("Shape", "input_shape", {pixels});
  n.batch_scalar = n.b.node("Gather", "batch_size", {shape, n.b.ints("const_idx0", {0}, true)});
  n.b.attr_i("axis", 0);
  n.batch = n.b.node("Unsqueeze", "batch_size_1d", {n.batch_scalar, n.b.ints("const_axes0", {0})});
  n.seq_scalar = n.b.ints("seq_len", {patches + 1}, true);
  n.seq = n.b.ints("seq_len_1d", {patches + 1});

  // Patch embedding: a patch_size convolution of stride patch_size, flattened to [b, patches, h].
  const std::string pe = "vit.embeddings.patch_embeddings.projection";
  std::string x = n.b.node("Conv", pe + "/Conv",
                           {pixels, n.b.weight(pe + ".weight", {h, c.num_channels, c.patch_size, c.patch_size}),
                            n.b.weight(pe + ".bias", {h})});
  n.b.attr_ints("kernel_shape", {c.patch_size, c.patch_size});
  n.b.attr_ints("strides", {c.patch_size, c.patch_size});
  const std::string flat = n.b.node("Concat", "vit.embeddings/flat_shape", {n.batch, n.b.ints("vit/h_patches", {h, patches})});
  n.b.attr_i("axis", 0);
  x = n.b.node("Reshape", "vit.embeddings/flatten", {x, flat});
  x = n.b.node("Transpose", "vit.embeddings/transpose", {x});
  n.b.attr_ints("perm", {0, 2, 1});
  // The class token expanded over the batch and put first (torch.cat copies both), then the
  // learned positions.
  const std::string cls_shape = n.b.node("Concat", "vit.embeddings/cls_shape", {n.batch, n.b.ints("vit/one_h", {1, h})});
  n.b.attr_i("axis", 0);
  const std::string cls = n.b.node("Expand", "vit.embeddings/cls_expand", {n.b.weight("vit.embeddings.cls_token", {1, 1, h}), cls_shape});
  x = n.b.node("Concat", "vit.embeddings/cat", {cls, x});
  n.b.attr_i("axis", 1);
  x = n.b.node("Add", "vit.embeddings/position_Add", {x, n.b.weight("vit.embeddings.position_embeddings", {1, patches + 1, h})});
  x = dropout(n, "vit.embeddings.dropout", x, c.dropout);

  for (int64_t l = 0; l < c.layers; ++l) x = vit_layer(n, "vit.encoder.layer." + std::to_string(l), x, c);
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
