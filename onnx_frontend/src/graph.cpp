// graph.cpp - small helpers of the graph IR (dtype names, attribute access).
#include "neusight/graph.h"

#include <algorithm>
#include <cctype>

namespace neusight {

int dtype_bits(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: case DType::u32: case DType::tf32: return 32;
    case DType::u8: case DType::i8: case DType::boolean: case DType::f8e4m3fn:
    case DType::f8e4m3fnuz: case DType::f8e5m2: case DType::f8e5m2fnuz: return 8;
    case DType::u16: case DType::i16: case DType::f16: case DType::bf16: return 16;
    case DType::i64: case DType::u64: case DType::f64: case DType::c64: return 64;
    case DType::c128: return 128;
    case DType::u4: case DType::i4: case DType::f4e2m1: return 4;
    case DType::string: case DType::undefined: return 0;
  }
  return 0;
}

double element_bytes(DType t) {
  const int bits = dtype_bits(t == DType::tf32 ? DType::f32 : t);
  return bits > 0 ? bits / 8.0 : 4.0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::tf32: return "tf32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::f64: return "fp64";
    case DType::f8e4m3fn: case DType::f8e4m3fnuz: return "fp8";
    case DType::f8e5m2: case DType::f8e5m2fnuz: return "fp8e5m2";
    case DType::u8: return "uint8";
    case DType::i8: return "int8";
    case DType::u16: return "uint16";
    case DType::i16: return "int16";
    case DType::i32: return "int32";
    case DType::u32: return "uint32";
    case DType::i64: return "int64";
    case DType::u64: return "uint64";
    case DType::boolean: return "bool";
    case DType::string: return "string";
    case DType::c64: return "complex64";
    case DType::c128: return "complex128";
    case DType::f4e2m1: return "fp4";
    case DType::u4: return "uint4";
    case DType::i4: return "int4";
    case DType::undefined: return "undefined";
  }
  return "undefined";
}

std::optional<DType> parse_dtype(const std::string& s_in) {
  std::string s = s_in;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s.compare(0, 6, "torch.") == 0) s = s.substr(6);  // PyTorch's repr: torch.float16
  static const std::pair<const char*, DType> table[] = {
      {"fp32", DType::f32},     {"float32", DType::f32},  {"float", DType::f32},
      {"tf32", DType::tf32},    {"fp16", DType::f16},     {"float16", DType::f16},
      {"half", DType::f16},     {"bf16", DType::bf16},    {"bfloat16", DType::bf16},
      {"fp8", DType::f8e4m3fn}, {"fp8e4m3", DType::f8e4m3fn}, {"fp8e5m2", DType::f8e5m2},
      {"fp64", DType::f64},     {"float64", DType::f64},  {"double", DType::f64},
      {"int8", DType::i8},      {"uint8", DType::u8},     {"int16", DType::i16},
      {"uint16", DType::u16},   {"int32", DType::i32},    {"uint32", DType::u32},
      {"int64", DType::i64},    {"uint64", DType::u64},   {"bool", DType::boolean},
      {"int4", DType::i4},      {"uint4", DType::u4},
      {"fp4", DType::f4e2m1},   {"nvfp4", DType::f4e2m1}, {"mxfp4", DType::f4e2m1}, {"f4e2m1", DType::f4e2m1},
      {"float4e2m1", DType::f4e2m1}, {"float4_e2m1fn_x2", DType::f4e2m1},
      {"e4m3", DType::f8e4m3fn}, {"fp8_e4m3", DType::f8e4m3fn}, {"fp8_e4m3fn", DType::f8e4m3fn},
      {"e5m2", DType::f8e5m2},   {"fp8_e5m2", DType::f8e5m2},
      // The names of XLA (f32, f8e4m3fn), PyTorch (float8_e4m3fn) and ONNX (FLOAT8E4M3FN).
      {"f32", DType::f32},      {"f16", DType::f16},      {"f64", DType::f64},
      {"f8e4m3fn", DType::f8e4m3fn},   {"float8e4m3fn", DType::f8e4m3fn},   {"float8_e4m3fn", DType::f8e4m3fn},
      {"f8e4m3fnuz", DType::f8e4m3fnuz}, {"float8e4m3fnuz", DType::f8e4m3fnuz}, {"float8_e4m3fnuz", DType::f8e4m3fnuz},
      {"f8e5m2", DType::f8e5m2},       {"float8e5m2", DType::f8e5m2},       {"float8_e5m2", DType::f8e5m2},
      {"f8e5m2fnuz", DType::f8e5m2fnuz}, {"float8e5m2fnuz", DType::f8e5m2fnuz}, {"float8_e5m2fnuz", DType::f8e5m2fnuz},
      {"s8", DType::i8},        {"u8", DType::u8},
  };
  for (const auto& [name, t] : table)
    if (s == name) return t;
  return std::nullopt;
}

bool is_float(DType t) {
  switch (t) {
    case DType::f32: case DType::tf32: case DType::f16: case DType::bf16: case DType::f64:
    case DType::f8e4m3fn: case DType::f8e4m3fnuz: case DType::f8e5m2: case DType::f8e5m2fnuz: case DType::f4e2m1:
      return true;
    default:
      return false;
  }
}

bool is_fp8(DType t) {
  return t == DType::f8e4m3fn || t == DType::f8e4m3fnuz || t == DType::f8e5m2 || t == DType::f8e5m2fnuz;
}

bool is_fp4(DType t) { return t == DType::f4e2m1; }

bool TensorInfo::fully_known() const {
  if (!has_shape) return false;
  for (const auto& d : shape)
    if (!d.known()) return false;
  return true;
}

int64_t TensorInfo::num_elements() const {
  if (!fully_known()) return -1;
  int64_t n = 1;
  for (const auto& d : shape) {
    if (d.value != 0 && n > INT64_MAX / d.value) return -1;
    n *= d.value;
  }
  return n;
}

const Attribute* Node::attr(const std::string& key) const {
  auto it = attributes.find(key);
  return it == attributes.end() ? nullptr : &it->second;
}
int64_t Node::attr_i(const std::string& key, int64_t fallback) const {
  const Attribute* a = attr(key);
  return a ? a->i : fallback;
}
double Node::attr_f(const std::string& key, double fallback) const {
  const Attribute* a = attr(key);
  return a ? a->f : fallback;
}
std::string Node::attr_s(const std::string& key, const std::string& fallback) const {
  const Attribute* a = attr(key);
  return a ? a->s : fallback;
}
std::vector<int64_t> Node::attr_ints(const std::string& key) const {
  const Attribute* a = attr(key);
  return a ? a->ints : std::vector<int64_t>{};
}

TensorInfo& Graph::tensor(const std::string& name) {
  auto& t = tensors[name];
  if (t.name.empty()) t.name = name;
  return t;
}
const TensorInfo* Graph::find(const std::string& name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

int64_t Model::opset(const std::string& domain) const {
  auto it = opsets.find(domain);
  if (it == opsets.end() && domain.empty()) {
    auto it2 = opsets.find("ai.onnx");
    if (it2 != opsets.end()) return it2->second;
  }
  return it == opsets.end() ? 0 : it->second;
}

}  // namespace neusight
