// infer.cpp - shape and dtype inference with shape-value propagation, one rule per op family.
//
// Rules live in one table (op type -> handler). A handler reads its inputs' TensorInfo and
// fills its outputs. Shape *values* (int_value) are propagated for the small integer
// tensors of shape subgraphs so Reshape/Expand/ConstantOfShape get concrete targets.
#include <algorithm>
#include <cmath>
#include <map>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <unordered_map>

#include "neusight/op_traits.h"
#include "rules.h"

namespace neusight::shape_rules {

int64_t checked_mul(int64_t a, int64_t b, const std::string& where) {
  if (a < 0 || b < 0) return -1;
  if (a != 0 && b > kMaxDim / a) throw InputError(where + ": dimension overflow (product exceeds 2^62)");
  return a * b;
}

namespace {
int64_t ceil_div_safe(int64_t a, int64_t b) { return b <= 0 ? 0 : (a + b - 1) / b; }
}  // namespace

void set_out(Ctx& c, size_t i, DType dt, const Shape& s) {
  if (i >= c.num_out() || c.n.outputs[i].empty()) return;
  TensorInfo& t = c.out(i);
  t.dtype = dt;
  t.has_shape = true;
  t.shape = s;
}

void set_dtype(Ctx& c, size_t i, DType dt) {
  if (i >= c.num_out() || c.n.outputs[i].empty()) return;
  c.out(i).dtype = dt;
}

Shape dims_of(const std::vector<int64_t>& v) {
  Shape s;
  s.reserve(v.size());
  for (int64_t x : v) s.push_back(x >= 0 ? Dim::of(x) : Dim{});
  return s;
}

Shape unknown_dims(int64_t rank, const Ctx& c) {
  if (rank < 0 || rank > kMaxRank)
    throw InputError(c.where() + ": a shape of rank " + std::to_string(rank) + " (more than " +
                     std::to_string(kMaxRank) + " dims)");
  return Shape(static_cast<size_t>(rank));
}

int64_t norm_axis(int64_t axis, int64_t rank, const Ctx& c) {
  // Valid axes are [-rank, rank - 1]; a scalar (rank 0) has none.
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) throw InputError(c.where() + ": axis out of range");
  return axis;
}

// Numpy-style broadcast of two shapes.
std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += s[i].known() ? std::to_string(s[i].value) : s[i].param.empty() ? "?" : s[i].param;
  }
  return out + "]";
}

Shape broadcast(const Shape& a, const Shape& b, const Ctx& c) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const Dim* da = i < r - a.size() ? nullptr : &a[i - (r - a.size())];
    const Dim* db = i < r - b.size() ? nullptr : &b[i - (r - b.size())];
    if (!da) { out[i] = *db; continue; }
    if (!db) { out[i] = *da; continue; }
    if (da->known() && db->known()) {
      if (da->value == db->value || db->value == 1) out[i] = *da;
      else if (da->value == 1) out[i] = *db;
      else throw InputError(c.where() + ": shapes cannot broadcast (" + std::to_string(da->value) +
                            " vs " + std::to_string(db->value) + ": " + shape_text(a) + " and " + shape_text(b) + ")");
    } else if (da->known() && da->value != 1) out[i] = *da;
    else if (db->known() && db->value != 1) out[i] = *db;
    else if (!da->known() && !db->known() && da->param == db->param) out[i] = *da;
    else if (da->known()) out[i] = *db;
    else if (db->known()) out[i] = *da;
    else out[i] = Dim{};
  }
  return out;
}

// Elementwise broadcast over all inputs; value propagation for integer arithmetic.
void rule_broadcast(Ctx& c, DType out_dtype, std::function<int64_t(int64_t, int64_t)> op) {
  Shape s;
  bool first = true, shaped = true;
  DType dt = DType::undefined;
  for (size_t i = 0; i < c.n.inputs.size(); ++i) {
    const TensorInfo* t = c.in(i);
    if (!t) continue;
    if (dt == DType::undefined) dt = t->dtype;
    if (!t->has_shape) { shaped = false; continue; }
    s = first ? t->shape : broadcast(s, t->shape, c);
    first = false;
  }
  if (c.n.op_type == "Where" && c.in(1)) dt = c.in(1)->dtype;
  if (out_dtype != DType::undefined) dt = out_dtype;
  if (!shaped) {
    if (c.num_out()) c.out(0).dtype = dt;
    return;
  }
  set_out(c, 0, dt, s);
  // Float arithmetic on small constants with a non-integral operand (integral ones take the
  // integer path below).
  if (c.n.inputs.size() == 2 && is_float(dt) && ((c.in(0) && c.in(0)->float_value && !c.in(0)->int_value) ||
                                                  (c.in(1) && c.in(1)->float_value && !c.in(1)->int_value))) {
    static const std::map<std::string, double (*)(double, double)> kFloat = {
        {"Add", [](double a, double b) { return a + b; }}, {"Sub", [](double a, double b) { return a - b; }},
        {"Mul", [](double a, double b) { return a * b; }}, {"Div", [](double a, double b) { return a / b; }},
        {"Max", [](double a, double b) { return std::max(a, b); }}, {"Min", [](double a, double b) { return std::min(a, b); }}};
    auto it = kFloat.find(c.n.op_type);
    const auto a = numbers(c.in(0)), b = numbers(c.in(1));
    if (it != kFloat.end() && a && b && !a->empty() && !b->empty()) {
      const size_t n = std::max(a->size(), b->size());
      if ((a->size() == n || a->size() == 1) && (b->size() == n || b->size() == 1) && n <= kMaxValues) {
        std::vector<double> v(n);
        for (size_t i = 0; i < n; ++i) v[i] = it->second((*a)[a->size() == 1 ? 0 : i], (*b)[b->size() == 1 ? 0 : i]);
        set_numbers(c.out(0), v);
      }
    }
    return;
  }
  // Value propagation for binary integer ops on small tensors.
  if (op && c.n.inputs.size() == 2 && c.value(0) && c.value(1)) {
    const auto& a = *c.value(0);
    const auto& b = *c.value(1);
    const size_t n = std::max(a.size(), b.size());
    if ((a.size() == n || a.size() == 1) && (b.size() == n || b.size() == 1) && n <= 4096) {
      std::vector<int64_t> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = op(a[a.size() == 1 ? 0 : i], b[b.size() == 1 ? 0 : i]);
      c.out(0).int_value = v;
    }
  }
}

void rule_unary(Ctx& c) {
  const TensorInfo* t = c.in(0);
  if (!t) return;
  if (t->kind != ValueKind::tensor || (c.n.op_type == "Identity" && (t->float_value || t->string_value))) {
    set_value(c, 0, *t);  // Identity of a sequence / optional / constant: everything it holds
    return;
  }
  if (t->has_shape) set_out(c, 0, t->dtype, t->shape);
  else c.out(0).dtype = t->dtype;
  static const std::set<std::string> kFloatOps = {"Neg", "Abs", "Floor", "Ceil", "Round", "Relu", "Sign", "Sqrt", "Reciprocal", "Exp", "Log"};
  if (t->float_value && kFloatOps.count(c.n.op_type) && c.num_out() && !c.n.outputs[0].empty()) {
    std::vector<double> v = *t->float_value;
    const std::string& op = c.n.op_type;
    for (auto& x : v) {
      if (op == "Neg") x = -x;
      else if (op == "Abs") x = std::fabs(x);
      else if (op == "Floor") x = std::floor(x);
      else if (op == "Ceil") x = std::ceil(x);
      else if (op == "Round") x = std::nearbyint(x);  // half to even, as ONNX rounds
      else if (op == "Relu") x = std::max(x, 0.0);
      else if (op == "Sign") x = (x > 0) - (x < 0);
      else if (op == "Sqrt") x = std::sqrt(x);
      else if (op == "Reciprocal") x = 1.0 / x;
      else if (op == "Exp") x = std::exp(x);
      else if (op == "Log") x = std::log(x);
    }
    set_numbers(c.out(0), v);
    return;
  }
  static const std::set<std::string> kValueOps = {"Identity", "Neg", "Abs", "Floor", "Ceil", "Round", "Relu", "Sign"};
  if (t->int_value && kValueOps.count(c.n.op_type)) {
    auto v = *t->int_value;
    const auto negate = [](int64_t x) { return static_cast<int64_t>(0 - uint64_t(x)); };  // wraps at INT64_MIN
    if (c.n.op_type == "Neg") for (auto& x : v) x = negate(x);
    if (c.n.op_type == "Abs") for (auto& x : v) x = x < 0 ? negate(x) : x;
    if (c.n.op_type == "Relu") for (auto& x : v) x = std::max<int64_t>(x, 0);
    if (c.n.op_type == "Sign") for (auto& x : v) x = (x > 0) - (x < 0);
    c.out(0).int_value = v;
  }
}

void rule_cast(Ctx& c) {
  const TensorInfo* t = c.in(0);
  const DType to = static_cast<DType>(c.n.attr_i("to", 1));
  if (!t) return;
  if (t->has_shape) set_out(c, 0, to, t->shape);
  else c.out(0).dtype = to;
  if (t->float_value && !t->int_value) {
    // Non-integral floats: truncated toward zero into integer types, kept as floats otherwise.
    std::vector<double> v = *t->float_value;
    if (!is_float(to)) for (auto& x : v) x = to == DType::boolean ? double(x != 0) : std::trunc(x);
    set_numbers(c.out(0), v);
    return;
  }
  if (t->int_value) {
    auto v = *t->int_value;
    if (to == DType::boolean) for (auto& x : v) x = x != 0;
    c.out(0).int_value = v;
    if (is_float(to)) c.out(0).float_value = std::vector<double>(v.begin(), v.end());
  }
  if (t->string_value && to == DType::string) c.out(0).string_value = t->string_value;
}

void rule_matmul(Ctx& c) {
  const TensorInfo* a = c.in(0);
  const TensorInfo* b = c.in(1);
  if (!a || !b || !a->has_shape || !b->has_shape) return;
  Shape sa = a->shape, sb = b->shape;
  if (sa.empty() || sb.empty()) throw InputError(c.where() + ": MatMul of a scalar");
  bool va = sa.size() == 1, vb = sb.size() == 1;
  if (va) sa.insert(sa.begin(), Dim::of(1));
  if (vb) sb.push_back(Dim::of(1));
  const Dim& ka = sa.back();
  const Dim& kb = sb[sb.size() - 2];
  if (ka.known() && kb.known() && ka.value != kb.value)
    throw InputError(c.where() + ": inner dimensions differ (" + std::to_string(ka.value) + " vs " +
                     std::to_string(kb.value) + ": " + shape_text(a->shape) + " x " + shape_text(b->shape) + ")");
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  Shape s = broadcast(ba, bb, c);
  if (!va) s.push_back(sa[sa.size() - 2]);
  if (!vb) s.push_back(sb.back());
  DType dt = a->dtype;
  if (c.n.op_type == "MatMulInteger") dt = DType::i32;
  set_out(c, 0, dt, s);
}

void rule_gemm(Ctx& c) {
  const TensorInfo* a = c.in(0);
  const TensorInfo* b = c.in(1);
  // A and B are matrices in every opset; onnxruntime and ONNX's own inference refuse others.
  for (const auto& [t, name] : {std::pair{a, "A"}, std::pair{b, "B"}})
    if (t && t->has_shape && t->shape.size() != 2)
      throw InputError(c.where() + ": " + name + " " + shape_text(t->shape) + " has rank " +
                       std::to_string(t->shape.size()) + " (Gemm takes 2-D A and B; MatMul takes batches)");
  if (!a || !b || !a->has_shape || !b->has_shape) return;
  const bool ta = c.n.attr_i("transA", 0), tb = c.n.attr_i("transB", 0);
  // K of A against K of B, as runtimes check them: a Reshape to [1, -1] that folds the batch
  // into K (an SSR-Net head bound to batch 8) cannot run.
  const Dim& ka = a->shape[ta ? 0 : 1];
  const Dim& kb = b->shape[tb ? 1 : 0];
  if (ka.known() && kb.known() && ka.value != kb.value)
    throw InputError(c.where() + ": inner dimensions differ (" + std::to_string(ka.value) + " vs " + std::to_string(kb.value) +
                     ": " + shape_text(a->shape) + (ta ? " transposed" : "") + " x " + shape_text(b->shape) +
                     (tb ? " transposed" : "") + ")");
  const Shape out{a->shape[ta ? 1 : 0], b->shape[tb ? 0 : 1]};
  // The bias C broadcasts to [M, N] one way: each of its dims is 1 or the output's.
  const TensorInfo* bias = c.in(2);
  if (bias && bias->has_shape) {
    if (bias->shape.size() > 2) throw InputError(c.where() + ": bias C of rank " + std::to_string(bias->shape.size()));
    for (size_t i = 0; i < bias->shape.size(); ++i) {
      const Dim& d = bias->shape[bias->shape.size() - 1 - i];
      const Dim& o = out[1 - i];
      if (d.known() && o.known() && d.value != 1 && d.value != o.value)
        throw InputError(c.where() + ": bias C " + shape_text(bias->shape) + " does not broadcast to the output " +
                         shape_text(out));
    }
  }
  set_out(c, 0, a->dtype, out);
}

void rule_layernorm(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  if (x->has_shape) set_out(c, 0, x->dtype, x->shape);
  else c.out(0).dtype = x->dtype;
  // Optional Mean / InvStdDev outputs: reduced over normalised axes.
  if (x->has_shape && c.num_out() > 1) {
    int64_t axis = norm_axis(c.n.attr_i("axis", -1), static_cast<int64_t>(x->shape.size()), c);
    Shape s = x->shape;
    for (size_t i = static_cast<size_t>(axis); i < s.size(); ++i) s[i] = Dim::of(1);
    for (size_t o = 1; o < c.num_out(); ++o) set_out(c, o, DType::f32, s);
  }
}

void rule_shape(Ctx& c) {
  const TensorInfo* t = c.in(0);
  if (!t || !t->has_shape) {
    if (c.num_out()) c.out(0).dtype = DType::i64;
    return;
  }
  int64_t r = static_cast<int64_t>(t->shape.size());
  int64_t start = c.n.attr_i("start", 0), end = c.n.attr_i("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  const int64_t len = std::max<int64_t>(end - start, 0);
  set_out(c, 0, DType::i64, {Dim::of(len)});
  std::vector<int64_t> v;
  for (int64_t i = start; i < end; ++i) {
    if (!t->shape[i].known()) return;
    v.push_back(t->shape[i].value);
  }
  c.out(0).int_value = v;
}

void rule_size(Ctx& c) {
  set_out(c, 0, DType::i64, {});
  const TensorInfo* t = c.in(0);
  if (t && t->num_elements() >= 0) c.out(0).int_value = std::vector<int64_t>{t->num_elements()};
}

void rule_constant(Ctx& c) {
  const Attribute* a = c.n.attr("value");
  if (a && a->t) {
    TensorInfo& o = c.out(0);
    o.dtype = a->t->dtype;
    o.has_shape = true;
    o.shape = a->t->shape;
    o.int_value = a->t->int_value;
    o.float_value = a->t->float_value;
    o.string_value = a->t->string_value;
    return;
  }
  if ((a = c.n.attr("value_int"))) { set_out(c, 0, DType::i64, {}); c.out(0).int_value = std::vector<int64_t>{a->i}; }
  else if ((a = c.n.attr("value_ints"))) { set_out(c, 0, DType::i64, {Dim::of(int64_t(a->ints.size()))}); c.out(0).int_value = a->ints; }
  else if ((a = c.n.attr("value_float"))) { set_out(c, 0, DType::f32, {}); set_numbers(c.out(0), {a->f}); }
  else if ((a = c.n.attr("value_floats"))) { set_out(c, 0, DType::f32, {Dim::of(int64_t(a->floats.size()))}); set_numbers(c.out(0), a->floats); }
  else if ((a = c.n.attr("value_string"))) { set_out(c, 0, DType::string, {}); c.out(0).string_value = std::vector<std::string>{a->s}; }
  else if ((a = c.n.attr("value_strings"))) { set_out(c, 0, DType::string, {Dim::of(int64_t(a->strings.size()))}); c.out(0).string_value = a->strings; }
}

void rule_reshape(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  std::vector<int64_t> target;
  if (c.opset() < 5 || (c.n.op_type == "Reshape" && c.n.attr("shape"))) target = c.n.attr_ints("shape");
  else if (c.value(1)) target = *c.value(1);
  else {
    const TensorInfo* s = c.in(1);
    c.out(0).dtype = x->dtype;
    if (s && s->fully_known() && s->shape.size() == 1) {
      set_out(c, 0, x->dtype, unknown_dims(s->shape[0].value, c));
    }
    return;
  }
  const bool allowzero = c.n.attr_i("allowzero", 0) != 0;
  Shape s;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t v = target[i];
    if (v == 0 && !allowzero) {
      if (!x->has_shape || i >= x->shape.size()) { s.push_back(Dim{}); known = -1; continue; }
      s.push_back(x->shape[i]);
      if (x->shape[i].known()) known = checked_mul(known, x->shape[i].value, c.where());
      else known = -1;
    } else if (v == -1) {
      if (infer >= 0) throw InputError(c.where() + ": Reshape with two -1 dims");
      infer = static_cast<int>(i);
      s.push_back(Dim{});
    } else if (v < -1) {
      throw InputError(c.where() + ": Reshape with negative dim " + std::to_string(v));
    } else {
      s.push_back(Dim::of(v));
      known = checked_mul(known, v, c.where());
    }
  }
  if (infer >= 0) {
    const int64_t total = x->num_elements();
    if (total >= 0 && known > 0) {
      if (total % known != 0) throw InputError(c.where() + ": Reshape cannot divide " + std::to_string(total) + " elements into the target shape");
      s[infer] = Dim::of(total / known);
    } else if (x->has_shape && known > 0) {
      // Symbolic: when all but one input dim cancel out, keep the symbol.
      int64_t kx = 1;
      std::vector<Dim> syms;
      for (const auto& d : x->shape) {
        if (d.known()) kx = checked_mul(kx, d.value, c.where());
        else syms.push_back(d);
      }
      if (syms.size() == 1 && kx == known) s[infer] = syms[0];
    }
  } else if (known >= 0 && x->num_elements() >= 0 && x->num_elements() != known) {
    // Runtimes reject it: the dims bound to the inputs do not fit a size the graph fixes.
    throw InputError(c.where() + ": Reshape of " + std::to_string(x->num_elements()) + " elements into a fixed shape of " +
                     std::to_string(known) + " (the graph fixes this size; the input dims bound do not fit it)");
  }
  set_out(c, 0, x->dtype, s);
  if (x->int_value) c.out(0).int_value = x->int_value;
}

void rule_flatten(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x || !x->has_shape) return;
  const int64_t r = static_cast<int64_t>(x->shape.size());
  int64_t axis = c.n.attr_i("axis", 1);
  if (axis < 0) axis += r;
  int64_t a = 1, b = 1;
  for (int64_t i = 0; i < r; ++i) {
    const Dim& d = x->shape[i];
    int64_t& acc = i < axis ? a : b;
    acc = (d.known() && acc >= 0) ? checked_mul(acc, d.value, c.where()) : -1;
  }
  set_out(c, 0, x->dtype, {a >= 0 ? Dim::of(a) : Dim{}, b >= 0 ? Dim::of(b) : Dim{}});
  if (x->int_value) c.out(0).int_value = x->int_value;
}

std::vector<int64_t> axes_of(Ctx& c, size_t input_index) {
  if (c.n.attr("axes")) return c.n.attr_ints("axes");
  if (c.value(input_index)) return *c.value(input_index);
  return {};
}

void rule_unsqueeze(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x || !x->has_shape) return;
  auto axes = axes_of(c, 1);
  if (axes.empty() && c.has_in(1)) { c.out(0).dtype = x->dtype; return; }
  const int64_t r = static_cast<int64_t>(x->shape.size() + axes.size());
  for (auto& a : axes) a = norm_axis(a, r, c);
  std::sort(axes.begin(), axes.end());
  Shape s;
  size_t j = 0;
  for (int64_t i = 0; i < r; ++i) {
    if (std::binary_search(axes.begin(), axes.end(), i)) s.push_back(Dim::of(1));
    else if (j < x->shape.size()) s.push_back(x->shape[j++]);
  }
  set_out(c, 0, x->dtype, s);
  if (x->int_value) c.out(0).int_value = x->int_value;
}

void rule_squeeze(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x || !x->has_shape) { if (x) set_dtype(c, 0, x->dtype); return; }
  auto axes = axes_of(c, 1);
  if (axes.empty() && c.has_in(1) && !c.value(1)) { set_dtype(c, 0, x->dtype); return; }
  const int64_t r = static_cast<int64_t>(x->shape.size());
  for (auto& a : axes) a = norm_axis(a, r, c);
  Shape s;
  for (int64_t i = 0; i < r; ++i) {
    const bool drop = axes.empty() ? (x->shape[i].known() && x->shape[i].value == 1)
                                   : std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!drop) s.push_back(x->shape[i]);
  }
  set_out(c, 0, x->dtype, s);
  if (x->int_value) c.out(0).int_value = x->int_value;
}

void rule_transpose(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x || !x->has_shape) return;
  auto perm = c.n.attr_ints("perm");
  const size_t r = x->shape.size();
  if (perm.empty())
    for (size_t i = 0; i < r; ++i) perm.push_back(static_cast<int64_t>(r - 1 - i));
  if (perm.size() != r) throw InputError(c.where() + ": perm has wrong length");
  Shape s;
  std::vector<size_t> from;  // output axis -> input axis
  for (auto p : perm) {
    from.push_back(static_cast<size_t>(norm_axis(p, static_cast<int64_t>(r), c)));
    if (std::count(from.begin(), from.end(), from.back()) > 1)
      throw InputError(c.where() + ": perm names axis " + std::to_string(from.back()) + " twice");
    s.push_back(x->shape.at(from.back()));
  }
  set_out(c, 0, x->dtype, s);
  // A known value (shape math: pads as [2, rank] turned to [rank, 2]) is permuted with it.
  if (!x->int_value || x->num_elements() != static_cast<int64_t>(x->int_value->size())) return;
  std::vector<int64_t> in_stride(r, 1), vals;
  for (size_t a = r; a-- > 1;) in_stride[a - 1] = in_stride[a] * x->shape[a].value;
  std::vector<int64_t> at(r, 0);  // the output's index, odometer order
  for (size_t n = 0; n < x->int_value->size(); ++n) {
    int64_t flat = 0;
    for (size_t a = 0; a < r; ++a) flat += at[a] * in_stride[from[a]];
    vals.push_back((*x->int_value)[static_cast<size_t>(flat)]);
    for (size_t a = r; a-- > 0;) {
      if (++at[a] < s[a].value) break;
      at[a] = 0;
    }
  }
  c.out(0).int_value = vals;
}

void rule_concat(Ctx& c) {
  const TensorInfo* first = nullptr;
  for (size_t i = 0; i < c.n.inputs.size(); ++i)
    if (c.in(i) && c.in(i)->has_shape) { first = c.in(i); break; }
  if (!first) return;
  const int64_t r = static_cast<int64_t>(first->shape.size());
  const int64_t axis = norm_axis(c.n.attr_i("axis", 0), r, c);
  Shape s = first->shape;
  int64_t total = 0;
  bool all_values = true;
  std::vector<int64_t> vals;
  for (size_t i = 0; i < c.n.inputs.size(); ++i) {
    const TensorInfo* t = c.in(i);
    if (!t) continue;
    if (t->has_shape && static_cast<int64_t>(t->shape.size()) != r)
      throw InputError(c.where() + ": inputs of rank " + std::to_string(r) + " " + shape_text(first->shape) + " and " +
                       std::to_string(t->shape.size()) + " " + shape_text(t->shape));
    if (!t->has_shape) { total = -1; all_values = false; continue; }
    const Dim& d = t->shape[axis];
    total = (total >= 0 && d.known()) ? total + d.value : -1;
    for (int64_t k = 0; k < r; ++k) {
      // Every dim but the axis is the same in each input (a U-Net's skip at an odd size is not).
      if (k != axis && s[k].known() && t->shape[k].known() && s[k].value != t->shape[k].value)
        throw InputError(c.where() + ": inputs differ on axis " + std::to_string(k) + " (" + shape_text(first->shape) +
                         " and " + shape_text(t->shape) + ", concatenated on axis " + std::to_string(axis) + ")");
      if (k != axis && !s[k].known() && t->shape[k].known()) s[k] = t->shape[k];
    }
    if (t->int_value) vals.insert(vals.end(), t->int_value->begin(), t->int_value->end());
    else all_values = false;
  }
  s[axis] = total >= 0 ? Dim::of(total) : Dim{};
  set_out(c, 0, first->dtype, s);
  if (all_values && r == 1) c.out(0).int_value = vals;
}

void rule_gather(Ctx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* idx = c.in(1);
  if (!x || !idx || !x->has_shape || !idx->has_shape) return;
  const int64_t r = static_cast<int64_t>(x->shape.size());
  const int64_t axis = norm_axis(c.n.attr_i("axis", 0), r, c);
  const Dim& d = x->shape[axis];
  if (idx->int_value && d.known())
    for (int64_t i : *idx->int_value)
      if (i < -d.value || i >= d.value)  // runtimes refuse it ("indices element out of data bounds")
        throw InputError(c.where() + ": index " + std::to_string(i) + " out of range for axis " + std::to_string(axis) +
                         " of " + shape_text(x->shape));
  Shape s(x->shape.begin(), x->shape.begin() + axis);
  s.insert(s.end(), idx->shape.begin(), idx->shape.end());
  s.insert(s.end(), x->shape.begin() + axis + 1, x->shape.end());
  set_out(c, 0, x->dtype, s);
  if (x->int_value && idx->int_value && r == 1) {
    std::vector<int64_t> v;
    const int64_t n = static_cast<int64_t>(x->int_value->size());
    for (int64_t i : *idx->int_value) {
      if (i < 0) i += n;
      if (i < 0 || i >= n) return;
      v.push_back((*x->int_value)[i]);
    }
    c.out(0).int_value = v;
  }
}

void rule_slice(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x || !x->has_shape) return;
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = c.n.attr_ints("starts");
    ends = c.n.attr_ints("ends");
    axes = c.n.attr_ints("axes");
  } else {
    if (!c.value(1) || !c.value(2)) {
      // Rank is known even when bounds are not.
      Shape s = x->shape;
      if (c.value(3)) {
        for (auto a : *c.value(3)) s[norm_axis(a, static_cast<int64_t>(s.size()), c)] = Dim{};
      } else {
        for (auto& d : s) d = Dim{};
      }
      set_out(c, 0, x->dtype, s);
      return;
    }
    starts = *c.value(1);
    ends = *c.value(2);
    if (c.value(3)) axes = *c.value(3);
    if (c.value(4)) steps = *c.value(4);
    else if (c.has_in(4)) { c.out(0).dtype = x->dtype; return; }
    if (c.has_in(3) && !c.value(3)) { c.out(0).dtype = x->dtype; return; }
  }
  const int64_t r = static_cast<int64_t>(x->shape.size());
  if (axes.empty()) for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    throw InputError(c.where() + ": Slice starts/ends/axes/steps lengths differ");
  Shape s = x->shape;
  // Per axis, the input indices kept (every index of an axis not sliced): a known value (shape
  // math, often 2-D: pads reshaped to [-1, 2] and reversed) is sliced along with the shape.
  const bool has_value = x->int_value && x->num_elements() == static_cast<int64_t>(x->int_value->size());
  std::vector<std::vector<int64_t>> kept(static_cast<size_t>(has_value ? r : 0));
  for (int64_t a = 0; a < static_cast<int64_t>(kept.size()); ++a)
    for (int64_t k = 0; k < x->shape[a].value; ++k) kept[a].push_back(k);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t a = norm_axis(axes[i], r, c);
    const int64_t step = steps[i];
    if (step == 0) throw InputError(c.where() + ": Slice step 0");
    const Dim& d = x->shape[a];
    if (!d.known()) { s[a] = Dim{}; continue; }
    const int64_t n = d.value;
    int64_t st = starts[i], en = ends[i];
    if (st < 0) st += n;
    if (en < 0) en += n;
    int64_t len;
    if (step > 0) {
      st = std::clamp<int64_t>(st, 0, n);
      en = std::clamp<int64_t>(en, 0, n);
      len = en > st ? static_cast<int64_t>((__int128(en) - st + step - 1) / step) : 0;  // step may be near 2^63
    } else {
      st = std::clamp<int64_t>(st, 0, n - 1);
      en = std::clamp<int64_t>(en, -1, n - 1);
      len = st > en ? static_cast<int64_t>((__int128(st) - en - step - 1) / -__int128(step)) : 0;
    }
    s[a] = Dim::of(len);
    if (has_value) {
      kept[a].clear();
      for (int64_t k = 0; k < len; ++k) kept[a].push_back(st + k * step);
    }
  }
  set_out(c, 0, x->dtype, s);
  if (!has_value) return;
  // The kept elements in row-major order: an odometer over the kept indices of every axis.
  std::vector<int64_t> stride(static_cast<size_t>(r), 1), vals;
  for (int64_t a = r - 2; a >= 0; --a) stride[a] = stride[a + 1] * x->shape[a + 1].value;
  for (const auto& k : kept)
    if (k.empty()) { c.out(0).int_value = vals; return; }
  std::vector<size_t> at(static_cast<size_t>(r), 0);
  for (;;) {
    int64_t flat = 0;
    for (int64_t a = 0; a < r; ++a) flat += kept[a][at[a]] * stride[a];
    vals.push_back((*x->int_value)[static_cast<size_t>(flat)]);
    int64_t a = r - 1;
    while (a >= 0 && ++at[a] == kept[a].size()) at[a--] = 0;
    if (a < 0) break;
  }
  c.out(0).int_value = vals;
}

void rule_reduce(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x || !x->has_shape) { if (x && c.num_out()) c.out(0).dtype = x->dtype; return; }
  const int64_t r = static_cast<int64_t>(x->shape.size());
  std::vector<int64_t> axes;
  const bool axes_as_input = (c.n.op_type == "ReduceSum" && c.opset() >= 13) || c.opset() >= 18;
  if (axes_as_input && c.has_in(1)) {
    if (!c.value(1)) { c.out(0).dtype = x->dtype; return; }
    axes = *c.value(1);
  } else {
    axes = c.n.attr_ints("axes");
  }
  const bool keep = c.n.attr_i("keepdims", 1) != 0;
  const bool noop = axes.empty() && c.n.attr_i("noop_with_empty_axes", 0) != 0;
  if (noop) { set_out(c, 0, x->dtype, x->shape); return; }
  for (auto& a : axes) a = norm_axis(a, r, c);
  Shape s;
  for (int64_t i = 0; i < r; ++i) {
    const bool red = axes.empty() || std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!red) s.push_back(x->shape[i]);
    else if (keep) s.push_back(Dim::of(1));
  }
  DType dt = x->dtype;
  if (c.n.op_type == "ArgMax" || c.n.op_type == "ArgMin") dt = DType::i64;
  set_out(c, 0, dt, s);
}

void rule_argminmax(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x || !x->has_shape) return;
  const int64_t r = static_cast<int64_t>(x->shape.size());
  const int64_t axis = norm_axis(c.n.attr_i("axis", 0), r, c);
  Shape s = x->shape;
  if (c.n.attr_i("keepdims", 1)) s[axis] = Dim::of(1);
  else s.erase(s.begin() + axis);
  set_out(c, 0, DType::i64, s);
}

void rule_expand(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  if (!c.value(1) || !x->has_shape) {
    const TensorInfo* s = c.in(1);
    if (s && s->fully_known() && s->shape.size() == 1) {
      Shape out(static_cast<size_t>(s->shape[0].value));
      set_out(c, 0, x->dtype, out);
    } else {
      c.out(0).dtype = x->dtype;
    }
    return;
  }
  set_out(c, 0, x->dtype, broadcast(x->shape, dims_of(*c.value(1)), c));
}

void rule_constant_of_shape(Ctx& c) {
  DType dt = DType::f32;
  const Attribute* a = c.n.attr("value");
  if (a && a->t) dt = a->t->dtype;
  if (c.value(0)) {
    for (auto v : *c.value(0))
      if (v < 0) throw InputError(c.where() + ": negative dim in ConstantOfShape");
    set_out(c, 0, dt, dims_of(*c.value(0)));
    if (a && a->t && a->t->int_value && a->t->int_value->size() == 1 && c.value(0)->size() <= 1) {
      int64_t n = 1;
      for (auto v : *c.value(0)) n *= v;
      if (n <= 4096) c.out(0).int_value = std::vector<int64_t>(static_cast<size_t>(n), (*a->t->int_value)[0]);
    }
  } else {
    const TensorInfo* s = c.in(0);
    if (s && s->fully_known() && s->shape.size() == 1) set_out(c, 0, dt, unknown_dims(s->shape[0].value, c));
    else c.out(0).dtype = dt;
  }
}

void rule_range(Ctx& c) {
  const TensorInfo* st = c.in(0);
  DType dt = st ? st->dtype : DType::i64;
  // Non-integral float bounds: count = max(ceil((limit - start) / delta), 0).
  const bool fractional = [&] {
    for (size_t i = 0; i < 3; ++i)
      if (const TensorInfo* t = c.in(i); t && t->float_value && !t->int_value) return true;
    return false;
  }();
  if (fractional) {
    const auto a = numbers(c.in(0)), b = numbers(c.in(1)), d = numbers(c.in(2));
    if (a && b && d && a->size() == 1 && b->size() == 1 && d->size() == 1 && (*d)[0] != 0) {
      const double n = std::max(0.0, std::ceil(((*b)[0] - (*a)[0]) / (*d)[0]));
      if (n >= 0 && n < double(kMaxDim)) {
        set_out(c, 0, dt, {Dim::of(static_cast<int64_t>(n))});
        return;
      }
    }
    set_out(c, 0, dt, {Dim{}});
    return;
  }
  if (c.value(0) && c.value(1) && c.value(2) && c.value(0)->size() == 1 && c.value(1)->size() == 1 &&
      c.value(2)->size() == 1) {
    const int64_t a = (*c.value(0))[0], b = (*c.value(1))[0], d = (*c.value(2))[0];
    if (d == 0) throw InputError(c.where() + ": Range with delta 0");
    const __int128 count = (__int128(b) - a + d + (d > 0 ? -1 : 1)) / d;  // no int64 overflow
    if (count > kMaxDim) throw InputError(c.where() + ": Range of more than 2^62 elements");
    const int64_t n = count < 0 ? 0 : static_cast<int64_t>(count);
    set_out(c, 0, dt, {Dim::of(n)});
    if (n <= 4096) {
      std::vector<int64_t> v;
      for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<int64_t>(a + __int128(i) * d));
      c.out(0).int_value = v;
    }
  } else {
    set_out(c, 0, dt, {Dim{}});
  }
}

// Split of a tensor whose values are known (tf2onnx splits a constant pads vector into
// scalars and concatenates them back in another order before a Pad): each output keeps its
// part of the values, so the shapes they feed stay known.
void split_values(Ctx& c, const TensorInfo& x, int64_t axis, const std::vector<int64_t>& split) {
  if (!x.int_value || x.int_value->size() > kMaxValues || !x.fully_known() ||
      x.num_elements() != static_cast<int64_t>(x.int_value->size()) || split.size() != c.num_out())
    return;
  const Shape& s = x.shape;
  int64_t outer = 1, inner = 1, total = 0;
  for (int64_t k = 0; k < axis; ++k) outer *= s[static_cast<size_t>(k)].value;
  for (size_t k = static_cast<size_t>(axis) + 1; k < s.size(); ++k) inner *= s[k].value;
  for (int64_t part : split) {
    if (part < 0) return;
    total += part;
  }
  const int64_t d = s[static_cast<size_t>(axis)].value;
  if (total != d) return;
  const std::vector<int64_t>& v = *x.int_value;
  int64_t offset = 0;
  for (size_t i = 0; i < split.size(); ++i) {
    std::vector<int64_t> part;
    part.reserve(static_cast<size_t>(outer * split[i] * inner));
    for (int64_t o = 0; o < outer; ++o) {
      const auto from = v.begin() + (o * d + offset) * inner;
      part.insert(part.end(), from, from + split[i] * inner);
    }
    offset += split[i];
    if (!c.n.outputs[i].empty()) c.out(i).int_value = std::move(part);
  }
}

std::string sizes_text(const std::vector<int64_t>& v) {
  Shape s;
  for (int64_t x : v) s.push_back(Dim::of(x));
  return shape_text(s);
}

void rule_split(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x || !x->has_shape) return;
  const int64_t r = static_cast<int64_t>(x->shape.size());
  const int64_t axis = norm_axis(c.n.attr_i("axis", 0), r, c);
  std::vector<int64_t> split = c.n.attr_ints("split");
  if (split.empty() && c.value(1)) split = *c.value(1);
  const bool split_unknown = split.empty() && c.has_in(1);  // sizes fed at run time
  const size_t n = c.num_out();
  const Dim& d = x->shape[axis];
  if (!split.empty() && d.known()) {
    // Given sizes cover the axis exactly, one per output, as runtimes check.
    __int128 sum = 0;
    for (int64_t v : split) {
      if (v < 0) throw InputError(c.where() + ": split size " + std::to_string(v));
      sum += v;
    }
    if (sum != d.value || split.size() != n)
      throw InputError(c.where() + ": split sizes " + sizes_text(split) + " for " + std::to_string(n) + " outputs of axis " +
                       std::to_string(axis) + " of " + shape_text(x->shape));
  }
  if (split.empty() && d.known() && !split_unknown) {
    const int64_t parts = c.n.attr_i("num_outputs", static_cast<int64_t>(n));
    const int64_t each = ceil_div_safe(d.value, parts);
    for (size_t i = 0; i < n; ++i)
      split.push_back(std::min<int64_t>(each, std::max<int64_t>(0, d.value - each * static_cast<int64_t>(i))));
  }
  for (size_t i = 0; i < n; ++i) {
    Shape s = x->shape;
    s[axis] = i < split.size() ? Dim::of(split[i]) : Dim{};
    set_out(c, i, x->dtype, s);
  }
  split_values(c, *x, axis, split);
}

// Window attributes of Conv/ConvTranspose/pooling, validated: one entry per spatial axis (a
// shorter list is padded with the default), kernel, strides and dilations >= 1, pads >= 0,
// everything at most 2^62. Bad values are input errors, never a division by zero.
void check_window(Ctx& c, size_t sd, std::vector<int64_t>& kernel, std::vector<int64_t>& strides,
                  std::vector<int64_t>& dil, std::vector<int64_t>& pads) {
  auto check = [&](std::vector<int64_t>& v, size_t n, int64_t lo, const char* what) {
    if (v.size() > n) throw InputError(c.where() + ": " + what + " has " + std::to_string(v.size()) +
                                       " entries for " + std::to_string(n));
    for (int64_t x : v)
      if (x < lo || x > kMaxDim) throw InputError(c.where() + ": " + what + " value " + std::to_string(x) + " out of range");
  };
  check(kernel, sd, -1, "kernel_shape");
  check(strides, sd, 1, "strides");
  check(dil, sd, 1, "dilations");
  check(pads, 2 * sd, 0, "pads");
  kernel.resize(sd, -1);
  strides.resize(sd, 1);
  dil.resize(sd, 1);
  pads.resize(2 * sd, 0);
}

// An output extent computed in 128 bits; outside [0, 2^62] it is an input error.
int64_t window_dim(Ctx& c, __int128 o) {
  if (o < 0 || o > kMaxDim) throw InputError(c.where() + ": output size out of range");
  return int64_t(o);
}

__int128 floor_div(__int128 a, __int128 b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
__int128 ceil_div(__int128 a, __int128 b) { return -floor_div(-a, b); }

std::string int128_text(__int128 v) {
  return v < INT64_MIN || v > INT64_MAX ? std::string(v < 0 ? "-" : "") + "huge" : std::to_string(int64_t(v));
}

// The output extent of a sliding window along one spatial axis: floor((n - k) / stride) + 1
// windows (ceil with ceil_mode) over an input of n (pads included) and a dilated kernel of k,
// rounded as runtimes round (C++ division truncates toward zero: a kernel one wider than the
// input gave 1 where onnxruntime and PyTorch give 0). No window at all (a kernel wider than
// the padded input: a 7x7 head bound to a small image) cannot run: an input error, never an
// unknown dim that ONNX's own inference then fills with its negative size's square.
__int128 window_extent(Ctx& c, size_t axis, __int128 n, __int128 k, int64_t stride, bool ceil_mode) {
  const __int128 o = (ceil_mode ? ceil_div(n - k, stride) : floor_div(n - k, stride)) + 1;
  if (o < 1)
    throw InputError(c.where() + ": spatial axis " + std::to_string(axis) + ": a kernel spanning " + int128_text(k) +
                     " is wider than the padded input of " + int128_text(n) +
                     ": no output position (runtimes refuse it)");
  return o;
}

// The channels a convolution's weight was made for: a Conv's input has the weight's C per group
// times group channels and its M splits into the groups; a ConvTranspose's input has the
// weight's first dim. Runtimes refuse anything else ("Input channels C is not equal to kernel
// channels * group"): an image of the wrong channel count bound with --shape cannot run.
void check_conv_channels(Ctx& c, const TensorInfo& x, const TensorInfo& w, int64_t group, bool transposed) {
  const Dim& cin = x.shape[1];
  const Dim& wc = transposed ? w.shape[0] : w.shape[1];
  const std::string groups = group > 1 ? " in " + std::to_string(group) + " groups" : "";
  if (cin.known() && wc.known() && __int128(cin.value) != (transposed ? 1 : __int128(group)) * wc.value)
    throw InputError(c.where() + ": an input of " + std::to_string(cin.value) + " channels " + shape_text(x.shape) +
                     " for a weight " + shape_text(w.shape) + groups + " made for " +
                     std::to_string((transposed ? 1 : group) * wc.value) + " channels");
  if (!transposed && group > 1 && w.shape[0].known() && w.shape[0].value % group != 0)
    throw InputError(c.where() + ": a weight " + shape_text(w.shape) + " of " + std::to_string(w.shape[0].value) +
                     " output channels does not split into " + std::to_string(group) + " groups");
}

void rule_conv(Ctx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* w = c.in(1);
  if (!x || !w || !x->has_shape || !w->has_shape || x->shape.size() < 3) {
    if (x && c.num_out()) c.out(0).dtype = x->dtype;
    return;
  }
  const size_t sd = x->shape.size() - 2;
  const bool transposed = c.n.op_type == "ConvTranspose";
  if (w->shape.size() < 2 || w->shape.size() != x->shape.size())
    throw InputError(c.where() + ": weight of rank " + std::to_string(w->shape.size()) + " for an input of rank " +
                     std::to_string(x->shape.size()));
  auto kernel = c.n.attr_ints("kernel_shape");
  if (kernel.empty())
    for (size_t i = 0; i < sd; ++i) kernel.push_back(w->shape[2 + i].known() ? w->shape[2 + i].value : -1);
  auto strides = c.n.attr_ints("strides");
  auto dil = c.n.attr_ints("dilations");
  auto pads = c.n.attr_ints("pads");
  check_window(c, sd, kernel, strides, dil, pads);
  const std::string autopad = c.n.attr_s("auto_pad", "NOTSET");
  Shape s{x->shape[0]};
  const int64_t group = c.n.attr_i("group", 1);
  if (group < 1 || group > kMaxDim) throw InputError(c.where() + ": group " + std::to_string(group) + " out of range");
  check_conv_channels(c, *x, *w, group, transposed);
  if (transposed) s.push_back(w->shape[1].known() ? Dim::of(checked_mul(w->shape[1].value, group, c.where())) : Dim{});
  else s.push_back(w->shape[0]);
  auto out_pad = c.n.attr_ints("output_padding");
  if (out_pad.size() > sd) throw InputError(c.where() + ": output_padding has too many entries");
  for (int64_t v : out_pad)
    if (v < 0 || v > kMaxDim) throw InputError(c.where() + ": output_padding value " + std::to_string(v) + " out of range");
  out_pad.resize(sd, 0);
  auto out_shape = c.n.attr_ints("output_shape");
  if (!out_shape.empty() && out_shape.size() != sd)
    throw InputError(c.where() + ": output_shape has " + std::to_string(out_shape.size()) + " entries for " + std::to_string(sd));
  for (size_t i = 0; i < sd; ++i) {
    const Dim& in = x->shape[2 + i];
    if (!in.known() || kernel[i] < 0) { s.push_back(Dim{}); continue; }
    const __int128 k = __int128(kernel[i] - 1) * dil[i] + 1;
    const __int128 n = in.value;
    __int128 o;
    if (transposed) {
      if (!out_shape.empty()) o = out_shape[i];
      else if (autopad == "SAME_UPPER" || autopad == "SAME_LOWER") o = n * strides[i];
      else o = __int128(strides[i]) * (n - 1) + out_pad[i] + k - pads[i] - pads[i + sd];
    } else if (autopad == "SAME_UPPER" || autopad == "SAME_LOWER") {
      o = (n + strides[i] - 1) / strides[i];
    } else if (autopad == "VALID") {
      o = window_extent(c, i, n, k, strides[i], false);
    } else {
      o = window_extent(c, i, n + pads[i] + pads[i + sd], k, strides[i], false);
    }
    if (o < 1) throw InputError(c.where() + ": spatial axis " + std::to_string(i) + ": output size " + int128_text(o));
    s.push_back(Dim::of(window_dim(c, o)));
  }
  set_out(c, 0, c.n.op_type == "ConvInteger" ? DType::i32 : x->dtype, s);
}

void rule_pool(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x || !x->has_shape || x->shape.size() < 3) return;
  const size_t sd = x->shape.size() - 2;
  Shape s{x->shape[0], x->shape[1]};
  const std::string& op = c.n.op_type;
  if (op.rfind("Global", 0) == 0) {
    for (size_t i = 0; i < sd; ++i) s.push_back(Dim::of(1));
    set_out(c, 0, x->dtype, s);
    return;
  }
  auto kernel = c.n.attr_ints("kernel_shape");
  auto strides = c.n.attr_ints("strides");
  auto pads = c.n.attr_ints("pads");
  auto dil = c.n.attr_ints("dilations");
  check_window(c, sd, kernel, strides, dil, pads);
  for (auto& k : kernel)
    if (k < 0) k = 1;
  const bool ceil_mode = c.n.attr_i("ceil_mode", 0) != 0;
  const std::string autopad = c.n.attr_s("auto_pad", "NOTSET");
  for (size_t i = 0; i < sd; ++i) {
    const Dim& in = x->shape[2 + i];
    if (!in.known()) { s.push_back(Dim{}); continue; }
    const __int128 k = __int128(kernel[i] - 1) * dil[i] + 1;
    const __int128 n = in.value;
    __int128 o;
    if (autopad == "SAME_UPPER" || autopad == "SAME_LOWER") o = (n + strides[i] - 1) / strides[i];
    else if (autopad == "VALID") o = window_extent(c, i, n, k, strides[i], false);
    else {
      o = window_extent(c, i, n + pads[i] + pads[i + sd], k, strides[i], ceil_mode);
      if (ceil_mode && o > 1 && (o - 1) * strides[i] >= n + pads[i]) --o;
    }
    s.push_back(Dim::of(window_dim(c, o)));
  }
  set_out(c, 0, x->dtype, s);
  if (c.num_out() > 1) set_out(c, 1, DType::i64, s);
}

namespace {

// A broadcasting rule; `f` folds integer values (shape arithmetic), `dt` the output type
// when it is not the inputs' (comparisons give bool).
Rule binary_rule(std::function<int64_t(int64_t, int64_t)> f, DType dt = DType::undefined) {
  return [f, dt](Ctx& c) { rule_broadcast(c, dt, f); };
}

// Arithmetic: broadcasting, with the integer values folded.
void add_arithmetic_rules(RuleTable& t) {
  const auto bin = [](std::function<int64_t(int64_t, int64_t)> f) { return binary_rule(std::move(f)); };
  // Folded integer arithmetic wraps in two's complement, as int64 tensors do at run time;
  // division by zero folds to 0 and INT64_MIN / -1 wraps instead of trapping.
  const auto wrap = [](uint64_t v) { return static_cast<int64_t>(v); };
  t["Add"] = bin([wrap](int64_t a, int64_t b) { return wrap(uint64_t(a) + uint64_t(b)); });
  t["Sub"] = bin([wrap](int64_t a, int64_t b) { return wrap(uint64_t(a) - uint64_t(b)); });
  t["Mul"] = bin([wrap](int64_t a, int64_t b) { return wrap(uint64_t(a) * uint64_t(b)); });
  t["Div"] = [](Ctx& c) {
    rule_broadcast(c, DType::undefined, [](int64_t a, int64_t b) { return b == 0 ? 0 : b == -1 ? int64_t(0 - uint64_t(a)) : a / b; });
    // A float division of integral values is kept only when it is exact.
    const auto* a = c.value(0);
    const auto* b = c.value(1);
    if (c.num_out() && c.out(0).int_value && is_float(c.out(0).dtype) && a && b) {
      for (size_t i = 0; i < std::max(a->size(), b->size()); ++i) {
        const int64_t x = (*a)[a->size() == 1 ? 0 : i], y = (*b)[b->size() == 1 ? 0 : i];
        if (y == 0 || (y != -1 && x % y != 0)) {  // not exact: the float quotient
          std::vector<double> q(c.out(0).int_value->size());
          for (size_t k = 0; k < q.size(); ++k)
            q[k] = double((*a)[a->size() == 1 ? 0 : k]) / double((*b)[b->size() == 1 ? 0 : k]);
          c.out(0).int_value.reset();
          set_numbers(c.out(0), q);
          break;
        }
      }
    }
  };
  t["Mod"] = bin([](int64_t a, int64_t b) { return b == 0 || b == -1 ? 0 : a % b; });
  t["Max"] = bin([](int64_t a, int64_t b) { return std::max(a, b); });
  t["Min"] = bin([](int64_t a, int64_t b) { return std::min(a, b); });
  t["Pow"] = bin(nullptr);
  t["Sum"] = bin(nullptr);
  t["Mean"] = bin(nullptr);
  // The slope broadcasts to X (from opset 7; older ones take it along the channel axis), as
  // onnxruntime checks; the output is X's.
  t["PRelu"] = [](Ctx& c) {
    rule_unary(c);
    const TensorInfo *x = c.in(0), *slope = c.in(1);
    if (c.opset() >= 7 && x && slope && x->has_shape && slope->has_shape) broadcast(x->shape, slope->shape, c);
  };
  t["BitShift"] = bin(nullptr);
}

// Comparisons and logic (bool results) and Where.
void add_comparison_rules(RuleTable& t) {
  const auto bin = [](std::function<int64_t(int64_t, int64_t)> f, DType dt) { return binary_rule(std::move(f), dt); };
  using F = std::function<int64_t(int64_t, int64_t)>;
  const std::pair<const char*, F> compare[] = {
      {"Equal", [](int64_t a, int64_t b) { return int64_t(a == b); }},
      {"Less", [](int64_t a, int64_t b) { return int64_t(a < b); }},
      {"Greater", [](int64_t a, int64_t b) { return int64_t(a > b); }},
      {"LessOrEqual", [](int64_t a, int64_t b) { return int64_t(a <= b); }},
      {"GreaterOrEqual", [](int64_t a, int64_t b) { return int64_t(a >= b); }},
      {"And", [](int64_t a, int64_t b) { return int64_t(a && b); }},
      {"Or", [](int64_t a, int64_t b) { return int64_t(a || b); }},
      {"Xor", [](int64_t a, int64_t b) { return int64_t(bool(a) != bool(b)); }},
  };
  for (const auto& [op, f] : compare) t[op] = bin(f, DType::boolean);
  t["Where"] = [](Ctx& c) {
    rule_broadcast(c, DType::undefined, nullptr);
    const auto* cond = c.value(0);
    const auto* a = c.value(1);
    const auto* b = c.value(2);
    if (!c.num_out() || !cond || !a || !b) return;
    const size_t n = std::max({cond->size(), a->size(), b->size()});
    auto at = [n](const std::vector<int64_t>& v, size_t i) { return v.size() == 1 ? v[0] : (v.size() == n ? v[i] : 0); };
    for (const auto* v : {cond, a, b})
      if (v->size() != 1 && v->size() != n) return;
    if (n > kMaxValues) return;
    std::vector<int64_t> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = at(*cond, i) ? at(*a, i) : at(*b, i);
    c.out(0).int_value = out;
  };
}

// One input's shape to the output: activations, normalizations, casts.
void add_unary_rules(RuleTable& t) {
  // Elementwise ops get theirs from their traits (add_elementwise_rules).
  for (const char* op : {"Identity", "Dropout", "Softmax", "LogSoftmax", "Hardmax", "LpNormalization",
                         "InstanceNormalization", "LRN", "MeanVarianceNormalization", "CumSum", "Trilu",
                         "ReverseSequence"})
    t[op] = rule_unary;
  // Per-channel parameters ([C]: scale and bias, BatchNormalization's running statistics too)
  // match the input's channels, as runtimes check ("Invalid input scale: 0th dimension != C").
  const Rule per_channel = [](Ctx& c) {
    rule_unary(c);
    const TensorInfo* x = c.in(0);
    if (!x || !x->has_shape || x->shape.size() < 2 || !x->shape[1].known()) return;
    const size_t params = c.n.op_type == "BatchNormalization" ? 5 : 3;
    for (size_t i = 1; i < params && i < c.n.inputs.size(); ++i) {
      const TensorInfo* p = c.in(i);
      // (BatchNormalization before opset 9 with spatial = 0 takes [C, D1, ...] parameters.)
      if (!p || !p->has_shape || p->shape.size() != 1 || !p->shape[0].known() || p->shape[0].value == x->shape[1].value)
        continue;
      static const char* const names[] = {"", "scale", "bias", "mean", "variance"};
      throw InputError(c.where() + ": " + names[i] + " " + shape_text(p->shape) + " for the " +
                       std::to_string(x->shape[1].value) + " channels of " + shape_text(x->shape));
    }
  };
  t["InstanceNormalization"] = per_channel;
  t["BatchNormalization"] = per_channel;
  t["Not"] = [](Ctx& c) {
    rule_unary(c);
    if (!c.num_out()) return;
    c.out(0).dtype = DType::boolean;
    if (c.value(0)) {
      auto v = *c.value(0);
      for (auto& x : v) x = x == 0;
      c.out(0).int_value = v;
    }
  };
  t["IsNaN"] = t["Not"];
  t["IsInf"] = t["Not"];
  t["Dropout"] = [](Ctx& c) {
    rule_unary(c);
    const TensorInfo* x = c.in(0);
    // The mask is bool from opset 12 on; before that it has the input's type.
    if (x && x->has_shape && c.num_out() > 1) set_out(c, 1, c.opset() >= 12 ? DType::boolean : x->dtype, x->shape);
  };
  t["Cast"] = rule_cast;
  t["CastLike"] = [](Ctx& c) {
    rule_unary(c);
    if (c.in(1) && c.num_out()) c.out(0).dtype = c.in(1)->dtype;
  };
}

// Matrix products, shape manipulation, reductions, convolutions and pooling.
void add_structural_rules(RuleTable& t) {
  t["MatMul"] = rule_matmul;
  t["MatMulInteger"] = rule_matmul;
  t["Gemm"] = rule_gemm;
  t["LayerNormalization"] = rule_layernorm;
  t["SimplifiedLayerNormalization"] = rule_layernorm;
  t["RMSNormalization"] = rule_layernorm;
  t["Shape"] = rule_shape;
  t["Size"] = rule_size;
  t["Constant"] = rule_constant;
  t["Reshape"] = rule_reshape;
  t["Flatten"] = rule_flatten;
  t["Unsqueeze"] = rule_unsqueeze;
  t["Squeeze"] = rule_squeeze;
  t["Transpose"] = rule_transpose;
  t["Concat"] = rule_concat;
  t["Gather"] = rule_gather;
  t["Slice"] = rule_slice;
  for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                         "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
    t[op] = rule_reduce;
  t["ArgMax"] = rule_argminmax;
  t["ArgMin"] = rule_argminmax;
  t["Expand"] = rule_expand;
  t["ConstantOfShape"] = rule_constant_of_shape;
  t["Range"] = rule_range;
  t["Split"] = rule_split;
  t["Conv"] = rule_conv;
  t["ConvTranspose"] = rule_conv;
  t["ConvInteger"] = rule_conv;
  for (const char* op : {"MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"})
    t[op] = rule_pool;
}

}  // namespace

void add_core_rules(RuleTable& t) {
  add_arithmetic_rules(t);
  add_comparison_rules(t);
  add_unary_rules(t);
  add_structural_rules(t);
}

void add_elementwise_rules(RuleTable& t) {
  for (const auto& [domain, op] : op_traits().ops()) {
    if (t.find(domain, op, 0)) continue;  // a rule of its own (values, output type)
    const OpTraits& traits = *op_traits().find(domain, op, 0);
    if (traits.arity == 1) t.add(domain, op, rule_unary);
    else t.add(domain, op, [](Ctx& c) { rule_broadcast(c, DType::undefined, nullptr); });
  }
}

namespace {

constexpr int kMaxDepth = 32;

const RuleTable& rules() {
  static const RuleTable table = [] {
    RuleTable t;
    add_core_rules(t);
    add_standard_rules(t);
    add_contrib_rules(t);
    add_control_flow_rules(t);
    add_sequence_rules(t);
    add_data_rules(t);
    add_elementwise_rules(t);
    return t;
  }();
  return table;
}

const Rule* find_rule(const Node& n, const Model& model) {
  return rules().find(n.domain, n.op_type, model.opset(n.domain));
}

// Fills what the rule left unknown from ONNX's own inference; never overrides the rule.
// Symbolic hint dims take the values bound on the graph inputs.
bool merge_hint(TensorInfo& t, const TensorInfo& h, const std::map<std::string, int64_t>& bound) {
  bool used = false;
  if (t.dtype == DType::undefined && h.dtype != DType::undefined) { t.dtype = h.dtype; used = true; }
  if (!h.has_shape) return used;
  auto resolve = [&](const Dim& d) {
    if (d.known() || d.param.empty()) return d;
    if (d.param.rfind("unk__", 0) == 0) return Dim{};  // ONNX's generated names mean "unknown"
    auto it = bound.find(d.param);
    return it == bound.end() ? d : Dim::of(it->second);
  };
  if (!t.has_shape) {
    t.has_shape = true;
    t.shape.clear();
    for (const auto& d : h.shape) t.shape.push_back(resolve(d));
    return true;
  }
  if (t.shape.size() != h.shape.size()) return used;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i].known()) continue;
    Dim d = resolve(h.shape[i]);
    if (d.known() || (t.shape[i].param.empty() && !d.param.empty())) { t.shape[i] = d; used = true; }
  }
  return used;
}

struct Run {
  const Model& model;
  ShapeResult& result;
  const Hints* hints;
  std::map<std::string, int64_t> bound;  // symbolic input dim -> bound value (for hints)
  std::set<std::string> unknown;         // ops with neither a rule nor a hint
  int64_t* unroll_budget = nullptr;      // shared by the whole inference (Ctx::unroll_budget)
};

// Node evaluations that unrolled Loop / SequenceMap bodies may cost in one inference.
constexpr int64_t kUnrollBudget = 100000;

void infer_graph(Run& run, Graph& graph, int depth);

// Every dim and every tensor's element count must stay within 2^62 (so later stages can
// multiply by element sizes without overflow).
void check_size(const TensorInfo& t, const std::string& where) {
  int64_t n = 1;
  for (const auto& d : t.shape) {
    if (!d.known()) continue;
    if (d.value > kMaxDim) throw InputError(where + ": tensor '" + t.name + "' has a dimension beyond 2^62 (overflow)");
    if (d.value != 0 && n > kMaxDim / d.value)
      throw InputError(where + ": tensor '" + t.name + "' has more than 2^62 elements (size overflow)");
    n *= d.value;
  }
}

}  // namespace

void infer_subgraph(Ctx& c, Graph& body) {
  if (c.depth + 1 > kMaxDepth) throw InputError(c.where() + ": subgraphs nested too deeply");
  // Outer-scope names the body reads become visible to it (copied in, never overwritten).
  std::set<std::string> local;
  for (const auto& n : body.nodes)
    for (const auto& o : n.outputs) local.insert(o);
  std::function<void(const Graph&)> import = [&](const Graph& g) {
    for (const auto& n : g.nodes) {
      for (const auto& in : n.inputs) {
        if (in.empty() || local.count(in) || body.tensors.count(in)) continue;
        if (const TensorInfo* t = c.g.find(in)) body.tensors[in] = *t;
      }
      for (const auto& [k, a] : n.attributes)
        for (const auto& sg : a.graphs) import(*sg);
    }
  };
  import(body);
  for (const auto& o : body.outputs)
    if (!local.count(o) && !body.tensors.count(o))
      if (const TensorInfo* t = c.g.find(o)) body.tensors[o] = *t;
  Run run{c.model, c.result, c.hints, {}, {}, c.unroll_budget};
  infer_graph(run, body, c.depth + 1);
}

namespace {

void infer_graph(Run& run, Graph& graph, int depth) {
  std::vector<std::pair<std::string, Attribute>> bodies;
  for (size_t idx = 0; idx < graph.nodes.size(); ++idx) {
    const Node& node = graph.nodes[idx];
    Ctx c{graph, run.model, node, run.result, run.hints, depth, run.unroll_budget, &bodies};
    const Rule* rule = find_rule(node, run.model);
    if (rule) (*rule)(c);
    bool hinted = false;
    if (run.hints) {
      for (const auto& o : node.outputs) {
        if (o.empty()) continue;
        auto it = run.hints->find(o);
        if (it != run.hints->end()) hinted |= merge_hint(graph.tensor(o), it->second, run.bound);
      }
    }
    if (!rule && !hinted) {
      run.unknown.insert(node.domain.empty() ? node.op_type : node.domain + "." + node.op_type);
      // Best effort: outputs take the first input's dtype.
      const TensorInfo* x = c.in(0);
      for (size_t i = 0; i < c.num_out(); ++i)
        if (!node.outputs[i].empty() && x && c.out(i).dtype == DType::undefined) c.out(i).dtype = x->dtype;
    }
    for (const auto& o : node.outputs) {
      if (o.empty()) continue;
      TensorInfo& t = graph.tensor(o);
      check_size(t, c.where());
      if (t.int_value && t.int_value->size() > kMaxValues) t.int_value.reset();
    }
    // Inferred control-flow bodies replace the node's attributes (in this graph only: the
    // loaded model's bodies are shared, never written).
    for (auto& [key, a] : bodies) graph.nodes[idx].attributes[key] = std::move(a);
    bodies.clear();
  }
  if (!run.unknown.empty()) {
    for (const auto& u : run.unknown) run.result.unknown_ops.push_back(u);
    run.unknown.clear();
  }
}

}  // namespace
}  // namespace neusight::shape_rules

namespace neusight {

std::vector<std::pair<std::string, std::string>> shape_rule_ops() { return shape_rules::rules().ops(); }

ShapeResult infer_shapes(Graph& graph, const Model& model, const std::map<std::string, TensorInfo>* hints) {
  using namespace shape_rules;
  ShapeResult result;
  int64_t budget = kUnrollBudget;
  Run run{model, result, hints, {}, {}, &budget};
  // What bind_dims did: symbolic dims of the loaded inputs against the bound ones.
  for (const auto& name : graph.inputs) {
    const TensorInfo* now = graph.find(name);
    const TensorInfo* was = model.graph.find(name);
    if (!now || !was || now->shape.size() != was->shape.size()) continue;
    for (size_t i = 0; i < now->shape.size(); ++i)
      if (now->shape[i].known() && !was->shape[i].known() && !was->shape[i].param.empty())
        run.bound.emplace(was->shape[i].param, now->shape[i].value);
  }
  // Dims that differ only by name: the same axis of two inputs under two symbolic names
  // bound to the same value (`batch` / `batch_size`) is most likely one dim named twice.
  {
    std::set<std::string> seen;
    std::string list;
    const auto& ins = model.graph.inputs;
    for (size_t a = 0; a < ins.size(); ++a)
      for (size_t b = a + 1; b < ins.size(); ++b) {
        const TensorInfo* ta = model.graph.find(ins[a]);
        const TensorInfo* tb = model.graph.find(ins[b]);
        if (!ta || !tb || !ta->has_shape || !tb->has_shape) continue;
        for (size_t k = 0; k < std::min(ta->shape.size(), tb->shape.size()); ++k) {
          const std::string& p = ta->shape[k].param;
          const std::string& q = tb->shape[k].param;
          if (p.empty() || q.empty() || p == q || ta->shape[k].known() || tb->shape[k].known()) continue;
          auto vp = run.bound.find(p), vq = run.bound.find(q);
          if (vp == run.bound.end() || vq == run.bound.end() || vp->second != vq->second) continue;
          const std::string pair = std::min(p, q) + "' and '" + std::max(p, q);
          if (!seen.insert(pair).second) continue;
          list += (list.empty() ? "'" : ", '") + pair + "' (axis " + std::to_string(k) + " of '" + ins[a] +
                  "' and '" + ins[b] + "')";
        }
      }
    if (!list.empty())
      result.warnings.push_back(Warning{WarningCode::dims_differ_by_name, "input dims that differ only by name: " + list +
                                                  "; each name was bound on its own (to the same value)"});
  }
  for (const auto& name : graph.inputs)
    if (const TensorInfo* t = graph.find(name)) check_size(*t, "input '" + name + "'");
  for (const auto& name : graph.initializers)
    if (const TensorInfo* t = graph.find(name)) check_size(*t, "initializer '" + name + "'");
  infer_graph(run, graph, 0);
  std::sort(result.unknown_ops.begin(), result.unknown_ops.end());
  result.unknown_ops.erase(std::unique(result.unknown_ops.begin(), result.unknown_ops.end()), result.unknown_ops.end());
  if (!result.unknown_ops.empty()) {
    std::string list;
    for (const auto& u : result.unknown_ops) list += (list.empty() ? "" : ", ") + u;
    result.warnings.push_back(
        Warning{WarningCode::no_shape_rule, "no shape rule for: " + list + " (shapes after them may be unknown)"});
  }
  return result;
}

}  // namespace neusight
