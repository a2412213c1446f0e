// mamba.cpp - the Mamba-2 mixer (HF Mamba2Mixer, NemotronHMamba2Mixer) as its CUDA path runs it:
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

}  // namespace neusight::builder
