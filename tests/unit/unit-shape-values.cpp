// unit-shape-values.cpp - value evaluation in shape inference: sequences and optionals,
// data-dependent ops on constants (NonMaxSuppression, Unique, StringNormalizer), float
// arithmetic, unrolled loops, and ONNX's own hints for ops without a project rule.
#include <doctest/doctest.h>

#include <initializer_list>

#include "onnx_proto.h"
#include "neusight/shape_inference.h"

using namespace neusight;

namespace {

struct Builder {
  onnx::ModelProto m;
  Builder() {
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
  }
  onnx::GraphProto& g() { return *m.mutable_graph(); }
  void floats(const std::string& name, std::initializer_list<int64_t> dims, std::initializer_list<float> v) {
    auto* t = g().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    for (float x : v) t->add_float_data(x);
  }
  void ints(const std::string& name, std::initializer_list<int64_t> dims, std::initializer_list<int64_t> v) {
    auto* t = g().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (auto d : dims) t->add_dims(d);
    for (auto x : v) t->add_int64_data(x);
  }
  void strings(const std::string& name, std::initializer_list<std::string> v) {
    auto* t = g().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::STRING);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (const auto& x : v) t->add_string_data(x);
  }
  onnx::NodeProto& node(const std::string& op, std::initializer_list<std::string> in,
                        std::initializer_list<std::string> out, onnx::GraphProto* into = nullptr) {
    auto* n = (into ? into : &g())->add_node();
    n->set_op_type(op);
    for (const auto& x : in) n->add_input(x);
    for (const auto& x : out) n->add_output(x);
    return *n;
  }
  void output(const std::string& name) { g().add_output()->set_name(name); }
};

void attr_i(onnx::NodeProto& n, const std::string& k, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(k);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

// Loads, infers (with ONNX's hints) and returns the graph.
Graph infer(const Builder& b) {
  LoadedModel lm = load_model_from_proto(b.m, "m");
  Graph g = lm.model.graph;
  bind_dims(g, DimBindings{});
  const auto hints = onnx_shape_hints(lm, g);
  infer_shapes(g, lm.model, &hints);
  return g;
}

std::vector<int64_t> dims(const Graph& g, const std::string& name) {
  const TensorInfo* t = g.find(name);
  REQUIRE(t);
  REQUIRE(t->has_shape);
  std::vector<int64_t> v;
  for (const auto& d : t->shape) v.push_back(d.value);
  return v;
}

}  // namespace

TEST_CASE("shape values: sequences keep one shape per element") {
  Builder b;
  b.floats("X", {5, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  b.ints("split", {2}, {2, 3});
  b.ints("one", {}, {1});
  auto& s = b.node("SplitToSequence", {"X", "split"}, {"S"});
  attr_i(s, "axis", 0);
  b.node("SequenceAt", {"S", "one"}, {"A"});
  b.node("SequenceLength", {"S"}, {"L"});
  b.node("SequenceErase", {"S"}, {"E"});
  b.node("SequenceInsert", {"E", "X"}, {"I"});
  auto& cat = b.node("ConcatFromSequence", {"I"}, {"C"});
  attr_i(cat, "axis", 0);
  auto& stack = b.node("ConcatFromSequence", {"S"}, {"T"});
  attr_i(stack, "axis", 1);
  attr_i(stack, "new_axis", 1);
  b.output("I");
  Graph g = infer(b);
  const TensorInfo* seq = g.find("S");
  REQUIRE(seq);
  CHECK(seq->kind == ValueKind::sequence);
  REQUIRE(seq->elements_known);
  REQUIRE(seq->elements.size() == 2);
  CHECK(seq->elements[1].shape[0].value == 3);
  CHECK(dims(g, "A") == std::vector<int64_t>{3, 2});
  REQUIRE(g.find("L")->int_value);
  CHECK(g.find("L")->int_value->at(0) == 2);
  CHECK(g.find("I")->elements.size() == 2);
  CHECK(dims(g, "C") == std::vector<int64_t>{7, 2});
  CHECK(dims(g, "T")[1] == 2);
}

TEST_CASE("shape values: a sequence position outside the sequence is an input error") {
  Builder b;
  b.floats("X", {2}, {0, 1});
  b.ints("five", {}, {5});
  b.node("SequenceConstruct", {"X", "X"}, {"S"});
  b.node("SequenceAt", {"S", "five"}, {"A"});
  b.output("A");
  LoadedModel lm = load_model_from_proto(b.m, "m");
  Graph g = lm.model.graph;
  CHECK_THROWS_AS(infer_shapes(g, lm.model), InputError);
}

TEST_CASE("shape values: optionals") {
  Builder b;
  b.floats("X", {4}, {0, 1, 2, 3});
  b.node("Optional", {"X"}, {"O"});
  b.node("OptionalHasElement", {"O"}, {"H"});
  b.node("OptionalGetElement", {"O"}, {"V"});
  b.node("Optional", {}, {"N"});
  b.node("OptionalHasElement", {"N"}, {"HN"});
  b.output("V");
  b.m.mutable_opset_import(0)->set_version(18);
  Graph g = infer(b);
  CHECK(g.find("O")->kind == ValueKind::optional);
  CHECK(g.find("H")->int_value->at(0) == 1);
  CHECK(g.find("HN")->int_value->at(0) == 0);
  CHECK(dims(g, "V") == std::vector<int64_t>{4});
}

TEST_CASE("shape values: NonMaxSuppression on constant boxes counts the selected boxes") {
  // ONNX's suppress_by_IOU example: 6 boxes, one class, 3 survive.
  Builder b;
  b.floats("boxes", {1, 6, 4}, {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, -0.1f, 1, 0.9f,
                                0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100, 1, 101});
  b.floats("scores", {1, 1, 6}, {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f});
  b.ints("max", {1}, {3});
  b.floats("iou", {1}, {0.5f});
  b.floats("score", {1}, {0.0f});
  b.node("NonMaxSuppression", {"boxes", "scores", "max", "iou", "score"}, {"sel"});
  b.node("NonMaxSuppression", {"boxes", "scores", "max", "iou"}, {"sel_all"});
  b.output("sel");
  Graph g = infer(b);
  CHECK(dims(g, "sel") == std::vector<int64_t>{3, 3});
  REQUIRE(g.find("sel")->int_value);
  CHECK(*g.find("sel")->int_value == std::vector<int64_t>{0, 0, 3, 0, 0, 0, 0, 0, 5});
  CHECK(dims(g, "sel_all") == std::vector<int64_t>{3, 3});
}

TEST_CASE("shape values: NonMaxSuppression on unknown scores keeps the rank") {
  Builder b;
  auto* in = b.g().add_input();
  in->set_name("scores");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(1);
  for (int64_t d : {1, 1, 2}) tt->mutable_shape()->add_dim()->set_dim_value(d);
  b.floats("boxes", {1, 2, 4}, {0, 0, 1, 1, 0, 0, 1, 1});
  b.ints("max", {1}, {3});
  b.node("NonMaxSuppression", {"boxes", "scores", "max"}, {"sel"});
  b.output("sel");
  Graph g = infer(b);
  const TensorInfo* t = g.find("sel");
  REQUIRE(t->has_shape);
  CHECK(t->shape.size() == 2);
  CHECK(!t->shape[0].known());
  CHECK(t->shape[1].value == 3);
}

TEST_CASE("shape values: Unique counts distinct values and slices") {
  Builder b;
  b.floats("X", {6}, {2, 1, 1, 3, 4, 3});
  b.node("Unique", {"X"}, {"Y", "idx", "inv", "cnt"});
  b.floats("M", {3, 3}, {1, 0, 0, 1, 0, 0, 2, 3, 4});
  auto& u = b.node("Unique", {"M"}, {"YM"});
  attr_i(u, "axis", 0);
  b.output("Y");
  Graph g = infer(b);
  CHECK(dims(g, "Y") == std::vector<int64_t>{4});
  CHECK(*g.find("Y")->int_value == std::vector<int64_t>{1, 2, 3, 4});
  CHECK(dims(g, "inv") == std::vector<int64_t>{6});
  CHECK(*g.find("cnt")->int_value == std::vector<int64_t>{2, 1, 2, 1});
  CHECK(dims(g, "YM") == std::vector<int64_t>{2, 3});
}

TEST_CASE("shape values: StringNormalizer removes stopwords from constant strings") {
  Builder b;
  b.strings("X", {"monday", "tuesday", "MONDAY", "wednesday"});
  auto& n = b.node("StringNormalizer", {"X"}, {"Y"});
  auto* a = n.add_attribute();
  a->set_name("stopwords");
  a->set_type(onnx::AttributeProto::STRINGS);
  a->add_strings("monday");
  b.strings("all", {"monday"});
  auto& n2 = b.node("StringNormalizer", {"all"}, {"Z"});
  *n2.add_attribute() = *a;
  b.output("Y");
  Graph g = infer(b);
  CHECK(dims(g, "Y") == std::vector<int64_t>{2});  // case-insensitive by default
  CHECK(dims(g, "Z") == std::vector<int64_t>{1});  // everything removed: one empty string
}

TEST_CASE("shape values: float constants flow through arithmetic into a trip count") {
  // Range(1, 3.5, 0.5) expanded as ONNX does: trips = ceil((limit - start) / delta) = 5.
  Builder b;
  b.floats("start", {}, {1});
  b.floats("limit", {}, {3.5f});
  b.floats("delta", {}, {0.5f});
  b.node("Sub", {"limit", "start"}, {"span"});
  b.node("Div", {"span", "delta"}, {"q"});
  b.node("Ceil", {"q"}, {"qc"});
  auto& cast = b.node("Cast", {"qc"}, {"trips"});
  attr_i(cast, "to", onnx::TensorProto::INT64);
  b.ints("shape_in", {1}, {0});
  b.node("Range", {"start", "limit", "delta"}, {"R"});
  b.output("trips");
  Graph g = infer(b);
  REQUIRE(g.find("trips")->int_value);
  CHECK(g.find("trips")->int_value->at(0) == 5);
  CHECK(dims(g, "R") == std::vector<int64_t>{5});
}

TEST_CASE("shape values: a 2-D value is sliced and transposed element by element") {
  // torch.onnx's spelling of F.pad's pads (Silero VAD's STFT): [0, 64] and zeros concatenated,
  // reshaped to [-1, 2], its rows reversed (Slice, step -1), transposed and flattened: the
  // Pad's pads [0, 0, 0, 64] are known before the run, so the padded input's shape is too.
  Builder b;
  auto* x = b.g().add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {1, 512}) x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  b.ints("m", {2, 3}, {1, 2, 3, 4, 5, 6});
  b.ints("minus1", {1}, {-1});
  b.ints("to_start", {1}, {-9223372036854775807LL});
  b.ints("ax0", {1}, {0});
  b.ints("ax1", {1}, {1});
  b.ints("one", {1}, {1});
  b.ints("three", {1}, {3});
  b.node("Slice", {"m", "minus1", "to_start", "ax0", "minus1"}, {"rows_reversed"});
  b.node("Slice", {"m", "one", "three", "ax1"}, {"cols_1_2"});
  b.node("Transpose", {"m"}, {"mt"});
  auto* perm = b.node("Transpose", {"rows_reversed"}, {"rt"}).add_attribute();
  perm->set_name("perm");
  perm->set_type(onnx::AttributeProto::INTS);
  perm->add_ints(1);
  perm->add_ints(0);
  b.ints("half", {2}, {0, 64});
  b.ints("zeros", {2}, {0, 0});
  auto& cat = b.node("Concat", {"half", "zeros"}, {"cat"});
  attr_i(cat, "axis", 0);
  b.ints("pairs", {2}, {-1, 2});
  b.node("Reshape", {"cat", "pairs"}, {"p2"});
  b.node("Slice", {"p2", "minus1", "to_start", "ax0", "minus1"}, {"p2r"});
  b.node("Transpose", {"p2r"}, {"p2t"});
  b.node("Reshape", {"p2t", "minus1"}, {"pads"});
  auto& pad = b.node("Pad", {"x", "pads"}, {"y"});
  auto* mode = pad.add_attribute();
  mode->set_name("mode");
  mode->set_type(onnx::AttributeProto::STRING);
  mode->set_s("reflect");
  for (const char* o : {"rows_reversed", "cols_1_2", "mt", "rt", "y"}) b.output(o);
  Graph g = infer(b);
  auto value = [&](const char* name) {
    const TensorInfo* t = g.find(name);
    REQUIRE(t->int_value);
    return *t->int_value;
  };
  CHECK(dims(g, "rows_reversed") == std::vector<int64_t>{2, 3});
  CHECK(value("rows_reversed") == std::vector<int64_t>{4, 5, 6, 1, 2, 3});
  CHECK(dims(g, "cols_1_2") == std::vector<int64_t>{2, 2});
  CHECK(value("cols_1_2") == std::vector<int64_t>{2, 3, 5, 6});
  CHECK(dims(g, "mt") == std::vector<int64_t>{3, 2});
  CHECK(value("mt") == std::vector<int64_t>{1, 4, 2, 5, 3, 6});
  CHECK(value("rt") == std::vector<int64_t>{4, 1, 5, 2, 6, 3});
  CHECK(value("pads") == std::vector<int64_t>{0, 0, 0, 64});
  CHECK(dims(g, "y") == std::vector<int64_t>{1, 576});
}

TEST_CASE("shape values: Split of a known value keeps each part's values") {
  // tf2onnx's spelling of a TensorFlow Pad (M-LSD's MobileNetV2 blocks): a constant pads
  // vector split into scalars and concatenated back in ONNX's order; the Pad's output shape
  // is known before the run only when the parts keep their values.
  Builder b;
  auto* x = b.g().add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {1, 96, 256, 256}) x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  b.ints("tf_pads", {8}, {0, 0, 0, 0, 0, 1, 1, 0});
  b.ints("ones", {8}, {1, 1, 1, 1, 1, 1, 1, 1});
  b.node("Split", {"tf_pads", "ones"}, {"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"});
  auto& cat = b.node("Concat", {"s0", "s3", "s1", "s2", "s4", "s7", "s5", "s6"}, {"pads"});
  attr_i(cat, "axis", 0);
  b.node("Pad", {"x", "pads"}, {"y"});
  // A 2-D value split along its second axis: each part takes its columns of every row.
  b.ints("m", {2, 3}, {1, 2, 3, 4, 5, 6});
  b.ints("cols", {2}, {1, 2});
  auto& split = b.node("Split", {"m", "cols"}, {"left", "right"});
  attr_i(split, "axis", 1);
  for (const char* o : {"y", "left", "right"}) b.output(o);
  Graph g = infer(b);
  auto value = [&](const char* name) {
    const TensorInfo* t = g.find(name);
    REQUIRE(t->int_value);
    return *t->int_value;
  };
  CHECK(value("s5") == std::vector<int64_t>{1});
  CHECK(value("pads") == std::vector<int64_t>{0, 0, 0, 0, 0, 0, 1, 1});
  CHECK(dims(g, "y") == std::vector<int64_t>{1, 96, 257, 257});
  CHECK(value("left") == std::vector<int64_t>{1, 4});
  CHECK(value("right") == std::vector<int64_t>{2, 3, 5, 6});
  CHECK(dims(g, "right") == std::vector<int64_t>{2, 2});
}

TEST_CASE("shape values: a loop with a known trip count is unrolled") {
  // Loop 4 times: carried acc = Concat(acc, iter) grows by one each iteration; scan out iter.
  Builder b;
  b.ints("M", {}, {4});
  b.ints("acc0", {0}, {});
  auto& loop = b.node("Loop", {"M", "", "acc0"}, {"acc", "iters"});
  auto* a = loop.add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto& body = *a->mutable_g();
  for (const char* n : {"i", "cond_in", "acc_in"}) body.add_input()->set_name(n);
  body.mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(7);
  body.mutable_input(1)->mutable_type()->mutable_tensor_type()->set_elem_type(9);
  body.mutable_input(2)->mutable_type()->mutable_tensor_type()->set_elem_type(7);
  for (const char* n : {"cond_out", "acc_out", "i_out"}) body.add_output()->set_name(n);
  b.node("Identity", {"cond_in"}, {"cond_out"}, &body);
  auto* axes = body.add_initializer();
  axes->set_name("axes0");
  axes->set_data_type(onnx::TensorProto::INT64);
  axes->add_dims(1);
  axes->add_int64_data(0);
  b.node("Unsqueeze", {"i", "axes0"}, {"i1"}, &body);
  auto& cat = b.node("Concat", {"acc_in", "i1"}, {"acc_out"}, &body);
  attr_i(cat, "axis", 0);
  b.node("Identity", {"i"}, {"i_out"}, &body);
  b.output("acc");
  b.output("iters");
  Graph g = infer(b);
  CHECK(dims(g, "acc") == std::vector<int64_t>{4});
  REQUIRE(g.find("acc")->int_value);
  CHECK(*g.find("acc")->int_value == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(dims(g, "iters") == std::vector<int64_t>{4});
}

TEST_CASE("shape values: ONNX's hints fill ops without a project rule") {
  // DFT (opset 17) has no project rule; ONNX 1.12 infers it. The graph output has no
  // stored shape, which ONNX's checker would reject if the hints copy kept it that way.
  Builder b;
  b.floats("X", {1, 4, 1}, {0, 1, 2, 3});
  b.node("DFT", {"X"}, {"Y"});
  b.output("Y");
  b.g().mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  Graph g = infer(b);
  CHECK(dims(g, "Y") == std::vector<int64_t>{1, 4, 2});
}

TEST_CASE("shape inference: input dims that differ only by name are reported") {
  Builder b;
  auto add_input = [&](const std::string& name, std::initializer_list<const char*> params) {
    auto* in = b.g().add_input();
    in->set_name(name);
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(1);
    for (const char* p : params) tt->mutable_shape()->add_dim()->set_dim_param(p);
  };
  add_input("ids", {"batch", "seq"});
  add_input("mask", {"batch_size", "seq"});
  b.node("Add", {"ids", "mask"}, {"Y"});
  b.output("Y");
  LoadedModel lm = load_model_from_proto(b.m, "m");
  Graph g = lm.model.graph;
  DimBindings bind;
  bind.named = {{"batch", 2}, {"batch_size", 2}, {"seq", 8}};
  bind_dims(g, bind);
  ShapeResult r = infer_shapes(g, lm.model);
  std::string all;
  for (const auto& w : r.warnings) {
    CHECK(w.code == WarningCode::dims_differ_by_name);
    all += w.message + "\n";
  }
  CHECK(all.find("'batch' and 'batch_size'") != std::string::npos);
  CHECK(all.find("'seq'") == std::string::npos);
}

TEST_CASE("shape inference: wrong stored value_info and output shapes are re-inferred") {
  Builder b;
  b.floats("X", {2, 3}, {0, 1, 2, 3, 4, 5});
  b.node("Relu", {"X"}, {"R"});
  b.node("Transpose", {"R"}, {"Y"});
  b.output("Y");
  for (auto* vi : {b.g().add_value_info(), b.g().mutable_output(0)}) {
    if (vi->name().empty()) vi->set_name("R");
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(1);
    for (int64_t d : {7, 7, 7}) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  Graph g = infer(b);
  CHECK(dims(g, "R") == std::vector<int64_t>{2, 3});
  CHECK(dims(g, "Y") == std::vector<int64_t>{3, 2});
}
