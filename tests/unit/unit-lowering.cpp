// unit-lowering.cpp - nodes to kernels, one test per op family (hand-worked work counts).
#include <doctest/doctest.h>

#include <map>

#include "lowering_graph.h"
#include "neusight/lowering.h"

using namespace neusight;
using test::IrGraph;
using test::lower_with;
using test::of_class;

namespace {

GemmShape only_gemm(const Graph& g, Fusion f = Fusion::eager) {
  const KernelList kl = lower_with(g, f);
  const auto gemms = of_class(kl, KernelClass::gemm);
  REQUIRE(gemms.size() == 1);
  return gemms[0].gemm;
}

void check_shape(const GemmShape& s, int64_t b, int64_t m, int64_t n, int64_t k) {
  CHECK(s.batch == b);
  CHECK(s.m == m);
  CHECK(s.n == n);
  CHECK(s.k == k);
}

}  // namespace

TEST_CASE("lowering: MatMul folds rows into m for a shared weight and broadcasts batch dims") {
  {
    IrGraph b;  // activations [2,3,4,5] x weight [5,6]: one linear layer over 24 rows
    b.node("MatMul", {b.t("a", {2, 3, 4, 5}), b.w("w", {5, 6})}, {b.t("y", {2, 3, 4, 6})});
    const KernelList kl = lower_with(b.g, Fusion::eager);
    REQUIRE(kl.kernels.size() == 1);
    const Kernel& k = kl.kernels[0];
    CHECK(k.op == "linear");
    check_shape(k.gemm, 1, 24, 6, 5);
    CHECK(k.flops == 2.0 * 24 * 6 * 5);
    CHECK(k.bytes == (120 + 30 + 144) * 4.0);
  }
  {
    IrGraph b;  // batched on both sides
    b.node("MatMul", {b.t("a", {2, 3, 4, 5}), b.t("b", {2, 3, 5, 6})}, {b.t("y", {2, 3, 4, 6})});
    check_shape(only_gemm(b.g), 6, 4, 6, 5);
  }
  {
    IrGraph b;  // A [4,5] broadcast against B [3,5,6]
    b.node("MatMul", {b.t("a", {4, 5}), b.t("b", {3, 5, 6})}, {b.t("y", {3, 4, 6})});
    check_shape(only_gemm(b.g), 3, 4, 6, 5);
  }
  {
    IrGraph b;  // [2,1,4,5] x [3,5,6] -> batch 2x3
    b.node("MatMul", {b.t("a", {2, 1, 4, 5}), b.t("b", {3, 5, 6})}, {b.t("y", {2, 3, 4, 6})});
    check_shape(only_gemm(b.g), 6, 4, 6, 5);
  }
  {
    IrGraph b;  // vector x matrix
    b.node("MatMul", {b.t("a", {5}), b.w("w", {5, 6})}, {b.t("y", {6})});
    check_shape(only_gemm(b.g), 1, 1, 6, 5);
  }
}

TEST_CASE("lowering: Gemm honours transA/transB and reads its bias in the epilogue") {
  IrGraph b;
  Node& n = b.node("Gemm", {b.t("a", {64, 32}), b.w("w", {128, 64}), b.w("c", {128})}, {b.t("y", {32, 128})});
  n.attributes["transA"] = test::attr_int(1);
  n.attributes["transB"] = test::attr_int(1);
  const KernelList kl = lower_with(b.g, Fusion::eager);
  REQUIRE(kl.kernels.size() == 1);
  check_shape(kl.kernels[0].gemm, 1, 32, 128, 64);
  CHECK(kl.kernels[0].epilogue == "bias");
  CHECK(kl.kernels[0].trans_a);
  CHECK(kl.kernels[0].trans_b);
  CHECK(kl.kernels[0].flops == 2.0 * 32 * 128 * 64);
}

TEST_CASE("lowering: Conv is an implicit GEMM, grouped per group, depthwise is a memory-bound stencil") {
  {
    IrGraph b;
    b.node("Conv", {b.t("x", {2, 16, 32, 32}), b.w("w", {32, 16, 3, 3})}, {b.t("y", {2, 32, 32, 32})});
    const GemmShape s = only_gemm(b.g);
    check_shape(s, 1, 2 * 32 * 32, 32, 16 * 9);
  }
  {
    IrGraph b;
    Node& n = b.node("Conv", {b.t("x", {2, 16, 32, 32}), b.w("w", {32, 4, 3, 3})}, {b.t("y", {2, 32, 16, 16})});
    n.attributes["group"] = test::attr_int(4);
    const KernelList kl = lower_with(b.g, Fusion::eager);
    REQUIRE(kl.kernels.size() == 1);
    check_shape(kl.kernels[0].gemm, 4, 2 * 16 * 16, 8, 4 * 9);
    CHECK(kl.kernels[0].note == "grouped implicit GEMM");
    // FLOPs of a grouped conv: 2 * N*P*Q * Cout * Cin/group * R*S.
    CHECK(kl.kernels[0].flops == 2.0 * 2 * 256 * 32 * 4 * 9);
  }
  {
    IrGraph b;
    Node& n = b.node("Conv", {b.t("x", {2, 16, 32, 32}), b.w("w", {16, 1, 3, 3})}, {b.t("y", {2, 16, 32, 32})});
    n.attributes["group"] = test::attr_int(16);
    const KernelList kl = lower_with(b.g, Fusion::eager);
    REQUIRE(kl.kernels.size() == 1);
    const Kernel& k = kl.kernels[0];
    CHECK(k.cls == KernelClass::elementwise);
    CHECK(k.op == "depthwise_conv");
    CHECK(k.flops == 2.0 * 2 * 16 * 32 * 32 * 9);
    CHECK(k.bytes == (2.0 * 16 * 1024 * 2 + 16 * 9) * 4);
  }
  {
    IrGraph b;  // transposed conv: M over input pixels
    b.node("ConvTranspose", {b.t("x", {1, 8, 10, 10}), b.w("w", {8, 4, 2, 2})}, {b.t("y", {1, 4, 20, 20})});
    check_shape(only_gemm(b.g), 1, 100, 16, 8);
  }
}

TEST_CASE("lowering: Einsum contractions become (batched) GEMMs") {
  {
    IrGraph b;
    Node& n = b.node("Einsum", {b.t("q", {2, 8, 128, 64}), b.t("k", {2, 8, 256, 64})}, {b.t("s", {2, 8, 128, 256})});
    n.attributes["equation"] = test::attr_str("bhqd,bhkd->bhqk");
    check_shape(only_gemm(b.g), 16, 128, 256, 64);
  }
  {
    IrGraph b;
    Node& n = b.node("Einsum", {b.t("x", {4, 10, 32}), b.w("w", {32, 48})}, {b.t("y", {4, 10, 48})});
    n.attributes["equation"] = test::attr_str("bsd,df->bsf");
    check_shape(only_gemm(b.g), 1, 40, 48, 32);
  }
  {
    IrGraph b;  // more than two operands: kept and flagged, never dropped
    Node& n = b.node("Einsum", {b.t("a", {4, 4}), b.t("b", {4, 4}), b.t("c", {4, 4})}, {b.t("y", {4, 4})});
    n.attributes["equation"] = test::attr_str("ij,jk,kl->il");
    const KernelList kl = lower_with(b.g, Fusion::eager);
    REQUIRE(kl.kernels.size() == 1);
    CHECK(kl.kernels[0].cls == KernelClass::unknown);
    CHECK(kl.unknown_ops == std::vector<std::string>{"Einsum"});
  }
}

TEST_CASE("lowering: elementwise ops count broadcast operands and scalars") {
  IrGraph b;
  b.node("Add", {b.t("x", {4, 1024, 1280}), b.w("bias", {1280})}, {b.t("y", {4, 1024, 1280})});
  b.node("Mul", {"y", b.w("half", {1})}, {b.t("z", {4, 1024, 1280})});
  b.node("Gelu", {"z"}, {b.t("g", {4, 1024, 1280})});
  const KernelList kl = lower_with(b.g, Fusion::none);
  REQUIRE(kl.kernels.size() == 3);
  const int64_t e = 4 * 1024 * 1280;
  const Kernel& add = kl.kernels[0];
  CHECK(add.rows == 4096);
  CHECK(add.cols == 1280);
  CHECK(add.inputs == 2);
  CHECK(add.operand_elems == std::vector<int64_t>{e, 1280});
  CHECK(add.bytes == (2.0 * e + 1280) * 4);
  CHECK(kl.kernels[1].inputs == 1);  // tensor x scalar ("mulu" in the dataset)
  CHECK(kl.kernels[2].op == "gelu");
  CHECK(kl.kernels[2].flops == double(e));
}

TEST_CASE("lowering: softmax axis rules, layernorm, reductions and pooling") {
  IrGraph b;
  Node& s13 = b.node("Softmax", {b.t("x", {2, 3, 8})}, {b.t("y", {2, 3, 8})});
  s13.attributes["axis"] = test::attr_int(1);
  b.node("LayerNormalization", {"x", b.w("g", {8}), b.w("bt", {8})}, {b.t("ln", {2, 3, 8})});
  Node& r = b.node("ReduceMean", {"x"}, {b.t("m", {2, 3, 1})});
  r.attributes["axes"] = test::attr_ints({-1});
  Node& p = b.node("MaxPool", {b.t("img", {1, 4, 8, 8})}, {b.t("pool", {1, 4, 4, 4})});
  p.attributes["kernel_shape"] = test::attr_ints({2, 2});
  LoweringOptions o;
  o.opset = 17;
  KernelList kl = lower(b.g, o);
  REQUIRE(kl.kernels.size() == 4);
  CHECK(kl.kernels[0].cls == KernelClass::softmax);
  CHECK(kl.kernels[0].cols == 3);  // opset >= 13: along one axis
  CHECK(kl.kernels[0].rows == 16);
  CHECK(kl.kernels[1].cls == KernelClass::layernorm);
  CHECK(kl.kernels[1].rows == 6);
  CHECK(kl.kernels[1].cols == 8);
  CHECK(kl.kernels[1].flops == 6.0 * 48);
  CHECK(kl.kernels[2].cls == KernelClass::reduce);
  CHECK(kl.kernels[2].rows == 6);
  CHECK(kl.kernels[2].cols == 8);
  CHECK(kl.kernels[3].cls == KernelClass::reduce);
  CHECK(kl.kernels[3].cols == 4);
  CHECK(kl.kernels[3].flops == 64.0 * 4);
  o.opset = 11;  // opset < 13: flattened from the axis on
  kl = lower(b.g, o);
  CHECK(kl.kernels[0].cols == 24);
  CHECK(kl.kernels[0].rows == 2);
}

TEST_CASE("lowering: com.microsoft EmbedLayerNormalization is one fused gather + add + layernorm kernel") {
  IrGraph b;
  const std::string ids = b.input("ids", {4, 128}, DType::i32);
  const std::string seg = b.input("seg", {4, 128}, DType::i32);
  b.node("EmbedLayerNormalization",
         {ids, seg, b.w("word", {30522, 768}), b.w("pos", {512, 768}), b.w("segt", {2, 768}), b.w("gamma", {768}),
          b.w("beta", {768})},
         {b.t("y", {4, 128, 768}), b.t("mask_index", {4}, DType::i32)}, "com.microsoft");
  const KernelList kl = lower(b.g, LoweringOptions{});
  CHECK(kl.unknown_ops.empty());
  REQUIRE(kl.kernels.size() == 1);
  const Kernel& k = kl.kernels[0];
  CHECK(k.cls == KernelClass::layernorm);
  CHECK(k.rows == 512);
  CHECK(k.cols == 768);
  const double e = 512.0 * 768;
  // Three gathered rows per token (never the whole 30522 x 768 table), ids, gamma/beta, the
  // output and the mask index.
  CHECK(k.bytes == doctest::Approx(3 * e * 4 + 2 * 512 * 4 + 2 * 768 * 4 + e * 4 + 4 * 4));
  CHECK(k.bytes < 30522.0 * 768 * 4);
  CHECK(k.flops == doctest::Approx(8 * e));
  // Without segment ids: two tables.
  IrGraph b2;
  b2.node("EmbedLayerNormalization",
          {b2.input("ids", {4, 128}, DType::i32), "", b2.w("word", {30522, 768}), b2.w("pos", {512, 768}), "",
           b2.w("gamma", {768}), b2.w("beta", {768})},
          {b2.t("y", {4, 128, 768})}, "com.microsoft");
  const KernelList kl2 = lower(b2.g, LoweringOptions{});
  REQUIRE(kl2.kernels.size() == 1);
  CHECK(kl2.kernels[0].bytes == doctest::Approx(2 * e * 4 + 512 * 4 + 2 * 768 * 4 + e * 4));
}

TEST_CASE("lowering: memory ops move bytes, same-dtype casts and views are free") {
  IrGraph b;
  const std::string ids = b.input("ids", {4, 16}, DType::i64);
  b.node("Gather", {b.w("table", {1000, 64}), ids}, {b.t("emb", {4, 16, 64})});
  Node& tr = b.node("Transpose", {"emb"}, {b.t("embT", {4, 64, 16})});
  tr.attributes["perm"] = test::attr_ints({0, 2, 1});
  b.node("Relu", {"embT"}, {b.t("r", {4, 64, 16})});
  b.node("Cast", {"r"}, {b.t("c", {4, 64, 16})});
  b.node("Reshape", {"c", b.ints("shape", {4, 1024})}, {b.t("flat", {4, 1024})});
  b.node("Where", {b.t("mask", {1, 1024}, DType::boolean), "flat", b.w("neg", {1})}, {b.t("wh", {4, 1024})});
  const KernelList kl = lower_with(b.g, Fusion::eager);
  REQUIRE(kl.kernels.size() == 4);  // gather, transpose, relu, where
  const Kernel& g = kl.kernels[0];
  CHECK(g.cls == KernelClass::memory);
  CHECK(g.op == "embedding");
  CHECK(g.bytes == 4096 * 4.0 * 2 + 64 * 8.0);  // rows read + written, indices read
  CHECK(kl.kernels[1].op == "transpose");  // a Transpose read by an elementwise op is a copy
  CHECK(kl.kernels[1].bytes == 4096 * 4.0 * 2);
  CHECK(kl.kernels[3].op == "where");
  CHECK(kl.kernels[3].bytes == 1024 * 1.0 + 4096 * 4.0 + 4.0 + 4096 * 4.0);
  CHECK(kl.free_reason[3] == FreeReason::none);  // the cast: no kernel, not free by plan either (a no-op)
  CHECK(kl.free_reason[4] == FreeReason::view);
}

TEST_CASE("lowering: shape-only subgraphs run on the host and cost nothing") {
  IrGraph b;
  b.input("x", {4, 128, 64});
  b.node("Shape", {"x"}, {b.ints("shape", {4, 128, 64}, false)});
  b.node("Gather", {"shape", b.ints("i0", {0})}, {b.ints("batch", {4}, false)});
  b.node("Concat", {"batch", b.ints("minus1", {-1})}, {b.ints("target", {4, -1}, false)});
  b.node("Reshape", {"x", "target"}, {b.t("y", {4, 8192})});
  // Tiny integer arithmetic whose values are not known is host work too.
  b.node("Add", {b.t("n", {1}, DType::i64), b.t("one", {1}, DType::i64)}, {b.t("n1", {1}, DType::i64)});
  for (auto mode : {Fusion::none, Fusion::eager, Fusion::full}) {
    const KernelList kl = lower_with(b.g, mode);
    CHECK(kl.kernels.empty());
    CHECK(kl.free_reason[1] == FreeReason::host);
    CHECK(kl.free_reason[2] == FreeReason::host);
    CHECK(kl.free_reason[4] == FreeReason::host);
  }
}

TEST_CASE("lowering: unknown ops are kept with zero work and reported") {
  IrGraph b;
  b.node("FancyOp", {b.t("x", {4, 4})}, {b.t("y", {4, 4})}, "com.example");
  const KernelList kl = lower_with(b.g, Fusion::eager);
  REQUIRE(kl.kernels.size() == 1);
  CHECK(kl.kernels[0].cls == KernelClass::unknown);
  CHECK(kl.kernels[0].op == "FancyOp");
  CHECK(kl.kernels[0].flops == 0);
  CHECK(kl.unknown_ops == std::vector<std::string>{"com.example.FancyOp"});
}

TEST_CASE("lowering: fused attention ops become projection, QK^T, softmax and AV") {
  {
    IrGraph b;  // com.microsoft Attention, B=2, S=64, hidden 256, 8 heads
    Node& n = b.node("Attention", {b.t("x", {2, 64, 256}), b.w("w", {256, 768}), b.w("bias", {768})},
                     {b.t("y", {2, 64, 256})}, "com.microsoft");
    n.attributes["num_heads"] = test::attr_int(8);
    const KernelList kl = lower_with(b.g, Fusion::eager);
    const auto gemms = of_class(kl, KernelClass::gemm);
    REQUIRE(gemms.size() == 3);
    check_shape(gemms[0].gemm, 1, 128, 768, 256);
    CHECK(gemms[0].epilogue == "bias");
    check_shape(gemms[1].gemm, 16, 64, 64, 32);
    check_shape(gemms[2].gemm, 16, 64, 32, 64);
    const auto sm = of_class(kl, KernelClass::softmax);
    REQUIRE(sm.size() == 1);
    CHECK(sm[0].rows == 16 * 64);
    CHECK(sm[0].cols == 64);
  }
  {
    IrGraph b;  // GroupQueryAttention decode step: 1 new token, 127 cached, 32 q heads / 8 kv heads
    Node& n = b.node("GroupQueryAttention",
                     {b.t("q", {1, 1, 4096}), b.t("k", {1, 1, 1024}), b.t("v", {1, 1, 1024}),
                      b.t("pk", {1, 8, 127, 128}), b.t("pv", {1, 8, 127, 128})},
                     {b.t("o", {1, 1, 4096}), b.t("presk", {1, 8, 128, 128}), b.t("presv", {1, 8, 128, 128})},
                     "com.microsoft");
    n.attributes["num_heads"] = test::attr_int(32);
    n.attributes["kv_num_heads"] = test::attr_int(8);
    const KernelList kl = lower_with(b.g, Fusion::eager);
    const auto gemms = of_class(kl, KernelClass::gemm);
    REQUIRE(gemms.size() == 2);
    check_shape(gemms[0].gemm, 32, 1, 128, 128);
    check_shape(gemms[1].gemm, 32, 1, 128, 128);
    REQUIRE(of_class(kl, KernelClass::memory).size() == 1);  // the KV-cache append
  }
  for (const int64_t window : {-1, 32, 500}) {
    // GroupQueryAttention with a local window, as FlashAttention (--fusion full, FP16): a
    // 64-token prompt after 100 cached tokens, then one decode token after 163.
    for (const int64_t seq : {64, 1}) {
      const int64_t past = seq == 64 ? 100 : 163, total = past + seq;
      IrGraph b;
      Node& n = b.node("GroupQueryAttention",
                       {b.t("q", {1, seq, 4096}, DType::f16), b.t("k", {1, seq, 1024}, DType::f16),
                        b.t("v", {1, seq, 1024}, DType::f16), b.t("pk", {1, 8, past, 128}, DType::f16),
                        b.t("pv", {1, 8, past, 128}, DType::f16)},
                       {b.t("o", {1, seq, 4096}, DType::f16), b.t("presk", {1, 8, total, 128}, DType::f16),
                        b.t("presv", {1, 8, total, 128}, DType::f16)},
                       "com.microsoft");
      n.attributes["num_heads"] = test::attr_int(32);
      n.attributes["kv_num_heads"] = test::attr_int(8);
      n.attributes["local_window_size"] = test::attr_int(window);
      const KernelList kl = lower_with(b.g, Fusion::full);
      REQUIRE(kl.kernels.size() == 1);
      const Kernel& k = kl.kernels[0];
      const int64_t w = window > 0 ? window : total;
      if (seq == 64) {
        // Query i (at position 100 + i) sees min(101 + i, w) keys.
        double pairs = 0;
        for (int64_t i = 0; i < seq; ++i) pairs += double(std::min(past + i + 1, w));
        CHECK(k.op == "flash_attention");
        CHECK(k.flops == doctest::Approx(2.0 * 32 * pairs * 256));
      } else {
        CHECK(k.op == "flash_decode");
        CHECK(k.gemm.k == std::min(total, w));  // the keys read
      }
    }
  }
  {
    IrGraph b;  // opset-23 Attention with 4-D inputs
    b.node("Attention", {b.t("q", {2, 4, 16, 32}), b.t("k", {2, 4, 24, 32}), b.t("v", {2, 4, 24, 48})},
           {b.t("y", {2, 4, 16, 48})});
    const KernelList kl = lower_with(b.g, Fusion::eager);
    const auto gemms = of_class(kl, KernelClass::gemm);
    REQUIRE(gemms.size() == 2);
    check_shape(gemms[0].gemm, 8, 16, 24, 32);
    check_shape(gemms[1].gemm, 8, 16, 48, 24);
  }
}

TEST_CASE("lowering: LSTM/GRU run one input GEMM and a recurrent GEMM plus gates per step") {
  IrGraph b;
  Node& n = b.node("LSTM", {b.t("x", {5, 2, 8}), b.w("W", {2, 64, 8}), b.w("R", {2, 64, 16})},
                   {b.t("y", {5, 2, 2, 16})});
  n.attributes["hidden_size"] = test::attr_int(16);
  n.attributes["direction"] = test::attr_str("bidirectional");
  const KernelList kl = lower_with(b.g, Fusion::eager);
  const auto gemms = of_class(kl, KernelClass::gemm);
  REQUIRE(gemms.size() == 2 * (1 + 5));
  check_shape(gemms[0].gemm, 1, 10, 64, 8);
  check_shape(gemms[1].gemm, 1, 2, 64, 16);
  CHECK(of_class(kl, KernelClass::elementwise).size() == 10);
}

TEST_CASE("lowering: quantized matmuls take their dtype and bytes from the weights") {
  IrGraph b;
  Node& n = b.node("MatMulNBits", {b.t("a", {1, 1, 4096}, DType::f16), b.w("bq", {11008, 128, 16}, DType::u8),
                                   b.w("scales", {11008 * 128}, DType::f16)},
                   {b.t("y", {1, 1, 11008}, DType::f16)}, "com.microsoft");
  n.attributes["K"] = test::attr_int(4096);
  n.attributes["N"] = test::attr_int(11008);
  n.attributes["bits"] = test::attr_int(4);
  n.attributes["block_size"] = test::attr_int(32);
  IrGraph q;
  q.node("MatMulInteger", {q.t("a", {16, 64}, DType::u8), q.w("b", {64, 32}, DType::i8)}, {q.t("y", {16, 32}, DType::i32)});
  const KernelList kl = lower_with(b.g, Fusion::eager);
  REQUIRE(kl.kernels.size() == 1);
  const Kernel& k = kl.kernels[0];
  check_shape(k.gemm, 1, 1, 11008, 4096);
  CHECK(k.dtype == DType::u4);
  // 4-bit weights + fp16 scales per block of 32, fp16 activations and output.
  CHECK(k.bytes == doctest::Approx(11008.0 * 4096 / 2 + 11008.0 * 128 * 2 + 4096 * 2 + 11008 * 2));
  CHECK(k.weight_only);
  const KernelList kq = lower_with(q.g, Fusion::eager);
  REQUIRE(kq.kernels.size() == 1);
  CHECK(kq.kernels[0].dtype == DType::i8);
  CHECK_FALSE(kq.kernels[0].weight_only);  // integer activations: the integer matrix units
  // 8-bit weights: uint8, still weight-only (their math in half precision, precision.h); a bit
  // count outside 2-8 is no MatMulNBits.
  n.attributes["bits"] = test::attr_int(8);
  const KernelList k8 = lower_with(b.g, Fusion::eager);
  REQUIRE(k8.kernels.size() == 1);
  CHECK(k8.kernels[0].dtype == DType::u8);
  CHECK(k8.kernels[0].weight_only);
  n.attributes["bits"] = test::attr_int(16);
  CHECK_THROWS_WITH_AS(lower_with(b.g, Fusion::eager), doctest::Contains("bits must be 2 to 8, got 16"), InputError);
}

TEST_CASE("lowering: Loop and Scan repeat their body, If costs its dearer branch") {
  auto body = std::make_shared<Graph>();
  {
    IrGraph bb;
    bb.node("MatMul", {bb.t("h", {8, 16}), bb.w("wb", {16, 16})}, {bb.t("h2", {8, 16})});
    *body = bb.g;
  }
  auto cheap = std::make_shared<Graph>();
  {
    IrGraph bb;
    bb.node("Relu", {bb.t("h", {8, 16})}, {bb.t("r", {8, 16})});
    *cheap = bb.g;
  }
  IrGraph b;
  Node& loop = b.node("Loop", {b.ints("trips", {3}), b.t("cond", {}, DType::boolean), b.t("h0", {8, 16})},
                      {b.t("hn", {8, 16})});
  Attribute a;
  a.kind = Attribute::Kind::g;
  a.graphs = {body};
  loop.attributes["body"] = a;
  Node& iff = b.node("If", {b.t("c", {}, DType::boolean)}, {b.t("out", {8, 16})});
  Attribute then_a = a, else_a;
  else_a.kind = Attribute::Kind::g;
  else_a.graphs = {cheap};
  iff.attributes["then_branch"] = else_a;
  iff.attributes["else_branch"] = then_a;
  const KernelList kl = lower_with(b.g, Fusion::eager);
  const auto gemms = of_class(kl, KernelClass::gemm);
  REQUIRE(gemms.size() == 4);  // 3 loop trips + the dearer (else) branch
  CHECK(gemms[0].node == 0);
  CHECK(gemms[2].steps == 3);
  CHECK(gemms[3].node == 1);
  CHECK(of_class(kl, KernelClass::elementwise).empty());
}

TEST_CASE("lowering: collectives are their own class") {
  IrGraph b;
  b.node("AllReduce", {b.t("x", {1024, 1024}, DType::f16)}, {b.t("y", {1024, 1024}, DType::f16)}, "com.microsoft");
  const KernelList kl = lower_with(b.g, Fusion::eager);
  REQUIRE(kl.kernels.size() == 1);
  CHECK(kl.kernels[0].cls == KernelClass::collective);
  CHECK(kl.kernels[0].bytes == 1024.0 * 1024 * 2);
}

TEST_CASE("lowering: training adds GEMM gradients only where a parameter needs them") {
  IrGraph b;
  // x (graph input, no gradient) -> linear -> relu -> linear; plus a BMM of two activations.
  b.input("x", {32, 64});
  b.node("MatMul", {"x", b.w("w1", {64, 128})}, {b.t("h", {32, 128})});
  b.node("Relu", {"h"}, {b.t("r", {32, 128})});
  b.node("MatMul", {"r", b.w("w2", {128, 16})}, {b.t("y", {32, 16})});
  const KernelList kl = lower_with(b.g, Fusion::eager, Mode::training);
  const auto fwd = of_class(kl, KernelClass::gemm, Phase::forward);
  const auto bwd = of_class(kl, KernelClass::gemm, Phase::backward);
  REQUIRE(fwd.size() == 2);
  // Second linear: grad input and grad weight; first: grad weight only (x needs none).
  REQUIRE(bwd.size() == 3);
  check_shape(bwd[0].gemm, 1, 32, 128, 16);   // dR = dY W2^T
  check_shape(bwd[1].gemm, 1, 16, 128, 32);   // dW2 (dataset order K, M, N)
  CHECK(bwd[2].note == "grad weight");
  check_shape(bwd[2].gemm, 1, 128, 64, 32);
  const auto upd = test::of_phase(kl, Phase::update);
  REQUIRE(upd.size() == 2);
  CHECK(upd[0].cols == 64 * 128);
  CHECK(upd[1].cols == 128 * 16);
  // Relu backward: one kernel reading dy and x.
  const auto ew = of_class(kl, KernelClass::elementwise, Phase::backward);
  REQUIRE(ew.size() == 1);
  CHECK(ew[0].op == "relu_grad");
  CHECK(kl.warnings.empty());
}

TEST_CASE("lowering: training a graph without a trainable parameter says its step is the forward pass") {
  // A product of two graph inputs: no gradient, no update, and one warning that says so.
  IrGraph b;
  b.input("x", {32, 64});
  b.input("w", {64, 128});
  b.node("MatMul", {"x", "w"}, {b.t("y", {32, 128})});
  const KernelList kl = lower_with(b.g, Fusion::eager, Mode::training);
  CHECK(test::of_phase(kl, Phase::backward).empty());
  CHECK(test::of_phase(kl, Phase::update).empty());
  REQUIRE(kl.warnings.size() == 1);
  CHECK(kl.warnings[0].find("no trainable parameter") != std::string::npos);
  CHECK(lower_with(b.g, Fusion::eager, Mode::inference).warnings.empty());
}

TEST_CASE("lowering: weights held in Constant nodes train as the ops read them, other constants stay constants") {
  // Paddle2ONNX and scripted exports hold every weight in a Constant node: a Conv's weight and
  // bias, a MatMul's weight are parameters (gradients, an update each); a float mask added to
  // the result is not.
  IrGraph b;
  b.input("x", {8, 3, 32, 32});
  b.node("Constant", {}, {b.t("conv_w", {16, 3, 3, 3})});
  b.node("Constant", {}, {b.t("conv_b", {16})});
  b.node("Conv", {"x", "conv_w", "conv_b"}, {b.t("c", {8, 16, 30, 30})});
  b.node("Reshape", {"c", b.ints("flat", {8, 14400})}, {b.t("f", {8, 14400})});
  b.node("Constant", {}, {b.t("fc_w", {14400, 10})});
  b.node("MatMul", {"f", "fc_w"}, {b.t("logits", {8, 10})});
  b.node("Constant", {}, {b.t("mask", {8, 10})});
  b.node("Add", {"logits", "mask"}, {b.t("y", {8, 10})});
  const KernelList kl = lower_with(b.g, Fusion::eager, Mode::training);
  CHECK(kl.warnings.empty());
  const auto upd = test::of_phase(kl, Phase::update);
  std::vector<std::string> updated;
  for (const auto& k : upd) updated.push_back(k.weight);
  CHECK(updated == std::vector<std::string>{"conv_w", "conv_b", "fc_w"});
  const auto grads = of_class(kl, KernelClass::gemm, Phase::backward);
  CHECK(grads.size() >= 2);  // the MatMul's grad input and grad weight at least
}

TEST_CASE("lowering: training passes add gradients through, sums broadcast ones, dropout is two kernels") {
  IrGraph b;
  // h = x W; a = h + h2 (same shape, both need gradients); c = a + pos (pos broadcast over the
  // batch, a parameter path); d = Dropout(c); t = Transpose(d) (a materialized copy); y = t W3.
  b.input("x", {4, 8, 16});
  b.node("MatMul", {"x", b.w("w", {16, 16})}, {b.t("h", {4, 8, 16})});
  b.node("MatMul", {"x", b.w("w2", {16, 16})}, {b.t("h2", {4, 8, 16})});
  b.node("Add", {"h", "h2"}, {b.t("a", {4, 8, 16})});
  b.node("Gather", {b.w("pos_table", {8, 16}), b.ints("pos_ids", {0, 1, 2, 3, 4, 5, 6, 7})}, {b.t("pos", {8, 16})});
  b.node("Add", {"a", "pos"}, {b.t("c", {4, 8, 16})});
  b.node("Dropout", {"c"}, {b.t("d", {4, 8, 16})});
  Node& tr = b.node("Transpose", {"d"}, {b.t("t", {4, 16, 8})});
  tr.attributes["perm"] = test::attr_ints({0, 2, 1});
  b.node("Relu", {"t"}, {b.t("y", {4, 16, 8})});
  const KernelList kl = lower_with(b.g, Fusion::eager, Mode::training);
  std::map<std::string, int> bw;
  for (const auto& k : test::of_phase(kl, Phase::backward)) ++bw[k.op];
  CHECK(bw.count("grad_copy") == 0);   // the same-shape add: the gradient itself, no kernel
  CHECK(bw["sum"] == 1);               // the broadcast position rows: one reduction
  CHECK(bw["dropout_grad"] == 2);      // as traced: two MEM ops
  CHECK(bw.count("transpose_grad") == 0);  // permute + contiguous: back through a view
}

TEST_CASE("lowering: training reduces addmm's bias gradient and layernorm's affine gradients, where reads dy and the mask") {
  IrGraph b;
  // x -> LayerNorm(gamma, beta) -> MatMul + bias (addmm) -> Where(mask, s, -inf) -> Relu.
  b.input("x", {64, 32});
  Node& ln = b.node("LayerNormalization", {"x", b.w("gamma", {32}), b.w("beta", {32})}, {b.t("n", {64, 32})});
  ln.attributes["axis"] = test::attr_int(-1);
  b.node("MatMul", {"n", b.w("w", {32, 48})}, {b.t("h", {64, 48})});
  b.node("Add", {"h", b.w("bias", {48})}, {b.t("s", {64, 48})});
  b.input("mask", {1, 48}, DType::boolean);
  b.node("Where", {"mask", "s", b.w("ninf", {1})}, {b.t("m", {64, 48})});
  b.node("Relu", {"m"}, {b.t("y", {64, 48})});
  const KernelList kl = lower_with(b.g, Fusion::eager, Mode::training);
  std::vector<Kernel> sums;
  for (const auto& k : kl.kernels)
    if (k.phase == Phase::backward && k.cls == KernelClass::reduce) sums.push_back(k);
  REQUIRE(sums.size() == 2);
  // addmm backward: grad input, grad weight and sum_to(bias) over the 64 rows.
  CHECK(sums[0].note == "grad bias (sum over rows)");
  CHECK(sums[0].rows == 48);
  CHECK(sums[0].cols == 64);
  CHECK(sums[0].bytes == (64.0 * 48 + 48) * 4);
  // layer_norm backward: the input gradient (mul) and GammaBetaBackward, a column reduction
  // reading dy and x and writing the gamma and beta gradients.
  CHECK(sums[1].rows == 32);
  CHECK(sums[1].cols == 64);
  CHECK(sums[1].bytes == (2.0 * 64 * 32 + 2 * 32) * 4);
  CHECK(of_class(kl, KernelClass::elementwise, Phase::backward).size() == 2);  // relu_grad, ln mul
  // where: the selected operand's gradient reads dy and the broadcast 1-byte mask.
  int wheres = 0;
  for (const auto& k : kl.kernels)
    if (k.op == "where_grad") {
      ++wheres;
      CHECK(k.bytes == 2.0 * 64 * 48 * 4 + 48);
    }
  CHECK(wheres == 1);
}

namespace {

Kernel one_kernel(const KernelList& kl) {
  REQUIRE(kl.kernels.size() == 1);
  return kl.kernels[0];
}

// A sequence value of known elements (shapes as after shape inference).
std::string sequence(IrGraph& b, const std::string& name, const std::vector<std::vector<int64_t>>& elems) {
  TensorInfo& t = b.g.tensor(name);
  t.name = name;
  t.dtype = DType::f32;
  t.kind = ValueKind::sequence;
  t.elements_known = true;
  for (const auto& dims : elems) {
    TensorInfo e;
    e.dtype = DType::f32;
    e.has_shape = true;
    for (int64_t d : dims) e.shape.push_back(Dim::of(d));
    t.elements.push_back(e);
  }
  return name;
}

}  // namespace

TEST_CASE("lowering: NegativeLogLikelihoodLoss gathers the target class and reduces") {
  {
    IrGraph b;  // mean with class weights: one reduce kernel over the 4 targets
    b.node("NegativeLogLikelihoodLoss", {b.t("x", {4, 5}), b.t("t", {4}, DType::i64), b.w("wc", {5})},
           {b.t("loss", {})});
    const Kernel k = one_kernel(lower_with(b.g, Fusion::eager));
    CHECK(k.cls == KernelClass::reduce);
    CHECK(k.op == "nll_loss");
    CHECK(k.rows == 1);
    CHECK(k.cols == 4);
    CHECK(k.flops == 3 * 4 + 4);                 // negate, weigh, sum; plus the weight sum (mean)
    CHECK(k.bytes == 4 * 4.0 * 2 + 4 * 8.0 + 4);  // gathered values and weights, targets, scalar
  }
  {
    IrGraph b;  // reduction none, [N, C, d1]: a gather writing the per-target losses
    Node& n = b.node("NegativeLogLikelihoodLoss", {b.t("x", {2, 3, 6}), b.t("t", {2, 6}, DType::i64)},
                     {b.t("loss", {2, 6})});
    n.attributes["reduction"] = test::attr_str("none");
    const Kernel k = one_kernel(lower_with(b.g, Fusion::eager));
    CHECK(k.cls == KernelClass::memory);
    CHECK(k.flops == 12);
    CHECK(k.bytes == 12 * 4.0 + 12 * 8.0 + 12 * 4.0);
  }
}

TEST_CASE("lowering: SoftmaxCrossEntropyLoss is a log-softmax over the classes plus the NLL kernel") {
  IrGraph b;
  Node& n = b.node("SoftmaxCrossEntropyLoss", {b.t("x", {2, 5, 3}), b.t("y", {2, 3}, DType::i64)}, {b.t("loss", {})});
  n.attributes["reduction"] = test::attr_str("sum");
  const KernelList kl = lower_with(b.g, Fusion::eager);
  REQUIRE(kl.kernels.size() == 2);
  const Kernel& s = kl.kernels[0];
  CHECK(s.cls == KernelClass::softmax);
  CHECK(s.op == "logsoftmax");
  CHECK(s.rows == 6);
  CHECK(s.cols == 5);
  CHECK(s.flops == 5 * 30);
  CHECK(s.bytes == 2 * 30 * 4.0);
  const Kernel& l = kl.kernels[1];
  CHECK(l.cls == KernelClass::reduce);
  CHECK(l.cols == 6);
  CHECK(l.flops == 2 * 6);
  CHECK(l.bytes == 6 * 4.0 + 6 * 8.0 + 4);
  CHECK(kl.unknown_ops.empty());
}

TEST_CASE("lowering: LRN is an elementwise stencil, MeanVarianceNormalization a norm over its axes") {
  {
    IrGraph b;
    Node& n = b.node("LRN", {b.t("x", {1, 8, 4, 4})}, {b.t("y", {1, 8, 4, 4})});
    n.attributes["size"] = test::attr_int(3);
    const Kernel k = one_kernel(lower_with(b.g, Fusion::eager));
    CHECK(k.cls == KernelClass::elementwise);
    CHECK(k.flops == (2 * 3 + 3) * 128);
    CHECK(k.bytes == 2 * 128 * 4.0);
  }
  {
    IrGraph b;  // default axes [0, 2, 3]: one row per channel
    b.node("MeanVarianceNormalization", {b.t("x", {2, 3, 4, 5})}, {b.t("y", {2, 3, 4, 5})});
    const Kernel k = one_kernel(lower_with(b.g, Fusion::eager));
    CHECK(k.cls == KernelClass::layernorm);
    CHECK(k.rows == 3);
    CHECK(k.cols == 40);
    CHECK(k.flops == 5 * 120);
    CHECK(k.bytes == 2 * 120 * 4.0);
  }
}

TEST_CASE("lowering: GridSample, RoiAlign and MaxUnpool are memory-bound gathers and scatters") {
  for (const char* mode : {"linear", "cubic"}) {
    IrGraph b;
    Node& n = b.node("GridSample", {b.t("x", {1, 2, 8, 8}), b.t("grid", {1, 4, 4, 2})}, {b.t("y", {1, 2, 4, 4})});
    n.attributes["mode"] = test::attr_str(mode);
    const Kernel k = one_kernel(lower_with(b.g, Fusion::eager));
    const double taps = std::string(mode) == "linear" ? 4 : 16;
    CHECK(k.cls == KernelClass::memory);
    CHECK(k.flops == 2 * taps * 32);
    CHECK(k.bytes == taps * 32 * 4.0 + 32 * 4.0 + 32 * 4.0);  // taps, grid, output
  }
  {
    IrGraph b;
    Node& n = b.node("RoiAlign", {b.t("x", {1, 4, 16, 16}), b.t("rois", {3, 4}), b.t("bi", {3}, DType::i64)},
                     {b.t("y", {3, 4, 2, 2})});
    n.attributes["sampling_ratio"] = test::attr_int(2);
    const Kernel k = one_kernel(lower_with(b.g, Fusion::eager));
    CHECK(k.cls == KernelClass::memory);
    CHECK(k.flops == 2 * 16 * 48);
    CHECK(k.bytes == 16 * 48 * 4.0 + (12 * 4.0 + 3 * 8.0) + 48 * 4.0);
  }
  {
    IrGraph b;
    b.node("MaxUnpool", {b.t("x", {1, 1, 2, 2}), b.t("i", {1, 1, 2, 2}, DType::i64)}, {b.t("y", {1, 1, 4, 4})});
    const KernelList kl = lower_with(b.g, Fusion::eager);
    REQUIRE(kl.kernels.size() == 2);
    CHECK(kl.kernels[0].op == "fill");
    CHECK(kl.kernels[0].bytes == 16 * 4.0);
    CHECK(kl.kernels[1].op == "scatter");
    CHECK(kl.kernels[1].bytes == 2 * 4 * 4.0 + 4 * 8.0);
  }
}

TEST_CASE("lowering: DFT/STFT count 5 n log2 n per transform, windows fill, Det is a batched LU, NMS pairs boxes") {
  {
    IrGraph b;  // opset 17: the axis is an attribute (the rule registered since 17)
    Node& n = b.node("DFT", {b.t("x", {3, 16, 1})}, {b.t("y", {3, 16, 2})});
    n.attributes["axis"] = test::attr_int(1);
    LoweringOptions o17;
    o17.opset = 17;
    const Kernel k = one_kernel(lower(b.g, o17));
    CHECK(k.cls == KernelClass::elementwise);
    CHECK(k.rows == 3);
    CHECK(k.cols == 16);
    CHECK(k.flops == 3 * 5 * 16 * 4);
    CHECK(k.bytes == (48 + 96) * 4.0);
  }
  {
    IrGraph b;  // opset 20: the axis is an input (-2 by default); dft_length 32 pads
    b.node("DFT", {b.t("x", {3, 16, 2}), b.ints("len", {32}), b.ints("ax", {-2})}, {b.t("y", {3, 32, 2})});
    const Kernel k = one_kernel(lower_with(b.g, Fusion::eager));
    CHECK(k.cols == 32);
    CHECK(k.flops == 3 * 5 * 32 * 5);
  }
  {
    IrGraph b;
    b.node("STFT", {b.t("s", {1, 128, 1}), b.ints("step", {16}), b.t("win", {32})}, {b.t("y", {1, 7, 17, 2})});
    const Kernel k = one_kernel(lower_with(b.g, Fusion::eager));
    CHECK(k.rows == 7);
    CHECK(k.cols == 32);
    CHECK(k.flops == 7 * (5 * 32 * 5 + 32));
    CHECK(k.bytes == (128 + 32 + 7 * 17 * 2) * 4.0);
  }
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) {
    IrGraph b;
    b.node(op, {b.t("size", {}, DType::i64)}, {b.t("w", {10})});
    const Kernel k = one_kernel(lower_with(b.g, Fusion::eager));
    CHECK(k.op == "fill");
    CHECK(k.bytes == 10 * 4.0);
  }
  {
    IrGraph b;
    b.node("Det", {b.t("x", {2, 3, 3})}, {b.t("d", {2})});
    const Kernel k = one_kernel(lower_with(b.g, Fusion::eager));
    CHECK(k.rows == 2);
    CHECK(k.flops == doctest::Approx(2 * (2.0 * 27 / 3 + 3)));
    CHECK(k.bytes == (18 + 2) * 4.0);
  }
  {
    IrGraph b;
    b.node("NonMaxSuppression", {b.t("boxes", {1, 6, 4}), b.t("scores", {1, 2, 6})}, {b.t("sel", {4, 3}, DType::i64)});
    const Kernel k = one_kernel(lower_with(b.g, Fusion::eager));
    CHECK(k.rows == 2);
    CHECK(k.cols == 36);
    CHECK(k.flops == 13 * 2 * 36);
    CHECK(k.bytes == 24 * 4.0 + 12 * 4.0 + 12 * 8.0);
  }
}

TEST_CASE("lowering: sequence ops - split/concat copy, the rest are views, SequenceMap runs its body per element") {
  {
    IrGraph b;
    b.node("SplitToSequence", {b.t("x", {4, 6})}, {sequence(b, "s", {{2, 6}, {2, 6}})});
    b.node("SequenceInsert", {"s", b.t("z", {2, 6})}, {sequence(b, "s2", {{2, 6}, {2, 6}, {2, 6}})});
    b.node("SequenceLength", {"s2"}, {b.t("len", {}, DType::i64)});
    b.node("SequenceErase", {"s2"}, {sequence(b, "s3", {{2, 6}, {2, 6}})});
    b.node("ConcatFromSequence", {"s3"}, {b.t("y", {4, 6})});
    const KernelList kl = lower_with(b.g, Fusion::eager);
    REQUIRE(kl.kernels.size() == 2);
    CHECK(kl.kernels[0].op == "split");
    CHECK(kl.kernels[0].bytes == 2 * 24 * 4.0);
    CHECK(kl.kernels[1].op == "concat");
    CHECK(kl.kernels[1].bytes == 2 * 24 * 4.0);
    CHECK(kl.free_reason[1] == FreeReason::view);
    CHECK(kl.free_reason[2] == FreeReason::view);
    CHECK(kl.free_reason[3] == FreeReason::view);
  }
  {
    auto body = std::make_shared<Graph>();
    {
      IrGraph bb;
      bb.node("Relu", {bb.t("e", {8})}, {bb.t("r", {8})});
      *body = bb.g;
    }
    IrGraph b;
    Node& m = b.node("SequenceMap", {sequence(b, "s", {{8}, {8}, {8}})}, {sequence(b, "o", {{8}, {8}, {8}})});
    Attribute a;
    a.kind = Attribute::Kind::g;
    a.graphs = {body};
    m.attributes["body"] = a;
    const KernelList kl = lower_with(b.g, Fusion::eager);
    REQUIRE(kl.kernels.size() == 3);
    CHECK(kl.kernels[2].steps == 3);
    CHECK(kl.kernels[0].node == 0);
  }
}

TEST_CASE("lowering: preview.training optimizers update each parameter in one elementwise kernel") {
  {
    IrGraph b;
    b.node("Adam", {b.t("r", {}), b.t("tc", {}, DType::i64), b.t("x", {10}), b.t("g", {10}), b.t("v", {10}), b.t("h", {10})},
           {b.t("x2", {10}), b.t("v2", {10}), b.t("h2", {10})}, "ai.onnx.preview.training");
    const Kernel k = one_kernel(lower_with(b.g, Fusion::eager));
    CHECK(k.op == "adam");
    CHECK(k.flops == 14 * 10);
    CHECK(k.bytes == 7 * 10 * 4.0);  // read x, g, v, h; write x, v, h
  }
  {
    IrGraph b;  // two parameters
    b.node("Momentum", {b.t("r", {}), b.t("tc", {}, DType::i64), b.t("x1", {4}), b.t("x2", {6}), b.t("g1", {4}),
                        b.t("g2", {6}), b.t("v1", {4}), b.t("v2", {6})},
           {b.t("x1n", {4}), b.t("x2n", {6}), b.t("v1n", {4}), b.t("v2n", {6})}, "ai.onnx.preview.training");
    const KernelList kl = lower_with(b.g, Fusion::eager);
    REQUIRE(kl.kernels.size() == 2);
    CHECK(kl.kernels[0].flops == 5 * 4);
    CHECK(kl.kernels[0].bytes == 5 * 4 * 4.0);
    CHECK(kl.kernels[1].bytes == 5 * 6 * 4.0);
  }
}

TEST_CASE("lowering: ops with no GPU kernel stay unknown with the reason") {
  IrGraph b;
  b.node("StringNormalizer", {b.t("s", {3}, DType::string)}, {b.t("o", {3}, DType::string)});
  b.node("Gradient", {b.t("x", {3})}, {b.t("dx", {3})}, "ai.onnx.preview.training");
  const KernelList kl = lower_with(b.g, Fusion::eager);
  REQUIRE(kl.kernels.size() == 2);
  CHECK(kl.kernels[0].cls == KernelClass::unknown);
  CHECK(kl.kernels[0].note.find("host") != std::string::npos);
  CHECK(kl.kernels[1].note.find("meta-op") != std::string::npos);
  CHECK(kl.unknown_ops.size() == 2);
}

TEST_CASE("lowering: Einsum ellipsis broadcasts leading dims, a diagonal is a gather or a reduction") {
  {
    IrGraph b;  // the ellipsis of a shared weight folds into m
    Node& n = b.node("Einsum", {b.t("a", {2, 3, 4, 5}), b.w("w", {5, 6})}, {b.t("y", {2, 3, 4, 6})});
    n.attributes["equation"] = test::attr_str("...ij,jk->...ik");
    check_shape(only_gemm(b.g), 1, 24, 6, 5);
  }
  {
    IrGraph b;  // batched on both sides, B broadcast over the first dim
    Node& n = b.node("Einsum", {b.t("a", {2, 3, 4, 5}), b.t("b", {1, 3, 5, 6})}, {b.t("y", {2, 3, 4, 6})});
    n.attributes["equation"] = test::attr_str("...ij,...jk->...ik");
    check_shape(only_gemm(b.g), 6, 4, 6, 5);
  }
  {
    IrGraph b;
    Node& n = b.node("Einsum", {b.t("x", {3, 4, 4})}, {b.t("y", {3, 4})});
    n.attributes["equation"] = test::attr_str("...ii->...i");
    const Kernel k = one_kernel(lower_with(b.g, Fusion::eager));
    CHECK(k.cls == KernelClass::memory);
    CHECK(k.op == "diagonal");
    CHECK(k.bytes == 2 * 12 * 4.0);
  }
  {
    IrGraph b;  // trace: the diagonal reduced
    Node& n = b.node("Einsum", {b.t("x", {5, 5})}, {b.t("y", {})});
    n.attributes["equation"] = test::attr_str("ii");
    const Kernel k = one_kernel(lower_with(b.g, Fusion::eager));
    CHECK(k.cls == KernelClass::reduce);
    CHECK(k.cols == 5);
    CHECK(k.flops == 5);
    CHECK(k.bytes == 6 * 4.0);
  }
}

TEST_CASE("lowering: serving kernels merge the GEMMs that share an activation and describe RMSNorm as vLLM's") {
  // Q, K, V projections of one activation (and an unrelated GEMM of another) in FP16.
  IrGraph b;
  const std::string x = b.t("x", {1, 4, 64}, DType::f16);
  const std::string other = b.t("z", {1, 4, 32}, DType::f16);
  for (const char* p : {"q", "k", "v"})
    b.node("MatMul", {x, b.w(std::string("w") + p, {64, p[0] == 'q' ? 64 : 16}, DType::f16)},
           {b.t(std::string("y") + p, {1, 4, p[0] == 'q' ? 64 : 16}, DType::f16)});
  b.node("MatMul", {other, b.w("wo", {32, 8}, DType::f16)}, {b.t("yo", {1, 4, 8}, DType::f16)});
  b.node("SimplifiedLayerNormalization", {x, b.w("g", {64}, DType::f16)}, {b.t("n", {1, 4, 64}, DType::f16)});
  // The same RMSNorm as an exporter decomposes it (Pow, ReduceMean, Add, Sqrt, Div, Mul by the weight).
  b.node("Pow", {x, b.w("two", {1}, DType::f16)}, {b.t("sq", {1, 4, 64}, DType::f16)});
  b.node("ReduceMean", {"sq"}, {b.t("ms", {1, 4, 1}, DType::f16)});
  b.node("Add", {"ms", b.w("eps", {1}, DType::f16)}, {b.t("mse", {1, 4, 1}, DType::f16)});
  b.node("Sqrt", {"mse"}, {b.t("rms", {1, 4, 1}, DType::f16)});
  b.node("Div", {x, "rms"}, {b.t("xn", {1, 4, 64}, DType::f16)});
  b.node("Mul", {"xn", b.w("g2", {64}, DType::f16)}, {b.t("n2", {1, 4, 64}, DType::f16)});
  LoweringOptions o;
  o.fusion = Fusion::full;
  const KernelList plain = lower(b.g, o);
  REQUIRE(of_class(plain, KernelClass::gemm).size() == 4);
  o.serving_kernels = true;
  const KernelList serving = lower(b.g, o);
  const auto gemms = of_class(serving, KernelClass::gemm);
  REQUIRE(gemms.size() == 2);
  const Kernel& qkv = gemms[0];
  check_shape(qkv.gemm, 1, 4, 64 + 16 + 16, 64);
  CHECK(qkv.fused_nodes.size() == 2);
  // The activation read once: the three kernels' bytes less two reads of it.
  double sum = 0, flops = 0;
  for (int i = 0; i < 3; ++i) sum += of_class(plain, KernelClass::gemm)[size_t(i)].bytes, flops += of_class(plain, KernelClass::gemm)[size_t(i)].flops;
  CHECK(qkv.bytes == doctest::Approx(sum - 2 * 4 * 64 * 2));
  CHECK(qkv.flops == doctest::Approx(flops));
  check_shape(gemms[1].gemm, 1, 4, 8, 32);
  // RMSNorm: vLLM's rms_norm, one block of (up to 1024) threads per row, 2-byte loads.
  const auto norms = of_class(serving, KernelClass::layernorm);
  REQUIRE(norms.size() == 2);
  for (const Kernel& n : norms) {
    CHECK(n.op == "rmsnorm");
    CHECK(n.access.bytes_per_load == 2);
    CHECK(n.access.block_threads == 64);
    // The first pass reads the row of x alone: the weight (an operand of the decomposed
    // norm's group) comes with the second pass.
    CHECK(n.access.row_tensors == 1);
  }
  CHECK(norms[1].inputs == 2);
  CHECK(of_class(plain, KernelClass::layernorm)[0].access.bytes_per_load == 0);
  // Training never merges.
  o.mode = Mode::training;
  CHECK(of_class(lower(b.g, o), KernelClass::gemm).size() > 2);
}

// A pre-norm residual stream in FP16: r = x + h, read by a decomposed RMSNorm and by a later
// node (the next residual add); rows x 64.
static IrGraph residual_rmsnorm(int64_t rows) {
  IrGraph b;
  const std::string x = b.t("x", {1, rows, 64}, DType::f16);
  const std::string h = b.t("h", {1, rows, 64}, DType::f16);
  b.node("Add", {x, h}, {b.t("r", {1, rows, 64}, DType::f16)});
  b.node("Pow", {"r", b.w("two", {1}, DType::f16)}, {b.t("sq", {1, rows, 64}, DType::f16)});
  b.node("ReduceMean", {"sq"}, {b.t("ms", {1, rows, 1}, DType::f16)});
  b.node("Add", {"ms", b.w("eps", {1}, DType::f16)}, {b.t("mse", {1, rows, 1}, DType::f16)});
  b.node("Sqrt", {"mse"}, {b.t("rms", {1, rows, 1}, DType::f16)});
  b.node("Div", {"r", "rms"}, {b.t("rn", {1, rows, 64}, DType::f16)});
  b.node("Mul", {"rn", b.w("g", {64}, DType::f16)}, {b.t("n", {1, rows, 64}, DType::f16)});
  b.node("MatMul", {"n", b.w("w", {64, 64}, DType::f16)}, {b.t("m", {1, rows, 64}, DType::f16)});
  b.node("Add", {"r", "m"}, {b.t("y", {1, rows, 64}, DType::f16)});
  return b;
}

TEST_CASE("lowering: full fusion runs a residual add in the next norm's kernel, which writes the sum") {
  const IrGraph b = residual_rmsnorm(4);
  const KernelList eager = lower_with(b.g, Fusion::eager);
  CHECK(of_class(eager, KernelClass::layernorm).empty());  // eager: HF's RMSNorm node by node
  LoweringOptions o;
  o.fusion = Fusion::full;
  const KernelList full = lower(b.g, o);
  const auto norms = of_class(full, KernelClass::layernorm);
  REQUIRE(norms.size() == 1);
  const Kernel& n = norms[0];
  CHECK(n.residual_add);
  CHECK(n.op == "rmsnorm");
  CHECK(n.rows == 4);
  CHECK(n.cols == 64);
  // Reads x, h, the weight and two scalars; writes the sum (the last Add reads it) and the
  // normalised rows.
  CHECK(n.bytes == doctest::Approx((4 * 64 * 2 + 64 + 2 + 4 * 64 * 2) * 2.0));
  // The first Add launches no kernel of its own: one elementwise kernel left, the last Add.
  CHECK(of_class(full, KernelClass::elementwise).size() == 1);
  // Served: vLLM's fused_add_rms_norm (16-byte loads of x and the residual; a block of
  // min(cols, 1024) threads below 256 rows, 256 from there).
  o.serving_kernels = true;
  const Kernel s = of_class(lower(b.g, o), KernelClass::layernorm).at(0);
  CHECK(s.access.bytes_per_load == 16);
  CHECK(s.access.row_tensors == 2);
  CHECK(s.access.block_threads == 64);
  CHECK(vllm_fused_add_rms_norm_access(255, 4096).block_threads == 1024);
  CHECK(vllm_fused_add_rms_norm_access(256, 4096).block_threads == 256);
  CHECK(vllm_fused_add_rms_norm_access(256, 4100).bytes_per_load == 2);  // not a multiple of 8: scalar loads
  // vLLM's rotary_embedding and silu_and_mul: one block per token, scalar loads, two in flight.
  const ThreadAccess rope = vllm_rotary_access(32 * 128);
  CHECK(rope.block_threads == 512);
  CHECK(rope.index_loads == 1);
  CHECK(vllm_rotary_access(4 * 64).block_threads == 128);
  const ThreadAccess act = vllm_act_and_mul_access(11008);
  CHECK(act.block_threads == 1024);
  CHECK(act.row_tensors == 2);
  CHECK(act.bytes_per_load == 2);
  // Not when the norm reads an operand computed from the sum (a scale here): the sum must
  // reach memory before the norm's kernel starts.
  IrGraph c;
  c.node("Add", {c.t("x", {1, 4, 64}, DType::f16), c.t("h", {1, 4, 64}, DType::f16)}, {c.t("r", {1, 4, 64}, DType::f16)});
  Node& rm = c.node("ReduceMean", {"r"}, {c.t("s", {64}, DType::f16)});
  rm.attributes["axes"] = test::attr_ints({0, 1});
  rm.attributes["keepdims"] = test::attr_int(0);
  c.node("LayerNormalization", {"r", "s"}, {c.t("n", {1, 4, 64}, DType::f16)});
  c.node("Add", {"r", "n"}, {c.t("y", {1, 4, 64}, DType::f16)});
  const KernelList cyc = lower(c.g, o);
  REQUIRE(of_class(cyc, KernelClass::layernorm).size() == 1);
  CHECK_FALSE(of_class(cyc, KernelClass::layernorm)[0].residual_add);
  CHECK(of_class(cyc, KernelClass::elementwise).size() == 2);  // both Adds
  // Without the scale's dependence the same graph joins the first Add to the norm.
  IrGraph d;
  d.node("Add", {d.t("x", {1, 4, 64}, DType::f16), d.t("h", {1, 4, 64}, DType::f16)}, {d.t("r", {1, 4, 64}, DType::f16)});
  d.node("LayerNormalization", {"r", d.w("s", {64}, DType::f16)}, {d.t("n", {1, 4, 64}, DType::f16)});
  d.node("Add", {"r", "n"}, {d.t("y", {1, 4, 64}, DType::f16)});
  const KernelList joined = lower(d.g, o);
  CHECK(of_class(joined, KernelClass::layernorm).at(0).residual_add);
  CHECK(of_class(joined, KernelClass::elementwise).size() == 1);
}

TEST_CASE("lowering: onnxruntime's SkipSimplifiedLayerNormalization is a residual add + RMSNorm, served, vLLM's") {
  // (input, skip, gamma) -> output, ..., input_skip_bias_sum: the residual stream's fused kernel.
  IrGraph b;
  b.node("SkipSimplifiedLayerNormalization",
         {b.t("x", {1, 300, 4096}, DType::f16), b.t("skip", {1, 300, 4096}, DType::f16), b.w("g", {4096}, DType::f16)},
         {b.t("y", {1, 300, 4096}, DType::f16), "", "", b.t("sum", {1, 300, 4096}, DType::f16)}, "com.microsoft");
  LoweringOptions o;
  o.fusion = Fusion::full;
  const Kernel k = one_kernel(lower(b.g, o));
  CHECK(k.cls == KernelClass::layernorm);
  CHECK(k.residual_add);
  CHECK(k.access.bytes_per_load == 0);
  o.serving_kernels = true;
  const Kernel s = one_kernel(lower(b.g, o));
  CHECK(s.access.bytes_per_load == 16);  // fused_add_rms_norm's 8-wide vectors
  CHECK(s.access.block_threads == 256);  // 300 tokens: 256-thread blocks
  CHECK(s.access.row_tensors == 2);
}

TEST_CASE("lowering: served, the gated activation silu(gate) * up is vLLM's silu_and_mul") {
  IrGraph b;
  const std::string gate = b.t("gate", {1, 3, 2048}, DType::f16), up = b.t("up", {1, 3, 2048}, DType::f16);
  b.node("Sigmoid", {gate}, {b.t("sg", {1, 3, 2048}, DType::f16)});
  b.node("Mul", {gate, "sg"}, {b.t("silu", {1, 3, 2048}, DType::f16)});
  b.node("Mul", {"silu", up}, {b.t("y", {1, 3, 2048}, DType::f16)});
  LoweringOptions o;
  o.fusion = Fusion::full;
  const Kernel plain = one_kernel(lower(b.g, o));
  CHECK(plain.op == "silu_and_mul");
  CHECK(plain.rows == 3);
  CHECK(plain.cols == 2048);
  CHECK(plain.bytes == doctest::Approx(3 * 3 * 2048 * 2.0));  // gate and up read, y written
  CHECK(plain.access.bytes_per_load == 0);                     // inductor's kernel: the NeuSight law
  o.serving_kernels = true;
  const Kernel served = one_kernel(lower(b.g, o));
  CHECK(served.access.block_threads == 1024);
  CHECK(served.access.row_tensors == 2);
  o.compute_dtype = DType::f32;  // a 32-bit activation is not vLLM's kernel
  CHECK(one_kernel(lower(b.g, o)).access.bytes_per_load == 0);
}

TEST_CASE("lowering: serving kernels merge biased projections, each bias in the merged GEMM's epilogue") {
  // Qwen-style Q, K, V with biases (MatMul + Add each) of one activation.
  IrGraph b;
  const std::string x = b.t("x", {1, 4, 64}, DType::f16);
  for (const char* p : {"q", "k", "v"}) {
    const std::string y = b.t(std::string("y") + p, {1, 4, 32}, DType::f16);
    b.node("MatMul", {x, b.w(std::string("w") + p, {64, 32}, DType::f16)}, {y});
    b.node("Add", {y, b.w(std::string("b") + p, {32}, DType::f16)}, {b.t(std::string("o") + p, {1, 4, 32}, DType::f16)});
  }
  LoweringOptions o;
  o.fusion = Fusion::full;
  const KernelList plain = lower(b.g, o);
  const auto alone = of_class(plain, KernelClass::gemm);
  REQUIRE(alone.size() == 3);
  CHECK(of_class(plain, KernelClass::elementwise).empty());  // addmm: bias in the epilogue
  o.serving_kernels = true;
  const KernelList serving = lower(b.g, o);
  REQUIRE(serving.kernels.size() == 1);
  const Kernel& k = serving.kernels[0];
  check_shape(k.gemm, 1, 4, 96, 64);
  CHECK(k.epilogue == "bias");
  CHECK(k.fused_nodes.size() == 5);  // two MatMuls and three bias Adds
  CHECK(k.bytes == doctest::Approx(alone[0].bytes + alone[1].bytes + alone[2].bytes - 2 * 4 * 64 * 2));
}

TEST_CASE("lowering: a QMoE with SwiGLU fused into fc1 reduces fc2 over the activation's half") {
  // 64 tokens, 8 experts of 96 (gate and up: fc1 gives 192), top-2, 4-bit weights with one
  // scale per 32, as onnxruntime-genai exports gpt-oss: fc1 [E, 2f, h / 2], fc2 [E, h, f / 2].
  const int64_t rows = 64, h = 128, f = 96, e = 8;
  for (const bool fused : {true, false}) {
    IrGraph b;
    std::vector<std::string> in = {b.t("x", {rows, h}, DType::f16), b.t("router", {rows, e}, DType::f16)};
    auto weight = [&](const std::string& name, int64_t out, int64_t red) {
      in.push_back(b.w(name, {e, out, red / 2}, DType::u8));
      in.push_back(b.w(name + "_scales", {e, out, red / 32}, DType::f16));
      in.push_back("");
    };
    weight("fc1", fused ? 2 * f : f, h);
    weight("fc2", h, f);
    if (!fused) weight("fc3", f, h);
    Node& n = b.node("QMoE", in, {b.t("y", {rows, h}, DType::f16)}, "com.microsoft");
    n.attributes["k"] = test::attr_int(2);
    n.attributes["expert_weight_bits"] = test::attr_int(4);
    n.attributes["activation_type"] = test::attr_str(fused ? "swiglu" : "silu");
    if (fused) n.attributes["swiglu_fusion"] = test::attr_int(1);
    const KernelList kl = lower_with(b.g, Fusion::eager);
    const auto gemms = of_class(kl, KernelClass::gemm);
    REQUIRE(gemms.size() == (fused ? 2u : 3u));
    const Kernel& fc2 = gemms.back();
    CHECK(fc2.gemm.n == h);
    CHECK(fc2.gemm.k == f);  // the activation's output, not fc1's
    double fc1_n = 0;
    for (size_t i = 0; i + 1 < gemms.size(); ++i) fc1_n += double(gemms[i].gemm.n);
    CHECK(fc1_n == 2 * f);  // gate and up, fused or not
    const auto act = of_class(kl, KernelClass::elementwise);
    REQUIRE(!act.empty());
    CHECK(act[0].cols == f);
    CHECK(act[0].bytes == doctest::Approx(double(rows) * 2 * f * 2 * 3));  // gate, up read; product written
  }
}

TEST_CASE("lowering: NonZero counts and selects, priced at the bound of every element nonzero") {
  // Its output count depends on the data: the count reads the input, the select reads it again
  // and writes rank x elements int64 coordinates at most.
  IrGraph b;
  b.input("x", {4, 256, 256});
  b.node("NonZero", {"x"}, {b.t("idx", {3, 1}, DType::i64)});
  b.g.tensor("idx").shape[1] = Dim{};  // the count, known only at run time
  const KernelList kl = lower_with(b.g, Fusion::eager);
  REQUIRE(kl.kernels.size() == 2);
  const double n = 4.0 * 256 * 256;
  CHECK(kl.kernels[0].cls == KernelClass::reduce);
  CHECK(kl.kernels[0].bytes == 4 * n + 8);
  CHECK(kl.kernels[1].cls == KernelClass::memory);
  CHECK(kl.kernels[1].bytes == 4 * n + 3 * n * 8);
  CHECK(kl.kernels[1].note.find("bound") != std::string::npos);
}

TEST_CASE("lowering: --dtype int8 and fp8 run a convolution of a weight on the narrow matrix units in inference") {
  // As TensorRT's INT8 and FP8 engines: the image and the weights narrow, the output in the
  // activations' FP16 (int8) or BF16 (fp8); training (Transformer Engine's FP8 recipe) keeps
  // convolutions 16-bit.
  IrGraph b;
  b.input("x", {2, 64, 56, 56});
  b.node("Conv", {"x", b.w("w", {128, 64, 3, 3})}, {b.t("y", {2, 128, 54, 54})});
  const double x = 2.0 * 64 * 56 * 56, w = 128.0 * 64 * 9, y = 2.0 * 128 * 54 * 54;
  for (DType narrow : {DType::i8, DType::f8e4m3fn}) {
    CAPTURE(dtype_name(narrow));
    LoweringOptions o;
    o.compute_dtype = narrow;
    const KernelList inf = lower(b.g, o);
    REQUIRE(inf.kernels.size() == 1);
    CHECK(inf.kernels[0].dtype == narrow);
    CHECK(inf.kernels[0].bytes == doctest::Approx(x + w + 2 * y));
    o.mode = Mode::training;
    const KernelList tr = lower(b.g, o);
    REQUIRE(!tr.kernels.empty());
    CHECK(tr.kernels[0].dtype == activation_dtype(narrow));
    CHECK(tr.kernels[0].bytes == doctest::Approx(2 * (x + w + y)));
  }
  LoweringOptions fp4;
  fp4.compute_dtype = DType::f4e2m1;
  CHECK(lower(b.g, fp4).kernels[0].dtype == DType::bf16);
}
