// vit.cpp - image encoders as eager PyTorch runs them: the Vision Transformer (HF
// ViTForImageClassification / ViTModel: patch embedding, class token and learned positions,
// pre-norm encoder layers, the class token's classifier or ViTModel's pooler), DeiT (a
// distillation token beside the class token, each with its classifier) and DINOv2 (LayerScale,
// SwiGLU MLPs, positions interpolated to the image's grid) on the same layers, the vision
// towers of LLaVA (CLIP) and PaliGemma (SigLIP) with their projectors, and CLIP and SigLIP
// themselves (CLIPModel, SiglipModel: a text and an image tower compared; their vision models).
#include <cmath>

#include "common.h"
#include "families.h"

namespace neusight::builder {

namespace {

// A learned token (weight `name`, [1, 1, hidden]) expanded over the batch (a view), named
// under `scope` by `tag`.
std::string batch_token(Net& n, const std::string& scope, const std::string& name, int64_t hidden, const std::string& tag) {
  const std::string shape = n.b.node("Concat", scope + "/" + tag + "_shape", {n.batch, n.b.ints(scope + "/" + tag + "_one_h", {1, hidden})});
  n.b.attr_i("axis", 0);
  return n.b.node("Expand", scope + "/" + tag + "_expand", {n.b.weight(name, {1, 1, hidden}), shape});
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
  x = n.b.node("Concat", scope + "/cat", {batch_token(n, scope, class_token, hidden, "cls"), x});
  n.b.attr_i("axis", 1);
  return x;
}

// One pre-norm encoder layer: a norm, unmasked self-attention (q, k, v projections, the core
// under `attention`) and its output projection added to the input; a norm, fc1, the activation
// and fc2 added to that. Sizes, and the names of ViTLayer's or CLIP's and SigLIP's modules
// (relative to the layer; a dropout of "" is no module). DINOv2's LayerScale modules scale the
// attention's and the MLP's outputs before their residual adds (scale1, scale2; "": none), and
// its SwiGLU MLP (swiglu) is fc1 to 2 x ffn, chunked, silu(x1) * x2, fc2.
struct EncoderLayer {
  int64_t hidden = 0, heads = 0, ffn = 0;
  std::string activation;
  double eps = 1e-5;
  bool qkv_bias = true;
  float dropout = 0, attn_dropout = 0;
  const char *norm1, *attention, *q, *k, *v, *out, *out_dropout, *norm2, *fc1, *act, *fc2, *fc_dropout, *fc_residual;
  const char *scale1 = "", *scale2 = "";
  bool swiglu = false;
};

// ViTLayer (DeiTLayer is the same), or Dinov2Layer: norm1, the attention, layer_scale1, norm2,
// the MLP (fc1, activation, fc2; or weights_in, SiLU, weights_out), layer_scale2.
EncoderLayer vit_layer(const ModelConfig& c) {
  EncoderLayer e{c.hidden, c.heads, c.ffn, c.activation, c.layer_norm_eps, c.qkv_bias, c.dropout, c.attn_dropout,
                 ".layernorm_before", ".attention.attention", ".query", ".key", ".value", ".attention.output.dense",
                 ".attention.output.dropout", ".layernorm_after", ".intermediate.dense", ".intermediate.act", ".output.dense",
                 ".output.dropout", "/output_residual_Add"};
  if (!c.vit.layer_scale) return e;
  e.norm1 = ".norm1";
  e.norm2 = ".norm2";
  e.swiglu = c.vit.swiglu;
  e.fc1 = e.swiglu ? ".mlp.weights_in" : ".mlp.fc1";
  e.act = ".mlp.activation";
  e.fc2 = e.swiglu ? ".mlp.weights_out" : ".mlp.fc2";
  e.fc_dropout = "";
  e.fc_residual = "/mlp_residual_Add";
  e.scale1 = ".layer_scale1";
  e.scale2 = ".layer_scale2";
  return e;
}

// CLIP's and SigLIP's encoder layers (vision and text alike).
EncoderLayer clip_layer(int64_t hidden, int64_t heads, int64_t ffn, const std::string& act, double eps) {
  return {hidden, heads, ffn, act, eps, true, 0.0f, 0.0f,
          ".layer_norm1", ".self_attn", ".q_proj", ".k_proj", ".v_proj", ".self_attn.out_proj",
          "", ".layer_norm2", ".mlp.fc1", ".mlp.act", ".mlp.fc2", "", "/mlp_residual_Add"};
}
EncoderLayer clip_layer(const ModelConfig::VisionTower& v) {
  return clip_layer(v.hidden, v.heads, v.ffn, v.activation, v.layer_norm_eps);
}

// The layer's MLP on its normed input `f`: fc1, the activation, fc2; or the SwiGLU: fc1's output
// chunked in two along the last axis (views), silu of the first times the second, fc2.
std::string encoder_mlp(Net& n, const std::string& p, const std::string& f, const EncoderLayer& e) {
  const int64_t h = e.hidden;
  if (!e.swiglu) return linear(n, p + e.fc2, activation(n, p + e.act, linear(n, p + e.fc1, f, h, e.ffn), e.activation), e.ffn, h);
  const std::string x = linear(n, p + e.fc1, f, h, 2 * e.ffn);
  const auto half = [&](const std::string& name, int64_t from) {
    const std::string q = p + ".mlp/" + name;
    return n.b.node("Slice", q, {x, n.b.ints(q + "_s", {from}), n.b.ints(q + "_e", {from + e.ffn}), n.b.ints(q + "_ax", {2})});
  };
  const std::string g = n.b.node("Mul", p + ".mlp/Mul", {activation(n, p + ".mlp/silu", half("x1", 0), "silu"), half("x2", e.ffn)});
  return linear(n, p + e.fc2, g, e.ffn, h);
}

// LayerScale: `x` times the per-channel lambda1 of the layer's `module`; `x` itself where the
// layer has none (module "").
std::string layer_scale(Net& n, const std::string& layer, const char* module, const std::string& x, int64_t hidden) {
  if (!*module) return x;
  const std::string p = layer + module;
  return n.b.node("Mul", p + "/Mul", {x, n.b.weight(p + ".lambda1", {hidden})});
}

std::string encoder_layer(Net& n, const std::string& p, const std::string& x, const EncoderLayer& e,
                          const std::string& mask = "") {
  const int64_t h = e.hidden, nh = e.heads, hd = e.hidden / e.heads;
  const std::string a = layer_norm(n, p + e.norm1, x, h, e.eps);
  const std::string s = p + e.attention;
  const std::string q = split_heads(n, s + "/q", linear(n, s + e.q, a, h, h, e.qkv_bias), nh, hd);
  const std::string k = split_heads(n, s + "/k", linear(n, s + e.k, a, h, h, e.qkv_bias), nh, hd);
  const std::string v = split_heads(n, s + "/v", linear(n, s + e.v, a, h, h, e.qkv_bias), nh, hd);
  std::string o = linear(n, p + e.out, masked_attention(n, s, q, k, v, hd, mask, s + ".dropout", e.attn_dropout, h), h, h);
  if (*e.out_dropout) o = dropout(n, p + e.out_dropout, o, e.dropout);
  const std::string y = n.b.node("Add", p + "/attention_residual_Add", {layer_scale(n, p, e.scale1, o, h), x});
  std::string f = encoder_mlp(n, p, layer_norm(n, p + e.norm2, y, h, e.eps), e);
  if (*e.fc_dropout) f = dropout(n, p + e.fc_dropout, f, e.dropout);
  return n.b.node("Add", p + e.fc_residual, {layer_scale(n, p, e.scale2, f, h), y});
}

}  // namespace

int64_t image_patches(int64_t image, int64_t patch, int64_t channels, const std::string& what) {
  if (image <= 0 || patch <= 0 || channels <= 0 || image % patch != 0 || image / patch > 1024)
    throw InputError(what + ": image_size must be a positive multiple of patch_size (at most 1024 patches a side), "
                            "and num_channels positive");
  return (image / patch) * (image / patch);
}

namespace {

// A CLIP or SigLIP vision transformer (modules under `vm`, the input's shape nodes under
// `scope`) on graph input pixel_values: the patch convolution (CLIP's without a bias), CLIP's
// class embedding, the position embedding looked up (nn.Embedding) and added, CLIP's
// pre_layrnorm, then every layer (eager HF returns all hidden states). The Net's batch and
// sequence become the image's (the tower's heads split over its own tokens).
struct TowerStates {
  std::string last;      // the last layer's output
  std::string features;  // hidden_states[v.feature_layer] (0: the embeddings)
};
TowerStates vision_transformer(Net& n, const ModelConfig::VisionTower& v, const std::string& scope,
                               const std::string& vm) {
  const int64_t h = v.hidden, patches = image_patches(v.image_size, v.patch_size, v.channels, "vision tower");
  const int64_t seq = patches + (v.siglip() ? 0 : 1);  // SigLIP has no class token
  const std::string pixels = image_input(n, scope, v.channels, v.image_size, v.image_size, seq, v.images * v.crops());
  const std::string pe = vm + ".embeddings";
  std::string x = patch_tokens(n, pe, pixels, pe + ".patch_embedding", v.siglip(), v.siglip() ? "" : pe + ".class_embedding",
                               h, v.channels, v.patch_size, patches);
  std::vector<int64_t> ids(static_cast<size_t>(seq));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i);
  const std::string pos = n.b.node("Gather", pe + ".position_embedding/Gather",
                                   {n.b.weight(pe + ".position_embedding.weight", {seq, h}), n.b.ints(pe + "/position_ids", ids)});
  x = n.b.node("Add", pe + "/position_Add", {x, pos});
  if (!v.siglip()) x = layer_norm(n, vm + ".pre_layrnorm", x, h, v.layer_norm_eps);
  const int64_t pick = v.feature_layer;  // hidden_states[i] is layer i - 1's output
  TowerStates out;
  if (pick == 0) out.features = x;
  const EncoderLayer layer = clip_layer(v);
  for (int64_t l = 0; l < v.layers; ++l) {
    x = encoder_layer(n, vm + ".encoder.layers." + std::to_string(l), x, layer);
    if (l + 1 == pick) out.features = x;
  }
  out.last = x;
  return out;
}

// CLIP's pooled image: the class token's state through post_layernorm -> [batch, hidden].
std::string clip_pooled(Net& n, const std::string& vm, const std::string& x, const ModelConfig::VisionTower& v) {
  const std::string pooled = n.b.node("Gather", vm + "/pooled", {x, n.b.ints(vm + "/idx0b", {0}, true)});
  n.b.attr_i("axis", 1);
  return layer_norm(n, vm + ".post_layernorm", pooled, v.hidden, v.layer_norm_eps);
}

// LLaVA-NeXT's pack_image_features on the projected crops [batch x crops, side^2, hidden] (the
// whole image's first, as the processor orders them): the grid's crops laid out as one
// [hidden, rows x side, cols x side] feature map (view and permute: one copy), image_newline
// appended to each of its rows (cat: a copy), flattened and transposed to tokens, after the
// whole image's (cat: a copy) -> [batch, tokens(), hidden]. unpad_image (a view) first keeps
// the centre feature_rows x feature_cols of the map an image of another aspect covers (a square
// image on a square grid: all of it). The Net's batch is the images' here.
std::string pack_crops(Net& n, const ModelConfig& c, const std::string& projected) {
  const ModelConfig::VisionTower& v = c.vision;
  const int64_t h = c.hidden, side = v.image_size / v.patch_size, rows = v.grid_rows, cols = v.grid_cols;
  const std::string p = "image_features";
  const std::string per_image = n.b.node("Reshape", p + "/per_image",
                                         {projected, n.b.ints(p + "/per_image_shape", {-1, v.crops(), side * side, h})});
  const std::string whole = n.b.node("Slice", p + "/base", {per_image, n.b.ints(p + "/base_start", {0}),
                                                            n.b.ints(p + "/base_end", {1}), n.b.ints(p + "/axis1", {1})});
  const std::string base = n.b.node("Reshape", p + "/base_tokens", {whole, n.b.ints(p + "/base_shape", {-1, side * side, h})});
  const std::string grid = n.b.node("Slice", p + "/grid", {per_image, n.b.ints(p + "/grid_start", {1}),
                                                           n.b.ints(p + "/grid_end", {v.crops()}), n.b.ints(p + "/axis1b", {1})});
  const std::string cells = n.b.node("Reshape", p + "/grid_view",
                                     {grid, n.b.ints(p + "/grid_shape", {-1, rows, cols, side, side, h})});
  std::string map = n.b.node("Transpose", p + "/grid_permute", {cells});
  n.b.attr_ints("perm", {0, 5, 1, 3, 2, 4});  // [batch, hidden, rows, side, cols, side]
  map = n.b.node("Reshape", p + "/grid_map", {map, n.b.ints(p + "/map_shape", {-1, h, rows * side, cols * side})});
  const int64_t fr = v.feature_rows > 0 ? v.feature_rows : rows * side, fc = v.feature_cols > 0 ? v.feature_cols : cols * side;
  if (fr < rows * side || fc < cols * side) {  // unpad_image: the centre the image covers
    const int64_t top = (rows * side - fr) / 2, left = (cols * side - fc) / 2;
    map = n.b.node("Slice", p + "/unpad", {map, n.b.ints(p + "/unpad_start", {top, left}),
                                           n.b.ints(p + "/unpad_end", {top + fr, left + fc}), n.b.ints(p + "/unpad_axes", {2, 3})});
  }
  const std::string newline_shape =
      n.b.node("Concat", p + "/newline_shape", {n.batch, n.b.ints(p + "/newline_dims", {h, fr, 1})});
  n.b.attr_i("axis", 0);
  const std::string newline =
      n.b.node("Expand", p + "/newline_expand",
               {n.b.node("Reshape", p + "/newline_view", {n.b.weight("image_newline", {h}), n.b.ints(p + "/nl_shape", {1, h, 1, 1})}),
                newline_shape});
  map = n.b.node("Concat", p + "/newline_cat", {map, newline});
  n.b.attr_i("axis", 3);
  map = n.b.node("Reshape", p + "/grid_flatten", {map, n.b.ints(p + "/flat_shape", {0, h, -1})});
  std::string tokens = n.b.node("Transpose", p + "/grid_tokens", {map});
  n.b.attr_ints("perm", {0, 2, 1});
  tokens = n.b.node("Concat", p + "/cat", {base, tokens});
  n.b.attr_i("axis", 1);
  return tokens;
}

}  // namespace

namespace {

// The projector on one image's tower features [images, tokens, hidden] -> [images, image tokens,
// the language model's hidden]. Gemma 3: the patches as a [hidden, side, side] grid (transpose,
// reshape: one copy), average-pooled to the tokens' grid, flattened and transposed back,
// RMS-normalised (mm_soft_emb_norm) and projected by mm_input_projection_weight (a matmul, no
// bias). PaliGemma: one projection, the features divided by sqrt(hidden). LLaVA: the class token
// dropped by the "default" strategy (a strided view the projector copies), linear_1, the
// activation, linear_2, and LLaVA-NeXT's crops packed (pack_crops, on the images' batch).
std::string project_image(Net& n, const ModelConfig& c, std::string features, int64_t patches,
                          const std::string& text_batch) {
  const ModelConfig::VisionTower& v = c.vision;
  const int64_t h = v.hidden;
  const std::string mp = "multi_modal_projector";
  if (v.pooled_tokens > 0) {
    const int64_t side = v.image_size / v.patch_size, pooled = std::llround(std::sqrt(double(v.pooled_tokens)));
    std::string g = n.b.node("Transpose", mp + "/channels_first", {features});
    n.b.attr_ints("perm", {0, 2, 1});
    g = n.b.node("Reshape", mp + "/grid", {g, n.b.ints(mp + "/grid_shape", {-1, h, side, side})});
    g = n.b.node("AveragePool", mp + ".avg_pool/AveragePool", {g});
    n.b.attr_ints("kernel_shape", {side / pooled, side / pooled});
    n.b.attr_ints("strides", {side / pooled, side / pooled});
    g = n.b.node("Reshape", mp + "/flatten", {g, n.b.ints(mp + "/flat_shape", {-1, h, v.pooled_tokens})});
    g = n.b.node("Transpose", mp + "/tokens", {g});
    n.b.attr_ints("perm", {0, 2, 1});
    g = rms_norm(n, mp + ".mm_soft_emb_norm", g, h, v.layer_norm_eps);
    return n.b.node("MatMul", mp + "/MatMul", {g, n.b.weight(mp + ".mm_input_projection_weight", {h, c.hidden})});
  }
  if (v.siglip())
    return n.b.node("Div", mp + "/scale", {linear(n, mp + ".linear", features, h, c.hidden),
                                           f32(n, mp + "/sqrt_hidden", static_cast<float>(std::sqrt(double(c.hidden))))});
  if (!v.keep_class_token) {
    features = n.b.node("Slice", "vision_tower/select",
                        {features, n.b.ints("vision_tower/starts", {1}), n.b.ints("vision_tower/ends", {patches + 1}),
                         n.b.ints("vision_tower/axes1", {1})});
  }
  const std::string y = activation(n, mp + ".act", linear(n, mp + ".linear_1", features, h, c.hidden), v.projector_activation);
  std::string projected = linear(n, mp + ".linear_2", y, c.hidden, c.hidden);
  if (v.crops() > 1) {
    if (v.images > 1) n.batch = n.b.node("Mul", "image_features/images", {text_batch, n.b.ints("image_features/per_seq", {v.images})});
    projected = pack_crops(n, c, projected);
    n.batch = text_batch;
  }
  return projected;
}

}  // namespace

std::string llava_image_features(Net& n, const ModelConfig& c) {
  const ModelConfig::VisionTower& v = c.vision;
  const int64_t h = v.hidden, patches = image_patches(v.image_size, v.patch_size, v.channels, "vision tower");
  const std::string text_batch = n.batch, text_seq = n.seq;
  const std::string vm = "vision_tower.vision_model";
  const TowerStates states = vision_transformer(n, v, "vision_tower", vm);
  std::string features = states.features;
  if (v.siglip())  // post_layernorm over the last hidden state: the features
    features = layer_norm(n, vm + ".post_layernorm", states.last, h, v.layer_norm_eps);
  else  // the pooled class token's post_layernorm (computed, unused by LLaVA)
    clip_pooled(n, vm, states.last, v);
  n.batch = text_batch;
  n.seq = text_seq;
  return images_per_sequence(n, "image_features/per_sequence", project_image(n, c, features, patches, text_batch), v.images,
                             v.tokens(), c.hidden);
}

namespace {

// Dinov2Embeddings.interpolate_pos_encoding: the table's patch rows as a [1, hidden, grid, grid]
// image (reshape and permute; the interpolation reads it contiguous, a copy), resized bicubically
// to rows x cols (nn.functional.interpolate, antialiased: opset 17's Resize has no antialias,
// which changes the filter's weights, not the kernel's reads and writes), back to [1, rows x
// cols, hidden] (permute and view), after the class token's row (torch.cat: a copy).
std::string interpolated_positions(Net& n, const std::string& e, const std::string& table, int64_t grid, int64_t rows,
                                   int64_t cols, int64_t h) {
  const std::string p = e + "/interpolate_pos_encoding";
  const auto rows_of = [&](const std::string& name, int64_t from, int64_t to) {
    return n.b.node("Slice", p + "/" + name, {table, n.b.ints(p + "/" + name + "_s", {from}), n.b.ints(p + "/" + name + "_e", {to}),
                                              n.b.ints(p + "/" + name + "_ax", {1})});
  };
  std::string g = n.b.node("Reshape", p + "/grid", {rows_of("patch_rows", 1, grid * grid + 1), n.b.ints(p + "/grid_shape", {1, grid, grid, h})});
  g = n.b.node("Transpose", p + "/channels_first", {g});
  n.b.attr_ints("perm", {0, 3, 1, 2});
  g = n.b.node("Resize", p + "/Resize", {g, "", "", n.b.ints(p + "/sizes", {1, h, rows, cols})});
  n.b.attr_s("mode", "cubic");
  n.b.attr_s("coordinate_transformation_mode", "half_pixel");
  n.b.attr_f("cubic_coeff_a", -0.75f);
  g = n.b.node("Transpose", p + "/channels_last", {g});
  n.b.attr_ints("perm", {0, 2, 3, 1});
  g = n.b.node("Reshape", p + "/flatten", {g, n.b.ints(p + "/flat_shape", {1, rows * cols, h})});
  const std::string pos = n.b.node("Concat", p + "/cat", {rows_of("class_row", 0, 1), g});
  n.b.attr_i("axis", 1);
  return pos;
}

// The embeddings of ViT, DeiT and DINOv2 (modules under `m`.embeddings) for an image of rows x
// cols patches: the class token (DeiT: and the distillation token, one torch.cat) before the
// patch tokens, the position table added (DINOv2's interpolated where the image's grid is not
// the table's), dropout. DINOv2's mask token is a parameter only a masked forward reads.
std::string vit_embeddings(Net& n, const ModelConfig& c, const std::string& m, const std::string& pixels, int64_t rows,
                           int64_t cols) {
  const int64_t h = c.hidden, patches = rows * cols, grid = c.vit.position_grid;
  const std::string e = m + ".embeddings", conv = e + ".patch_embeddings.projection";
  std::string x;
  if (c.vit.distillation_token) {
    const std::string cls = batch_token(n, e, e + ".cls_token", h, "cls");
    const std::string distill = batch_token(n, e, e + ".distillation_token", h, "distillation");
    x = n.b.node("Concat", e + "/cat", {cls, distill, patch_tokens(n, e, pixels, conv, true, "", h, c.num_channels, c.patch_size, patches)});
    n.b.attr_i("axis", 1);
  } else {
    x = patch_tokens(n, e, pixels, conv, true, e + ".cls_token", h, c.num_channels, c.patch_size, patches);
  }
  if (c.vit.mask_token) n.b.weight(e + ".mask_token", {1, h});
  const int64_t leading = c.vit.distillation_token ? 2 : 1, table = grid > 0 ? grid * grid : patches;
  std::string pos = n.b.weight(e + ".position_embeddings", {1, table + leading, h});
  if (grid > 0 && (rows != grid || cols != grid)) pos = interpolated_positions(n, e, pos, grid, rows, cols, h);
  x = n.b.node("Add", e + "/position_Add", {x, pos});
  return dropout(n, e + ".dropout", x, c.dropout);
}

// One token's state of the final hidden states `x` ([batch, hidden]).
std::string token_state(Net& n, const std::string& m, const std::string& x, int64_t i) {
  const std::string t = n.b.node("Gather", m + "/token_" + std::to_string(i), {x, n.b.ints(m + "/token_idx" + std::to_string(i), {i}, true)});
  n.b.attr_i("axis", 1);
  return t;
}

// The head on the final hidden states `x` of `tokens` tokens: none (Dinov2Model: the last hidden
// state), ViTModel's and DeiTModel's pooler (the class token, dense, tanh), DeiT's two
// classifiers averaged (the class and the distillation token's), DINOv2's classifier of the
// class token beside the patches' mean (a reduction over the patches' view, torch.cat: a copy),
// or the class token's classifier.
LoadedModel vit_head(Net& n, const ModelConfig& c, const std::string& m, const std::string& x, int64_t tokens) {
  const int64_t h = c.hidden;
  if (c.head == "base") {
    n.rename_last("last_hidden_state");
    n.output("last_hidden_state", {"batch"}, {tokens, h});
    return n.finish(c);
  }
  if (c.head == "pooler") {
    n.b.node("Tanh", m + ".pooler/Tanh", {linear(n, m + ".pooler.dense", token_state(n, m, x, 0), h, h)});
    n.rename_last("pooler_output");
    n.output("pooler_output", {"batch"}, {h});
    return n.finish(c);
  }
  if (c.head == "distilled") {
    const std::string cls = linear(n, "cls_classifier", token_state(n, m, x, 0), h, c.num_labels);
    const std::string distill = linear(n, "distillation_classifier", token_state(n, m, x, 1), h, c.num_labels);
    n.b.node("Div", "logits/Div", {n.b.node("Add", "logits/Add", {cls, distill}), f32(n, "logits/two", 2.0f)});
  } else if (c.vit.layer_scale) {
    const std::string patches = n.b.node("Slice", m + "/patch_tokens", {x, n.b.ints(m + "/patches_s", {1}), n.b.ints(m + "/patches_e", {tokens}),
                                                                          n.b.ints(m + "/patches_ax", {1})});
    const std::string mean = n.b.node("ReduceMean", m + "/patch_mean", {patches});
    n.b.attr_ints("axes", {1});
    n.b.attr_i("keepdims", 0);
    const std::string both = n.b.node("Concat", m + "/linear_input", {token_state(n, m, x, 0), mean});
    n.b.attr_i("axis", 1);
    linear(n, "classifier", both, 2 * h, c.num_labels);
  } else {
    linear(n, "classifier", token_state(n, m, x, 0), h, c.num_labels);
  }
  n.rename_last("logits");
  n.output("logits", {"batch"}, {c.num_labels});
  return n.finish(c);
}

std::string vit_doc(const ModelConfig& c) {
  if (c.vit.distillation_token) return "DeiT (DeiTForImageClassificationWithTeacher)";
  if (c.vit.layer_scale) return "DINOv2 (Dinov2Model)";
  return "Vision Transformer (ViTForImageClassification)";
}

}  // namespace

LoadedModel build_vit(const ModelConfig& c) {
  // The base model's modules: vit, deit or dinov2 (the model_type).
  const std::string m = c.model_type;
  const int64_t h = c.hidden, width = c.vit.image_width > 0 ? c.vit.image_width : c.image_size;
  image_patches(c.image_size, c.patch_size, c.num_channels, m);
  image_patches(width, c.patch_size, c.num_channels, m);
  const int64_t rows = c.image_size / c.patch_size, cols = width / c.patch_size;
  const int64_t tokens = rows * cols + (c.vit.distillation_token ? 2 : 1);
  Net n(c, vit_doc(c));
  const std::string pixels = image_input(n, m, c.num_channels, c.image_size, width, tokens);
  std::string x = vit_embeddings(n, c, m, pixels, rows, cols);
  const EncoderLayer layer = vit_layer(c);
  for (int64_t l = 0; l < c.layers; ++l) x = encoder_layer(n, m + ".encoder.layer." + std::to_string(l), x, layer);
  x = layer_norm(n, m + ".layernorm", x, h, c.layer_norm_eps);
  return vit_head(n, c, m, x, tokens);
}

namespace {

// SiglipMultiheadAttentionPoolingHead on the tokens `x`: a learned probe repeated over the batch
// attends to them (nn.MultiheadAttention: the probe's query projection and the tokens' key and
// value projections, packed in in_proj, the core, out_proj), then layernorm and an MLP added to
// the attention's output; the probe's state [batch, hidden].
std::string siglip_attention_pool(Net& n, const std::string& p, const std::string& x, const ModelConfig::VisionTower& v) {
  const int64_t h = v.hidden, nh = v.heads, hd = h / nh;
  const std::string reps = n.b.node("Concat", p + "/probe_repeats", {n.batch, n.b.ints(p + "/ones", {1, 1})});
  n.b.attr_i("axis", 0);
  const std::string probe = n.b.node("Tile", p + "/probe_repeat", {n.b.weight(p + ".probe", {1, 1, h}), reps});
  const std::string a = p + ".attention";
  const std::string kv = linear(n, a + ".in_proj_kv", x, h, 2 * h);
  auto parts = n.b.node_n("Split", a + "/kv_Split", {kv, n.b.ints(a + "/kv_sizes", {h, h})}, 2);
  n.b.attr_i("axis", 2);
  const std::string k = split_heads(n, a + "/k", parts[0], nh, hd);
  const std::string val = split_heads(n, a + "/v", parts[1], nh, hd);
  // The query is the probe's one position: its heads split, and the core merges them, over it.
  const std::string tokens = n.seq;
  n.seq = n.b.ints(p + "/one_position", {1});
  const std::string q = split_heads(n, a + "/q", linear(n, a + ".in_proj_q", probe, h, h), nh, hd);
  const std::string o = linear(n, a + ".out_proj", masked_attention(n, a, q, k, val, hd, "", a + ".dropout", 0, h), h, h);
  n.seq = tokens;
  const std::string m = layer_norm(n, p + ".layernorm", o, h, v.layer_norm_eps);
  const std::string f = linear(n, p + ".mlp.fc2", activation(n, p + ".mlp.act", linear(n, p + ".mlp.fc1", m, h, v.ffn), v.activation),
                               v.ffn, h);
  const std::string y = n.b.node("Add", p + "/mlp_residual_Add", {o, f});
  const std::string first = n.b.node("Gather", p + "/first", {y, n.b.ints(p + "/idx0", {0}, true)});
  n.b.attr_i("axis", 1);
  return first;
}

// CLIP's or SigLIP's text transformer (text_model) on graph input input_ids: token and position
// embeddings, CLIP's causal mask, every layer, final_layer_norm; the pooled state: CLIP's at each
// sequence's highest token id (its end-of-text token: the original checkpoints' eos_token_id 2
// rule, argmax), SigLIP's at the last position through its head (a linear layer).
std::string text_transformer(Net& n, const ModelConfig& c, bool siglip) {
  const int64_t h = c.hidden;
  const std::string ids = n.token_input("input_ids");
  const std::string te = "text_model.embeddings";
  std::string x = n.b.node("Gather", te + ".token_embedding/Gather", {n.b.weight(te + ".token_embedding.weight", {c.vocab, h}), ids});
  // position_ids[:, :seq], a slice of a registered buffer (a view), looked up and added.
  const std::string pos = n.b.node("Range", te + "/position_ids", {n.b.ints(te + "/zero", {0}, true), n.seq_scalar,
                                                                   n.b.ints(te + "/one", {1}, true)});
  const std::string pos2 = n.b.node("Unsqueeze", te + "/position_ids_2d", {pos, n.b.ints(te + "/axes0", {0})});
  x = n.b.node("Add", te + "/position_Add",
               {x, n.b.node("Gather", te + ".position_embedding/Gather", {n.b.weight(te + ".position_embedding.weight",
                                                                                     {c.max_positions, h}), pos2})});
  std::string mask;
  if (!siglip) {  // _create_4d_causal_attention_mask: full((seq, seq), min), zero on and below the diagonal
    const std::string ss = n.b.node("Concat", "text_model/causal_shape", {n.seq, n.seq});
    n.b.attr_i("axis", 0);
    const std::string full = fill(n, "text_model/causal_full", ss, kF32, kFloatMin);
    const std::string upper = n.b.node("Trilu", "text_model/causal_triu", {full, n.b.ints("text_model/causal_k", {1}, true)});
    n.b.attr_i("upper", 1);
    mask = n.b.node("Unsqueeze", "text_model/causal_mask", {upper, n.b.ints("text_model/causal_axes", {0, 1})});
  }
  const EncoderLayer layer = clip_layer(h, c.heads, c.ffn, c.activation, c.layer_norm_eps);
  for (int64_t l = 0; l < c.layers; ++l) x = encoder_layer(n, "text_model.encoder.layers." + std::to_string(l), x, layer, mask);
  x = layer_norm(n, "text_model.final_layer_norm", x, h, c.layer_norm_eps);
  if (siglip) {
    const std::string last = n.b.node("Gather", "text_model/last_token", {x, n.b.ints("text_model/idx_last", {-1}, true)});
    n.b.attr_i("axis", 1);
    return linear(n, "text_model.head", last, h, c.projection_dim);
  }
  const std::string eos = n.b.node("ArgMax", "text_model/eos_ArgMax", {ids});
  n.b.attr_i("axis", -1);
  const std::string pooled = n.b.node("GatherND", "text_model/pooled", {x, eos});
  n.b.attr_i("batch_dims", 1);
  return pooled;
}

// x / x.norm(p=2, dim=-1, keepdim=True).
std::string l2_normalize(Net& n, const std::string& p, const std::string& x) {
  const std::string norm = n.b.node("ReduceL2", p + "/norm", {x});
  n.b.attr_ints("axes", {-1});
  return n.b.node("Div", p + "/Div", {x, norm});
}

}  // namespace

LoadedModel build_clip_text(const ModelConfig& c) {
  const bool siglip = c.model_type == "siglip_text_model";
  Net n(c, siglip ? "SigLIP text encoder (SiglipTextModel)" : "CLIP text encoder (CLIPTextModel)");
  std::string pooled = text_transformer(n, c, siglip);
  std::string out = "pooler_output";
  int64_t width = siglip ? c.projection_dim : c.hidden;
  if (c.head == "projection") {  // CLIPTextModelWithProjection (SDXL's second text encoder)
    linear(n, "text_projection", pooled, c.hidden, c.projection_dim, false);
    out = "text_embeds";
    width = c.projection_dim;
  }
  n.rename_last(out);
  n.output(out, {"batch"}, {width});
  return n.finish(c);
}

LoadedModel build_clip(const ModelConfig& c) {
  const ModelConfig::VisionTower& v = c.vision;
  const bool siglip = v.siglip(), dual = c.head == "contrastive";
  Net n(c, siglip ? (dual ? "SigLIP (SiglipModel)" : "SigLIP vision encoder (SiglipVisionModel)")
                  : (dual ? "CLIP (CLIPModel)" : "CLIP vision encoder (CLIPVisionModel)"));
  std::string text;
  if (dual) text = text_transformer(n, c, siglip);
  const std::string text_batch = n.batch, text_seq = n.seq;
  const std::string vm = "vision_model";
  const TowerStates states = vision_transformer(n, v, vm, vm);
  std::string image;
  if (siglip) {
    const std::string last = layer_norm(n, vm + ".post_layernorm", states.last, v.hidden, v.layer_norm_eps);
    if (c.head == "none") {
      n.rename_last("last_hidden_state");
      n.output("last_hidden_state", {"batch"}, {v.tokens(), v.hidden});
      return n.finish(c);
    }
    image = siglip_attention_pool(n, vm + ".head", last, v);
  } else {
    image = clip_pooled(n, vm, states.last, v);
  }
  if (!dual) {
    const std::string out = c.head == "projection" ? "image_embeds" : "pooler_output";
    if (c.head == "projection") linear(n, "visual_projection", image, v.hidden, c.projection_dim, false);
    n.rename_last(out);
    n.output(out, {"batch"}, {c.head == "projection" ? c.projection_dim : v.hidden});
    return n.finish(c);
  }
  n.batch = text_batch;
  n.seq = text_seq;
  if (!siglip) {
    image = linear(n, "visual_projection", image, v.hidden, c.projection_dim, false);
    text = linear(n, "text_projection", text, c.hidden, c.projection_dim, false);
  }
  image = l2_normalize(n, "image_embeds", image);
  text = l2_normalize(n, "text_embeds", text);
  // logits_per_text = text_embeds @ image_embeds.t() * logit_scale.exp() (+ SigLIP's
  // logit_bias); logits_per_image, its transpose, is a view.
  const std::string image_t = n.b.node("Transpose", "image_embeds/t", {image});
  n.b.attr_ints("perm", {1, 0});
  std::string logits = n.b.node("MatMul", "logits/MatMul", {text, image_t});
  logits = n.b.node("Mul", "logits/scale", {logits, n.b.node("Exp", "logit_scale/Exp", {n.b.weight("logit_scale", {1})})});
  if (siglip) logits = n.b.node("Add", "logits/bias", {logits, n.b.weight("logit_bias", {1})});
  n.rename_last("logits_per_text");
  n.output("logits_per_text", {"batch", "batch"}, {});
  return n.finish(c);
}

}  // namespace neusight::builder
