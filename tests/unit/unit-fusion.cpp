// unit-fusion.cpp - kernel grouping: --fusion none | eager | full on the decomposed patterns
// ONNX exporters emit (LayerNorm, GELU, SiLU, addmm, strided transposes, pointwise chains).
#include <doctest/doctest.h>

#include "lowering_graph.h"
#include "neusight/lowering.h"

using namespace neusight;
using test::IrGraph;
using test::lower_with;
using test::of_class;

namespace {

// x [rows, cols] -> the ReduceMean-Sub-Pow-ReduceMean-Add-Sqrt-Div-Mul-Add chain.
void decomposed_layernorm(IrGraph& b, const std::string& x, int64_t rows, int64_t cols, const std::string& y) {
  auto t = [&](const std::string& n) { return b.t(n, {rows, cols}); };
  auto r = [&](const std::string& n) { return b.t(n, {rows, 1}); };
  Node& m1 = b.node("ReduceMean", {x}, {r("mean")});
  m1.attributes["axes"] = test::attr_ints({-1});
  b.node("Sub", {x, "mean"}, {t("d")});
  b.node("Pow", {"d", b.w("two", {1})}, {t("sq")});
  Node& m2 = b.node("ReduceMean", {"sq"}, {r("var")});
  m2.attributes["axes"] = test::attr_ints({-1});
  b.node("Add", {"var", b.w("eps", {1})}, {r("ve")});
  b.node("Sqrt", {"ve"}, {r("std")});
  b.node("Div", {"d", "std"}, {t("norm")});
  b.node("Mul", {"norm", b.w("gamma", {cols})}, {t("scaled")});
  b.node("Add", {"scaled", b.w("beta", {cols})}, {b.t(y, {rows, cols})});
}

// x*0.5*(1+erf(x/sqrt2)) as torch.onnx exports nn.GELU.
void erf_gelu(IrGraph& b, const std::string& x, std::vector<int64_t> dims, const std::string& y) {
  b.node("Div", {x, b.w("sqrt2", {1})}, {b.t("g_div", dims)});
  b.node("Erf", {"g_div"}, {b.t("g_erf", dims)});
  b.node("Add", {"g_erf", b.w("one", {1})}, {b.t("g_add", dims)});
  b.node("Mul", {x, "g_add"}, {b.t("g_mul", dims)});
  b.node("Mul", {"g_mul", b.w("half", {1})}, {b.t(y, dims)});
}

// HF gelu_new: 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))), eight nodes.
void tanh_gelu(IrGraph& b, const std::string& x, std::vector<int64_t> dims, const std::string& y) {
  b.node("Mul", {x, b.w("c_half", {1})}, {b.t("m0", dims)});
  b.node("Pow", {x, b.w("c_three", {1})}, {b.t("pw", dims)});
  b.node("Mul", {"pw", b.w("c_coef", {1})}, {b.t("m1", dims)});
  b.node("Add", {x, "m1"}, {b.t("a0", dims)});
  b.node("Mul", {"a0", b.w("c_s2pi", {1})}, {b.t("m2", dims)});
  b.node("Tanh", {"m2"}, {b.t("th", dims)});
  b.node("Add", {"th", b.w("c_one", {1})}, {b.t("a1", dims)});
  b.node("Mul", {"m0", "a1"}, {b.t(y, dims)});
}

}  // namespace

TEST_CASE("fusion: decomposed LayerNorm is one layernorm kernel in eager, nine in none") {
  IrGraph b;
  b.input("x", {4096, 1280});
  decomposed_layernorm(b, "x", 4096, 1280, "y");
  b.output("y");
  const KernelList none = lower_with(b.g, Fusion::none);
  CHECK(none.kernels.size() == 9);
  const KernelList eager = lower_with(b.g, Fusion::eager);
  REQUIRE(eager.kernels.size() == 1);
  const Kernel& k = eager.kernels[0];
  CHECK(k.cls == KernelClass::layernorm);
  CHECK(k.rows == 4096);
  CHECK(k.cols == 1280);
  CHECK(k.flops == 6.0 * 4096 * 1280);
  CHECK(k.fused_nodes.size() == 8);
  // Reads x, gamma, beta and the two scalars; writes y.
  CHECK(k.bytes == doctest::Approx((2.0 * 4096 * 1280 + 2 * 1280 + 2) * 4));
  for (size_t i = 0; i + 1 < b.g.nodes.size(); ++i) CHECK(eager.fused_into[i] == 8);
}

TEST_CASE("fusion: a LayerNorm chain whose intermediate is read elsewhere is not fused") {
  IrGraph b;
  b.input("x", {64, 32});
  decomposed_layernorm(b, "x", 64, 32, "y");
  b.node("Relu", {"d"}, {b.t("leak", {64, 32})});  // the centred value escapes
  const KernelList eager = lower_with(b.g, Fusion::eager);
  CHECK(of_class(eager, KernelClass::layernorm).empty());
  CHECK(eager.kernels.size() == 10);
}

TEST_CASE("fusion: exact-erf GELU is one kernel in eager, the tanh form stays eight (as traced)") {
  IrGraph b;
  b.input("x", {4096, 5120});
  erf_gelu(b, "x", {4096, 5120}, "g");
  tanh_gelu(b, "g", {4096, 5120}, "y");
  const KernelList eager = lower_with(b.g, Fusion::eager);
  REQUIRE(eager.kernels.size() == 1 + 8);
  CHECK(eager.kernels[0].op == "gelu");
  CHECK(eager.kernels[0].cls == KernelClass::elementwise);
  CHECK(eager.kernels[0].inputs == 1);
  CHECK(eager.kernels[0].bytes == doctest::Approx((2.0 * 4096 * 5120 + 3) * 4));
  const KernelList none = lower_with(b.g, Fusion::none);
  CHECK(none.kernels.size() == 5 + 8);
  // full: both chains are pointwise, one kernel altogether.
  const KernelList full = lower_with(b.g, Fusion::full);
  REQUIRE(full.kernels.size() == 1);
  CHECK(full.kernels[0].op == "fused");
  CHECK(full.kernels[0].bytes == doctest::Approx((2.0 * 4096 * 5120 + 3 + 5) * 4));
  CHECK(full.kernels[0].flops == doctest::Approx((5 + 8) * 4096.0 * 5120));  // one op per fused node
}

TEST_CASE("fusion: SiLU (x * sigmoid(x)) is one eager kernel") {
  IrGraph b;
  b.input("x", {8, 4096});
  b.node("Sigmoid", {"x"}, {b.t("s", {8, 4096})});
  b.node("Mul", {"x", "s"}, {b.t("y", {8, 4096})});
  const KernelList eager = lower_with(b.g, Fusion::eager);
  REQUIRE(eager.kernels.size() == 1);
  CHECK(eager.kernels[0].op == "silu");
  CHECK(lower_with(b.g, Fusion::none).kernels.size() == 2);
}

TEST_CASE("fusion: MatMul + bias Add is one GEMM with a bias epilogue (addmm)") {
  IrGraph b;
  b.input("x", {4, 1024, 1280});
  b.node("MatMul", {"x", b.w("w", {1280, 3840})}, {b.t("h", {4, 1024, 3840})});
  b.node("Add", {"h", b.w("bias", {3840})}, {b.t("y", {4, 1024, 3840})});
  const KernelList none = lower_with(b.g, Fusion::none);
  CHECK(none.kernels.size() == 2);
  const KernelList eager = lower_with(b.g, Fusion::eager);
  REQUIRE(eager.kernels.size() == 1);
  const Kernel& k = eager.kernels[0];
  CHECK(k.cls == KernelClass::gemm);
  CHECK(k.epilogue == "bias");
  CHECK(k.node == 0);
  CHECK(k.fused_nodes == std::vector<int>{1});
  CHECK(k.flops == 2.0 * 4096 * 3840 * 1280);
  CHECK(k.bytes == (4096.0 * 1280 + 1280.0 * 3840 + 4096.0 * 3840 + 3840) * 4);
  CHECK(eager.fused_into[1] == 0);
}

TEST_CASE("fusion: a Transpose read only by GEMMs is a strided view in eager, a copy in none") {
  IrGraph b;
  b.input("q", {2, 8, 128, 64});
  b.input("k", {2, 8, 128, 64});
  Node& t = b.node("Transpose", {"k"}, {b.t("kT", {2, 8, 64, 128})});
  t.attributes["perm"] = test::attr_ints({0, 1, 3, 2});
  b.node("MatMul", {"q", "kT"}, {b.t("s", {2, 8, 128, 128})});
  const KernelList eager = lower_with(b.g, Fusion::eager);
  REQUIRE(eager.kernels.size() == 1);
  CHECK(eager.kernels[0].trans_b);
  CHECK(eager.free_reason[0] == FreeReason::strided_view_read_by_gemm);
  const KernelList none = lower_with(b.g, Fusion::none);
  REQUIRE(none.kernels.size() == 2);
  CHECK(none.kernels[0].cls == KernelClass::memory);
}

TEST_CASE("fusion: an Expand read as a gather's index is a broadcast view in eager (torch.gather, DeBERTa)") {
  IrGraph b;
  b.input("att", {2, 12, 128, 256});
  b.input("pos", {128, 128}, DType::i64);
  b.node("Expand", {"pos", b.ints("shape", {2, 12, 128, 128})}, {b.t("idx", {2, 12, 128, 128}, DType::i64)});
  Node& g = b.node("GatherElements", {"att", "idx"}, {b.t("y", {2, 12, 128, 128})});
  g.attributes["axis"] = test::attr_int(-1);
  const KernelList eager = lower_with(b.g, Fusion::eager);
  REQUIRE(eager.kernels.size() == 1);
  CHECK(eager.kernels[0].op == "gather");
  CHECK(eager.free_reason[0] == FreeReason::broadcast_view);
  // Gathered as data (not the index), the expanded tensor is materialized.
  IrGraph c;
  c.input("pos", {128, 128});
  c.input("i", {2, 12, 128, 1}, DType::i64);
  c.node("Expand", {"pos", c.ints("shape", {2, 12, 128, 128})}, {c.t("big", {2, 12, 128, 128})});
  Node& h = c.node("GatherElements", {"big", "i"}, {c.t("y", {2, 12, 128, 1})});
  h.attributes["axis"] = test::attr_int(-1);
  CHECK(lower_with(c.g, Fusion::eager).kernels.size() == 2);
}

TEST_CASE("fusion: `a += b.permute(...)` reads the permuted operand through its strides in eager") {
  // T5's relative position bias: stored [1, q, k, heads], added to [1, heads, q, k] scores.
  const int64_t h = 32, s = 512;
  const double n = double(h) * s * s;
  auto build = [&](bool permuted_first) {
    IrGraph b;
    b.input("scores", {1, h, s, s});
    b.input("bias", {1, s, s, h});
    Node& t = b.node("Transpose", {"bias"}, {b.t("bias_view", {1, h, s, s})});
    t.attributes["perm"] = test::attr_ints({0, 3, 1, 2});
    if (permuted_first) b.node("Add", {"bias_view", "scores"}, {b.t("y", {1, h, s, s})});
    else b.node("Add", {"scores", "bias_view"}, {b.t("y", {1, h, s, s})});
    b.output("y");
    return b;
  };
  const IrGraph b = build(false);
  const KernelList eager = lower_with(b.g, Fusion::eager);
  CHECK(eager.free_reason[0] == FreeReason::strided_view_read_by_elementwise);
  REQUIRE(eager.kernels.size() == 1);
  // Consecutive keys lie `heads` floats (128 bytes) apart: one 32-byte sector per element.
  // The 8 heads sharing a sector are read s * s output elements apart (the scores walk heads
  // outermost), after s * s sectors of the bias: from DRAM again (a sector per element) on
  // a GPU whose L2 holds less (tiling: on_gpu).
  const Kernel& k = eager.kernels[0];
  CHECK(k.bytes == n * 12);
  REQUIRE(k.l2_reuse.size() == 1);
  CHECK(k.l2_reuse[0].operand == 1);
  CHECK(k.l2_reuse[0].footprint == double(s) * s * 32);
  CHECK(k.l2_reuse[0].miss_bytes == n * (32 - 4));
  // No pass: the copy runs, then a contiguous add.
  const KernelList none = lower_with(b.g, Fusion::none);
  REQUIRE(none.kernels.size() == 2);
  CHECK(none.kernels[0].cls == KernelClass::memory);
  CHECK(none.kernels[1].bytes == n * 12);
  CHECK(none.kernels[1].l2_reuse.empty());
  // A permuted first operand fixes the output's layout instead: not a strided read of it.
  const IrGraph f = build(true);
  const KernelList first = lower_with(f.g, Fusion::eager);
  CHECK(first.free_reason[0] == FreeReason::none);
  CHECK(first.kernels.size() == 2);
}

TEST_CASE("lowering: a broadcast operand is read again from DRAM per repeat when its reused data exceeds the L2") {
  // OPT's `attn_weights + causal_mask`: scores [b, heads, q, k] plus a mask [b, 1, q, k]
  // broadcast over the heads: each mask element is used again one head later, after the
  // mask's q * k elements of that batch entry and one head's scores read and sums written,
  // which pass through the L2 as well.
  const int64_t b = 2, h = 32, s = 2048;
  IrGraph g;
  g.input("scores", {b, h, s, s});
  g.input("mask", {b, 1, s, s});
  g.node("Add", {"scores", "mask"}, {g.t("y", {b, h, s, s})});
  g.output("y");
  const KernelList eager = lower_with(g.g, Fusion::eager);
  REQUIRE(eager.kernels.size() == 1);
  const Kernel& k = eager.kernels[0];
  const double n = double(b) * h * s * s, m = double(b) * s * s;
  CHECK(k.bytes == (n + m + n) * 4);  // every element once
  REQUIRE(k.l2_reuse.size() == 1);
  CHECK(k.l2_reuse[0].operand == 1);
  CHECK(k.l2_reuse[0].footprint == double(s) * s * 4 * 3);  // 50.3 MB: beyond the A100's 40 MB
  CHECK(k.l2_reuse[0].miss_bytes == m * 4 * (h - 1));   // read once per head instead
  // Two broadcast dims ([b, 1, 1, k], BERT's mask): per dim the data inside it with the
  // streams of the output elements inside it, and a miss at the inner dim also misses at the
  // outer one (its footprint is larger).
  IrGraph g2;
  g2.input("scores", {b, h, 8, s});
  g2.input("mask", {b, 1, 1, s});
  g2.node("Add", {"scores", "mask"}, {g2.t("y", {b, h, 8, s})});
  g2.output("y");
  const KernelList e2 = lower_with(g2.g, Fusion::eager);
  REQUIRE(e2.kernels.size() == 1);
  const auto& r = e2.kernels[0].l2_reuse;
  REQUIRE(r.size() == 2);
  CHECK(r[0].footprint == s * 4.0 + s * 8.0);  // over the 8 rows: one row of scores and sums
  CHECK(r[0].miss_bytes == double(b) * s * 4 * (8 * h - 1));
  CHECK(r[1].footprint == s * 4.0 + 8 * s * 8.0);  // over the heads: one head's 8 rows
  CHECK(r[1].miss_bytes == double(b) * s * 4 * (h - 1));
  // Where reads its broadcast condition the same way (GPT-2's causal mask [1, 1, s, s], bool,
  // used again for every batch entry and head).
  IrGraph g4;
  g4.input("cond", {1, 1, s, s}, DType::boolean);
  g4.input("x", {b, h, s, s});
  g4.node("Where", {"cond", "x", g4.w("neg", {1})}, {g4.t("y", {b, h, s, s})});
  g4.output("y");
  const KernelList e4 = lower_with(g4.g, Fusion::eager);
  REQUIRE(e4.kernels.size() == 1);
  const auto& w = e4.kernels[0].l2_reuse;
  REQUIRE(w.size() == 2);
  CHECK(w[0].operand == 0);
  CHECK(w[0].footprint == double(s) * s * (1 + 8));  // the mask's byte, x and y: 37.7 MB
  CHECK(w[0].miss_bytes == double(s) * s * (h * b - 1));
  CHECK(w[1].miss_bytes == double(s) * s * (b - 1));
  // Same-shape operands and scalars carry none.
  IrGraph g3;
  g3.input("x", {4, 8});
  g3.node("Mul", {"x", g3.w("scale", {1})}, {g3.t("y", {4, 8})});
  g3.output("y");
  CHECK(lower_with(g3.g, Fusion::eager).kernels.at(0).l2_reuse.empty());
}

TEST_CASE("fusion: full fuses a pointwise prologue into the softmax (BERT's div+add+softmax)") {
  IrGraph b;
  const std::vector<int64_t> s = {8, 16, 512, 512};
  b.input("scores", s);
  b.input("mask", {8, 1, 1, 512});
  b.node("Div", {"scores", b.w("scale", {1})}, {b.t("d", s)});
  b.node("Add", {"d", "mask"}, {b.t("a", s)});
  b.node("Softmax", {"a"}, {b.t("p", s)});
  b.node("MatMul", {"p", b.t("v", {8, 16, 512, 64})}, {b.t("o", {8, 16, 512, 64})});
  const KernelList eager = lower_with(b.g, Fusion::eager);
  CHECK(eager.kernels.size() == 4);
  const KernelList full = lower_with(b.g, Fusion::full);
  REQUIRE(full.kernels.size() == 2);
  const Kernel& k = full.kernels[0];
  CHECK(k.cls == KernelClass::softmax);
  CHECK(k.rows == 65536);
  CHECK(k.cols == 512);
  const double e = 8.0 * 16 * 512 * 512;
  CHECK(k.flops == doctest::Approx(e + e + 5 * e));
  CHECK(k.bytes == doctest::Approx((e + 1 + 8 * 512 + e) * 4));  // scores, scale, mask in; p out
  CHECK(k.node == 2);
  CHECK(full.kernels[1].cls == KernelClass::gemm);
}

TEST_CASE("fusion: full does not fuse a pointwise op whose result is also read elsewhere") {
  IrGraph b;
  b.input("x", {1024, 1024});
  b.node("Relu", {"x"}, {b.t("r", {1024, 1024})});
  b.node("Exp", {"r"}, {b.t("e", {1024, 1024})});
  b.node("MatMul", {"r", b.w("w", {1024, 1024})}, {b.t("y", {1024, 1024})});
  const KernelList full = lower_with(b.g, Fusion::full);
  CHECK(full.kernels.size() == 3);
}

TEST_CASE("fusion: constant subgraphs fold in inference (every fusion mode), not in training") {
  IrGraph b;
  b.input("x", {16, 64});
  Node& t = b.node("Transpose", {b.w("w", {32, 64})}, {b.t("wT", {64, 32})});
  t.attributes["perm"] = test::attr_ints({1, 0});
  b.node("Relu", {"wT"}, {b.t("wr", {64, 32})});
  b.node("MatMul", {"x", "wr"}, {b.t("y", {16, 32})});
  for (Fusion f : {Fusion::none, Fusion::eager}) {
    const KernelList kl = lower_with(b.g, f);
    REQUIRE(kl.kernels.size() == 1);
    CHECK(kl.free_reason[1] == FreeReason::constant_folded);
  }
  const KernelList full = lower_with(b.g, Fusion::full);
  REQUIRE(full.kernels.size() == 1);
  CHECK(full.free_reason[0] == FreeReason::constant_folded);
  CHECK(full.free_reason[1] == FreeReason::constant_folded);
  // Training keeps them (the weight's gradient flows through).
  CHECK(of_class(lower_with(b.g, Fusion::full, Mode::training), KernelClass::gemm).size() == 1);
  CHECK(lower_with(b.g, Fusion::full, Mode::training).kernels.size() > 3);
}

TEST_CASE("fusion: permute then transpose before a matmul are both views (PyTorch k.permute().transpose())") {
  auto build = [](int64_t batch) {
    IrGraph b;
    b.input("k", {batch, 128, 8, 64});
    Node& t1 = b.node("Transpose", {"k"}, {b.t("kh", {batch, 8, 128, 64})});
    t1.attributes["perm"] = test::attr_ints({0, 2, 1, 3});
    Node& t2 = b.node("Transpose", {"kh"}, {b.t("kT", {batch, 8, 64, 128})});
    t2.attributes["perm"] = test::attr_ints({0, 1, 3, 2});
    b.input("q", {batch, 8, 128, 64});
    b.node("MatMul", {"q", "kT"}, {b.t("s", {batch, 8, 128, 128})});
    // The merged heads are read by a Reshape: PyTorch's .contiguous() copy.
    Node& t3 = b.node("Transpose", {"s"}, {b.t("sm", {batch, 128, 8, 128})});
    t3.attributes["perm"] = test::attr_ints({0, 2, 1, 3});
    b.node("Reshape", {"sm", b.ints("shape", {batch, 128, 1024})}, {b.t("merged", {batch, 128, 1024})});
    return b;
  };
  // Batch 1: the size-1 batch dim folds freely, the bmm reads k^T through its strides.
  const IrGraph one = build(1);
  const KernelList e1 = lower_with(one.g, Fusion::eager);
  REQUIRE(e1.kernels.size() == 2);
  CHECK(e1.kernels[0].cls == KernelClass::gemm);
  CHECK(e1.kernels[0].trans_b);
  CHECK(e1.kernels[1].op == "transpose");
  CHECK(e1.free_reason[0] == FreeReason::strided_view_read_by_gemm);
  CHECK(e1.free_reason[1] == FreeReason::strided_view_read_by_gemm);
  // Batch 2: torch.matmul folds [2, 8] into 16 with a reshape, and the permuted k's batch
  // strides (128 * 8 * 64, 64) do not nest: a copy of k^T first, on the MatMul node.
  const IrGraph two = build(2);
  const KernelList e2 = lower_with(two.g, Fusion::eager);
  REQUIRE(e2.kernels.size() == 3);
  CHECK(e2.kernels[0].cls == KernelClass::memory);
  CHECK(e2.kernels[0].node == 2);
  CHECK(e2.kernels[0].bytes == 2.0 * 2 * 8 * 64 * 128 * 4);
  CHECK(e2.kernels[1].cls == KernelClass::gemm);
  CHECK(e2.kernels[1].gemm.batch == 16);
  CHECK_FALSE(e2.kernels[1].trans_b);  // reads the contiguous copy
  CHECK(e2.kernels[2].op == "transpose");
  CHECK(e2.free_reason[0] == FreeReason::strided_view_read_by_gemm);
  // q is a graph input (contiguous): no copy. --fusion full (compiled) keeps the views.
  CHECK(lower_with(two.g, Fusion::full).kernels.size() == 2);
}

TEST_CASE("fusion: --fusion full runs a QDQ model's DequantizeLinear inside the GEMM that reads it") {
  // x -> Q -> DQ -> MatMul <- DQ <- int8 W; and a Conv whose int8 weight is dequantized.
  IrGraph b;
  b.input("x", {512, 1024});
  b.node("QuantizeLinear", {"x", b.w("xs", {}), b.w("xz", {}, DType::i8)}, {b.t("xq", {512, 1024}, DType::i8)});
  b.node("DequantizeLinear", {"xq", "xs", "xz"}, {b.t("xd", {512, 1024})});
  b.node("DequantizeLinear", {b.w("wq", {1024, 4096}, DType::i8), b.w("ws", {}), "xz"}, {b.t("wd", {1024, 4096})});
  b.node("MatMul", {"xd", "wd"}, {b.t("y", {512, 4096})});
  b.output("y");
  const KernelList eager = lower_with(b.g, Fusion::eager);
  CHECK(eager.kernels.size() == 4);  // eager runs every Q/DQ as its own kernel
  CHECK(of_class(eager, KernelClass::gemm).at(0).dtype == DType::f32);
  // ... and says what a fusing engine would run, once.
  REQUIRE(eager.warnings.size() == 1);
  CHECK(eager.warnings[0].find("2 DequantizeLinear nodes feed GEMM operands") == 0);
  CHECK(eager.warnings[0].find("--fusion full") != std::string::npos);
  const KernelList full = lower_with(b.g, Fusion::full);
  CHECK(full.warnings.empty());
  CHECK(full.free_reason[1] == FreeReason::dequantize_into_gemm);
  CHECK(full.free_reason[2] == FreeReason::dequantize_into_gemm);
  REQUIRE(full.kernels.size() == 2);  // the QuantizeLinear and one int8 GEMM
  const Kernel g = of_class(full, KernelClass::gemm).at(0);  // a copy: of_class returns a temporary
  CHECK(g.dtype == DType::i8);
  CHECK(g.bytes == doctest::Approx(512.0 * 1024 + 1024.0 * 4096 + 512.0 * 4096 * 4));  // int8 in, fp32 out
  // Training (quantization-aware) keeps the fake-quant kernels and a float GEMM.
  const KernelList qat = lower_with(b.g, Fusion::full, Mode::training);
  CHECK(of_class(qat, KernelClass::elementwise).size() == 2);  // Q+DQ of x fused, DQ of W
  CHECK(of_class(qat, KernelClass::gemm).at(0).dtype == DType::f32);

  // Weight-only: the activations stay float, the weights are read as int8.
  IrGraph w;
  w.input("a", {64, 1024});
  w.node("DequantizeLinear", {w.w("wq", {1024, 4096}, DType::i8), w.w("ws", {})}, {w.t("wd", {1024, 4096})});
  w.node("MatMul", {"a", "wd"}, {w.t("y", {64, 4096})});
  w.output("y");
  const KernelList wo = lower_with(w.g, Fusion::full);
  REQUIRE(wo.kernels.size() == 1);
  CHECK(wo.kernels[0].dtype == DType::f32);
  CHECK(wo.kernels[0].bytes == doctest::Approx(64.0 * 1024 * 4 + 1024.0 * 4096 + 64.0 * 4096 * 4));

  // A DequantizeLinear also read by a non-GEMM node stays a kernel of its own.
  IrGraph s;
  s.input("a", {64, 1024});
  s.node("DequantizeLinear", {s.w("wq", {1024, 1024}, DType::i8), s.w("ws", {})}, {s.t("wd", {1024, 1024})});
  s.node("MatMul", {"a", "wd"}, {s.t("y", {64, 1024})});
  s.node("Add", {"y", "wd"}, {s.t("z", {64, 1024})});
  s.output("z");
  const KernelList sh = lower_with(s.g, Fusion::full);
  CHECK(sh.free_reason[0] != FreeReason::dequantize_into_gemm);
  CHECK(of_class(sh, KernelClass::gemm).at(0).bytes == doctest::Approx((64.0 * 1024 * 2 + 1024.0 * 1024) * 4));
}

TEST_CASE("fusion: an embedding lookup fused with what follows reads the rows it gathers, not the table") {
  // Gemma's scaled embedding: Gather(table [50000, 64], ids [2, 3]) then Mul by a scalar.
  IrGraph b;
  const std::string rows = b.node("Gather", {b.w("table", {50000, 64}), b.t("ids", {2, 3}, DType::i64)},
                                  {b.t("e", {2, 3, 64})}).outputs[0];
  b.node("Mul", {rows, b.w("scale", {1})}, {b.t("y", {2, 3, 64})});
  const KernelList kl = lower_with(b.g, Fusion::full);
  REQUIRE(kl.kernels.size() == 1);
  const Kernel& k = kl.kernels[0];
  CHECK(k.fused_nodes.size() == 1);
  // 6 rows of 64 FP32 read and written, the 6 indices and the scalar: not the 12.8 MB table.
  CHECK(k.bytes == doctest::Approx(2.0 * 6 * 64 * 4 + 6 * 8 + 4));
}

TEST_CASE("fusion: a Slice read only by GEMMs is a view (its leading dimension), a strided one a copy") {
  for (const int64_t step : {1, 2}) {
    IrGraph b;
    const std::string x = b.t("x", {4, 96});
    const std::string s = b.node("Slice", {x, b.ints("st", {0}), b.ints("en", {64}), b.ints("ax", {1}), b.ints("sp", {step})},
                                 {b.t("xs", {4, step == 1 ? 64 : 32})}).outputs[0];
    b.node("MatMul", {s, b.w("w", {step == 1 ? 64 : 32, 16})}, {b.t("y", {4, 16})});
    const KernelList kl = lower_with(b.g, Fusion::eager);
    CHECK(of_class(kl, KernelClass::gemm).size() == 1);
    CHECK(of_class(kl, KernelClass::memory).size() == (step == 1 ? 0u : 1u));
  }
}
