// unit-lowering-models.cpp - lowering of whole built models: GPT-2 Large GEMM FLOPs against
// the analytic count, training GEMMs, and the traced PyTorch opgraphs of
// neusight-data/e2e/opgraph (fixtures under tests/data; kernel names and sizes, backward GEMMs,
// updates).
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "neusight/lowering.h"
#include "neusight/model_builder.h"
#include "opgraph.h"
#include "neusight/shape_inference.h"
#include "lowering_graph.h"
#include "test_util.h"

using namespace neusight;

namespace {

ModelConfig config(const std::string& name, int64_t layers = 0) {
  ModelConfig c = read_hf_config(test::fixture_dir() + "/model_configs/" + name + ".json");
  if (layers > 0) c.layers = layers;
  return c;
}

KernelList lower_model(const ModelConfig& c, int64_t batch, int64_t seq, Mode mode, Fusion fusion = Fusion::eager) {
  LoadedModel m = build_model(c);
  Graph g = m.model.graph;
  DimBindings b;
  b.batch = batch;
  b.seq = seq;
  bind_dims(g, b);
  infer_shapes(g, m.model);
  LoweringOptions o;
  o.mode = mode;
  o.fusion = fusion;
  o.opset = m.model.opset();
  return lower(g, o);
}

// A kernel in the opgraph's words: "Linear M,N,K" / "BMM B,M,N,K" (dataset order) and
// "VEC<op> rows,cols" (op with a 'u' suffix when the second operand is a scalar).
std::string traced_name(const Kernel& k) {
  const auto& g = k.gemm;
  auto s = [](int64_t v) { return std::to_string(v); };
  if (k.cls == KernelClass::gemm)
    return g.batch == 1 ? "Linear " + s(g.m) + "," + s(g.k) + "," + s(g.n)
                        : "BMM " + s(g.batch) + "," + s(g.m) + "," + s(g.k) + "," + s(g.n);
  const std::string rc = " " + s(k.rows) + "," + s(k.cols);
  if (k.cls == KernelClass::softmax) return "VECsoftmax" + rc;
  if (k.cls == KernelClass::layernorm) return "VECln" + rc;
  if (k.cls == KernelClass::elementwise) {
    const bool binary = k.op == "add" || k.op == "sub" || k.op == "mul" || k.op == "div" || k.op == "pow";
    return "VEC" + k.op + (binary && k.inputs == 1 ? "u" : "") + rc;
  }
  return "";
}

struct Traced {
  std::multiset<std::string> fw, bw_gemm, bw_rowwise, acc;
};

// One opgraph as multisets of kernel keys (model_builder/src/opgraph.h). A binary VEC op whose row
// has a (1,)-shaped input operand is a tensor-with-scalar op.
Traced read_traced(const std::string& name) {
  const std::string path = test::fixture_dir() + "/e2e/opgraph/" + name + ".csv";
  REQUIRE_MESSAGE(std::ifstream(path).good(), "missing fixture: " << path);
  Traced t;
  for (const TracedOp& op : read_opgraph(path)) {
    for (const auto& k : op.fw)
      if (!k.dims.empty()) t.fw.insert(traced_key(k, op.scalar_operand()));
    for (const auto& k : op.bw) {
      if (k.kind == "Linear" || k.kind == "BMM") t.bw_gemm.insert(traced_key(k));
      else if (k.kind == "VECsoftmax" || k.kind == "VECln") t.bw_rowwise.insert(traced_key(k));
    }
    for (const auto& k : op.acc)
      if (k.dims.size() >= 2) t.acc.insert(std::to_string(k.dims[1]));
  }
  return t;
}

std::string show(const std::multiset<std::string>& s) {
  std::string out;
  for (const auto& x : s) out += "\n  " + x;
  return out;
}

std::multiset<std::string> minus(const std::multiset<std::string>& a, const std::multiset<std::string>& b) {
  std::multiset<std::string> out = a;
  for (const auto& x : b) {
    auto it = out.find(x);
    if (it != out.end()) out.erase(it);
  }
  return out;
}

}  // namespace

TEST_CASE("lowering: GPT-2 Large forward GEMM FLOPs equal 24*T*d^2 + 4*B*S^2*d per layer plus the LM head") {
  const ModelConfig c = config("gpt2_large");
  const int64_t B = 4, S = 1024;
  const KernelList kl = lower_model(c, B, S, Mode::training);
  const double T = double(B) * S, d = double(c.hidden);
  const double expected = double(c.layers) * (24.0 * T * d * d + 4.0 * B * double(S) * S * d) + 2.0 * T * d * double(c.vocab);
  const double fwd = test::gemm_flops(kl, Phase::forward);
  CHECK(fwd == doctest::Approx(expected).epsilon(0.01));
  // Every GEMM operand is an activation or a parameter that needs a gradient: backward
  // GEMMs are exactly twice the forward ones.
  CHECK(test::gemm_flops(kl, Phase::backward) == doctest::Approx(2 * fwd).epsilon(1e-12));
  CHECK(kl.unknown_ops.empty());
}

TEST_CASE("lowering: GPT-2 Large eager kernels are exactly the traced PyTorch operators (inference)") {
  // The opgraph traces one transformer layer plus embeddings, final norm and LM head.
  const KernelList kl = lower_model(config("gpt2_large", 1), 4, 1024, Mode::inference);
  std::multiset<std::string> got;
  for (const auto& k : kl.kernels) {
    const std::string s = traced_name(k);
    if (!s.empty()) got.insert(s);
  }
  std::multiset<std::string> want;
  for (const auto& s : read_traced("gpt2_large-inf-1024-4").fw)
    if (s.rfind("MEM", 0) != 0) want.insert(s);
  CHECK_MESSAGE(got == want, "ours:" << show(got) << "\ntraced:" << show(want));
  // Memory kernels: the token-embedding lookup, the causal-mask slice, where and the
  // head-merge copy ('contiguous') are in the trace; the Q/K/V permutes and k.transpose are
  // strided views (no kernel of their own), which torch.matmul's reshape to 3-D copies at
  // batch > 1 inside the traced matmul (the opgraph lists only the BMM): q and k^T for
  // q @ k^T, v for probs @ v. The position-embedding lookup is a real kernel the trace files
  // under 'misc'.
  std::multiset<std::string> mem;
  int matmul_copies = 0;
  for (const auto& k : kl.kernels)
    if (k.cls == KernelClass::memory) {
      mem.insert(k.op);
      matmul_copies += k.note.find("torch.matmul") != std::string::npos;
    }
  CHECK(mem.count("transpose") == 1 + 3);
  CHECK(matmul_copies == 3);
  CHECK(mem.count("where") == 1);
  CHECK(mem.count("slice") == 1);
  CHECK(mem.count("embedding") == 2);
  // c_attn's output split into q, k, v: views read by the matmuls, no copy (the trace's
  // getitem of the split pieces moves nothing).
  CHECK(mem.count("split") == 0);
}

TEST_CASE("lowering: GPT-2 Large training matches the traced backward GEMMs, softmax/LN grads and updates") {
  const KernelList kl = lower_model(config("gpt2_large", 1), 4, 1024, Mode::training);
  const Traced want = read_traced("gpt2_large-train-1024-4");
  std::multiset<std::string> bw_gemm, bw_rowwise, fw, acc;
  std::multiset<std::string> bw_mul;
  for (const auto& k : kl.kernels) {
    const std::string s = traced_name(k);
    if (k.phase == Phase::forward && !s.empty()) fw.insert(s);
    if (k.phase == Phase::backward && k.cls == KernelClass::gemm) bw_gemm.insert(s);
    if (k.phase == Phase::backward && (k.cls == KernelClass::softmax)) bw_rowwise.insert(s);
    if (k.phase == Phase::update) acc.insert(std::to_string(k.cols));
  }
  std::multiset<std::string> want_fw;
  for (const auto& s : want.fw)
    if (s.rfind("MEM", 0) != 0) want_fw.insert(s);
  CHECK_MESSAGE(fw == want_fw, "ours:" << show(fw) << "\ntraced:" << show(want_fw));
  CHECK_MESSAGE(bw_gemm == want.bw_gemm, "ours:" << show(bw_gemm) << "\ntraced:" << show(want.bw_gemm));
  CHECK_MESSAGE(bw_rowwise == want.bw_rowwise, "ours:" << show(bw_rowwise) << "\ntraced:" << show(want.bw_rowwise));
  // Updates: one per parameter. The trace lists a bias update for the bias-free LM head
  // (50257) and files the position embedding under 'misc' (1024 x 1280 = 1310720).
  CHECK(minus(want.acc, acc) == std::multiset<std::string>{"50257"});
  CHECK(minus(acc, want.acc) == std::multiset<std::string>{"1310720"});
}

TEST_CASE("lowering: --fusion full groups GPT-2's pointwise chains like torch.compile") {
  const KernelList eager = lower_model(config("gpt2_large", 1), 4, 1024, Mode::inference, Fusion::eager);
  const KernelList full = lower_model(config("gpt2_large", 1), 4, 1024, Mode::inference, Fusion::full);
  CHECK(full.kernels.size() < eager.kernels.size());
  CHECK(test::gemm_flops(full, Phase::forward) == test::gemm_flops(eager, Phase::forward));
  // The eight-node tanh GELU is one kernel (the traced fusion run lists it as one fused op).
  int gelu_chains = 0;
  for (const auto& k : full.kernels)
    if (k.cls == KernelClass::elementwise && k.fused_nodes.size() == 7) ++gelu_chains;
  CHECK(gelu_chains == 1);
  // The masked scores (div by the scale, where with the causal mask) are a pointwise
  // prologue of the softmax kernel, as inductor emits it: one kernel, no separate where.
  int softmax_groups = 0, wheres = 0;
  for (const auto& k : full.kernels) {
    if (k.cls == KernelClass::softmax && k.fused_nodes.size() == 2) ++softmax_groups;
    if (k.op == "where") ++wheres;
  }
  CHECK(softmax_groups == 1);
  CHECK(wheres == 0);
  double eager_bytes = 0, full_bytes = 0;
  for (const auto& k : eager.kernels) eager_bytes += k.bytes;
  for (const auto& k : full.kernels) full_bytes += k.bytes;
  CHECK(full_bytes < eager_bytes);
}

// A two-layer Llama (hidden 256, 8 heads of which 2 KV, MLP 512) bound at batch x seq, its
// shapes inferred; its opset into `opset`.
Graph small_llama_graph(int64_t batch, int64_t seq, int64_t& opset) {
  const ModelConfig c = parse_hf_config(R"({"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
      "num_attention_heads": 8, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000,
      "hidden_act": "silu"})", "llama");
  const LoadedModel m = build_model(c);
  Graph g = m.model.graph;
  DimBindings b;
  b.batch = batch;
  b.seq = seq;
  bind_dims(g, b);
  infer_shapes(g, m.model);
  opset = m.model.opset();
  return g;
}

TEST_CASE("lowering: served LoRA adapters run forward alone, grouped by the adapters the tokens reach") {
  // Of N adapters drawn uniformly by B sequences: N (1 - (1 - 1/N)^B).
  CHECK(lora_adapters_reached(1, 32) == 1);
  CHECK(lora_adapters_reached(8, 1) == 1);
  CHECK(lora_adapters_reached(4, 2) == doctest::Approx(1.75));  // 4 (1 - 9/16)
  CHECK(lora_adapters_reached(1000, 3) == doctest::Approx(2.997).epsilon(1e-3));
  CHECK(lora_adapters_reached(4, 64) == doctest::Approx(4.0).epsilon(1e-6));
  LoweringOptions o;
  const Graph g = small_llama_graph(4, 16, o.opset);
  o.lora.rank = 8;
  o.lora.sequences = 4;
  const KernelList one = lower(g, o);
  int a = 0, other_phase = 0;
  for (const Kernel& k : one.kernels) {
    other_phase += k.phase != Phase::forward;
    if (k.op != "lora_a") continue;
    ++a;
    CHECK(k.gemm.batch == 1);
    CHECK(k.gemm.m == 64);
    CHECK(k.gemm.n == 8);
  }
  CHECK(a == 14);
  CHECK(other_phase == 0);
  // Four adapters for four sequences: about 2.7 reached (rounded to 3), each group a third of
  // the tokens, each reading its adapter's A.
  o.lora.adapters = 4;
  const KernelList four = lower(g, o);
  for (const Kernel& k : four.kernels) {
    if (k.op != "lora_a") continue;
    CHECK(k.gemm.batch == 3);
    CHECK(k.gemm.m == 22);  // ceil(64 / 3)
    CHECK(k.gemm.batched);
    CHECK(k.note.find("over 3 of 4 adapters") != std::string::npos);
  }
}

TEST_CASE("lowering: LoRA freezes the model and trains rank-r adapters beside its linear layers") {
  // A two-layer Llama: seven linear layers a layer (q, k, v, o, gate, up, down) and the head.
  LoweringOptions o;
  const Graph g = small_llama_graph(2, 64, o.opset);
  o.mode = Mode::training;
  o.optimizer = Optimizer::adam;
  const KernelList full = lower(g, o);
  o.lora.rank = 8;
  const KernelList lora = lower(g, o);
  const int64_t tokens = 2 * 64, r = 8;
  // Every linear layer's weight but the head's (dims: q 256->256, k and v 256->64, o 256->256,
  // gate and up 256->512, down 512->256): A [in x r] and B [r x out], updated and nothing else.
  const int64_t per_layer = r * ((256 + 256) + 2 * (256 + 64) + (256 + 256) + 2 * (256 + 512) + (512 + 256));
  double trained = 0;
  int updates = 0;
  for (const Kernel& k : lora.kernels)
    if (k.phase == Phase::update) {
      trained += double(k.cols);
      ++updates;
      CHECK(k.weight.find(".lora_") != std::string::npos);
    }
  CHECK(updates == 2 * 7 * 2);
  CHECK(trained == doctest::Approx(double(2 * per_layer)));
  // Forward: two adapter GEMMs, a scale and an add per adapted layer, the base kernels as they were.
  int fwd_a = 0, fwd_b = 0, bwd_lora = 0, first_dx = 0;
  for (const Kernel& k : lora.kernels) {
    if (k.phase == Phase::forward && k.op == "lora_a") {
      ++fwd_a;
      CHECK(k.gemm.m == tokens);
      CHECK(k.gemm.n == r);
    }
    if (k.phase == Phase::forward && k.op == "lora_b") ++fwd_b;
    if (k.phase == Phase::backward && (k.op == "lora_a" || k.op == "lora_b")) ++bwd_lora;
    if (k.phase == Phase::backward && k.note.find("grad input through LoRA") != std::string::npos) ++first_dx;
  }
  CHECK(fwd_a == 14);
  CHECK(fwd_b == 14);
  // Backward: dB, the gradient of x A and dA each; the input's share where x needs a gradient
  // (not the first layer's q, k and v, which read the frozen embedding's output).
  CHECK(first_dx == 14 - 3);
  CHECK(bwd_lora == 3 * 14 + first_dx);
  // No gradient of a frozen weight: the base layers' backward GEMMs are their input gradients
  // alone, so the step has fewer GEMM FLOPs than full fine-tuning's, and its forward more.
  CHECK(test::gemm_flops(lora, Phase::backward) < test::gemm_flops(full, Phase::backward));
  CHECK(test::gemm_flops(lora, Phase::forward) > test::gemm_flops(full, Phase::forward));
  for (const Kernel& k : lora.kernels) CHECK(k.note.find("grad weight") == std::string::npos);
  // Names: q_proj and v_proj alone (PEFT's default for Llama).
  o.lora.targets = "q_proj|v_proj";
  const KernelList qv = lower(g, o);
  int qv_updates = 0;
  for (const Kernel& k : qv.kernels) qv_updates += k.phase == Phase::update;
  CHECK(qv_updates == 2 * 2 * 2);
  // QLoRA: every linear layer's weight but the head's in NF4, whatever the adapters' targets,
  // dequantized before its forward GEMM and before its input's gradient where x needs one.
  o.lora.nf4_base = true;
  const KernelList q = lower(g, o);
  int fwd_dq = 0, bwd_dq = 0;
  for (const Kernel& k : q.kernels) {
    if (k.op != kNf4DequantizeOp) continue;
    (k.phase == Phase::forward ? fwd_dq : bwd_dq) += 1;
    CHECK(k.bytes == doctest::Approx(double(k.rows) * double(k.cols) * (kNf4BitsPerParameter / 8 + 4)));
  }
  CHECK(fwd_dq == 14);
  CHECK(bwd_dq == 14 - 3);  // the first layer's q, k and v read the embedding's output
  CHECK(kNf4BitsPerParameter == doctest::Approx(4.127).epsilon(1e-3));  // QLoRA's 4 + 0.127 bits
  o.lora.nf4_base = false;
  o.lora.targets = "(unclosed";
  CHECK_THROWS_AS(lower(g, o), InputError);
  o.lora.targets = "no_such_weight";
  CHECK_THROWS_AS(lower(g, o), InputError);
}

TEST_CASE("lowering: --sparsity 2:4 marks the linear layers but the head, or those a pattern names") {
  // A two-layer Llama: seven linear layers a layer (q, k, v, o, gate, up, down) and the head.
  LoweringOptions o;
  const Graph g = small_llama_graph(2, 64, o.opset);
  const KernelList dense = lower(g, o);
  o.sparsity.two_four = true;
  const KernelList all = lower(g, o);
  REQUIRE(all.kernels.size() == dense.kernels.size());
  int marked = 0;
  for (size_t i = 0; i < all.kernels.size(); ++i) {
    const Kernel& k = all.kernels[i];
    // The work counts stay the dense GEMM's: the GPU decides whether it runs sparse.
    CHECK(k.flops == dense.kernels[i].flops);
    CHECK(k.bytes == dense.kernels[i].bytes);
    if (!k.sparse_2_4) continue;
    ++marked;
    CHECK(k.cls == KernelClass::gemm);
    CHECK(g.nodes[static_cast<size_t>(k.node)].name.find("lm_head") == std::string::npos);
  }
  CHECK(marked == 2 * 7);
  CHECK(all.sparse_weights.size() == 2 * 7);
  CHECK(dense.sparse_weights.empty());
  o.sparsity.targets = "mlp";
  const KernelList mlp = lower(g, o);
  CHECK(std::count_if(mlp.kernels.begin(), mlp.kernels.end(), [](const Kernel& k) { return k.sparse_2_4; }) == 2 * 3);
  o.sparsity.targets = "no_such_layer";
  CHECK_THROWS_AS(lower(g, o), InputError);
  o.sparsity.targets = "(";
  CHECK_THROWS_AS(lower(g, o), InputError);
  // Serving kernels' GEMMs over concatenated weights (Q, K, V; gate, up): pruned when every
  // member is.
  o.serving_kernels = true;
  o.fusion = Fusion::full;
  o.sparsity.targets = "all";
  const KernelList merged = lower(g, o);
  int merged_marked = 0;
  for (const Kernel& k : merged.kernels) merged_marked += k.sparse_2_4;
  CHECK(merged_marked == 2 * 4);  // qkv, o, gate+up, down
  CHECK(merged.sparse_weights.size() == 2 * 7);
  o.sparsity.targets = "q_proj|o_proj";
  const KernelList partial = lower(g, o);
  int partial_marked = 0;
  for (const Kernel& k : partial.kernels) partial_marked += k.sparse_2_4;
  CHECK(partial_marked == 2);  // o alone: q's GEMM also reads k and v
}

TEST_CASE("lowering: --sparsity auto asks the weights' values, once each, along their reduction, the head's too") {
  LoweringOptions o;
  const Graph g = small_llama_graph(2, 64, o.opset);
  std::map<std::string, int> asked;
  std::set<int> axes;
  o.sparsity.two_four = true;
  o.sparsity.from_weights = true;
  // The MLPs' and the head's weights show the pattern; nothing else does.
  o.sparsity.pruned_values = [&](const std::string& name, int axis) -> std::optional<bool> {
    ++asked[name];
    axes.insert(axis);
    return name.find("mlp") != std::string::npos || name.find("lm_head") != std::string::npos;
  };
  const KernelList k = lower(g, o);
  CHECK(asked.size() == 2 * 7 + 1);
  for (const auto& [name, n] : asked) CHECK(n == 1);
  CHECK(axes == std::set<int>{0});  // MatMul's B [K, N]: down its columns
  CHECK(k.sparse_weights.size() == 2 * 3 + 1);
  CHECK(k.warnings.empty());
  // The serving engine's merged gate-up GEMM: pruned, both members being; merged QKV not.
  o.serving_kernels = true;
  o.fusion = Fusion::full;
  const KernelList merged = lower(g, o);
  CHECK(std::count_if(merged.kernels.begin(), merged.kernels.end(), [](const Kernel& x) { return x.sparse_2_4; }) ==
        2 * 2 + 1);
  // None pruned, some values not in hand: one warning, no error, nothing marked.
  o.serving_kernels = false;
  o.fusion = Fusion::eager;
  o.sparsity.pruned_values = [](const std::string& name, int) -> std::optional<bool> {
    if (name.find("down") != std::string::npos) return std::nullopt;
    return false;
  };
  const KernelList none = lower(g, o);
  CHECK(none.sparse_weights.empty());
  CHECK(std::none_of(none.kernels.begin(), none.kernels.end(), [](const Kernel& x) { return x.sparse_2_4; }));
  REQUIRE(none.warnings.size() == 1);
  CHECK(none.warnings[0].find("no GEMM weight is pruned 2:4 (13 checked, 2 whose values are not in the file") !=
        std::string::npos);
}

TEST_CASE("lowering: --sparsity takes a quantize-dequantize model's INT8 and FP8 weights by their stored initializers") {
  // fc0 reads an FP8 weight, fc1 an INT8 one whose zero point is 3, fc2 (the head) an INT8 one
  // with no zero point; each through DequantizeLinear.
  test::IrGraph b;
  std::string x = b.input("x", {64, 1024});
  const DType stored[] = {DType::f8e4m3fn, DType::i8, DType::i8};
  const int64_t cols[] = {1024, 1024, 64};
  for (int i = 0; i < 3; ++i) {
    const std::string q = b.w("w" + std::to_string(i) + "_q", {1024, cols[i]}, stored[i]);
    std::vector<std::string> dq_in = {q, b.w("w" + std::to_string(i) + "_s", {}, DType::f32)};
    if (i == 1) dq_in.push_back(b.ints("w1_z", {3}));
    const std::string d = b.t("w" + std::to_string(i) + "_d", {1024, cols[i]});
    b.node("DequantizeLinear", dq_in, {d});
    const std::string y = b.t("h" + std::to_string(i), {64, cols[i]});
    b.node("MatMul", {x, d}, {y});
    x = y;
  }
  b.output(x);
  LoweringOptions o;
  o.sparsity.two_four = true;
  const KernelList told = lower(b.g, o);
  CHECK(told.sparse_weights == std::vector<std::string>{"w0_q", "w1_q"});  // the head stays dense
  // auto: every prunable weight asked by its stored name along its reduction, but fc1's, whose
  // stored zeros are no zero weights.
  std::map<std::string, int> asked;
  o.sparsity.from_weights = true;
  o.sparsity.pruned_values = [&](const std::string& name, int axis) -> std::optional<bool> {
    asked[name] += 1 + 10 * axis;
    return true;
  };
  const KernelList found = lower(b.g, o);
  CHECK(asked == std::map<std::string, int>{{"w0_q", 1}, {"w2_q", 1}});
  CHECK(found.sparse_weights == std::vector<std::string>{"w0_q", "w2_q"});
  o.sparsity.pruned_values = [](const std::string&, int) -> std::optional<bool> { return false; };
  const KernelList none = lower(b.g, o);
  // Beside the lowering's note on the DequantizeLinear nodes run as written: one line.
  CHECK(std::count_if(none.warnings.begin(), none.warnings.end(), [](const std::string& w) {
          return w.find("--sparsity auto: no GEMM weight is pruned 2:4 (2 checked, 1 whose values are not in the "
                        "file") == 0;
        }) == 1);
}

TEST_CASE("lowering: --sparsity auto asks the model whether a long per-channel zero point is 0") {
  // A weight of 5,000 output channels with a per-channel zero point: the graph keeps no values
  // of a tensor that long, so whether its stored zeros are zero weights is asked of the model.
  test::IrGraph b;
  const std::string x = b.input("x", {64, 1024});
  const std::string q = b.w("w_q", {1024, 5000}, DType::i8);
  const std::string d = b.t("w_d", {1024, 5000});
  b.node("DequantizeLinear", {q, b.w("w_s", {5000}, DType::f32), b.w("w_z", {5000}, DType::i8)}, {d})
      .attributes["axis"] = test::attr_int(1);
  const std::string y = b.t("y", {64, 5000});
  b.node("MatMul", {x, d}, {y});
  b.output(y);
  LoweringOptions o;
  o.sparsity.two_four = true;
  o.sparsity.from_weights = true;
  std::vector<std::string> asked;
  o.sparsity.pruned_values = [&](const std::string& name, int) -> std::optional<bool> {
    asked.push_back(name);
    return true;
  };
  // Not asked: the weight's values are not read, and the warning counts it.
  const KernelList unknown = lower(b.g, o);
  CHECK(asked.empty());
  CHECK(unknown.sparse_weights.empty());
  using Answer = std::optional<bool>;
  for (const Answer zero : {Answer(true), Answer(false), Answer()}) {
    CAPTURE(zero.has_value());
    asked.clear();
    std::vector<std::string> zp_asked;
    o.sparsity.zero_values = [&](const std::string& name) {
      zp_asked.push_back(name);
      return zero;
    };
    const KernelList k = lower(b.g, o);
    CHECK(zp_asked == std::vector<std::string>{"w_z"});
    CHECK(asked == (zero == true ? std::vector<std::string>{"w_q"} : std::vector<std::string>{}));
    CHECK(k.sparse_weights == asked);
  }
}
