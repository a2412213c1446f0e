// vit.cpp - Vision Transformer (HF ViTForImageClassification / ViTModel in eager mode): patch
// embedding, class token and learned positions, pre-norm encoder layers, the class token's
// classifier (or ViTModel's pooler).
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

}  // namespace

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
