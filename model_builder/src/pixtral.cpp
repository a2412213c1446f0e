// pixtral.cpp - Mistral 3's vision tower and projector as eager PyTorch runs them
// (transformers' PixtralVisionModel and Mistral3MultiModalProjector), one image a sequence.
#include "common.h"

namespace neusight::builder {

namespace {

using Tower = ModelConfig::VisionTower;

// PixtralRotaryEmbedding: each patch's row and column frequencies, precomputed for the largest
// image (a [patches a side^2, head_dim] buffer), looked up by the patch's place -> cos, sin
// [patches, head_dim].
std::pair<std::string, std::string> pixtral_rotary(Net& n, const Tower& v, int64_t rows, int64_t cols) {
  const std::string p = "vision_tower.patch_positional_embedding";
  const int64_t hd = v.hidden / v.heads, side = v.longest_edge / v.patch_size;
  std::vector<int64_t> ids(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) ids[static_cast<size_t>(r * cols + c)] = r * side + c;
  const std::string f = n.b.node("Gather", p + "/Gather", {n.b.weight(p + ".inv_freq", {side * side, hd}), n.b.ints(p + "/position_ids", ids)});
  return {n.b.node("Cos", p + "/Cos", {f}), n.b.node("Sin", p + "/Sin", {f})};
}

// PixtralAttentionLayer: attention_norm, attention (q, k, v, o projections without bias, the
// rotary on queries and keys) added to the input; ffn_norm, the gated MLP added to that.
std::string pixtral_layer(Net& n, const std::string& p, const std::string& x, const Tower& v, const std::string& cos,
                          const std::string& sin) {
  const int64_t h = v.hidden;
  const std::string a = rms_norm(n, p + ".attention_norm", x, h, v.layer_norm_eps);
  const std::string o = rotary_self_attention(n, p + ".attention", a, h, v.heads, false, cos, sin);
  const std::string y = n.b.node("Add", p + "/attention_residual_Add", {x, o});
  const std::string m = rms_norm(n, p + ".ffn_norm", y, h, v.layer_norm_eps);
  const std::string ff = p + ".feed_forward";
  const std::string gate = activation(n, ff + ".act_fn", linear(n, ff + ".gate_proj", m, h, v.ffn, false), v.activation);
  const std::string f = linear(n, ff + ".down_proj", n.b.node("Mul", ff + "/Mul", {gate, linear(n, ff + ".up_proj", m, h, v.ffn, false)}),
                               v.ffn, h, false);
  return n.b.node("Add", p + "/ffn_residual_Add", {y, f});
}

}  // namespace

std::string pixtral_image_features(Net& n, const ModelConfig& c) {
  const Tower& v = c.vision;
  const int64_t h = v.hidden, rows = v.image_size / v.patch_size, cols = v.image_width / v.patch_size;
  const int64_t patches = rows * cols, m = v.merge_size;
  const std::string text_batch = n.batch, text_seq = n.seq;
  const std::string scope = "vision_tower";

  // pixel_values, one image or a sequence's several; the tower's batch is the images'.
  const std::string pixels = image_input(n, scope, v.channels, v.image_size, v.image_width, patches, v.images);

  // patch_conv (no bias), flattened and transposed to tokens, ln_pre.
  std::string x = n.b.node("Conv", scope + ".patch_conv/Conv",
                           {pixels, n.b.weight(scope + ".patch_conv.weight", {h, v.channels, v.patch_size, v.patch_size})});
  n.b.attr_ints("kernel_shape", {v.patch_size, v.patch_size});
  n.b.attr_ints("strides", {v.patch_size, v.patch_size});
  x = n.b.node("Reshape", scope + "/flatten", {x, n.b.ints(scope + "/flat_shape", {0, h, patches})});
  x = n.b.node("Transpose", scope + "/tokens", {x});
  n.b.attr_ints("perm", {0, 2, 1});
  x = rms_norm(n, scope + ".ln_pre", x, h, v.layer_norm_eps);
  const auto [cos, sin] = pixtral_rotary(n, v, rows, cols);
  std::string features = v.feature_layer == 0 ? x : "";
  for (int64_t l = 0; l < v.layers; ++l) {
    x = pixtral_layer(n, scope + ".transformer.layers." + std::to_string(l), x, v, cos, sin);
    if (l + 1 == v.feature_layer) features = x;
  }

  // Mistral3MultiModalProjector: norm; the patch merger (each merge x merge block of patches
  // unfolded side by side: one copy; an odd last row or column dropped, as unfold does) and its
  // merging_layer; linear_1, the activation, linear_2.
  const std::string mp = "multi_modal_projector";
  std::string y = rms_norm(n, mp + ".norm", features, h, c.layer_norm_eps);
  const int64_t mr = rows / m, mc = cols / m;
  if (mr * m != rows || mc * m != cols) {
    y = n.b.node("Reshape", mp + "/grid", {y, n.b.ints(mp + "/grid_shape", {0, rows, cols, h})});
    y = n.b.node("Slice", mp + "/whole_blocks", {y, n.b.ints(mp + "/wb_s", {0, 0}), n.b.ints(mp + "/wb_e", {mr * m, mc * m}),
                                                 n.b.ints(mp + "/wb_ax", {1, 2})});
  }
  y = n.b.node("Reshape", mp + ".patch_merger/blocks", {y, n.b.ints(mp + "/block_shape", {0, mr, m, mc, m, h})});
  y = n.b.node("Transpose", mp + ".patch_merger/unfold", {y});
  n.b.attr_ints("perm", {0, 1, 3, 5, 2, 4});  // [batch, rows, cols, hidden, m, m]: unfold's (channel, kh, kw) order
  y = n.b.node("Reshape", mp + ".patch_merger/tokens", {y, n.b.ints(mp + "/token_shape", {0, mr * mc, h * m * m})});
  y = linear(n, mp + ".patch_merger.merging_layer", y, h * m * m, h, false);
  y = activation(n, mp + ".act", linear(n, mp + ".linear_1", y, h, c.hidden, v.projector_bias), v.projector_activation);
  y = linear(n, mp + ".linear_2", y, c.hidden, c.hidden, v.projector_bias);
  n.batch = text_batch;
  n.seq = text_seq;
  return images_per_sequence(n, mp + "/per_sequence", y, v.images, v.tokens(), c.hidden);
}

}  // namespace neusight::builder
