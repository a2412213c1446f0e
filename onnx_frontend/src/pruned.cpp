// pruned.cpp - whether an inline weight's values carry the 2:4 pattern sparse tensor cores run.
#include <cstdint>
#include <cstring>
#include <functional>

#include "onnx_proto.h"

namespace neusight {

namespace {

// Per element i of `tp` (n elements): is it zero (either sign)? Empty when its values are not
// inline in a supported type: FP32, FP16, BF16, FP64, and the byte-wide types quantized weights
// are stored in (INT8, UINT8: a stored 0; the FP8 types: +0 and, where it is zero, -0).
std::function<bool(int64_t)> zero_test(const onnx::TensorProto& tp, int64_t n) {
  const auto dt = tp.data_type();
  const bool half = dt == onnx::TensorProto::FLOAT16 || dt == onnx::TensorProto::BFLOAT16;
  // FP8 (ONNX 1.14's data types 17-20, which Debian's ONNX 1.12 headers do not name):
  // E4M3FN (17) and E5M2 (19) have a negative zero (0x80); their FNUZ forms (18, 20) spend
  // 0x80 on NaN.
  const bool fp8_signed_zero = dt == 17 || dt == 19;
  const bool byte = dt == onnx::TensorProto::INT8 || dt == onnx::TensorProto::UINT8 || (dt >= 17 && dt <= 20);
  if (tp.data_location() == onnx::TensorProto::EXTERNAL) return {};
  if (tp.has_raw_data()) {
    const std::string& raw = tp.raw_data();
    const size_t width = byte ? 1 : half ? 2 : dt == onnx::TensorProto::FLOAT ? 4 : dt == onnx::TensorProto::DOUBLE ? 8 : 0;
    if (width == 0 || raw.size() != static_cast<size_t>(n) * width) return {};
    const char* p = raw.data();
    if (width == 1) {
      const uint8_t mask = fp8_signed_zero ? 0x7f : 0xff;
      return [p, mask](int64_t i) { return (static_cast<uint8_t>(p[i]) & mask) == 0; };
    }
    if (width == 2)
      return [p](int64_t i) {
        uint16_t x;
        std::memcpy(&x, p + 2 * i, 2);
        return (x & 0x7fffu) == 0;
      };
    if (width == 4)
      return [p](int64_t i) {
        uint32_t x;
        std::memcpy(&x, p + 4 * i, 4);
        return (x & 0x7fffffffu) == 0;
      };
    return [p](int64_t i) {
      uint64_t x;
      std::memcpy(&x, p + 8 * i, 8);
      return (x & 0x7fffffffffffffffull) == 0;
    };
  }
  if (dt == onnx::TensorProto::FLOAT && tp.float_data_size() == n)
    return [&tp](int64_t i) { return tp.float_data(static_cast<int>(i)) == 0.0f; };
  if (dt == onnx::TensorProto::DOUBLE && tp.double_data_size() == n)
    return [&tp](int64_t i) { return tp.double_data(static_cast<int>(i)) == 0.0; };
  if (half && tp.int32_data_size() == n)  // one 16-bit value in each int32 (ONNX's layout)
    return [&tp](int64_t i) { return (static_cast<uint32_t>(tp.int32_data(static_cast<int>(i))) & 0x7fffu) == 0; };
  if (byte && tp.int32_data_size() == n) {  // one byte-wide value in each int32, likewise
    const uint32_t mask = fp8_signed_zero ? 0x7fu : dt == onnx::TensorProto::INT8 ? 0xffffffffu : 0xffu;
    return [&tp, mask](int64_t i) { return (static_cast<uint32_t>(tp.int32_data(static_cast<int>(i))) & mask) == 0; };
  }
  return {};
}

// The initializer `name` of the model's main graph, or null.
const onnx::TensorProto* find_initializer(const LoadedModel& loaded, const std::string& name) {
  if (!loaded.proto) return nullptr;
  for (const onnx::TensorProto& tp : loaded.proto->model.graph().initializer())
    if (tp.name() == name) return &tp;
  return nullptr;
}

// Elements of `tp`, 0 when a dim is not positive or the count passes 2^40.
int64_t element_count(const onnx::TensorProto& tp) {
  int64_t n = 1;
  for (int i = 0; i < tp.dims_size(); ++i) {
    if (tp.dims(i) <= 0 || tp.dims(i) > (int64_t(1) << 40) / n) return 0;
    n *= tp.dims(i);
  }
  return n;
}

}  // namespace

std::optional<bool> initializer_all_zero(const LoadedModel& loaded, const std::string& name) {
  const onnx::TensorProto* tp = find_initializer(loaded, name);
  if (!tp) return std::nullopt;
  const int64_t n = element_count(*tp);
  const std::function<bool(int64_t)> zero = n > 0 ? zero_test(*tp, n) : std::function<bool(int64_t)>();
  if (!zero) return std::nullopt;
  for (int64_t i = 0; i < n; ++i)
    if (!zero(i)) return false;
  return true;
}

std::optional<bool> initializer_pruned_2_4(const LoadedModel& loaded, const std::string& name, int axis) {
  if (axis < 0) return std::nullopt;
  if (const onnx::TensorProto* found = find_initializer(loaded, name)) {
    const onnx::TensorProto& tp = *found;
    if (axis >= tp.dims_size()) return std::nullopt;
    // The tensor as [outer, along, inner] about the axis.
    const int64_t n = element_count(tp), along = tp.dims(axis);
    if (n == 0) return std::nullopt;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < tp.dims_size(); ++i) {
      if (i < axis) outer *= tp.dims(i);
      if (i > axis) inner *= tp.dims(i);
    }
    const std::function<bool(int64_t)> zero = zero_test(tp, n);
    if (!zero) return std::nullopt;
    if (along % 4 != 0) return false;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i)
        for (int64_t g = 0; g < along; g += 4) {
          int zeros = 0;
          for (int64_t j = 0; j < 4; ++j) zeros += zero((o * along + g + j) * inner + i);
          if (zeros < 2) return false;
        }
    return true;
  }
  return std::nullopt;
}

}  // namespace neusight
