// mamba.cpp - the linear-attention token mixers, as their CUDA paths run them: Mamba-2 (HF
// Mamba2Mixer, NemotronHMamba2Mixer) and the gated DeltaNet (HF Qwen3NextGatedDeltaNet, below).
// Mamba-2:
// in_proj; causal_conv1d with its SiLU over x, B and C (ai.neusight CausalConv1d); the chunked
// state-space scan (mamba_ssm's mamba_chunk_scan_combined, ai.neusight StateSpaceScan); the
// gated group RMSNorm (mamba_ssm's RMSNormGated, ai.neusight GatedRMSNorm); out_proj. The
// splits of in_proj's output are views those kernels read through their strides.
#include <cstdint>
#include <string>
#include <vector>

#include "common.h"

namespace neusight::builder {

namespace {

// x[..., from:to] of a [b, L, channels] tensor: a view the mixer's kernels read through strides.
std::string channels(Net& n, const std::string& p, const std::string& name, const std::string& t, int64_t from, int64_t to) {
  return n.b.node("Slice", p + "/" + name, {t, n.b.ints(p + "/" + name + "_s", {from}), n.b.ints(p + "/" + name + "_e", {to}),
                                            n.b.ints(p + "/" + name + "_ax", {2})});
}

// causal_conv1d with its SiLU over `x` [b, L, dim] (kernel taps, bias when `bias`); a decode step
// convolves the cached last taps - 1 inputs with the new ones and passes the last taps - 1 on.
std::string causal_conv(Net& n, const std::string& p, const std::string& x, int64_t dim, int64_t taps, bool bias,
                        const std::string& layer, bool cache) {
  std::vector<std::string> in = {x, n.b.weight(p + ".conv1d.weight", {dim, taps}), bias ? n.b.weight(p + ".conv1d.bias", {dim}) : ""};
  if (cache) {
    in.push_back("past_conv_state." + layer);
    n.b.input(in.back(), kF32, {-1, dim, taps - 1}, {"batch"});
  }
  const auto conv = n.b.node_n("CausalConv1d", p + ".conv1d/CausalConv1d", in, cache ? 2 : 1);
  n.b.last()->set_domain("ai.neusight");
  n.b.attr_s("activation", "silu");
  if (cache) {
    n.b.last()->set_output(1, "present_conv_state." + layer);
    n.b.output("present_conv_state." + layer, kF32, {-1, dim, taps - 1}, {"batch"});
  }
  return conv[0];
}

// A recurrent scan node of the ai.neusight domain over `in`; with `cache` it also reads the
// layer's state (past_<state>.N, [b, dims...]) and writes the next (present_<state>.N).
std::string scan(Net& n, const std::string& p, const std::string& op, std::vector<std::string> in, const std::string& state,
                 const std::vector<int64_t>& dims, const std::string& layer, bool cache, int64_t chunk) {
  std::vector<int64_t> shape = {-1};
  shape.insert(shape.end(), dims.begin(), dims.end());
  if (cache) {
    in.push_back("past_" + state + "." + layer);
    n.b.input(in.back(), kF32, shape, {"batch"});
  }
  const auto outs = n.b.node_n(op, p + "/" + op, in, cache ? 2 : 1);
  n.b.last()->set_domain("ai.neusight");
  n.b.attr_i("chunk_size", chunk);
  if (cache) {
    n.b.last()->set_output(1, "present_" + state + "." + layer);
    n.b.output("present_" + state + "." + layer, kF32, shape, {"batch"});
  }
  return outs[0];
}

// mamba_ssm's RMSNormGated: RMSNorm of y x silu(z) per group of `group` channels, its weight.
std::string gated_norm(Net& n, const std::string& p, const std::string& y, const std::string& z, int64_t weight, int64_t group,
                       double eps) {
  const std::string out = n.b.node("GatedRMSNorm", p + ".norm/GatedRMSNorm", {y, z, n.b.weight(p + ".norm.weight", {weight})}, 1,
                                   "ai.neusight");
  n.b.attr_i("group_size", group);
  n.b.attr_f("epsilon", static_cast<float>(eps));
  return out;
}

}  // namespace

std::string mamba2_mixer(Net& n, const std::string& p, const std::string& x, const ModelConfig& c, int64_t layer,
                         bool cache) {
  const int64_t h = c.hidden, heads = c.mamba_heads, hd = c.mamba_head_dim, g = c.ssm_groups, st = c.ssm_state;
  const int64_t inner = heads * hd, conv_dim = inner + 2 * g * st, k = c.conv_kernel;
  const std::string l = std::to_string(layer);
  // in_proj: [z | x B C | dt].
  const std::string proj = linear(n, p + ".in_proj", x, h, 2 * inner + 2 * g * st + heads, c.mamba_proj_bias);
  const std::string z = channels(n, p, "z", proj, 0, inner);
  const std::string dt = channels(n, p, "dt", proj, inner + conv_dim, inner + conv_dim + heads);
  const std::string conv = causal_conv(n, p, channels(n, p, "xBC", proj, inner, inner + conv_dim), conv_dim, k,
                                       c.mamba_conv_bias, l, cache);
  const std::string xs = n.b.node("Reshape", p + "/x_heads", {channels(n, p, "x", conv, 0, inner), n.shape_bs(p + "/x_shape", {heads, hd})});
  const std::string bs = n.b.node("Reshape", p + "/B_groups", {channels(n, p, "B", conv, inner, inner + g * st), n.shape_bs(p + "/B_shape", {g, st})});
  const std::string cs = n.b.node("Reshape", p + "/C_groups", {channels(n, p, "C", conv, inner + g * st, conv_dim), n.shape_bs(p + "/C_shape", {g, st})});
  // A = -exp(A_log), from the weights (folded before the run).
  const std::string a = n.b.node("Neg", p + "/A", {n.b.node("Exp", p + "/A_exp", {n.b.weight(p + ".A_log", {heads})})});
  const std::string ys = scan(n, p, "StateSpaceScan", {xs, dt, a, bs, cs, n.b.weight(p + ".D", {heads}), n.b.weight(p + ".dt_bias", {heads})},
                              "ssm_state", {heads, hd, st}, l, cache, c.ssm_chunk);
  n.b.attr_i("dt_softplus", 1);
  const std::string y = n.b.node("Reshape", p + "/y", {ys, n.shape_bs(p + "/y_shape", {inner})});
  const std::string normed = gated_norm(n, p, y, z, inner, inner / g, c.layer_norm_eps);
  return linear(n, p + ".out_proj", normed, inner, h, c.mamba_proj_bias);
}

// Qwen3-Next's gated DeltaNet (HF Qwen3NextGatedDeltaNet with flash-linear-attention's
// kernels): in_proj_qkvz and in_proj_ba; q, k and v concatenated (torch.cat, a copy) for
// causal_conv1d and its SiLU; the query and key heads repeated to the value heads
// (repeat_interleave, copies); beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias); the
// gated delta rule (chunk_gated_delta_rule, its q / k L2 norms inside); the gated RMSNorm of
// each value head with z; out_proj.
std::string gated_deltanet_mixer(Net& n, const std::string& p, const std::string& x, const ModelConfig& c, int64_t layer,
                                 bool cache) {
  const int64_t h = c.hidden, hk = c.delta_key_heads, hv = c.delta_value_heads, dk = c.delta_key_dim, dv = c.delta_value_dim;
  const int64_t keys = hk * dk, values = hv * dv, conv_dim = 2 * keys + values, k = c.conv_kernel;
  const std::string l = std::to_string(layer);
  const std::string qkvz = linear(n, p + ".in_proj_qkvz", x, h, 2 * keys + 2 * values, false);
  const std::string ba = linear(n, p + ".in_proj_ba", x, h, 2 * hv, false);
  const std::string qkv = n.b.node("Concat", p + "/qkv", {channels(n, p, "q", qkvz, 0, keys), channels(n, p, "k", qkvz, keys, 2 * keys),
                                                         channels(n, p, "v", qkvz, 2 * keys, 2 * keys + values)});
  n.b.attr_i("axis", 2);
  const std::string z = channels(n, p, "z", qkvz, 2 * keys + values, 2 * keys + 2 * values);
  const std::string conv = causal_conv(n, p, qkv, conv_dim, k, false, l, cache);
  // Query and key heads [b, L, hk, dk], repeated to the hv value heads.
  auto key_heads = [&](const std::string& name, int64_t from) {
    std::string t = n.b.node("Reshape", p + "/" + name + "_heads",
                             {channels(n, p, name + "_conv", conv, from, from + keys), n.shape_bs(p + "/" + name + "_shape", {hk, 1, dk})});
    if (hv != hk)
      t = n.b.node("Expand", p + "/" + name + "_repeat", {t, n.b.ints(p + "/" + name + "_repeat_shape", {1, 1, 1, hv / hk, 1})});
    return n.b.node("Reshape", p + "/" + name + "_all", {t, n.shape_bs(p + "/" + name + "_all_shape", {hv, dk})});
  };
  const std::string q = key_heads("q", 0), kk = key_heads("k", keys);
  const std::string v = n.b.node("Reshape", p + "/v_heads", {channels(n, p, "v_conv", conv, 2 * keys, conv_dim), n.shape_bs(p + "/v_shape", {hv, dv})});
  const std::string beta = n.b.node("Sigmoid", p + "/beta", {channels(n, p, "b", ba, 0, hv)});
  const std::string decay = n.b.node("Neg", p + "/A", {n.b.node("Exp", p + "/A_exp", {n.b.weight(p + ".A_log", {hv})})});
  const std::string softplus = n.b.node("Softplus", p + "/dt_softplus",
                                        {n.b.node("Add", p + "/dt_bias_Add", {channels(n, p, "a", ba, hv, 2 * hv), n.b.weight(p + ".dt_bias", {hv})})});
  const std::string g = n.b.node("Mul", p + "/g", {decay, softplus});
  const std::string o = scan(n, p, "GatedDeltaRule", {q, kk, v, g, beta}, "delta_state", {hv, dk, dv}, l, cache, 64);
  const std::string y = n.b.node("Reshape", p + "/o", {o, n.shape_bs(p + "/o_shape", {values})});
  const std::string normed = gated_norm(n, p, y, z, dv, dv, c.layer_norm_eps);
  return linear(n, p + ".out_proj", normed, values, h, false);
}

}  // namespace neusight::builder
