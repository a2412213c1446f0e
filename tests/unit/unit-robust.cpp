// unit-robust.cpp - the pipeline never crashes: mutated bytes, overflowing dims, cycles,
// deep subgraph nesting, long chains. Every failure must be InputError or RuntimeError.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "neusight/neusight.h"
#include "onnx_proto.h"
#include "test_util.h"

using namespace neusight;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// What the CLI does with a model, on bytes. Returns "ok", "input" or "runtime"; any other
// exception escapes and fails the test.
std::string pipeline(const LoadedModel& m, int64_t batch = 2, int64_t seq = 8) {
  try {
    Options o;
    o.dims.batch = batch;
    o.dims.seq = seq;
    o.predictor = PredictorKind::roofline;
    const Analysis a = prepare(m, o);
    const Report r = predict(a, m.model, GpuDatabase::builtin().resolve("b200"), o);
    (void)format_json({r});
    CHECK(std::isfinite(r.e2e_latency_ms));
    CHECK(r.e2e_latency_ms >= 0);
    return "ok";
  } catch (const InputError&) {
    return "input";
  } catch (const RuntimeError&) {
    return "runtime";
  }
}

std::string pipeline_bytes(const std::string& bytes) {
  try {
    return pipeline(load_model_from_bytes(bytes, "mutant"));
  } catch (const InputError&) {
    return "input";
  } catch (const RuntimeError&) {
    return "runtime";
  }
}

onnx::ValueInfoProto* add_value(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name,
                                std::initializer_list<int64_t> dims, bool with_shape = true) {
  auto* v = list->Add();
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  if (with_shape) {
    auto* sh = tt->mutable_shape();
    for (auto d : dims) {
      if (d < 0) sh->add_dim()->set_dim_param(d == -1 ? "batch" : "sequence");
      else sh->add_dim()->set_dim_value(d);
    }
  }
  return v;
}

onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op, std::initializer_list<std::string> in,
                          std::initializer_list<std::string> out, const std::string& name) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& s : in) n->add_input(s);
  for (const auto& s : out) n->add_output(s);
  return n;
}

onnx::ModelProto base_model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  m.mutable_graph()->set_name("robust");
  return m;
}

}  // namespace

TEST_CASE("robust: empty, tiny and random byte strings are input errors") {
  CHECK(pipeline_bytes("") == "input");
  CHECK(pipeline_bytes(std::string(1, '\0')) == "input");
  CHECK(pipeline_bytes("\x08\x08") == "input");  // ir_version only: no graph
  std::mt19937_64 rng(7);
  for (int i = 0; i < 50; ++i) {
    std::string s(1 + rng() % 2000, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    CHECK(pipeline_bytes(s) != "runtime");
  }
}

TEST_CASE("robust: truncated and bit-flipped copies of the example never escape as other errors") {
  const std::string bytes = read_bytes(test::example_model());
  REQUIRE(bytes.size() > 1000);
  CHECK(pipeline_bytes(bytes) == "ok");
  // Truncation at spread-out points: every prefix is an input error.
  for (size_t cut : {size_t(1), size_t(2), size_t(10), bytes.size() / 7, bytes.size() / 2, bytes.size() - 3})
    CHECK(pipeline_bytes(bytes.substr(0, cut)) == "input");
  // Byte mutations at deterministic pseudo-random positions: anything but a crash or a
  // foreign exception is fine (many mutants are still valid models).
  std::mt19937_64 rng(20261129);
  int ok = 0;
  for (int i = 0; i < 60; ++i) {
    std::string m = bytes;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) m[rng() % m.size()] = static_cast<char>(rng());
    const std::string r = pipeline_bytes(m);
    ok += r == "ok";
    CHECK(r != "runtime");
  }
  CHECK(ok > 0);  // the check above ran real analyses, not only parse failures
}

TEST_CASE("robust: cycles are input errors naming the cycle") {
  onnx::ModelProto m = base_model();
  auto* g = m.mutable_graph();
  add_value(g->mutable_input(), "X", {2, 2});
  add_value(g->mutable_output(), "B", {}, false);
  add_node(g, "Add", {"X", "B"}, {"A"}, "a");
  add_node(g, "Relu", {"A"}, {"B"}, "b");
  try {
    load_model_from_proto(m, "cyclic");
    FAIL("a cyclic graph loaded");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("cycle") != std::string::npos);
  }
  onnx::ModelProto s = base_model();
  add_value(s.mutable_graph()->mutable_input(), "X", {2});
  add_value(s.mutable_graph()->mutable_output(), "A", {}, false);
  add_node(s.mutable_graph(), "Add", {"X", "A"}, {"A"}, "self");
  CHECK_THROWS_AS(load_model_from_proto(s, "self"), InputError);
}

TEST_CASE("robust: deeply nested subgraphs are bounded (input error, no stack overflow)") {
  // 500 nested If bodies: far beyond any real model and beyond protobuf's parse limit.
  onnx::GraphProto inner;
  inner.set_name("leaf");
  add_node(&inner, "Identity", {"X"}, {"Z"}, "leaf");
  add_value(inner.mutable_output(), "Z", {2});
  for (int depth = 0; depth < 500; ++depth) {
    onnx::GraphProto outer;
    outer.set_name("g" + std::to_string(depth));
    auto* n = add_node(&outer, "If", {"C"}, {"Z"}, "if" + std::to_string(depth));
    auto* a = n->add_attribute();  // one branch is enough to nest (and keeps the size linear)
    a->set_name("then_branch");
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = std::move(inner);
    add_value(outer.mutable_output(), "Z", {2});
    inner = std::move(outer);
  }
  onnx::ModelProto m = base_model();
  auto* g = m.mutable_graph();
  *g = std::move(inner);
  add_value(g->mutable_input(), "X", {2});
  {
    auto* c = g->add_initializer();
    c->set_name("C");
    c->set_data_type(onnx::TensorProto::BOOL);
    c->add_int32_data(1);
  }
  CHECK_THROWS_AS(load_model_from_proto(m, "deep"), InputError);
  // Through bytes, protobuf's own recursion limit answers first: still an input error.
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  CHECK(pipeline_bytes(bytes) == "input");
}

TEST_CASE("robust: a 20,000-node chain stored in reverse order sorts and analyses") {
  onnx::ModelProto m = base_model();
  auto* g = m.mutable_graph();
  const int n = 20000;
  add_value(g->mutable_input(), "t0", {-1, 64});
  add_value(g->mutable_output(), "t" + std::to_string(n), {}, false);
  for (int i = n; i >= 1; --i)  // consumers before producers: the loader must topologically sort
    add_node(g, i % 2 ? "Relu" : "Neg", {"t" + std::to_string(i - 1)}, {"t" + std::to_string(i)}, "n" + std::to_string(i));
  const LoadedModel lm = load_model_from_proto(m, "chain");
  REQUIRE(lm.model.graph.nodes.size() == size_t(n));
  CHECK(lm.model.graph.nodes.front().name == "n1");
  CHECK(lm.model.graph.nodes.back().name == "n" + std::to_string(n));
  CHECK(pipeline(lm, 4, 1) == "ok");
}

TEST_CASE("robust: unknown ops are listed and still get a node, shapes flow around them") {
  onnx::ModelProto m = base_model();
  auto* dom = m.add_opset_import();
  dom->set_domain("org.example");
  dom->set_version(1);
  auto* g = m.mutable_graph();
  add_value(g->mutable_input(), "X", {-1, 8});
  add_value(g->mutable_output(), "Y", {}, false);
  add_node(g, "Relu", {"X"}, {"A"}, "r");
  add_node(g, "Frobnicate", {"A"}, {"B"}, "frob")->set_domain("org.example");
  add_node(g, "Neg", {"A"}, {"Y"}, "neg");
  const LoadedModel lm = load_model_from_proto(m, "unknown");
  Options o;
  o.dims.batch = 3;
  o.predictor = PredictorKind::roofline;
  const Report r = analyze(lm, GpuDatabase::builtin().resolve("b200"), o);
  REQUIRE(r.unknown_ops.size() == 1);
  CHECK(r.unknown_ops[0].find("Frobnicate") != std::string::npos);
  REQUIRE(r.nodes.size() == 3);
  CHECK(r.nodes[1].name == "frob");
  CHECK(r.nodes[2].outputs.at(0).shape.at(0).value == 3);
  CHECK(r.e2e_latency_ms > 0);
}

TEST_CASE("robust: float initializers beyond int64 load without undefined behaviour") {
  // Regression (UBSan): the loader keeps integral float values for shape arithmetic and used
  // to cast -FLT_MAX to int64 before checking the range.
  onnx::ModelProto m = base_model();
  auto* g = m.mutable_graph();
  add_value(g->mutable_input(), "X", {4});
  add_value(g->mutable_output(), "Y", {}, false);
  auto add_float = [&](const std::string& name, std::initializer_list<float> values) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (float v : values) t->add_float_data(v);
  };
  add_float("huge", {-3.40282e38f, 1e30f, std::nanf(""), 2.0f});
  add_float("small", {2.0f, -3.0f, 4.0f, 5.0f});
  add_node(g, "Add", {"X", "huge"}, {"A"}, "add");
  add_node(g, "Mul", {"A", "small"}, {"Y"}, "mul");
  const LoadedModel lm = load_model_from_proto(m, "floats");
  CHECK_FALSE(lm.model.graph.find("huge")->int_value.has_value());
  REQUIRE(lm.model.graph.find("small")->int_value.has_value());
  CHECK(*lm.model.graph.find("small")->int_value == std::vector<int64_t>{2, -3, 4, 5});
  CHECK(pipeline(lm) == "ok");
}
