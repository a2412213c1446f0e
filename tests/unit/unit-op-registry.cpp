// unit-op-registry.cpp - rules keyed by (domain, op type, opset), and the two stages' tables
// agreeing on which ops exist.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>

#include "neusight/lowering.h"
#include "neusight/op_registry.h"
#include "neusight/shape_inference.h"

using namespace neusight;

TEST_CASE("op registry: the rule serving a model is the newest one at or below its opset") {
  OpRegistry<std::string> r;
  r.add("", "Softmax", "flatten", 1);
  r.add("", "Softmax", "axis", 13);
  r.add("", "Attention", "onnx-23", 23);
  r["com.microsoft:Attention"] = "contrib";
  r["Gelu"] = "gelu";
  CHECK(*r.find("", "Softmax", 11) == "flatten");
  CHECK(*r.find("", "Softmax", 13) == "axis");
  CHECK(*r.find("ai.onnx", "Softmax", 21) == "axis");
  CHECK(*r.find("", "Softmax", 0) == "axis");  // opset not known: the latest
  CHECK(r.find("", "Attention", 22) == nullptr);  // older than every rule
  CHECK(*r.find("", "Attention", 23) == "onnx-23");
  CHECK(*r.find("com.microsoft", "Attention", 1) == "contrib");
  CHECK(*r.find("com.microsoft", "Gelu", 1) == "gelu");  // a contrib domain falls back to ai.onnx
  CHECK(r.find("", "Nope", 17) == nullptr);
  CHECK(r.versions("", "Softmax") == std::vector<int64_t>{1, 13});
  CHECK(r.contains("com.microsoft", "Attention"));
  CHECK_FALSE(r.contains("", "Relu"));
}

TEST_CASE("op registry: every op with a shape rule is lowered, and the contrib ops are keyed by their domain") {
  const auto shapes = shape_rule_ops();
  const auto lowered = lowering_rule_ops();
  const std::set<std::pair<std::string, std::string>> low(lowered.begin(), lowered.end());
  // Control flow is lowered through its bodies; the rest must have a lowering rule (in its
  // domain or, for another domain's re-registration of a standard op, in ai.onnx).
  const std::set<std::string> bodies = {"If", "Loop", "Scan", "SequenceMap"};
  std::string missing;
  for (const auto& [domain, op] : shapes) {
    if (bodies.count(op)) continue;
    if (!low.count({domain, op}) && !low.count({"", op})) missing += " " + (domain.empty() ? op : domain + ":" + op);
  }
  INFO("shape rule but no lowering rule:" << missing);
  CHECK(missing.empty());
  for (const char* op : {"Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention",
                         "PackedMultiHeadAttention", "DecoderMaskedMultiHeadAttention", "SparseAttention",
                         "RotaryEmbedding", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "MatMulNBits",
                         "GatherBlockQuantized", "FastGelu", "BiasGelu", "QuickGelu", "BiasSplitGelu", "BiasAdd",
                         "GemmFastGelu", "MoE", "QMoE"}) {
    INFO(op);
    CHECK(low.count({"com.microsoft", op}));
    CHECK(std::count(shapes.begin(), shapes.end(), std::make_pair(std::string("com.microsoft"), std::string(op))) +
              std::count(shapes.begin(), shapes.end(), std::make_pair(std::string(), std::string(op))) >= 1);
  }
}
