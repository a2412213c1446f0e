// unit-api.cpp - the public analyze() entry point end to end.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "neusight/neusight.h"
#include "neusight/precision.h"
#include "lowering_graph.h"
#include "onnx_proto.h"
#include "roofline_options.h"
#include "test_util.h"

using namespace neusight;

TEST_CASE("api: analyze() on the example gives positive per-node and end-to-end latencies") {
  LoadedModel m = load_model(test::example_model());
  Report r = analyze(m.proto->model, GpuDatabase::builtin().resolve("b200"), test::roofline_options(1, 256));
  CHECK(r.e2e_latency_ms > 0);
  CHECK(r.nodes.size() == m.model.graph.nodes.size());
  double sum = 0;
  for (const auto& n : r.nodes) sum += n.latency_ms;
  CHECK(sum == doctest::Approx(r.e2e_latency_ms));
  CHECK(r.graph_outputs.at(0).shape.at(2).value == 50257);
}

// The memory footprint of an unfused inference run of the graph `b` built.
MemoryFootprint unfused_footprint(const test::IrGraph& b) {
  Options o;
  o.fusion = Fusion::none;
  LoweringOptions lo;
  lo.fusion = Fusion::none;
  Analysis a;
  a.graph = b.g;
  a.kernels = lower(a.graph, lo);
  return memory_footprint(a, o, 0);
}

TEST_CASE("api: memory footprint of a small MLP: weights, activations alive at once, what training keeps") {
  // x[4,256] -> MatMul W1[256,1024] -> Relu -> MatMul W2[1024,256] -> Mul by a scalar -> out.
  test::IrGraph b;
  const std::string x = b.input("x", {4, 256});
  b.node("MatMul", {x, b.w("W1", {256, 1024})}, {b.t("h", {4, 1024})});
  b.node("Relu", {"h"}, {b.t("r", {4, 1024})});
  b.node("MatMul", {"r", b.w("W2", {1024, 256})}, {b.t("y", {4, 256})});
  b.node("Mul", {"y", b.w("s", {})}, {b.t("out", {4, 256})});
  b.output("out");
  const double KiB = 1024, GiB = 1024.0 * 1024 * 1024;
  for (const Mode mode : {Mode::inference, Mode::training}) {
    INFO((mode == Mode::training ? "training" : "inference"));
    Options o;
    o.mode = mode;
    o.fusion = Fusion::none;
    LoweringOptions lo;
    lo.mode = mode;
    lo.fusion = Fusion::none;
    lo.optimizer = Optimizer::adam;
    Analysis a;
    a.graph = b.g;
    a.kernels = lower(a.graph, lo);
    const MemoryFootprint m = memory_footprint(a, o, 0.5);
    if (mode == Mode::training) {  // the optimizer's state follows its update kernels
      LoweringOptions plain = lo;
      plain.optimizer = Optimizer::sgd;
      Analysis sgd = a;
      sgd.kernels = lower(sgd.graph, plain);
      CHECK(memory_footprint(sgd, o, 0.5).optimizer_gib == 0);
      CHECK(memory_footprint(sgd, o, 0.5).optimizer == "sgd");
      plain.optimizer = Optimizer::momentum;
      sgd.kernels = lower(sgd.graph, plain);
      CHECK(memory_footprint(sgd, o, 0.5).optimizer_gib * GiB == doctest::Approx(2 * 1024 * KiB));
      CHECK(m.optimizer == "adam");
    }
    CHECK(m.training == (mode == Mode::training));
    CHECK(m.weights_gib * GiB == doctest::Approx(2 * 1024 * KiB + 4));  // W1, W2 and the scalar
    if (mode == Mode::inference) {
      // Alive at once: Relu reads h (16 KiB) and writes r (16 KiB); x (4 KiB) is freed after
      // the first MatMul.
      CHECK(m.activations_gib * GiB == doctest::Approx(32 * KiB));
      CHECK(m.gradients_gib == 0);
      CHECK(m.optimizer_gib == 0);
    } else {
      // Kept for backward: x (the first MatMul's input) and r (Relu's output, the second
      // MatMul's input, once); the scale keeps nothing.
      CHECK(m.activations_gib * GiB == doctest::Approx(20 * KiB));
      CHECK(m.gradients_gib * GiB == doctest::Approx(2 * 1024 * KiB));
      CHECK(m.optimizer_gib * GiB == doctest::Approx(4 * 1024 * KiB));  // Adam: two FP32 moments
    }
    CHECK(m.capacity_gib == 0.5);
    CHECK(m.fits());
    MemoryFootprint small = m;
    small.capacity_gib = m.total_gib() / 2.5;
    CHECK_FALSE(small.fits());
    CHECK(small.gpus_to_hold() == 3);
  }
}

TEST_CASE("api: 16-bit training holds an FP32 master copy beside the optimizer's state, and says so") {
  LoadedModel m = load_model(test::example_model());
  Options o = test::roofline_options(2, 128, Mode::training);
  const Gpu gpu = GpuDatabase::builtin().resolve("h100");
  const Report fp32 = analyze(m, gpu, o);
  o.dtype = DType::bf16;
  const Report bf16 = analyze(m, gpu, o);
  REQUIRE(fp32.memory);
  REQUIRE(bf16.memory);
  CHECK_FALSE(fp32.memory->master_weights);
  CHECK(fp32.memory->optimizer_gib == 0);  // plain SGD keeps nothing
  CHECK(bf16.memory->master_weights);
  CHECK(bf16.memory->optimizer_gib == doctest::Approx(2 * bf16.memory->gradients_gib));  // 4 bytes a 2-byte parameter
  CHECK(memory_text(*bf16.memory).find("sgd state and FP32 master weights") != std::string::npos);
}

TEST_CASE("api: memory footprint counts weights held in Constant nodes as weights, not activations") {
  // x[4,256] -> MatMul W[256,1024] -> out, W an initializer or a Constant node's output (as
  // some exporters write weights): the same weights, the same activations.
  const double KiB = 1024, GiB = 1024.0 * 1024 * 1024;
  for (const bool constant_node : {false, true}) {
    INFO((constant_node ? "Constant node" : "initializer"));
    test::IrGraph b;
    const std::string x = b.input("x", {4, 256});
    std::string w = "W";
    if (constant_node) b.node("Constant", {}, {b.t(w, {256, 1024})});
    else b.w(w, {256, 1024});
    b.node("MatMul", {x, w}, {b.t("out", {4, 1024})});
    b.output("out");
    const MemoryFootprint m = unfused_footprint(b);
    CHECK(m.weights_gib * GiB == doctest::Approx(1024 * KiB));
    CHECK(m.activations_gib * GiB == doctest::Approx(4 * KiB + 16 * KiB));  // x and out
  }
}

TEST_CASE("api: memory footprint keeps a tensor an If branch reads by name alive until the If") {
  // x -> Relu a -> Relu b -> Relu c -> If whose branches add a and c (outer tensors read by name).
  auto branch = std::make_shared<Graph>();
  {
    test::IrGraph bb;
    bb.node("Add", {bb.t("a", {256}), bb.t("c", {256})}, {bb.t("o", {256})});
    bb.output("o");
    *branch = bb.g;
  }
  test::IrGraph b;
  b.node("Relu", {b.input("x", {256})}, {b.t("a", {256})});
  b.node("Relu", {"a"}, {b.t("b", {256})});
  b.node("Relu", {"b"}, {b.t("c", {256})});
  Node& iff = b.node("If", {b.input("cond", {}, DType::boolean)}, {b.t("out", {256})});
  Attribute g;
  g.kind = Attribute::Kind::g;
  g.graphs = {branch};
  iff.attributes["then_branch"] = g;
  iff.attributes["else_branch"] = g;
  b.output("out");
  // a (1 KiB) lives to the If, beside b and c when Relu c runs, and the condition's byte.
  CHECK(unfused_footprint(b).activations_gib * 1024.0 * 1024 * 1024 == doctest::Approx(3 * 1024 + 1));
}

TEST_CASE("api: the throughput is the step's FLOPs and samples over its latency, below the math's peak") {
  LoadedModel m = load_model(test::example_model());
  const GpuDatabase& db = GpuDatabase::builtin();
  for (const Mode mode : {Mode::inference, Mode::training})
    for (const DType dt : {DType::f32, DType::bf16})
      for (const std::string gpu : {"v100", "a100-80gb", "h100", "l4", "b200", "mi300x"}) {
        CAPTURE(gpu);
        CAPTURE(static_cast<int>(mode));
        CAPTURE(static_cast<int>(dt));
        Options o = test::roofline_options(4, 256, mode);
        o.predictor = PredictorKind::neusight;
        o.dtype = dt;
        const Report r = analyze(m, db.resolve(gpu), o);
        REQUIRE(r.throughput);
        const Throughput& t = *r.throughput;
        double flops = 0;
        for (const auto& n : r.nodes)
          for (const auto& k : n.kernels) flops += k.kernel.flops;
        CHECK(t.flops == doctest::Approx(flops));
        CHECK(t.model_flops == t.flops);  // nothing recomputed
        CHECK(t.tflops == doctest::Approx(flops * 1e-9 / r.e2e_latency_ms));
        CHECK(t.samples == 4);
        CHECK(t.tokens == 4 * 256);
        CHECK(t.tokens_per_s == doctest::Approx(4 * 256 * 1e3 / r.e2e_latency_ms));
        CHECK(t.samples_per_s_low <= t.samples_per_s);
        CHECK(t.samples_per_s <= t.samples_per_s_high);
        // No prediction beats the peak of the math its GEMMs run on (the GEMMs of this model
        // carry most of its FLOPs); BF16 on a V100 runs on the CUDA cores in FP32.
        CHECK(t.peak_math.find(dt == DType::bf16 && gpu != "v100" ? "bf16" : "fp32") == 0);
        CHECK(t.utilization() > 0.01);
        CHECK(t.utilization() < 1.0);
      }
  // Recomputed kernels count in the hardware FLOPs, not in the model FLOPs (MFU).
  Options o = test::roofline_options(4, 256, Mode::training);
  o.recompute = Recompute::full;
  const Report re = analyze(m, db.resolve("h100"), o);
  REQUIRE(re.throughput);
  CHECK(re.throughput->flops > 1.1 * re.throughput->model_flops);
  o.recompute = Recompute::none;
  const Report plain = analyze(m, db.resolve("h100"), o);
  REQUIRE(plain.throughput);
  CHECK(re.throughput->model_flops == doctest::Approx(plain.throughput->model_flops));
  // --parallel: one GPU's share of an iteration (each pipeline GPU its stage of every
  // micro-batch), samples the global batch.
  const Report par = analyze(m, db.resolve("h100"), test::roofline_options(8, 256, Mode::training, "dp=2,pp=2,microbatches=4"));
  REQUIRE(par.throughput);
  REQUIRE(par.parallel);
  CHECK(par.throughput->samples == 8);
  CHECK(par.throughput->model_flops == doctest::Approx(plain.throughput->model_flops / 2).epsilon(0.02));
  // --train-tokens: whole steps of the step's tokens at its latency (and its interval), on
  // the plan's GPUs.
  Options train = test::roofline_options(8, 256, Mode::training, "dp=2,pp=2,microbatches=4");
  train.train_tokens = 1e9;
  const Report days = analyze(m, db.resolve("h100"), train);
  REQUIRE(days.throughput);
  const Throughput& d = *days.throughput;
  const double steps = std::ceil(1e9 / (8 * 256));
  CHECK(d.gpus == 4);
  CHECK(d.train_days == doctest::Approx(steps * days.e2e_latency_ms / 86400e3));
  CHECK(d.gpu_hours == doctest::Approx(d.train_days * 24 * 4));
  CHECK(d.train_days_low <= d.train_days * (1 + 1e-12));  // the roofline gives no interval
  CHECK(d.train_days_high >= d.train_days * (1 - 1e-12));
  // It needs the step's tokens (a ViT's batch has images, not tokens), in training.
  const LoadedModel vit = build_model(parse_hf_config(R"({"model_type": "vit", "hidden_size": 192, "num_hidden_layers": 2,
      "num_attention_heads": 3, "intermediate_size": 768, "image_size": 224, "patch_size": 16, "num_channels": 3})", "vit"));
  Options images = test::roofline_options(2, -1, Mode::training);
  const Report v = analyze(vit, db.resolve("h100"), images);
  REQUIRE(v.throughput);
  CHECK(v.throughput->samples == 2);
  CHECK(v.throughput->tokens == 0);
  images.train_tokens = 1e9;
  CHECK_THROWS_AS(analyze(vit, db.resolve("h100"), images), InputError);
  Options infer = test::roofline_options(4, 256);
  infer.train_tokens = 1e9;
  CHECK_THROWS_AS(analyze(m, db.resolve("h100"), infer), InputError);
  // --shape sets the batch and sequence dims by name: its samples and tokens.
  Options fixed = test::roofline_options(4, 256);
  fixed.dims.batch = fixed.dims.seq = -1;
  fixed.dims.shapes["input_ids"] = {2, 64};
  const Report f = analyze(m, db.resolve("h100"), fixed);
  REQUIRE(f.throughput);
  CHECK(f.throughput->samples == 2);
  CHECK(f.throughput->tokens == 2 * 64);
  CHECK(f.throughput->tflops > 0);
}

TEST_CASE("api: --sparsity 2:4 never predicts slower, and at most twice as fast, on every GPU") {
  LoadedModel m = load_model(test::example_model());
  for (const Gpu& gpu : GpuDatabase::builtin().all()) {
    CAPTURE(gpu.name);
    for (const int64_t batch : {1, 8}) {
      Options o = test::roofline_options(batch, 512);
      o.predictor = PredictorKind::neusight;
      o.dtype = DType::bf16;
      o.timing = Timing::kernel;
      const Report dense = analyze(m, gpu, o);
      o.sparsity.two_four = true;
      const Report sparse = analyze(m, gpu, o);
      REQUIRE(sparse.sparsity);
      CHECK(sparse.sparsity->pruned_gemms == 12 * 4);  // GPT-2's four linear layers a block; not the head
      CHECK(sparse.e2e_latency_ms <= dense.e2e_latency_ms);
      CHECK(sparse.e2e_latency_ms >= 0.5 * dense.e2e_latency_ms);
      REQUIRE(sparse.memory);
      REQUIRE(dense.memory);
      const bool units = has_sparse_matrix_units(gpu, DType::bf16);
      if (!units) {
        // No sparse units for its math: dense, held dense, and a warning says so.
        CHECK(sparse.e2e_latency_ms == doctest::Approx(dense.e2e_latency_ms));
        CHECK(sparse.sparsity->sparse_gemms == 0);
        CHECK(sparse.memory->weights_gib == doctest::Approx(dense.memory->weights_gib));
        CHECK(std::any_of(sparse.warnings.begin(), sparse.warnings.end(),
                          [](const std::string& w) { return w.find("no sparse matrix units") != std::string::npos; }));
      } else {
        CHECK(sparse.sparsity->sparse_gemms > 0);
        CHECK(sparse.memory->weights_gib < dense.memory->weights_gib);
        CHECK(sparse.memory->weights_gib == doctest::Approx(dense.memory->weights_gib - sparse.sparsity->weights_saved_gib));
      }
      // Each pruned GEMM: never slower than its dense self, at most twice as fast.
      std::map<std::string, double> dense_ms;
      for (const auto& n : dense.nodes)
        for (const auto& k : n.kernels)
          if (k.kernel.cls == KernelClass::gemm) dense_ms[n.name] += k.prediction.latency_ms;
      for (const auto& n : sparse.nodes)
        for (const auto& k : n.kernels) {
          if (!k.kernel.sparse_2_4) continue;
          CHECK(units);
          CHECK(k.prediction.latency_ms <= dense_ms[n.name]);
          CHECK(k.prediction.latency_ms >= 0.5 * dense_ms[n.name] * (1 - 1e-9));
        }
    }
  }
}
