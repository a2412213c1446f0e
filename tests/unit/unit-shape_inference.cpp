// unit-shape_inference.cpp - dim binding and shape propagation.
#include <doctest/doctest.h>

#include <cctype>

#include "neusight/onnx_frontend.h"
#include "neusight/shape_inference.h"
#include "lowering_graph.h"
#include "test_util.h"

using namespace neusight;

TEST_CASE("shape inference: GPT-2 example resolves every tensor once batch and sequence are bound") {
  LoadedModel m = load_model(test::example_model());
  Graph g = m.model.graph;
  DimBindings b;
  b.batch = 2;
  b.seq = 128;
  bind_dims(g, b);
  ShapeResult r = infer_shapes(g, m.model);
  CHECK(r.unknown_ops.empty());
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs) {
      const TensorInfo* t = g.find(o);
      REQUIRE(t);
      INFO(o);
      CHECK(t->fully_known());
    }
  const TensorInfo* logits = g.find("logits");
  REQUIRE(logits);
  REQUIRE(logits->shape.size() == 3);
  CHECK(logits->shape[0].value == 2);
  CHECK(logits->shape[1].value == 128);
  CHECK(logits->shape[2].value == 50257);
}

TEST_CASE("shape inference: unbound dims are reported by name") {
  LoadedModel m = load_model(test::example_model());
  Graph g = m.model.graph;
  DimBindings b;
  b.batch = 2;
  CHECK_THROWS_WITH_AS(bind_dims(g, b), doctest::Contains("sequence"), InputError);
}

TEST_CASE("shape inference: --batch / --seq bind by position and say where a dim is named for them") {
  // [sequence_len, batch, 100] (TensorRT's Polygraphy attention example): by the CLI contract
  // --batch binds the first symbolic dim, --seq the second; the error (or the warning, when
  // both are bound) says which names they took.
  auto graph = [] {
    Graph g;
    g.inputs = {"input"};
    TensorInfo& t = g.tensor("input");
    t.dtype = DType::f32;
    t.has_shape = true;
    t.shape = {Dim::sym("sequence_len"), Dim::sym("batch"), Dim::of(100)};
    return g;
  };
  Graph g = graph();
  DimBindings b;
  b.batch = 8;
  CHECK_THROWS_WITH_AS(bind_dims(g, b), doctest::Contains("--batch bound 'sequence_len' (the first symbolic input dim), not 'batch': --dim batch=N binds a dim by name"), InputError);
  g = graph();
  b.seq = 4;
  const auto warnings = bind_dims(g, b);
  CHECK(g.find("input")->shape[0].value == 8);  // positions, as the contract says
  CHECK(g.find("input")->shape[1].value == 4);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("--batch bound 'sequence_len'") != std::string::npos);
  CHECK(warnings[0].find("--seq bound 'batch' (the second symbolic input dim), not 'sequence_len'") != std::string::npos);
  // Named by --dim: nothing to say.
  g = graph();
  DimBindings named;
  named.named = {{"batch", 2}, {"sequence_len", 16}};
  CHECK(bind_dims(g, named).empty());
  // Named in the usual order: no hint.
  g = graph();
  g.tensor("input").shape = {Dim::sym("batch_size"), Dim::sym("sequence_length"), Dim::of(100)};
  CHECK(bind_dims(g, b).empty());
}

TEST_CASE("shape inference: the batch and sequence length bound, for a report's samples and tokens") {
  auto graph = [](std::vector<Dim> dims) {
    Graph g;
    g.inputs = {"input"};
    TensorInfo& t = g.tensor("input");
    t.dtype = DType::f32;
    t.has_shape = true;
    t.shape = std::move(dims);
    return g;
  };
  // --batch / --seq where they bind a dim, whatever its name.
  Graph g = graph({Dim::sym("n"), Dim::sym("t"), Dim::of(100)});
  DimBindings b;
  b.batch = 8;
  b.seq = 4;
  BoundDims bound;
  bind_dims(g, b, &bound);
  CHECK(bound.batch == 8);
  CHECK(bound.seq == 4);
  // --dim or --shape on dims named like a batch and a sequence.
  g = graph({Dim::sym("batch_size"), Dim::sym("sequence_length"), Dim::of(100)});
  DimBindings named;
  named.named = {{"batch_size", 2}, {"sequence_length", 16}};
  bind_dims(g, named, &bound);
  CHECK(bound.batch == 2);
  CHECK(bound.seq == 16);
  g = graph({Dim::sym("batch"), Dim::sym("sequence"), Dim::of(100)});
  DimBindings shaped;
  shaped.shapes["input"] = {3, 7, 100};
  bind_dims(g, shaped, &bound);
  CHECK(bound.batch == 3);
  CHECK(bound.seq == 7);
  // Fixed dims, or --batch that binds nothing, or dims named otherwise: not known.
  g = graph({Dim::of(1), Dim::of(3), Dim::of(224)});
  bind_dims(g, b, &bound);
  CHECK(bound.batch == 0);
  CHECK(bound.seq == 0);
  g = graph({Dim::sym("height"), Dim::of(3)});
  DimBindings h;
  h.named = {{"height", 224}};
  bind_dims(g, h, &bound);
  CHECK(bound.batch == 0);
  CHECK(bound.seq == 0);
}

namespace {
std::vector<int64_t> dims_of(const TensorInfo* t) {
  std::vector<int64_t> v;
  for (const Dim& d : t->shape) v.push_back(d.known() ? d.value : -1);
  return v;
}
// A Conv/ConvTranspose/MaxPool graph on a 2x16x32x32 input; the output shape is inferred.
ShapeResult infer_window(const std::string& op, std::vector<int64_t> w_dims, const std::string& attr,
                         std::vector<int64_t> values, Graph* out = nullptr) {
  test::IrGraph b;
  std::vector<std::string> in = {b.input("x", {2, 16, 32, 32})};
  if (op != "MaxPool") in.push_back(b.w("w", w_dims));
  Node& n = b.node(op, in, {"y"});
  if (op == "MaxPool") n.attributes["kernel_shape"] = test::attr_ints({3, 3});
  if (!attr.empty()) n.attributes[attr] = test::attr_ints(values);
  b.output("y");
  Model m;
  m.opsets[""] = 17;
  ShapeResult r = infer_shapes(b.g, m);
  if (out) *out = b.g;
  return r;
}
}  // namespace

TEST_CASE("shape inference: Conv / ConvTranspose / pooling windows are validated, never divided by zero") {
  Graph g;
  infer_window("Conv", {32, 16, 3, 3}, "strides", {2, 2}, &g);
  REQUIRE(g.find("y"));
  CHECK(dims_of(g.find("y")) == std::vector<int64_t>{2, 32, 15, 15});
  infer_window("ConvTranspose", {16, 8, 2, 2}, "strides", {2, 2}, &g);
  CHECK(dims_of(g.find("y")) == std::vector<int64_t>{2, 8, 64, 64});
  infer_window("MaxPool", {}, "pads", {1, 1, 1, 1}, &g);
  CHECK(dims_of(g.find("y")) == std::vector<int64_t>{2, 16, 32, 32});
  // Found by the fuzzer (fuzz/regressions/conv-*.onnx): each was a crash before.
  CHECK_THROWS_WITH_AS(infer_window("Conv", {}, "", {}), doctest::Contains("weight of rank 0"), InputError);
  CHECK_THROWS_WITH_AS(infer_window("ConvTranspose", {16}, "", {}), doctest::Contains("weight of rank 1"), InputError);
  CHECK_THROWS_WITH_AS(infer_window("Conv", {32, 16, 3, 3}, "strides", {0, 1}), doctest::Contains("strides"), InputError);
  CHECK_THROWS_WITH_AS(infer_window("MaxPool", {}, "strides", {1, 0}), doctest::Contains("strides"), InputError);
  CHECK_THROWS_WITH_AS(infer_window("Conv", {32, 16, 3, 3}, "dilations", {1, 1, 1}), doctest::Contains("dilations"), InputError);
  CHECK_THROWS_WITH_AS(infer_window("Conv", {32, 16, 3, 3}, "pads", {-1, 0, 0, 0}), doctest::Contains("pads"), InputError);
  // Huge strides on a transposed conv overflow 2^62: an input error, not wrapped arithmetic.
  CHECK_THROWS_WITH_AS(infer_window("ConvTranspose", {16, 8, 2, 2}, "strides", {int64_t(1) << 61, 1}),
                       doctest::Contains("out of range"), InputError);
}

TEST_CASE("shape inference: a window wider than its padded input has no output position") {
  // 32 + pads 1 + 1 against a 33-wide kernel: two positions at stride 1, one at stride 2.
  Graph g;
  infer_window("Conv", {32, 16, 33, 33}, "pads", {1, 1, 1, 1}, &g);
  CHECK(dims_of(g.find("y")) == std::vector<int64_t>{2, 32, 2, 2});
  // Without the pads a 33-wide kernel has no position on 32 (the output was an unknown dim).
  CHECK_THROWS_WITH_AS(infer_window("Conv", {32, 16, 33, 33}, "", {}), doctest::Contains("wider than the padded input"),
                       InputError);
  CHECK_THROWS_WITH_AS(infer_window("Conv", {32, 16, 3, 3}, "dilations", {16, 1}),
                       doctest::Contains("spatial axis 0: a kernel spanning 33"), InputError);
  // A 3x3 MaxPool dilated by 16 spans 33 of the 32 (truncating division gave it one position).
  CHECK_THROWS_WITH_AS(infer_window("MaxPool", {}, "dilations", {1, 16}), doctest::Contains("spatial axis 1"), InputError);
}

TEST_CASE("shape inference: a MatMul or broadcast mismatch names both operands' shapes") {
  // TensorRT's Polygraphy attention head: Transpose without perm reverses [seq, batch, 100], so
  // q [seq, batch, 100] x k_T [100, batch, seq] only fits batch = 100; the operands say why.
  test::IrGraph b;
  b.input("q", {64, 2, 100});
  b.input("kt", {100, 2, 64});
  b.node("MatMul", {"q", "kt"}, {"y"});
  b.output("y");
  Model m;
  m.opsets[""] = 17;
  CHECK_THROWS_WITH_AS(infer_shapes(b.g, m), "node 'MatMul_0' (MatMul): inner dimensions differ (100 vs 2: [64,2,100] x [100,2,64])",
                       InputError);
  test::IrGraph a;
  a.input("x", {2, 3});
  a.input("z", {4, 3});
  a.node("Add", {"x", "z"}, {"y"});
  a.output("y");
  CHECK_THROWS_WITH_AS(infer_shapes(a.g, m), doctest::Contains("shapes cannot broadcast (2 vs 4: [2,3] and [4,3])"), InputError);
}

TEST_CASE("shape inference: a Gemm checks K and its bias against the output") {
  // SSR-Net's heads (npm faceplugin-face-recognition-js, fr_gender.onnx) flatten to [1, -1]:
  // at batch 8 the batch lands in K, which the weight does not have (onnxruntime: "GEMM:
  // Dimension mismatch"); the Gemm gave a [1, 3] output and the run priced it.
  Model m;
  m.opsets[""] = 13;
  auto gemm = [&](std::vector<int64_t> a, std::vector<int64_t> w, std::vector<int64_t> bias) {
    test::IrGraph b;
    b.input("a", a);
    std::vector<std::string> in = {"a", b.w("w", w)};
    if (!bias.empty()) in.push_back(b.w("c", bias));
    b.node("Gemm", in, {"y"}).attributes["transB"] = test::attr_int(1);
    b.output("y");
    infer_shapes(b.g, m);
    return dims_of(b.g.find("y"));
  };
  CHECK(gemm({8, 160}, {3, 160}, {3}) == std::vector<int64_t>{8, 3});
  CHECK(gemm({8, 160}, {3, 160}, {8, 1}) == std::vector<int64_t>{8, 3});
  CHECK_THROWS_WITH_AS(gemm({1, 1280}, {3, 160}, {3}),
                       "node 'Gemm_0' (Gemm): inner dimensions differ (1280 vs 160: [1,1280] x [3,160] transposed)", InputError);
  CHECK_THROWS_WITH_AS(gemm({8, 160}, {3, 160}, {4}), doctest::Contains("bias C [4] does not broadcast to the output [8,3]"),
                       InputError);
  // A and B are matrices: a batched operand is MatMul's, which onnxruntime refuses for Gemm.
  CHECK_THROWS_WITH_AS(gemm({2, 8, 160}, {3, 160}, {3}), doctest::Contains("A [2,8,160] has rank 3 (Gemm takes 2-D A and B"),
                       InputError);
  CHECK_THROWS_WITH_AS(gemm({8, 160}, {160}, {}), doctest::Contains("B [160] has rank 1"), InputError);
}

TEST_CASE("shape inference: channels, norm parameters, Concat operands and Split sizes are checked as runtimes check them") {
  // faceplugin's fr_expression.onnx (npm faceplugin-face-recognition-js) bound to a one-channel
  // image (--shape input=1x1x224x224) was priced as if its first 7x7 Conv had three channels.
  Model m;
  m.opsets[""] = 13;
  auto conv = [&](const std::string& op, std::vector<int64_t> w, int64_t group) {
    test::IrGraph b;
    b.input("x", {1, 8, 16, 16});
    b.node(op, {"x", b.w("w", w)}, {"y"}).attributes["group"] = test::attr_int(group);
    b.output("y");
    infer_shapes(b.g, m);
    return dims_of(b.g.find("y"));
  };
  CHECK(conv("Conv", {12, 2, 3, 3}, 4) == std::vector<int64_t>{1, 12, 14, 14});
  CHECK(conv("ConvTranspose", {8, 3, 2, 2}, 2) == std::vector<int64_t>{1, 6, 17, 17});
  CHECK_THROWS_WITH_AS(conv("Conv", {64, 3, 7, 7}, 1),
                       "node 'Conv_0' (Conv): an input of 8 channels [1,8,16,16] for a weight [64,3,7,7] made for 3 channels",
                       InputError);
  CHECK_THROWS_WITH_AS(conv("Conv", {6, 2, 3, 3}, 3), doctest::Contains("in 3 groups made for 6 channels"), InputError);
  CHECK_THROWS_WITH_AS(conv("Conv", {6, 2, 3, 3}, 4), doctest::Contains("does not split into 4 groups"), InputError);
  CHECK_THROWS_WITH_AS(conv("ConvTranspose", {4, 6, 2, 2}, 1), doctest::Contains("made for 4 channels"), InputError);
  // A U-Net's skip concatenated at an odd size; a Split whose sizes miss the axis.
  test::IrGraph c;
  c.input("a", {1, 8, 16, 16});
  c.input("b", {1, 8, 15, 16});
  c.node("Concat", {"a", "b"}, {"y"}).attributes["axis"] = test::attr_int(1);
  c.output("y");
  CHECK_THROWS_WITH_AS(infer_shapes(c.g, m), doctest::Contains("inputs differ on axis 2 ([1,8,16,16] and [1,8,15,16]"),
                       InputError);
  // Per-channel parameters of a normalization: the fourth of BatchNormalization's is the mean.
  for (const char* op : {"BatchNormalization", "InstanceNormalization"}) {
    test::IrGraph n;
    n.input("x", {1, 8, 16, 16});
    const bool bn = std::string(op) == "BatchNormalization";
    std::vector<std::string> in = {"x", n.w("s", {8}), n.w("b", {8})};
    if (bn) in.insert(in.end(), {n.w("mean", {4}), n.w("var", {8})});
    n.node(op, in, {"y"});
    n.output("y");
    if (bn) CHECK_THROWS_WITH_AS(infer_shapes(n.g, m), doctest::Contains("mean [4] for the 8 channels of [1,8,16,16]"), InputError);
    else CHECK(infer_shapes(n.g, m).unknown_ops.empty());
  }
  test::IrGraph sp;
  sp.input("x", {1, 8, 16, 16});
  sp.node("Split", {"x", sp.ints("s", {3, 3})}, {"y", "z"}).attributes["axis"] = test::attr_int(1);
  sp.output("y");
  CHECK_THROWS_WITH_AS(infer_shapes(sp.g, m), doctest::Contains("split sizes [3,3] for 2 outputs of axis 1"), InputError);
}

TEST_CASE("shape inference: a constant Gather index past its axis and a Tile of too few repeats are errors") {
  // onnxruntime refuses both ("indices element out of data bounds", "'Repeats' input has
  // incorrect number of values"); the Gather gave a shape and the Tile unknown dims.
  Model m;
  m.opsets[""] = 13;
  auto run = [&](const std::string& op, std::vector<int64_t> v) {
    test::IrGraph b;
    b.input("x", {1, 8, 16, 16});
    Node& n = b.node(op, {"x", b.ints("i", v)}, {"y"});
    if (op == "Gather") n.attributes["axis"] = test::attr_int(1);
    b.output("y");
    infer_shapes(b.g, m);
    return dims_of(b.g.find("y"));
  };
  CHECK(run("Gather", {7, -8}) == std::vector<int64_t>{1, 2, 16, 16});
  CHECK_THROWS_WITH_AS(run("Gather", {8}), "node 'Gather_0' (Gather): index 8 out of range for axis 1 of [1,8,16,16]",
                       InputError);
  CHECK_THROWS_WITH_AS(run("Gather", {-9}), doctest::Contains("index -9 out of range"), InputError);
  CHECK(run("Tile", {2, 1, 1, 2}) == std::vector<int64_t>{2, 8, 16, 32});
  CHECK_THROWS_WITH_AS(run("Tile", {2, 2}), doctest::Contains("2 repeats for an input of rank 4 [1,8,16,16]"), InputError);
}

TEST_CASE("shape inference: a PRelu slope, Resize scales and Einsum labels that cannot apply are errors") {
  // onnxruntime refuses each; before, PRelu and Einsum gave a shape and Resize a wrong one.
  Model m;
  m.opsets[""] = 13;
  auto prelu = [&](std::vector<int64_t> slope) {
    test::IrGraph b;
    b.input("x", {1, 8, 16, 16});
    b.node("PRelu", {"x", b.w("s", slope)}, {"y"});
    b.output("y");
    infer_shapes(b.g, m);
    return dims_of(b.g.find("y"));
  };
  CHECK(prelu({8, 1, 1}) == std::vector<int64_t>{1, 8, 16, 16});
  CHECK(prelu({1}) == std::vector<int64_t>{1, 8, 16, 16});
  CHECK_THROWS_WITH_AS(prelu({8}), doctest::Contains("cannot broadcast (16 vs 8"), InputError);
  auto resize = [&](std::vector<int64_t> scales) {
    test::IrGraph b;
    b.input("x", {1, 8, 16, 16});
    b.node("Resize", {"x", "", b.ints("scales", scales)}, {"y"});
    b.g.tensor("scales").dtype = DType::f32;
    b.output("y");
    infer_shapes(b.g, m);
    return dims_of(b.g.find("y"));
  };
  CHECK(resize({1, 1, 2, 2}) == std::vector<int64_t>{1, 8, 32, 32});
  CHECK_THROWS_WITH_AS(resize({2, 2}), doctest::Contains("scales has 2 values for a rank-4 input"), InputError);
  auto einsum = [&](std::vector<int64_t> b_dims) {
    test::IrGraph b;
    b.input("a", {4, 8});
    b.input("b", b_dims);
    b.node("Einsum", {"a", "b"}, {"y"}).attributes["equation"] = test::attr_str("ij,jk->ik");
    b.output("y");
    infer_shapes(b.g, m);
    return dims_of(b.g.find("y"));
  };
  CHECK(einsum({8, 5}) == std::vector<int64_t>{4, 5});
  CHECK_THROWS_WITH_AS(einsum({6, 5}), doctest::Contains("Einsum label 'j' is 8 in one operand and 6 in 'jk'"), InputError);
}

TEST_CASE("shape inference: a Reshape to a fixed shape of another size is an error naming both sizes") {
  // A model-zoo ResNet-50 flattens to a fixed [1, 2048]: bound to batch 128 (--shape), its
  // 262,144 pooled elements do not fit, as a runtime would refuse; a -1 or 0 target still follows.
  Model m;
  m.opsets[""] = 13;
  test::IrGraph b;
  b.input("x", {128, 2048, 1, 1});
  b.ints("fixed", {1, 2048});
  b.node("Reshape", {"x", "fixed"}, {"y"});
  b.output("y");
  CHECK_THROWS_WITH_AS(infer_shapes(b.g, m),
                       "node 'Reshape_0' (Reshape): Reshape of 262144 elements into a fixed shape of 2048 (the graph "
                       "fixes this size; the input dims bound do not fit it)",
                       InputError);
  test::IrGraph ok;
  ok.input("x", {128, 2048, 1, 1});
  ok.ints("flat", {0, -1});
  ok.node("Reshape", {"x", "flat"}, {"y"});
  ok.output("y");
  infer_shapes(ok.g, m);
  const TensorInfo* y = ok.g.find("y");
  REQUIRE(y->shape.size() == 2);
  CHECK(y->shape[0].value == 128);
  CHECK(y->shape[1].value == 2048);
}

// ---------------------------------------------------------------------------------------
// Control-flow bodies: the body tensors carry inferred shapes, so their kernels are priced.
using test::of_class;
namespace {
Attribute graph_attr(Graph g) {
  Attribute a;
  a.kind = Attribute::Kind::g;
  a.graphs = {std::make_shared<Graph>(std::move(g))};
  return a;
}
// A body input with no declared type (shape inference must supply it).
std::string bare_input(test::IrGraph& b, const std::string& name) {
  b.g.tensor(name).name = name;
  b.g.tensor(name).is_graph_input = true;
  b.g.inputs.push_back(name);
  return name;
}
KernelList infer_lower(Graph& g) {
  Model m;
  m.opsets[""] = 17;
  m.graph = g;
  infer_shapes(g, m);
  return test::lower_with(g, Fusion::none);
}
std::string test_lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}
// Kernels of one op ("Relu": the priced kernel is "relu", an unknown one keeps "Relu").
std::vector<Kernel> of_op(const KernelList& kl, const std::string& op) {
  std::vector<Kernel> v;
  for (const auto& k : kl.kernels)
    if (k.op == op || (k.cls != KernelClass::unknown && k.op == test_lower(op))) v.push_back(k);
  return v;
}
// The bytes of a lone Relu on a [rows, 4] fp32 tensor (the reference for a body's Relu).
double relu_bytes(int64_t rows) {
  test::IrGraph b;
  b.node("Relu", {b.input("x", {rows, 4})}, {b.t("y", {rows, 4})});
  const KernelList kl = test::lower_with(b.g, Fusion::none);
  REQUIRE(kl.kernels.size() == 1);
  return kl.kernels[0].bytes;
}
// Loop body: acc_out = Concat(acc_in, R) (one more row each trip), r = Relu(acc_out) scanned,
// h = MatMul(Xo, W) (outer-scope operands, the same every trip).
Graph growing_loop_body() {
  test::IrGraph body;
  bare_input(body, "i");
  bare_input(body, "cond_in");
  bare_input(body, "acc_in");
  body.node("Identity", {"cond_in"}, {"cond_out"});
  body.node("Concat", {"acc_in", "R"}, {"acc_out"}).attributes["axis"] = test::attr_int(0);
  body.node("Relu", {"acc_out"}, {"r"});
  body.node("MatMul", {"Xo", "W"}, {"h"});
  for (const char* o : {"cond_out", "acc_out", "r", "h"}) body.output(o);
  return body.g;
}
}  // namespace

TEST_CASE("control-flow bodies: Scan body gets the per-iteration slice, each trip is priced") {
  test::IrGraph body;
  bare_input(body, "s_in");
  bare_input(body, "x_in");
  body.node("MatMul", {"x_in", "W"}, {"h"});
  body.node("Add", {"s_in", "h"}, {"s_out"});
  body.node("Relu", {"s_out"}, {"y"});
  body.output("s_out");
  body.output("y");
  test::IrGraph b;
  b.w("W", {16, 16});
  Node& scan = b.node("Scan", {b.input("s0", {8, 16}), b.input("X", {5, 8, 16})}, {"s_final", "Y"});
  scan.attributes["num_scan_inputs"] = test::attr_int(1);
  scan.attributes["body"] = graph_attr(body.g);
  b.output("Y");
  const KernelList kl = infer_lower(b.g);
  CHECK(kl.unknown_ops.empty());
  CHECK(dims_of(b.g.find("Y")) == std::vector<int64_t>{5, 8, 16});
  const Graph& inferred = *b.g.nodes[0].attr("body")->graphs[0];
  CHECK(dims_of(inferred.find("x_in")) == std::vector<int64_t>{8, 16});  // scan axis removed
  CHECK(dims_of(inferred.find("h")) == std::vector<int64_t>{8, 16});
  CHECK(b.g.nodes[0].attr("body")->trips.empty());  // one body, valid for every iteration
  const auto gemms = of_class(kl, KernelClass::gemm);
  REQUIRE(gemms.size() == 5);
  for (size_t r = 0; r < gemms.size(); ++r) {
    CHECK(gemms[r].flops == doctest::Approx(2.0 * 8 * 16 * 16));
    CHECK(gemms[r].bytes == doctest::Approx(gemms[0].bytes));
    CHECK(gemms[r].steps == static_cast<int64_t>(r) + 1);
    CHECK(gemms[r].node == 0);
  }
  CHECK(of_op(kl, "Add").size() == 5);
  CHECK(of_op(kl, "Relu").size() == 5);
  CHECK(of_class(kl, KernelClass::unknown).empty());
}

TEST_CASE("control-flow bodies: an unrolled Loop whose carried value grows is priced per trip") {
  test::IrGraph b;
  b.ints("M", {3});
  b.w("R", {1, 4});
  b.input("Xo", {8, 16});  // data: a body GEMM of two weights would be folded
  b.w("W", {16, 16});
  Node& loop = b.node("Loop", {"M", "", b.input("acc0", {1, 4})}, {"acc", "rs", "hs"});
  loop.attributes["body"] = graph_attr(growing_loop_body());
  b.output("acc");
  const KernelList kl = infer_lower(b.g);
  CHECK(dims_of(b.g.find("acc")) == std::vector<int64_t>{4, 4});
  const Attribute& a = *b.g.nodes[0].attr("body");
  REQUIRE(a.trips.size() == 3);
  CHECK(dims_of(a.trips[2]->find("acc_in")) == std::vector<int64_t>{3, 4});
  CHECK(dims_of(a.graphs[0]->find("acc_in")) == std::vector<int64_t>{-1, 4});  // what every trip agrees on
  const auto relus = of_op(kl, "Relu");
  REQUIRE(relus.size() == 3);
  for (int64_t r = 0; r < 3; ++r) {
    CHECK(relus[static_cast<size_t>(r)].bytes == doctest::Approx(relu_bytes(r + 2)));
    CHECK(relus[static_cast<size_t>(r)].steps == r + 1);
  }
  const auto gemms = of_class(kl, KernelClass::gemm);
  REQUIRE(gemms.size() == 3);
  for (const auto& k : gemms) CHECK(k.flops == doctest::Approx(2.0 * 8 * 16 * 16));
  CHECK(of_class(kl, KernelClass::unknown).empty());
}

TEST_CASE("control-flow bodies: a Loop of unknown trip count keeps what every iteration agrees on") {
  test::IrGraph b;
  b.input("M", {}, DType::i64);
  b.w("R", {1, 4});
  b.input("Xo", {8, 16});  // data: a body GEMM of two weights would be folded
  b.w("W", {16, 16});
  Node& loop = b.node("Loop", {"M", "", b.input("acc0", {1, 4})}, {"acc", "rs", "hs"});
  loop.attributes["body"] = graph_attr(growing_loop_body());
  const KernelList kl = infer_lower(b.g);
  const Graph& inferred = *b.g.nodes[0].attr("body")->graphs[0];
  CHECK(dims_of(inferred.find("acc_in")) == std::vector<int64_t>{-1, 4});  // grows: dim 0 unknown
  CHECK(dims_of(inferred.find("h")) == std::vector<int64_t>{8, 16});
  const auto gemms = of_class(kl, KernelClass::gemm);
  REQUIRE(gemms.size() == 1);  // counted once (trip count unknown), priced
  CHECK(gemms[0].flops == doctest::Approx(2.0 * 8 * 16 * 16));
  const auto relus = of_op(kl, "Relu");
  REQUIRE(relus.size() == 1);
  CHECK(relus[0].cls == KernelClass::unknown);  // its shape differs per iteration: not guessed
  CHECK(relus[0].note.find("shapes not inferred") != std::string::npos);
}

TEST_CASE("control-flow bodies: If branches see outer-scope tensors, a known condition picks its branch") {
  auto make = [](bool known, bool value) {
    test::IrGraph then_b, else_b;
    then_b.node("MatMul", {"X", "W"}, {"t_out"});
    then_b.output("t_out");
    else_b.node("Relu", {"X"}, {"e_out"});
    else_b.output("e_out");
    test::IrGraph b;
    b.input("X", {8, 16});
    b.w("W", {16, 32});
    b.t("c", {}, DType::boolean);
    if (known) b.g.tensor("c").int_value = std::vector<int64_t>{value ? 1 : 0};
    Node& iff = b.node("If", {"c"}, {"out"});
    iff.attributes["then_branch"] = graph_attr(then_b.g);
    iff.attributes["else_branch"] = graph_attr(else_b.g);
    return b;
  };
  {
    test::IrGraph b = make(false, false);
    const KernelList kl = infer_lower(b.g);
    REQUIRE(kl.kernels.size() == 1);  // the dearer branch
    CHECK(kl.kernels[0].cls == KernelClass::gemm);
    CHECK(kl.kernels[0].flops == doctest::Approx(2.0 * 8 * 16 * 32));
    CHECK(kl.kernels[0].note.find("dearer") != std::string::npos);
  }
  {
    test::IrGraph b = make(true, false);
    const KernelList kl = infer_lower(b.g);
    REQUIRE(kl.kernels.size() == 1);
    CHECK(kl.kernels[0].op == "relu");
    CHECK(kl.kernels[0].cls == KernelClass::elementwise);
    CHECK(kl.kernels[0].note.find("else branch (condition known)") != std::string::npos);
    CHECK(dims_of(b.g.find("out")) == std::vector<int64_t>{8, 16});
  }
}

TEST_CASE("control-flow bodies: an op of a branch that is not priced is unknown, never the If that holds it") {
  // A known condition picks a branch holding an op of no known domain: that op is listed as
  // unknown, the If (lowered through its branch) is not.
  test::IrGraph then_b, else_b;
  then_b.node("Frobnicate", {"X"}, {"t_out"}, "com.example");
  then_b.output("t_out");
  else_b.node("Relu", {"X"}, {"e_out"});
  else_b.output("e_out");
  test::IrGraph b;
  b.input("X", {8, 16});
  b.t("c", {}, DType::boolean);
  b.g.tensor("c").int_value = std::vector<int64_t>{1};
  Node& iff = b.node("If", {"c"}, {"out"});
  iff.attributes["then_branch"] = graph_attr(then_b.g);
  iff.attributes["else_branch"] = graph_attr(else_b.g);
  const KernelList kl = infer_lower(b.g);
  REQUIRE(kl.kernels.size() == 1);
  CHECK(kl.kernels[0].cls == KernelClass::unknown);
  CHECK(kl.unknown_ops == std::vector<std::string>{"com.example.Frobnicate"});
}

TEST_CASE("shape inference: an LSTM / GRU / RNN input of a rank other than 3 cannot run") {
  // Silero VAD's LSTM cell exported as LSTM: fed a 4-D tensor (its 8 kHz branch on a 16 kHz
  // chunk), onnxruntime refuses it; the error names the node, the shape and the layout.
  for (const char* op : {"LSTM", "GRU", "RNN"}) {
    CAPTURE(op);
    const int64_t gates = std::string(op) == "LSTM" ? 4 : std::string(op) == "GRU" ? 3 : 1;
    test::IrGraph b;
    b.input("x", {1, 2, 128, 2});
    b.w("W", {1, gates * 16, 128});
    b.w("R", {1, gates * 16, 16});
    Node& n = b.node(op, {"x", "W", "R"}, {"y"});
    n.attributes["hidden_size"] = test::attr_int(16);
    b.output("y");
    Model m;
    m.opsets[""] = 14;
    CHECK_THROWS_WITH_AS(infer_shapes(b.g, m),
                         (std::string("node '") + op + "_0' (" + op + "): input X is [1,2,128,2] (rank 4); " + op +
                          " takes a rank-3 [seq, batch, input]").c_str(),
                         InputError);
    test::IrGraph ok;
    ok.input("x", {5, 2, 128});
    ok.w("W", {1, gates * 16, 128});
    ok.w("R", {1, gates * 16, 16});
    Node& k = ok.node(op, {"x", "W", "R"}, {"y"});
    k.attributes["hidden_size"] = test::attr_int(16);
    ok.output("y");
    infer_shapes(ok.g, m);
    CHECK(dims_of(ok.g.find("y")) == std::vector<int64_t>{5, 1, 2, 16});
  }
}

TEST_CASE("control-flow bodies: nested loops that expand past the kernel bound are an input error") {
  // Three nested Loops of 1000 trips around one Relu: 10^9 kernels, refused (never allocated).
  Graph inner;
  {
    test::IrGraph b;
    b.node("Relu", {b.t("x", {8, 16})}, {b.t("y", {8, 16})});
    inner = b.g;
  }
  for (int level = 0; level < 3; ++level) {
    test::IrGraph b;
    b.ints("M", {1000});
    b.node("Loop", {"M", "", b.t("x", {8, 16})}, {"y"}).attributes["body"] = graph_attr(inner);
    inner = b.g;
  }
  CHECK_THROWS_WITH_AS(test::lower_with(inner, Fusion::none), doctest::Contains("expand to more than"), InputError);
}
