// unit-op-traits.cpp - the elementwise ops' traits agree with what every stage does with them.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "lowering_graph.h"
#include "neusight/op_traits.h"
#include "neusight/shape_inference.h"

using namespace neusight;
using neusight::test::IrGraph;

namespace {

std::string spelled(const std::string& domain, const std::string& op) { return domain.empty() ? op : domain + ":" + op; }

// One node of `op` on [4, 8] float inputs (as many as its arity), read by a Relu when `chained`.
KernelList lower_op(const std::string& domain, const std::string& op, const OpTraits& t, Fusion f, bool chained) {
  IrGraph b;
  std::vector<std::string> in = {b.input("x", {4, 8})};
  const int n = t.arity == OpTraits::kVariadic ? 2 : t.arity;
  for (int i = 1; i < n; ++i) in.push_back(b.input("x" + std::to_string(i), {4, 8}));
  b.t("y", {4, 8});
  b.node(op, in, {"y"}, domain);
  if (chained) {
    b.t("z", {4, 8});
    b.node("Relu", {"y"}, {"z"});
    b.output("z");
  } else {
    b.output("y");
  }
  return test::lower_with(b.g, f);
}

}  // namespace

TEST_CASE("op traits: every elementwise op has a shape rule, its elementwise kernel, and one fusion answer") {
  const auto shapes = shape_rule_ops();
  const auto lowered = lowering_rule_ops();
  const std::set<std::pair<std::string, std::string>> shape(shapes.begin(), shapes.end()), low(lowered.begin(), lowered.end());
  auto has = [](const std::set<std::pair<std::string, std::string>>& s, const std::string& domain, const std::string& op) {
    return s.count({domain, op}) || s.count({"", op});
  };
  // Pointwise for fusion but lowered by other rules (a cast is a copy, Dropout an identity
  // or a mask pass), and elementwise but not pointwise (the quantization scale is a
  // reduction over the whole tensor).
  const std::set<std::string> fusible_not_elementwise = {"Cast", "CastLike", "Dropout"};
  const std::set<std::string> elementwise_not_fusible = {"DynamicQuantizeLinear"};
  for (const auto& entry : op_traits().ops()) {
    const std::string& domain = entry.first;  // named, not a structured binding: INFO captures it
    const std::string& op = entry.second;
    const OpTraits& t = *find_op_traits(domain, op);
    INFO(spelled(domain, op));
    CHECK(has(shape, domain, op));
    CHECK(has(low, domain, op));
    if (t.fusible && !t.elementwise) CHECK(fusible_not_elementwise.count(op));
    if (t.elementwise && !t.fusible) CHECK(elementwise_not_fusible.count(op));
    if (t.elementwise) {
      const KernelList kl = lower_op(domain, op, t, Fusion::none, false);
      REQUIRE(kl.kernels.size() == 1);
      CHECK(kl.kernels[0].cls == KernelClass::elementwise);
      CHECK(kl.kernels[0].op == t.kernel);
      CHECK(kl.kernels[0].flops == doctest::Approx(32 * t.flops_per_element));
    }
    if (op != "Dropout") {
      // Full fusion: a pointwise producer runs inside its pointwise reader's kernel.
      const KernelList kl = lower_op(domain, op, t, Fusion::full, true);
      CHECK(kl.kernels.size() == (t.fusible ? 1u : 2u));
    }
  }
}

TEST_CASE("op traits: contrib ops are keyed by their domain and fall back to ai.onnx") {
  REQUIRE(find_op_traits("com.microsoft", "FastGelu"));
  CHECK(find_op_traits("", "FastGelu") == nullptr);
  REQUIRE(find_op_traits("com.microsoft", "Relu"));
  CHECK(std::string(find_op_traits("com.microsoft", "Relu")->kernel) == "relu");
  CHECK(find_op_traits("", "MatMul") == nullptr);
}
