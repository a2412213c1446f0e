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

std::string mamba2_mixer(Net& n, const std::string& p, const std::string& x, const ModelConfig& c, int64_t layer,
                         bool cache) {
  const int64_t h = c.hidden, heads = c.mamba_heads, hd = c.mamba_head_dim, g = c.ssm_groups, st = c.ssm_state;
  const int64_t inner = heads * hd, conv_dim = inner + 2 * g * st, k = c.conv_kernel;
  const std::string l = std::to_string(layer);
  // in_proj: [z | x B C | dt].
  const std::string proj = linear(n, p + ".in_proj", x, h, 2 * inner + 2 * g * st + heads, c.mamba_proj_bias);
  auto slice = [&](const std::string& name, const std::string& t, int64_t from, int64_t to) {
    return n.b.node("Slice", p + "/" + name, {t, n.b.ints(p + "/" + name + "_s", {from}), n.b.ints(p + "/" + name + "_e", {to}),
                                              n.b.ints(p + "/" + name + "_ax", {2})});
  };
  const std::string z = slice("z", proj, 0, inner);
  const std::string xbc = slice("xBC", proj, inner, inner + conv_dim);
  const std::string dt = slice("dt", proj, inner + conv_dim, inner + conv_dim + heads);
  // The causal convolution over time and its SiLU; a decode step convolves the cached last
  // k - 1 inputs with the new ones and passes the last k - 1 on.
  std::vector<std::string> conv_in = {xbc, n.b.weight(p + ".conv1d.weight", {conv_dim, k}),
                                      c.mamba_conv_bias ? n.b.weight(p + ".conv1d.bias", {conv_dim}) : ""};
  if (cache) {
    conv_in.push_back("past_conv_state." + l);
    n.b.input(conv_in.back(), kF32, {-1, conv_dim, k - 1}, {"batch"});
  }
  const auto conv = n.b.node_n("CausalConv1d", p + ".conv1d/CausalConv1d", conv_in, cache ? 2 : 1);
  n.b.last()->set_domain("ai.neusight");
  n.b.attr_s("activation", "silu");
  if (cache) {
    n.b.last()->set_output(1, "present_conv_state." + l);
    n.b.output("present_conv_state." + l, kF32, {-1, conv_dim, k - 1}, {"batch"});
  }
  const std::string xs = n.b.node("Reshape", p + "/x_heads", {slice("x", conv[0], 0, inner), n.shape_bs(p + "/x_shape", {heads, hd})});
  const std::string bs = n.b.node("Reshape", p + "/B_groups", {slice("B", conv[0], inner, inner + g * st), n.shape_bs(p + "/B_shape", {g, st})});
  const std::string cs = n.b.node("Reshape", p + "/C_groups", {slice("C", conv[0], inner + g * st, conv_dim), n.shape_bs(p + "/C_shape", {g, st})});
  // A = -exp(A_log), from the weights (folded before the run).
  const std::string a = n.b.node("Neg", p + "/A", {n.b.node("Exp", p + "/A_exp", {n.b.weight(p + ".A_log", {heads})})});
  std::vector<std::string> scan_in = {xs, dt, a, bs, cs, n.b.weight(p + ".D", {heads}), n.b.weight(p + ".dt_bias", {heads})};
  if (cache) {
    scan_in.push_back("past_ssm_state." + l);
    n.b.input(scan_in.back(), kF32, {-1, heads, hd, st}, {"batch"});
  }
  const auto outs = n.b.node_n("StateSpaceScan", p + "/StateSpaceScan", scan_in, cache ? 2 : 1);
  n.b.last()->set_domain("ai.neusight");
  n.b.attr_i("chunk_size", c.ssm_chunk);
  n.b.attr_i("dt_softplus", 1);
  if (cache) {
    n.b.last()->set_output(1, "present_ssm_state." + l);
    n.b.output("present_ssm_state." + l, kF32, {-1, heads, hd, st}, {"batch"});
  }
  const std::string y = n.b.node("Reshape", p + "/y", {outs[0], n.shape_bs(p + "/y_shape", {inner})});
  const std::string normed = n.b.node("GatedRMSNorm", p + ".norm/GatedRMSNorm", {y, z, n.b.weight(p + ".norm.weight", {inner})}, 1,
                                      "ai.neusight");
  n.b.attr_i("group_size", inner / g);
  n.b.attr_f("epsilon", static_cast<float>(c.layer_norm_eps));
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
  auto slice = [&](const std::string& name, const std::string& t, int64_t from, int64_t to) {
    return n.b.node("Slice", p + "/" + name, {t, n.b.ints(p + "/" + name + "_s", {from}), n.b.ints(p + "/" + name + "_e", {to}),
                                              n.b.ints(p + "/" + name + "_ax", {2})});
  };
  const std::string qkv = n.b.node("Concat", p + "/qkv", {slice("q", qkvz, 0, keys), slice("k", qkvz, keys, 2 * keys),
                                                         slice("v", qkvz, 2 * keys, 2 * keys + values)});
  n.b.attr_i("axis", 2);
  const std::string z = slice("z", qkvz, 2 * keys + values, 2 * keys + 2 * values);
  std::vector<std::string> conv_in = {qkv, n.b.weight(p + ".conv1d.weight", {conv_dim, k}), ""};
  if (cache) {
    conv_in.push_back("past_conv_state." + l);
    n.b.input(conv_in.back(), kF32, {-1, conv_dim, k - 1}, {"batch"});
  }
  const auto conv = n.b.node_n("CausalConv1d", p + ".conv1d/CausalConv1d", conv_in, cache ? 2 : 1);
  n.b.last()->set_domain("ai.neusight");
  n.b.attr_s("activation", "silu");
  if (cache) {
    n.b.last()->set_output(1, "present_conv_state." + l);
    n.b.output("present_conv_state." + l, kF32, {-1, conv_dim, k - 1}, {"batch"});
  }
  // Query and key heads [b, L, hk, dk], repeated to the hv value heads.
  auto key_heads = [&](const std::string& name, int64_t from) {
    std::string t = n.b.node("Reshape", p + "/" + name + "_heads",
                             {slice(name + "_conv", conv[0], from, from + keys), n.shape_bs(p + "/" + name + "_shape", {hk, 1, dk})});
    if (hv != hk) {
      t = n.b.node("Expand", p + "/" + name + "_repeat", {t, n.b.ints(p + "/" + name + "_repeat_shape", {1, 1, 1, hv / hk, 1})});
    }
    return n.b.node("Reshape", p + "/" + name + "_all", {t, n.shape_bs(p + "/" + name + "_all_shape", {hv, dk})});
  };
  const std::string q = key_heads("q", 0), kk = key_heads("k", keys);
  const std::string v = n.b.node("Reshape", p + "/v_heads", {slice("v_conv", conv[0], 2 * keys, conv_dim), n.shape_bs(p + "/v_shape", {hv, dv})});
  const std::string beta = n.b.node("Sigmoid", p + "/beta", {slice("b", ba, 0, hv)});
  const std::string decay = n.b.node("Neg", p + "/A", {n.b.node("Exp", p + "/A_exp", {n.b.weight(p + ".A_log", {hv})})});
  const std::string softplus = n.b.node("Softplus", p + "/dt_softplus",
                                        {n.b.node("Add", p + "/dt_bias_Add", {slice("a", ba, hv, 2 * hv), n.b.weight(p + ".dt_bias", {hv})})});
  const std::string g = n.b.node("Mul", p + "/g", {decay, softplus});
  std::vector<std::string> rule_in = {q, kk, v, g, beta};
  if (cache) {
    rule_in.push_back("past_delta_state." + l);
    n.b.input(rule_in.back(), kF32, {-1, hv, dk, dv}, {"batch"});
  }
  const auto outs = n.b.node_n("GatedDeltaRule", p + "/GatedDeltaRule", rule_in, cache ? 2 : 1);
  n.b.last()->set_domain("ai.neusight");
  n.b.attr_i("chunk_size", 64);
  if (cache) {
    n.b.last()->set_output(1, "present_delta_state." + l);
    n.b.output("present_delta_state." + l, kF32, {-1, hv, dk, dv}, {"batch"});
  }
  const std::string y = n.b.node("Reshape", p + "/o", {outs[0], n.shape_bs(p + "/o_shape", {values})});
  const std::string normed = n.b.node("GatedRMSNorm", p + ".norm/GatedRMSNorm", {y, z, n.b.weight(p + ".norm.weight", {dv})}, 1,
                                      "ai.neusight");
  n.b.attr_i("group_size", dv);
  n.b.attr_f("epsilon", static_cast<float>(c.layer_norm_eps));
  return linear(n, p + ".out_proj", normed, values, h, false);
}

}  // namespace neusight::builder
