// llama4_vision.cpp - Llama 4's vision model and projector as eager PyTorch runs them
// (transformers' Llama4VisionModel and Llama4MultiModalProjector): each image's tiles through
// the tower, pixel-shuffled and adapted, projected to the language model's width.
#include "common.h"

namespace neusight::builder {

namespace {

using Tower = ModelConfig::VisionTower;

// Llama4VisionRotaryEmbedding: each patch's frequencies from its row and column (the class
// token's zero), computed once per forward -> cos, sin [tokens, head_dim] (freqs_ci applied as
// the complex product: the same passes as rotate_half).
std::pair<std::string, std::string> tile_rotary(Net& n, const Tower& v, int64_t side) {
  const std::string p = "vision_model.rotary_embedding";
  const int64_t hd = v.hidden / v.heads, tokens = side * side + 1;
  std::vector<int64_t> pos(static_cast<size_t>(tokens), 0);
  for (int64_t i = 0; i < side * side; ++i) pos[static_cast<size_t>(i)] = (i / side) * side + (i % side) + 1;
  std::string f = n.b.node("Cast", p + "/positions", {n.b.ints(p + "/position_ids", pos)});
  n.b.attr_i("to", kF32);
  f = n.b.node("Unsqueeze", p + "/column", {f, n.b.ints(p + "/axes1", {1})});
  f = n.b.node("Mul", p + "/freqs", {f, n.b.weight(p + ".inv_freq", {hd / 2})});
  f = n.b.node("Concat", p + "/emb", {f, f});
  n.b.attr_i("axis", -1);
  return {n.b.node("Cos", p + "/Cos", {f}), n.b.node("Sin", p + "/Sin", {f})};
}

// Llama4VisionEncoderLayer: input_layernorm, attention (q, k, v, o with biases; the rotary on
// queries and keys) added to the input; post_attention_layernorm, fc1, GELU, fc2 added to that.
std::string tile_layer(Net& n, const std::string& p, const std::string& x, const Tower& v, const std::string& cos,
                       const std::string& sin) {
  const int64_t h = v.hidden;
  const std::string a = layer_norm(n, p + ".input_layernorm", x, h, v.layer_norm_eps);
  const std::string o = rotary_self_attention(n, p + ".self_attn", a, h, v.heads, true, cos, sin);
  const std::string y = n.b.node("Add", p + "/attention_residual_Add", {x, o});
  const std::string m = layer_norm(n, p + ".post_attention_layernorm", y, h, v.layer_norm_eps);
  const std::string f = linear(n, p + ".mlp.fc2", activation(n, p + ".mlp.act", linear(n, p + ".mlp.fc1", m, h, v.ffn), v.activation),
                               v.ffn, h);
  return n.b.node("Add", p + "/mlp_residual_Add", {y, f});
}

}  // namespace

std::string llama4_image_features(Net& n, const ModelConfig& c) {
  const Tower& v = c.vision;
  const int64_t h = v.hidden, side = v.image_size / v.patch_size, patches = side * side, views = v.images * v.tiles();
  const int64_t patch_dim = v.channels * v.patch_size * v.patch_size, out_side = side / v.shuffle;
  const std::string text_batch = n.batch, text_seq = n.seq;
  const std::string vm = "vision_model";

  // pixel_values [batch, images x tiles, channels, image, image], viewed per tile (one tile:
  // [batch, channels, image, image]); the tower's batch is the tiles'.
  const std::string pixels = image_input(n, vm, v.channels, v.image_size, v.image_size, patches + 1, views);

  // Llama4UnfoldConvolution: nn.Unfold into [tiles, patches, C x P x P] (one copy), a linear
  // without bias; the class token appended last, the positions added, layernorm_pre.
  const std::string pe = vm + ".patch_embedding";
  std::string x = n.b.node("Reshape", pe + "/blocks", {pixels, n.b.ints(pe + "/block_shape", {-1, v.channels, side, v.patch_size, side, v.patch_size})});
  x = n.b.node("Transpose", pe + "/unfold", {x});
  n.b.attr_ints("perm", {0, 2, 4, 1, 3, 5});
  x = n.b.node("Reshape", pe + "/patches", {x, n.b.ints(pe + "/patch_shape", {-1, patches, patch_dim})});
  x = linear(n, pe + ".linear", x, patch_dim, h, false);
  const std::string cls_shape = n.b.node("Concat", vm + "/cls_shape", {n.batch, n.b.ints(vm + "/one_h", {1, h})});
  n.b.attr_i("axis", 0);
  const std::string cls = n.b.node("Expand", vm + "/cls_expand", {n.b.weight(vm + ".class_embedding", {1, 1, h}), cls_shape});
  x = n.b.node("Concat", vm + "/cat", {x, cls});
  n.b.attr_i("axis", 1);
  x = n.b.node("Add", vm + "/position_Add", {x, n.b.weight(vm + ".positional_embedding_vlm", {patches + 1, h})});
  x = layer_norm(n, vm + ".layernorm_pre", x, h, v.layer_norm_eps);
  const auto [cos, sin] = tile_rotary(n, v, side);
  for (int64_t l = 0; l < v.layers; ++l) x = tile_layer(n, vm + ".model.layers." + std::to_string(l), x, v, cos, sin);
  x = layer_norm(n, vm + ".layernorm_post", x, h, v.layer_norm_eps);
  x = n.b.node("Slice", vm + "/patches_only", {x, n.b.ints(vm + "/po_s", {0}), n.b.ints(vm + "/po_e", {patches}),
                                               n.b.ints(vm + "/po_ax", {1})});

  // pixel_shuffle: shuffle x shuffle neighbouring patches into one token of shuffle^2 x hidden
  // (two permuting copies), then the adapter MLP (fc1, GELU, fc2, GELU; no biases).
  const int64_t sh = v.shuffle;
  const std::string ps = vm + ".vision_adapter";
  x = n.b.node("Reshape", ps + "/rows", {x, n.b.ints(ps + "/rows_shape", {-1, side, side / sh, h * sh})});
  x = n.b.node("Transpose", ps + "/permute", {x});
  n.b.attr_ints("perm", {0, 2, 1, 3});
  x = n.b.node("Reshape", ps + "/cols", {x, n.b.ints(ps + "/cols_shape", {-1, out_side, out_side, h * sh * sh})});
  x = n.b.node("Transpose", ps + "/permute_back", {x});
  n.b.attr_ints("perm", {0, 2, 1, 3});
  x = n.b.node("Reshape", ps + "/tokens", {x, n.b.ints(ps + "/token_shape", {-1, out_side * out_side, h * sh * sh})});
  x = activation(n, ps + ".mlp.act", linear(n, ps + ".mlp.fc1", x, h * sh * sh, v.out_hidden, false), "gelu");
  x = activation(n, ps + ".mlp.act_out", linear(n, ps + ".mlp.fc2", x, v.out_hidden, v.adapter_dim, false), "gelu");

  // Llama4MultiModalProjector: linear_1 to the language model's width.
  x = linear(n, "multi_modal_projector.linear_1", x, v.adapter_dim, c.hidden, v.projector_bias);
  n.batch = text_batch;
  n.seq = text_seq;
  // Each sequence's images' tiles, one after another (a view).
  return n.b.node("Reshape", "image_features/per_sequence", {x, n.b.ints("image_features/sequence_shape", {-1, v.sequence_tokens(), c.hidden})});
}

}  // namespace neusight::builder
