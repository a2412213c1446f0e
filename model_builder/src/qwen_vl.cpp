// qwen_vl.cpp - the vision towers of Qwen2-VL, Qwen2.5-VL and Qwen3-VL as eager PyTorch runs
// them (transformers' Qwen2VisionTransformerPretrainedModel, Qwen2_5_VisionTransformerPretrainedModel,
// Qwen3VLVisionModel), one image a sequence: the patch embedding (a Conv3d whose kernel is its
// stride), Qwen3-VL's interpolated learned positions, 2D rotary positions, the vision blocks
// (Qwen2.5-VL's within windows but in its full-attention layers), the PatchMerger to the
// language model's width, and Qwen3-VL's DeepStack mergers.
#include <algorithm>
#include <cmath>
#include <utility>

#include "common.h"

namespace neusight::builder {

namespace {

using Tower = ModelConfig::VisionTower;

// The patch grid of the tower's image and its merged units, windows and their tokens.
struct QwenGrid {
  int64_t rows = 0, cols = 0;  // patches a side
  int64_t patches = 0;         // rows x cols: the tower's sequence
  int64_t unit = 0;            // patches a merged unit (merge_size^2)
  int64_t windows = 1;         // Qwen2.5-VL's attention windows (1: none)
  int64_t window_len = 0;      // patches a window, the sequence split evenly (padded when uneven)
};

QwenGrid qwen_grid(const Tower& v) {
  QwenGrid g;
  g.rows = v.image_size / v.patch_size;
  g.cols = v.image_width / v.patch_size;
  g.patches = g.rows * g.cols;
  g.unit = v.merge_size * v.merge_size;
  if (v.window_size > 0) {
    const int64_t side = v.window_size / (v.patch_size * v.merge_size);  // merged units a window side
    const int64_t mr = g.rows / v.merge_size, mc = g.cols / v.merge_size;
    g.windows = ((mr + side - 1) / side) * ((mc + side - 1) / side);
  }
  g.window_len = (g.patches + g.windows - 1) / g.windows;
  return g;
}

// The order the processor flattens patches in: each merge_size x merge_size block of patches
// contiguous, blocks row-major; (row, column) of each patch, interleaved.
std::vector<int64_t> patch_positions(const Tower& v, const QwenGrid& g) {
  std::vector<int64_t> pos;
  pos.reserve(static_cast<size_t>(2 * g.patches));
  const int64_t m = v.merge_size;
  for (int64_t br = 0; br < g.rows / m; ++br)
    for (int64_t bc = 0; bc < g.cols / m; ++bc)
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < m; ++c) {
          pos.push_back(br * m + r);
          pos.push_back(bc * m + c);
        }
  return pos;
}

// Qwen2.5-VL's get_window_index: the merged units ordered window by window (windows row-major,
// units row-major within each), so that each window's patches are contiguous.
std::vector<int64_t> window_order(const Tower& v, const QwenGrid& g) {
  const int64_t side = v.window_size / (v.patch_size * v.merge_size);
  const int64_t mr = g.rows / v.merge_size, mc = g.cols / v.merge_size;
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(mr * mc));
  for (int64_t wr = 0; wr < mr; wr += side)
    for (int64_t wc = 0; wc < mc; wc += side)
      for (int64_t r = wr; r < std::min(mr, wr + side); ++r)
        for (int64_t c = wc; c < std::min(mc, wc + side); ++c) order.push_back(r * mc + c);
  return order;
}

// Rows of [batch, units, ...] taken in `order` along axis 1 (index_select: one copy).
std::string reorder_units(Net& n, const std::string& p, const std::string& x, const std::vector<int64_t>& order) {
  const std::string y = n.b.node("Gather", p, {x, n.b.ints(p + "_index", order)});
  n.b.attr_i("axis", 1);
  return y;
}

// The tower's rotary tables, once per forward (VisionRotaryEmbedding, rot_pos_emb): the
// frequencies of every grid position (positions x inv_freq, head_dim / 4 of them), each
// patch's row and column frequencies looked up and concatenated, then doubled, cos and sin ->
// [patches, 1, head_dim] each (broadcast over the heads). Qwen2.5-VL orders them by window.
std::pair<std::string, std::string> rotary_tables(Net& n, const Tower& v, const QwenGrid& g,
                                                  const std::vector<int64_t>& order) {
  const std::string p = "visual.rotary_pos_emb";
  const int64_t hd = v.hidden / v.heads, side = std::max(g.rows, g.cols);
  std::vector<int64_t> grid(static_cast<size_t>(side));
  for (size_t i = 0; i < grid.size(); ++i) grid[i] = int64_t(i);
  std::string seq = n.b.node("Cast", p + "/seq", {n.b.ints(p + "/arange", grid)});
  n.b.attr_i("to", kF32);
  seq = n.b.node("Unsqueeze", p + "/seq_column", {seq, n.b.ints(p + "/axes1", {1})});
  const std::string freqs = n.b.node("Mul", p + "/outer", {seq, n.b.weight(p + ".inv_freq", {hd / 4})});
  std::string f = n.b.node("Gather", p + "/lookup", {freqs, n.b.ints(p + "/pos_ids", patch_positions(v, g))});
  f = n.b.node("Reshape", p + "/flatten", {f, n.b.ints(p + "/flat_shape", {1, g.patches / g.unit, g.unit, hd / 2})});
  if (!order.empty()) f = reorder_units(n, p + "/window_order", f, order);
  f = n.b.node("Reshape", p + "/per_patch", {f, n.b.ints(p + "/patch_shape", {g.patches, 1, hd / 2})});
  const std::string emb = n.b.node("Concat", p + "/emb", {f, f});
  n.b.attr_i("axis", -1);
  return {n.b.node("Cos", p + "/Cos", {emb}), n.b.node("Sin", p + "/Sin", {emb})};
}

// Qwen3-VL's fast_pos_embed_interpolate: the position table (position_grid^2 rows) read at the
// four grid corners around each patch's place on it (bilinear over linspace positions), each
// times its weight, summed, then laid out in the processor's merge-block order (a permuting copy)
// -> [1, patches, hidden], added to every image's patch tokens.
std::string interpolated_positions(Net& n, const Tower& v, const QwenGrid& g) {
  const std::string p = "visual.pos_embed";
  const int64_t side = v.position_grid, h = v.hidden, m = v.merge_size;
  std::vector<int64_t> idx(static_cast<size_t>(4 * g.patches)), weight(idx.size());
  auto at = [&](int64_t i, int64_t count) { return count > 1 ? double(i) * double(side - 1) / double(count - 1) : 0.0; };
  for (int64_t r = 0; r < g.rows; ++r)
    for (int64_t c = 0; c < g.cols; ++c) {
      const double y = at(r, g.rows), x = at(c, g.cols);
      const int64_t y0 = int64_t(y), x0 = int64_t(x), y1 = std::min(y0 + 1, side - 1), x1 = std::min(x0 + 1, side - 1);
      const double dy = y - double(y0), dx = x - double(x0);
      const int64_t corner[4] = {y0 * side + x0, y0 * side + x1, y1 * side + x0, y1 * side + x1};
      const double w[4] = {(1 - dy) * (1 - dx), (1 - dy) * dx, dy * (1 - dx), dy * dx};
      for (int k = 0; k < 4; ++k) {
        const size_t i = static_cast<size_t>(k * g.patches + r * g.cols + c);
        idx[i] = corner[k];
        weight[i] = std::llround(w[k] * 65536.0);  // 16 fractional bits, scaled back below
      }
    }
  std::string e = n.b.node("Gather", p + "/Gather", {n.b.weight(p + ".weight", {side * side, h}), n.b.ints(p + "/corners", idx)});
  e = n.b.node("Reshape", p + "/corner_rows", {e, n.b.ints(p + "/corner_shape", {4, g.patches, h})});
  std::string w = n.b.node("Cast", p + "/weights", {n.b.ints(p + "/weights_fixed", weight)});
  n.b.attr_i("to", kF32);
  w = n.b.node("Mul", p + "/weights_scale", {w, f32(n, p + "/fixed_one", 1.0f / 65536.0f)});
  w = n.b.node("Reshape", p + "/weights_column", {w, n.b.ints(p + "/weights_shape", {4, g.patches, 1})});
  e = n.b.node("ReduceSum", p + "/corner_sum", {n.b.node("Mul", p + "/weighted", {e, w}), n.b.ints(p + "/corner_axis", {0})});
  n.b.attr_i("keepdims", 0);
  e = n.b.node("Reshape", p + "/grid", {e, n.b.ints(p + "/grid_shape", {g.rows / m, m, g.cols / m, m, h})});
  e = n.b.node("Transpose", p + "/merge_order", {e});
  n.b.attr_ints("perm", {0, 2, 1, 3, 4});
  return n.b.node("Reshape", p + "/tokens", {e, n.b.ints(p + "/token_shape", {1, g.patches, h})});
}

// The tower's norm over the last `width` of `x`: Qwen2.5-VL's RMSNorm, the others' LayerNorm.
std::string tower_norm(Net& n, const Tower& v, const std::string& p, const std::string& x, int64_t width) {
  return v.window_size > 0 ? rms_norm(n, p, x, width, v.layer_norm_eps) : layer_norm(n, p, x, width, v.layer_norm_eps);
}

// A PatchMerger on [batch, patches, hidden]: each merged unit's patches side by side, fc1,
// GELU, fc2 to the language model's width; the norm over each patch before (`post_shuffle`
// false) or over the concatenated unit after (Qwen3-VL's DeepStack mergers). Qwen2.5-VL's is an
// RMSNorm. Names under `p`: Qwen3-VL's norm / linear_fc1 / linear_fc2, else ln_q / mlp.0 / mlp.2.
std::string patch_merger(Net& n, const std::string& p, const std::string& x, const Tower& v, const QwenGrid& g,
                         bool post_shuffle) {
  const int64_t h = v.hidden, wide = g.unit * h, units = g.patches / g.unit;
  const bool v3 = v.position_grid > 0;
  const std::string nm = p + (v3 ? ".norm" : ".ln_q");
  std::string y = post_shuffle ? x : tower_norm(n, v, nm, x, h);
  y = n.b.node("Reshape", p + "/units", {y, n.b.ints(p + "/unit_shape", {0, units, wide})});
  if (post_shuffle) y = tower_norm(n, v, nm, y, wide);
  y = activation(n, p + (v3 ? ".act_fn" : ".mlp.1"), linear(n, p + (v3 ? ".linear_fc1" : ".mlp.0"), y, wide, wide), "gelu");
  return linear(n, p + (v3 ? ".linear_fc2" : ".mlp.2"), y, wide, v.out_hidden);
}

// One vision block's attention: the fused qkv projection viewed as [q | k | v] blocks of heads,
// the rotary on queries and keys, the attention core over the whole image or, with `windowed`,
// within each window (the sequence viewed as [batch x windows, window_len]; FlashAttention's
// varlen kernel and the per-window loop of eager attention compute the same blocks), proj.
std::string block_attention(Net& n, const std::string& p, const std::string& x, const Tower& v, const QwenGrid& g,
                            const std::string& cos, const std::string& sin, bool windowed) {
  const int64_t h = v.hidden, nh = v.heads, hd = h / nh;
  const std::string qkv = linear(n, p + ".qkv", x, h, 3 * h);
  const std::string image_batch = n.batch, image_seq = n.seq;
  const int64_t padded = windowed ? g.windows * g.window_len : g.patches;
  if (windowed) {  // the attention core's batch and sequence are the windows'
    n.batch = n.b.node("Mul", p + "/window_batch", {image_batch, n.b.ints(p + "/windows", {g.windows})});
    n.seq = n.b.ints(p + "/window_len", {g.window_len});
  }
  auto role = [&](const std::string& name, int64_t i, bool rotate) {
    std::string y = n.b.node("Slice", p + "/" + name, {qkv, n.b.ints(p + "/" + name + "_s", {i * h}),
                                                       n.b.ints(p + "/" + name + "_e", {(i + 1) * h}), n.b.ints(p + "/" + name + "_ax", {2})});
    y = n.b.node("Reshape", p + "/" + name + "_heads", {y, n.b.ints(p + "/" + name + "_shape", {0, g.patches, nh, hd})});
    if (rotate) y = rotate_half_embedding(n, p + "/rotary_" + name, y, hd, cos, sin);
    if (padded > g.patches) {  // windows of equal length: the sequence padded to fill the last
      y = n.b.node("Pad", p + "/" + name + "_pad", {y, n.b.ints(p + "/" + name + "_pads", {0, 0, 0, 0, 0, padded - g.patches, 0, 0})});
    }
    if (windowed) y = n.b.node("Reshape", p + "/" + name + "_windows", {y, n.b.ints(p + "/" + name + "_wshape", {-1, g.window_len, nh, hd})});
    const std::string t = n.b.node("Transpose", p + "/" + name + "_t", {y});
    n.b.attr_ints("perm", {0, 2, 1, 3});
    return t;
  };
  const std::string q = role("q", 0, true), k = role("k", 1, true), val = role("v", 2, false);
  std::string o = masked_attention(n, p, q, k, val, hd, "", p + ".attn_dropout", 0.0f, h);
  n.batch = image_batch;
  n.seq = image_seq;
  if (windowed) {
    o = n.b.node("Reshape", p + "/unwindow", {o, n.b.ints(p + "/unwindow_shape", {-1, padded, h})});
    if (padded > g.patches)
      o = n.b.node("Slice", p + "/unpad", {o, n.b.ints(p + "/unpad_s", {0}), n.b.ints(p + "/unpad_e", {g.patches}),
                                          n.b.ints(p + "/unpad_ax", {1})});
  }
  return linear(n, p + ".proj", o, h, h);
}

// A vision block: norm1, attention added to the input; norm2, the MLP added to that.
std::string vision_block(Net& n, const std::string& p, const std::string& x, const Tower& v, const QwenGrid& g,
                         const std::string& cos, const std::string& sin, bool windowed) {
  const int64_t h = v.hidden;
  const std::string a = block_attention(n, p + ".attn", tower_norm(n, v, p + ".norm1", x, h), v, g, cos, sin, windowed);
  const std::string y = n.b.node("Add", p + "/attention_residual_Add", {x, a});
  const std::string m = tower_norm(n, v, p + ".norm2", y, h);
  std::string f;
  if (v.window_size > 0) {  // Qwen2_5_VLMLP: down(act(gate(x)) * up(x)), biased
    const std::string gate = activation(n, p + ".mlp.act_fn", linear(n, p + ".mlp.gate_proj", m, h, v.ffn), v.activation);
    f = linear(n, p + ".mlp.down_proj", n.b.node("Mul", p + ".mlp/Mul", {gate, linear(n, p + ".mlp.up_proj", m, h, v.ffn)}),
               v.ffn, h);
  } else {  // VisionMlp: fc2(act(fc1(x))) (Qwen3-VL's linear_fc1, linear_fc2)
    const bool v3 = v.position_grid > 0;
    f = linear(n, p + (v3 ? ".mlp.linear_fc2" : ".mlp.fc2"),
               activation(n, p + ".mlp.act", linear(n, p + (v3 ? ".mlp.linear_fc1" : ".mlp.fc1"), m, h, v.ffn), v.activation),
               v.ffn, h);
  }
  return n.b.node("Add", p + "/mlp_residual_Add", {y, f});
}

}  // namespace

std::string qwen_vl_image_features(Net& n, const ModelConfig& c, std::vector<std::string>* deepstack) {
  const Tower& v = c.vision;
  const QwenGrid g = qwen_grid(v);
  const int64_t h = v.hidden, units = g.patches / g.unit;
  const int64_t patch_dim = v.channels * v.temporal_patch * v.patch_size * v.patch_size;
  const std::string text_batch = n.batch, text_seq = n.seq;

  // pixel_values: the processor's flattened patches, [batch, images x patches, C x T x P x P]
  // (HF's [images x patches, ...] with each sequence's rows apart), viewed per image; the
  // tower's batch is the images'.
  const std::string scope = "visual";
  std::string pixels = n.b.input("pixel_values", kF32, {-1, v.images * g.patches, patch_dim}, {"batch"});
  image_batch(n, scope, pixels, v.images, g.patches);
  if (v.images > 1)
    pixels = n.b.node("Reshape", scope + "/per_image", {pixels, n.b.ints(scope + "/image_shape", {-1, g.patches, patch_dim})});

  // PatchEmbed: each patch a [C, T, P, P] volume through a Conv3d of that kernel and stride.
  const std::string pe = scope + ".patch_embed.proj";
  std::string x = n.b.node("Reshape", pe + "/volumes",
                           {pixels, n.b.ints(pe + "/volume_shape", {-1, v.channels, v.temporal_patch, v.patch_size, v.patch_size})});
  std::vector<std::string> conv_in = {x, n.b.weight(pe + ".weight", {h, v.channels, v.temporal_patch, v.patch_size, v.patch_size})};
  if (v.position_grid > 0) conv_in.push_back(n.b.weight(pe + ".bias", {h}));  // Qwen3-VL's has one
  x = n.b.node("Conv", pe + "/Conv", conv_in);
  n.b.attr_ints("kernel_shape", {v.temporal_patch, v.patch_size, v.patch_size});
  n.b.attr_ints("strides", {v.temporal_patch, v.patch_size, v.patch_size});
  x = n.b.node("Reshape", pe + "/tokens", {x, n.shape_bs(pe + "/token_shape", {h})});
  if (v.position_grid > 0) x = n.b.node("Add", scope + "/position_Add", {x, interpolated_positions(n, v, g)});

  // Qwen2.5-VL: the merged units ordered window by window (and back after the merger).
  const std::vector<int64_t> order = v.window_size > 0 ? window_order(v, g) : std::vector<int64_t>{};
  if (!order.empty()) {
    x = n.b.node("Reshape", scope + "/units", {x, n.b.ints(scope + "/unit_shape", {0, units, g.unit * h})});
    x = reorder_units(n, scope + "/window_order", x, order);
    x = n.b.node("Reshape", scope + "/ordered", {x, n.b.ints(scope + "/ordered_shape", {0, g.patches, h})});
  }
  const auto [cos, sin] = rotary_tables(n, v, g, order);
  for (int64_t l = 0; l < v.layers; ++l) {
    const auto& full = v.full_attention_layers;
    const bool windowed = v.window_size > 0 && std::find(full.begin(), full.end(), l) == full.end();
    x = vision_block(n, scope + ".blocks." + std::to_string(l), x, v, g, cos, sin, windowed);
    const auto ds_at = std::find(v.deepstack_layers.begin(), v.deepstack_layers.end(), l);
    if (ds_at != v.deepstack_layers.end() && deepstack) {  // Qwen3-VL: this layer's features for the language model
      const std::string ds = scope + ".deepstack_merger_list." + std::to_string(ds_at - v.deepstack_layers.begin());
      deepstack->push_back(images_per_sequence(n, ds + "/per_sequence", patch_merger(n, ds, x, v, g, true), v.images,
                                               v.tokens(), v.out_hidden));
    }
  }
  const std::string mp = scope + ".merger";
  x = patch_merger(n, mp, x, v, g, false);
  if (!order.empty()) {  // reverse_indices: the units back in the image's order
    std::vector<int64_t> reverse(order.size());
    for (size_t i = 0; i < order.size(); ++i) reverse[static_cast<size_t>(order[i])] = int64_t(i);
    x = reorder_units(n, mp + "/reverse_order", x, reverse);
  }
  n.batch = text_batch;
  n.seq = text_seq;
  return images_per_sequence(n, mp + "/per_sequence", x, v.images, v.tokens(), v.out_hidden);
}

}  // namespace neusight::builder
