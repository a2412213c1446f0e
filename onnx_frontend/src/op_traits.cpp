// op_traits.cpp - the table of elementwise ops (op_traits.h).
#include "neusight/op_traits.h"

namespace neusight {
namespace {

struct Entry {
  const char* op;  // "Op" (ai.onnx) or "domain:Op"
  OpTraits traits;
};

constexpr int V = OpTraits::kVariadic;

// Ops lowered to one elementwise kernel: {arity, elementwise, kernel, FLOPs per element}.
OpTraits ew(int arity, const char* kernel, double flops = 1) { return OpTraits{arity, true, kernel, flops, true}; }

const Entry kEntries[] = {
    // Arithmetic, comparisons, logic (numpy broadcasting).
    {"Add", ew(2, "add")}, {"Sub", ew(2, "sub")}, {"Mul", ew(2, "mul")}, {"Div", ew(2, "div")},
    {"Pow", ew(2, "pow")}, {"Mod", ew(2, "mod")}, {"Max", ew(V, "max")}, {"Min", ew(V, "min")},
    {"Sum", ew(V, "add")}, {"Mean", ew(V, "mean")}, {"PRelu", ew(2, "prelu")},
    {"Equal", ew(2, "equal")}, {"Less", ew(2, "less")}, {"Greater", ew(2, "greater")},
    {"LessOrEqual", ew(2, "lessequal")}, {"GreaterOrEqual", ew(2, "greaterequal")},
    {"And", ew(2, "and")}, {"Or", ew(2, "or")}, {"Xor", ew(2, "xor")}, {"Not", ew(1, "not")},
    {"BitShift", ew(2, "bitshift")}, {"BitwiseAnd", ew(2, "and")}, {"BitwiseOr", ew(2, "or")},
    {"BitwiseXor", ew(2, "xor")}, {"BitwiseNot", ew(1, "not")},
    // Activations and unary math.
    {"Relu", ew(1, "relu")}, {"Gelu", ew(1, "gelu")}, {"Tanh", ew(1, "tanh")}, {"Sigmoid", ew(1, "sigmoid")},
    {"Exp", ew(1, "exp")}, {"Log", ew(1, "log")}, {"Sqrt", ew(1, "sqrt")}, {"Erf", ew(1, "erf")},
    {"Neg", ew(1, "neg")}, {"Abs", ew(1, "abs")}, {"Reciprocal", ew(1, "reciprocal")}, {"Clip", ew(1, "clip")},
    {"LeakyRelu", ew(1, "leakyrelu")}, {"Elu", ew(1, "elu")}, {"Selu", ew(1, "selu")}, {"Celu", ew(1, "celu")},
    {"HardSigmoid", ew(1, "hardsigmoid")}, {"HardSwish", ew(1, "hardswish")}, {"Softplus", ew(1, "softplus")},
    {"Softsign", ew(1, "softsign")}, {"Mish", ew(1, "mish")}, {"ThresholdedRelu", ew(1, "relu")},
    {"Shrink", ew(1, "shrink")}, {"Swish", ew(1, "silu")}, {"Silu", ew(1, "silu")},
    {"Sin", ew(1, "sin")}, {"Cos", ew(1, "cos")}, {"Tan", ew(1, "tan")}, {"Asin", ew(1, "asin")},
    {"Acos", ew(1, "acos")}, {"Atan", ew(1, "atan")}, {"Sinh", ew(1, "sinh")}, {"Cosh", ew(1, "cosh")},
    {"Asinh", ew(1, "asinh")}, {"Acosh", ew(1, "acosh")}, {"Atanh", ew(1, "atanh")},
    {"Floor", ew(1, "floor")}, {"Ceil", ew(1, "ceil")}, {"Round", ew(1, "round")}, {"Sign", ew(1, "sign")},
    {"IsNaN", ew(1, "isnan")}, {"IsInf", ew(1, "isinf")},
    // Per-channel affine and (de)quantization: input 0's shape, scales per tensor or channel.
    {"BatchNormalization", ew(1, "batchnorm", 2)}, {"QuantizeLinear", ew(1, "quantize", 2)},
    {"DequantizeLinear", ew(1, "dequantize", 2)},
    // Not pointwise: the scale comes from a min/max reduction over the whole tensor.
    {"DynamicQuantizeLinear", OpTraits{1, true, "quantize", 3, false}},
    // onnxruntime contrib activations and bias adds.
    {"com.microsoft:FastGelu", ew(1, "gelu")}, {"com.microsoft:BiasGelu", ew(2, "gelu")},
    {"com.microsoft:QuickGelu", ew(1, "gelu")}, {"com.microsoft:BiasAdd", ew(3, "add")},
    // Pointwise for fusion but lowered by other rules: a cast is a copy kernel (memory.cpp),
    // Dropout an identity in inference and a mask-and-scale pass in training (vector.cpp).
    {"Cast", OpTraits{1, false, "", 0, true}}, {"CastLike", OpTraits{1, false, "", 0, true}},
    {"Dropout", OpTraits{1, false, "", 0, true}},
};

}  // namespace

const OpRegistry<OpTraits>& op_traits() {
  static const OpRegistry<OpTraits> table = [] {
    OpRegistry<OpTraits> t;
    for (const Entry& e : kEntries) t[e.op] = e.traits;
    return t;
  }();
  return table;
}

const OpTraits* find_op_traits(const std::string& domain, const std::string& op, int64_t opset) {
  return op_traits().find(domain, op, opset);
}

}  // namespace neusight
