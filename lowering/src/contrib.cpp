// contrib.cpp - com.microsoft ops outside attention and normalisation that exporters emit for
// onnxruntime's CUDA provider: RotaryEmbedding (also ai.onnx 23), GatherBlockQuantized,
// BiasSplitGelu, GemmFastGelu, MoE / QMoE.
#include <algorithm>
#include <cmath>

#include "internal.h"

namespace neusight::lowering_detail {
namespace {

int64_t dim(const TensorInfo* t, size_t i) {
  return t && t->has_shape && i < t->shape.size() && t->shape[i].known() ? t->shape[i].value : -1;
}

// RotaryEmbedding: com.microsoft (input, position_ids, cos_cache, sin_cache), ai.onnx 23
// (X, cos_cache, sin_cache, position_ids). One elementwise pass over the input (x * cos -
// y * sin on the rotated pairs, 3 FLOPs an element) that reads each token's cos and sin row
// (rotary_dim / 2 elements each: the caches' second dim) and its position id.
void lower_rotary(LowerCtx& c) {
  const bool onnx = RuleTable::canonical(c.n.domain).empty();
  const TensorInfo* x = c.in(0);
  const TensorInfo* y = c.outp(0);
  const TensorInfo* cos = c.in(onnx ? 1 : 2);
  const TensorInfo* pos = c.in(onnx ? 3 : 1);
  if (!c.all_known({x, y}) || x->shape.size() < 3) {
    c.unknown("shapes not inferred");
    return;
  }
  Kernel k = c.base(KernelClass::elementwise, "rotary");
  rows_cols(y, k.rows, k.cols);
  const double e = double(numel(x)), eb = element_bytes(k.dtype);
  // Tokens: B x S ([B, S, hidden], [B, S, N, H] or [B, N, S, H]).
  const size_t r = x->shape.size();
  const int64_t seq = r == 4 && dim(x, 1) == c.n.attr_i("num_heads", -1) ? dim(x, 2) : dim(x, 1);
  const double tokens = double(x->shape[0].value) * double(std::max<int64_t>(seq, 1));
  const double half = std::max<int64_t>(dim(cos, cos && cos->shape.size() >= 1 ? cos->shape.size() - 1 : 0), 0);
  k.flops = 3 * e;
  k.bytes = 2 * e * eb + 2 * tokens * half * element_bytes(c.dtype(cos)) + tensor_bytes(c, pos);
  k.operand_elems = {numel(x)};
  k.inputs = 2;
  k.note = "rotary position embedding";
  c.out.push_back(k);
}

// GatherBlockQuantized(data, indices, scales, zero_points): a Gather of block-quantized rows
// (4-bit packed two to a uint8, or 8-bit) dequantized on the way: reads the gathered
// quantized elements, their block scales (and zero points) and the indices, writes the
// output in the scales' precision.
void lower_gather_block_quantized(LowerCtx& c) {
  const TensorInfo* data = c.in(0);
  const TensorInfo* idx = c.in(1);
  const TensorInfo* scales = c.in(2);
  const TensorInfo* y = c.outp(0);
  if (!c.all_known({data, idx, y})) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t bits = c.n.attr_i("bits", 4), block = std::max<int64_t>(c.n.attr_i("block_size", 128), 1);
  const double e = double(numel(y));
  Kernel k = c.base(KernelClass::memory, "gather");
  rows_cols(y, k.rows, k.cols);
  const double scale_b = scales ? element_bytes(c.dtype(scales)) : 2.0;
  const double zp = c.in(3) ? e / double(block) * (bits / 8.0) : 0;
  k.flops = 2 * e;
  k.bytes = e * (bits / 8.0) + e / double(block) * scale_b + zp + tensor_bytes(c, idx) + e * element_bytes(k.dtype);
  k.operand_elems = {numel(idx)};
  k.note = std::to_string(bits) + "-bit rows dequantized in the gather";
  c.out.push_back(k);
}

// GemmFastGelu(X, W, bias): one GEMM with the bias and the tanh-GELU in its epilogue.
void lower_gemm_fast_gelu(LowerCtx& c) {
  const size_t before = c.out.size();
  emit_matmul(c);
  if (c.out.size() != before + 1 || c.out.back().cls != KernelClass::gemm) return;
  Kernel& k = c.out.back();
  const TensorInfo* bias = c.in(2);
  k.epilogue = bias ? "bias+gelu" : "gelu";
  if (bias) k.bytes += double(numel(bias)) * element_bytes(k.dtype);
  k.note = k.note.empty() ? "FastGelu epilogue" : k.note + "; FastGelu epilogue";
}

// A mixture's routing: the top-k of each token's router logits.
Kernel moe_router_kernel(LowerCtx& c, const TensorInfo* router, DType act, int64_t rows, int64_t experts, int64_t top_k) {
  Kernel topk = c.base(KernelClass::reduce, "topk");
  topk.dtype = act;
  topk.rows = rows;
  topk.cols = experts;
  topk.flops = double(rows) * double(experts) * 2;
  topk.bytes = double(numel(router)) * element_bytes(c.dtype(router)) + double(rows) * double(top_k) * (element_bytes(act) + 4);
  topk.operand_elems = {numel(router)};
  topk.note = "router top-" + std::to_string(top_k) + " of " + std::to_string(experts) + " experts";
  return topk;
}

// A mixture's output: each token's experts' outputs weighted by their routing weights, summed.
Kernel moe_combine_kernel(LowerCtx& c, DType act, int64_t rows, int64_t hidden, int64_t top_k) {
  const double eb = element_bytes(act), routed = double(rows) * double(top_k);
  Kernel sum = c.base(KernelClass::elementwise, "moe_combine");
  sum.dtype = act;
  sum.rows = rows;
  sum.cols = hidden;
  sum.inputs = 2;
  sum.flops = 2 * routed * double(hidden);
  sum.bytes = routed * double(hidden) * eb + double(rows) * double(top_k) * eb + double(rows) * double(hidden) * eb;
  sum.operand_elems = {static_cast<int64_t>(routed) * hidden};
  sum.note = "weighted sum of each token's experts";
  return sum;
}

// MoE / QMoE(input [rows, hidden] or [B, S, hidden], router_probs [rows, E], fc1 weights
// [E, hidden, inter] (or [E, inter, hidden]), fc1 bias, fc2 weights, fc2 bias, fc3 weights
// ...): the router's top-k over E experts per token, then each expert's FFN on the tokens
// routed to it, the activation, and the weighted sum of each token's k expert outputs. QMoE
// reads its weights at expert_weight_bits. Routing is taken as uniform and independent per
// token: an expert is left out by one token with probability 1 - k / E, so rows tokens reach
// E x (1 - (1 - k / E)^rows) experts on average. Only those run (a grouped GEMM launches no
// tile for an expert without tokens): one batched GEMM per FC layer over the experts reached,
// the rows x k routed tokens spread evenly over them, reading those experts' weights. One
// decode token with top-2 of 8 experts reads 2 experts' weights, a long prompt all 8.
void lower_moe(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* router = c.in(1);
  const MoeWeightInputs w = moe_weight_inputs(c.n.op_type);
  const TensorInfo* fc1 = c.in(w.fc1);
  const bool quantized = w.scales;
  const size_t fc2_at = w.fc2, fc3_at = w.fc3;
  const TensorInfo* fc2 = c.in(fc2_at);
  const bool gated = c.in(fc3_at) != nullptr;
  if (!c.all_known({x, router, fc1}) || router->shape.size() != 2 || fc1->shape.size() != 3 || x->shape.empty()) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t bits = quantized ? c.n.attr_i("expert_weight_bits", 4) : 0;
  const int64_t pack = quantized && bits > 0 && bits < 8 ? 8 / bits : 1;
  const int64_t hidden = x->shape.back().value, experts = router->shape[1].value;
  const int64_t rows = numel(x) / std::max<int64_t>(hidden, 1);
  const int64_t top_k = std::clamp<int64_t>(c.n.attr_i("k", 1), 1, std::max<int64_t>(experts, 1));
  // The intermediate size: fc1's dim that is not the hidden size (the packed one unpacked).
  const int64_t a = fc1->shape[1].value, b = fc1->shape[2].value;
  const int64_t inter = a == hidden ? b * pack : a;
  // SwiGLU fused into fc1 (swiglu_fusion 1 interleaved, 2 concatenated; onnxruntime-genai's
  // gpt-oss and Phi MoE exports): fc1 gives gate and up together, the activation halves them,
  // and fc2 reduces over the half.
  const bool fused_glu = !gated && (c.n.attr_i("swiglu_fusion", 0) > 0 || c.n.attr_s("activation_type", "") == "swiglu");
  const int64_t act_out = fused_glu ? inter / 2 : inter;
  if (experts <= 0 || inter <= 0 || act_out <= 0 || rows <= 0) {
    c.unknown("shapes not inferred");
    return;
  }
  const DType act = c.dtype(x);
  const double eb = element_bytes(act);
  const double routed = double(rows) * double(top_k);
  const double reached = moe_experts_reached(double(rows), experts, top_k);
  const int64_t active = std::min<int64_t>(experts, static_cast<int64_t>(std::ceil(reached - 1e-9)));
  const int64_t per_expert = static_cast<int64_t>(std::ceil(routed / double(active)));

  c.out.push_back(moe_router_kernel(c, router, act, rows, experts, top_k));

  // --dtype fp4 (internal.h): unquantized experts run NVFP4, operands with their scales.
  const bool narrow = !quantized && narrow_weight_gemms(c.opt.compute_dtype);
  const double weight_elem_bytes = quantized ? bits / 8.0 : narrow ? narrow_operand_bytes(c.opt.compute_dtype) : eb;
  const double in_elem_bytes = narrow ? narrow_operand_bytes(c.opt.compute_dtype) : eb;
  // One grouped GEMM over the reached experts; `inputs` are the weights whose output columns it
  // computes together (n each), reading the routed tokens once.
  auto ffn = [&](std::vector<size_t> inputs, int64_t n, int64_t k, const std::string& what, Kernel::ExpertPart part) {
    Kernel g = c.base(KernelClass::gemm, "bmm");
    g.expert_part = part;
    g.dtype = quantized ? (bits == 8 ? DType::u8 : DType::u4) : narrow ? c.opt.compute_dtype : act;
    g.weight_only = quantized;
    const int64_t cols = n * static_cast<int64_t>(inputs.size());
    g.gemm = {active, per_expert, cols, k, true};
    g.flops = 2.0 * routed * double(cols) * double(k);
    double weights = 0;
    for (size_t input : inputs) {
      weights += reached * double(n) * double(k) * weight_elem_bytes;
      // QMoE: the reached experts' scales (after each weight) come with their weights.
      if (const TensorInfo* sc = quantized ? c.in(input + 1) : nullptr; sc && sc->fully_known())
        weights += reached / double(experts) * double(numel(sc)) * element_bytes(sc->dtype);
    }
    g.bytes = routed * double(k) * in_elem_bytes + weights + routed * double(cols) * eb;
    g.moe = {experts, top_k, double(rows), weights};
    g.operand_elems = {static_cast<int64_t>(routed) * k, active * cols * k};
    g.a_input = -1;
    g.b_input = static_cast<int>(inputs.front());
    g.note = what + " of the " + std::to_string(active) + " of " + std::to_string(experts) + " experts reached, " +
             std::to_string(per_expert) + " tokens each";
    if (quantized) g.note += ", " + std::to_string(bits) + "-bit weights";
    c.out.push_back(g);
  };
  // Serving engines stack fc1 and fc3 (w13: vLLM's fused_moe, SGLang, TensorRT-LLM) and run them
  // as one grouped GEMM; onnxruntime's MoE kernel and training run them apart.
  if (gated && c.opt.serving_kernels && c.opt.mode == Mode::inference) {
    ffn({2, fc3_at}, inter, hidden, "FC1 and FC3 (gate) as one GEMM over stacked weights", Kernel::ExpertPart::up);
  } else {
    ffn({2}, inter, hidden, "FC1", Kernel::ExpertPart::up);
    if (gated) ffn({fc3_at}, inter, hidden, "FC3 (gate)", Kernel::ExpertPart::up);
  }
  Kernel actk = c.base(KernelClass::elementwise, c.n.attr_s("activation_type", "relu"));
  actk.dtype = act;
  actk.rows = static_cast<int64_t>(routed);
  actk.cols = act_out;
  const bool glu = gated || fused_glu;  // reads gate and up, writes their product
  actk.flops = routed * double(act_out) * (glu ? 2 : 1);
  actk.bytes = routed * double(act_out) * eb * (glu ? 3 : 2);
  actk.operand_elems = {static_cast<int64_t>(routed) * act_out};
  actk.note = fused_glu ? "expert activation (SwiGLU of fc1's gate and up halves)" : "expert activation";
  actk.expert_part = Kernel::ExpertPart::activation;
  actk.moe = {experts, top_k, double(rows), 0};
  c.out.push_back(actk);
  if (fc2) ffn({fc2_at}, hidden, act_out, "FC2", Kernel::ExpertPart::down);
  c.out.push_back(moe_combine_kernel(c, act, rows, hidden, top_k));
}

// A streaming kernel of a recurrent mixer's scan (the state updates, cumulative sums), in `act`.
void push_scan_vector(LowerCtx& c, DType act, const std::string& op, int64_t rows, int64_t cols, double flops, double bytes,
                      const std::string& note) {
  Kernel k = c.base(KernelClass::elementwise, op);
  k.dtype = act;
  k.rows = rows;
  k.cols = cols;
  k.inputs = 2;
  k.flops = flops;
  k.bytes = bytes;
  k.operand_elems = {rows * cols};
  k.note = note;
  c.out.push_back(k);
}

// A batched GEMM of a recurrent mixer's chunked scan (no operand a node input), in `act`.
void push_scan_gemm(LowerCtx& c, DType act, const std::string& what, int64_t batch, int64_t m, int64_t n, int64_t k,
                    double flops, double bytes) {
  Kernel g = c.base(KernelClass::gemm, "bmm");
  g.dtype = act;
  g.gemm = {batch, m, n, k, true};
  g.flops = flops;
  g.bytes = bytes;
  g.operand_elems = {batch * m * k, batch * k * n};
  g.a_input = g.b_input = -1;
  g.note = what;
  c.out.push_back(g);
}

// ai.neusight StateSpaceScan (Mamba-2; inputs X [b, L, heads, head_dim], dt [b, L, heads], A,
// B and C [b, L, groups, state], D, dt_bias, initial state): the scan as mamba_ssm's kernels
// run it, in the model's dtype with FP32 chunk states. One token per sequence (a decode step)
// is selective_state_update: every head's [head_dim x state] state read, decayed, updated by
// x B^T and written back, y = state C + D x, bound by the states' bytes. Longer sequences run
// the chunked scan (mamba_chunk_scan_combined, chunks of chunk_size tokens): the chunks'
// cumulative decay; each chunk's state, x^T B over the chunk (a batched GEMM of [head_dim x
// chunk] by [chunk x state] per chunk and head); the states passed from chunk to chunk (one
// sequential pass); C B^T within each chunk and group; and the output, the causal C B^T times x
// within the chunk plus C times the incoming state (a batched GEMM of [chunk x (chunk / 2 +
// state)] by [.. x head_dim] per chunk and head: the blocks above the diagonal are skipped).
void lower_state_space_scan(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* bm = c.in(3);
  if (!c.all_known({x, bm}) || x->shape.size() != 4 || bm->shape.size() != 4) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t b = x->shape[0].value, len = x->shape[1].value, h = x->shape[2].value, hd = x->shape[3].value;
  const int64_t g = bm->shape[2].value, n = bm->shape[3].value;
  if (b <= 0 || len <= 0 || h <= 0 || hd <= 0 || g <= 0 || n <= 0 || h % g != 0) {
    c.unknown("scan shapes empty or heads not a multiple of the groups");
    return;
  }
  const int64_t cs = std::max<int64_t>(1, c.n.attr_i("chunk_size", 256));
  // Every tile count below fits an int64 many times over (the bound is the scan's elements).
  if (double(b) * double(len) * double(h) * double(std::max(hd, n)) * double(cs) > 1e17) {
    c.unknown("scan too large");
    return;
  }
  const DType act = c.dtype(x);
  const double eb = element_bytes(act), fp32 = 4.0;
  const double states = double(b) * double(h) * double(hd) * double(n);  // one per sequence and head
  const double xs = double(b) * double(len) * double(h) * double(hd);
  const double bc = double(b) * double(len) * double(g) * double(n);
  const double dts = double(b) * double(len) * double(h);
  const auto vector_kernel = [&](auto&&... a) { push_scan_vector(c, act, a...); };
  if (len == 1) {
    vector_kernel("selective_state_update", b * h, hd * n, 5.0 * states,
                  2.0 * states * eb + 2.0 * xs * eb + 2.0 * bc * eb + 2.0 * dts * eb,
                  "each head's state read, decayed, updated by x B^T and written back; y = state C + D x");
    return;
  }
  const int64_t chunks = (len + cs - 1) / cs;
  const double chunk_states = double(b) * double(chunks) * double(h) * double(hd) * double(n);
  const double cb = double(b) * double(chunks) * double(g) * double(cs) * double(cs);
  vector_kernel("ssd_chunk_cumsum", b * h, len, 3.0 * dts, dts * eb + 2.0 * dts * fp32,
                "dt (softplus, bias) and its cumulative decay within each chunk");
  const auto gemm = [&](auto&&... a) { push_scan_gemm(c, act, a...); };
  gemm("SSD chunk states: x^T B over each chunk, per head", b * chunks * h, hd, n, cs,
       2.0 * xs * double(n), xs * eb + bc * eb + dts * fp32 + chunk_states * fp32);
  vector_kernel("ssd_state_passing", b * h, chunks * hd * n, 2.0 * chunk_states, 2.0 * chunk_states * fp32 + states * eb,
                "the chunk states passed on from chunk to chunk");
  gemm("SSD C B^T within each chunk, per group", b * chunks * g, cs, cs, n, 2.0 * cb * double(n), 2.0 * bc * eb + cb * fp32);
  const int64_t k_out = (cs + 1) / 2 + n;  // the causal half of the chunk, and the incoming state
  gemm("SSD output: causal C B^T x within the chunk plus C times the incoming state, per head", b * chunks * h, cs, hd,
       k_out, 2.0 * xs * double(k_out),
       cb * fp32 + xs * eb + bc * eb + chunk_states * fp32 + dts * fp32 + xs * eb);
}

// ai.neusight CausalConv1d (x [b, L, channels], weight [channels, kernel], bias, state): the
// causal depthwise convolution of causal_conv1d (its CUDA kernel reads the channels-last input
// through its strides and applies SiLU in the same pass): one pass over x, each output the dot
// product of `kernel` inputs; a decode step also reads and writes the state.
void lower_causal_conv1d(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* w = c.in(1);
  if (!c.all_known({x, w}) || x->shape.size() != 3 || w->shape.size() != 2) {
    c.unknown("shapes not inferred");
    return;
  }
  Kernel k = c.base(KernelClass::elementwise, "causal_conv1d");
  rows_cols(x, k.rows, k.cols);
  const double e = double(numel(x)), eb = element_bytes(k.dtype), taps = double(w->shape[1].value);
  const TensorInfo* state = c.in(3);
  const double state_bytes = state && state->fully_known() ? double(numel(state)) * eb : 0;
  k.inputs = 1;
  k.flops = e * (2.0 * taps + (c.n.attr_s("activation", "silu") == "silu" ? 4.0 : 0.0));
  k.bytes = 2.0 * e * eb + double(numel(w)) * eb + 2.0 * state_bytes;
  k.operand_elems = {static_cast<int64_t>(e)};
  k.note = "causal depthwise convolution of " + std::to_string(static_cast<int64_t>(taps)) + " taps and its SiLU";
  c.out.push_back(k);
}

// ai.neusight GatedRMSNorm(y, z, weight): RMSNorm of y x silu(z) over groups of group_size
// channels, times the weight (mamba_ssm's RMSNormGated: one kernel reading y and z).
void lower_gated_rmsnorm(LowerCtx& c) {
  const TensorInfo* y = c.in(0);
  if (!c.all_known({y}) || y->shape.empty()) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t channels = y->shape.back().value;
  const int64_t group = std::clamp<int64_t>(c.n.attr_i("group_size", channels), 1, std::max<int64_t>(channels, 1));
  Kernel k = c.base(KernelClass::layernorm, "rmsnorm");
  const double e = double(numel(y)), eb = element_bytes(k.dtype);
  k.rows = static_cast<int64_t>(e) / group;
  k.cols = group;
  k.flops = 10.0 * e;
  k.bytes = 3.0 * e * eb + double(channels) * eb;
  k.operand_elems = {static_cast<int64_t>(e), static_cast<int64_t>(e)};
  k.note = "RMSNorm of y x silu(z) per group of " + std::to_string(group);
  c.out.push_back(k);
}

// ai.neusight GatedDeltaRule (Qwen3-Next's gated DeltaNet; inputs q, k [b, L, heads, key_dim],
// v [b, L, heads, value_dim], g, beta [b, L, heads], initial state): as flash-linear-attention
// runs it, in the model's dtype with FP32 states. One token per sequence (a decode step) is
// fused_recurrent_gated_delta_rule: every head's [key_dim x value_dim] state read, decayed,
// corrected by the delta rule and written back, bound by the states' bytes. Longer sequences run
// chunk_gated_delta_rule (chunks of chunk_size): the gate's cumulative sum; K K^T and Q K^T
// within each chunk (a batched GEMM per chunk and head, reduction 2 x key_dim); the WY
// representation, the triangular inverse applied to beta K and beta V (a batched GEMM per chunk
// and head); the state recurrence, sequential over the chunks (a batched GEMM per head whose
// reduction runs over every chunk: W h and K^T U, 2 x L); and the output, Q h plus the masked
// Q K^T times the corrected values (a batched GEMM per chunk and head).
void lower_gated_delta_rule(LowerCtx& c) {
  const TensorInfo* k = c.in(1);
  const TensorInfo* v = c.in(2);
  if (!c.all_known({k, v}) || k->shape.size() != 4 || v->shape.size() != 4) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t b = v->shape[0].value, len = v->shape[1].value, h = v->shape[2].value, dv = v->shape[3].value;
  const int64_t dk = k->shape[3].value;
  const int64_t cs = std::max<int64_t>(1, c.n.attr_i("chunk_size", 64));
  if (b <= 0 || len <= 0 || h <= 0 || dk <= 0 || dv <= 0 || k->shape[2].value != h) {
    c.unknown("delta-rule shapes empty or key and value heads differ");
    return;
  }
  if (double(b) * double(len) * double(h) * double(std::max(dk, dv)) * double(std::max(cs, std::max(dk, dv))) > 1e17) {
    c.unknown("delta rule too large");
    return;
  }
  const DType act = c.dtype(v);
  const double eb = element_bytes(act), fp32 = 4.0;
  const double states = double(b) * double(h) * double(dk) * double(dv);
  const double qk = double(b) * double(len) * double(h) * double(dk), vs = double(b) * double(len) * double(h) * double(dv);
  const double gates = double(b) * double(len) * double(h);
  const auto vector_kernel = [&](auto&&... a) { push_scan_vector(c, act, a...); };
  if (len == 1) {
    vector_kernel("fused_recurrent_gated_delta_rule", b * h, dk * dv, 6.0 * states,
                  2.0 * states * eb + 2.0 * qk * eb + 2.0 * vs * eb + 2.0 * gates * eb,
                  "each head's state read, decayed, corrected by the delta rule and written back");
    return;
  }
  const int64_t chunks = (len + cs - 1) / cs;
  const double chunk_states = double(b) * double(h) * double(chunks) * double(dk) * double(dv);
  const double tri = double(b) * double(h) * double(chunks) * double(cs) * double(cs);
  vector_kernel("gdn_chunk_cumsum", b * h, len, gates, gates * eb + gates * fp32, "the gate's cumulative sum within each chunk");
  // Every GEMM of the chunked rule does its whole shape's work.
  const auto gemm = [&](const std::string& what, int64_t batch, int64_t m, int64_t nn, int64_t kk, double bytes) {
    push_scan_gemm(c, act, what, batch, m, nn, kk, 2.0 * double(batch) * double(m) * double(nn) * double(kk), bytes);
  };
  gemm("delta rule: K K^T and Q K^T within each chunk, per head", b * h * chunks, cs, cs, 2 * dk, 2.0 * qk * eb + 2.0 * tri * fp32);
  gemm("delta rule: the WY representation, the chunk's triangular inverse times beta K and beta V", b * h * chunks, cs, dk + dv,
       cs, tri * fp32 + qk * eb + vs * eb + qk * eb + vs * eb);
  gemm("delta rule: the state recurrence over the chunks, per head", b * h, dk, dv, 2 * len,
       qk * eb * 2 + vs * eb * 2 + chunk_states * eb + states * eb);
  gemm("delta rule: the output, Q h plus the masked Q K^T times the corrected values, per chunk and head", b * h * chunks, cs, dv,
       dk + cs, qk * eb + chunk_states * eb + tri * fp32 + vs * eb + vs * eb);
}

}  // namespace

void add_contrib_rules(RuleTable& r) {
  r["ai.neusight:StateSpaceScan"] = lower_state_space_scan;
  r["ai.neusight:GatedDeltaRule"] = lower_gated_delta_rule;
  r["ai.neusight:CausalConv1d"] = lower_causal_conv1d;
  r["ai.neusight:GatedRMSNorm"] = lower_gated_rmsnorm;
  r["com.microsoft:RotaryEmbedding"] = lower_rotary;
  r.add("", "RotaryEmbedding", lower_rotary, 23);
  r["com.microsoft:GatherBlockQuantized"] = lower_gather_block_quantized;
  r["com.microsoft:BiasSplitGelu"] = [](LowerCtx& c) { emit_elementwise(c, "bias_split_gelu", 3); };
  r["com.microsoft:GemmFastGelu"] = lower_gemm_fast_gelu;
  r["com.microsoft:MoE"] = lower_moe;
  r["com.microsoft:QMoE"] = lower_moe;
}

}  // namespace neusight::lowering_detail

namespace neusight {

MoeWeightInputs moe_weight_inputs(const std::string& op_type) {
  // MoE: fc1, fc1 bias, fc2, fc2 bias, fc3, fc3 bias; QMoE adds each weight's scales after it.
  if (op_type == "QMoE") return MoeWeightInputs{2, 5, 8, true};
  return MoeWeightInputs{};
}

double moe_experts_reached(double rows, int64_t experts, int64_t top_k) {
  if (experts <= 0) return 0;
  const double k = double(std::clamp<int64_t>(top_k, 1, experts));
  if (!(rows > 0)) return 0;
  return std::clamp(double(experts) * (1.0 - std::pow(1.0 - k / double(experts), rows)), k, double(experts));
}

}  // namespace neusight
