// rules_standard.cpp - shape rules for the standard ONNX ops beyond the core table: data
// movement (Tile, Pad, Resize, DepthToSpace ...), indexing (GatherElements/ND, Scatter*,
// TopK, OneHot, NonZero ...), quantization, recurrent layers, Einsum, opset-23 Attention.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "rules.h"

namespace neusight::shape_rules {
namespace {

// Output 0 has the shape of input `i`; dtype `dt` (undefined: the input's).
void same_as(Ctx& c, size_t i, DType dt = DType::undefined, size_t out = 0) {
  const TensorInfo* x = c.in(i);
  if (!x) { if (dt != DType::undefined) set_dtype(c, out, dt); return; }
  const DType d = dt == DType::undefined ? x->dtype : dt;
  if (x->has_shape) set_out(c, out, d, x->shape);
  else set_dtype(c, out, d);
}

int64_t scalar_value(const Ctx& c, size_t i, int64_t fallback) {
  const auto* v = c.value(i);
  return v && v->size() == 1 ? (*v)[0] : fallback;
}

void rule_tile(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  const auto* rep = c.value(1);
  if (!x->has_shape) { set_dtype(c, 0, x->dtype); return; }
  Shape s = x->shape;
  if (rep && rep->size() != s.size())
    throw InputError(c.where() + ": " + std::to_string(rep->size()) + " repeats for an input of rank " +
                     std::to_string(s.size()) + " " + shape_text(s));
  if (!rep) {
    for (auto& d : s) d = Dim{};
    set_out(c, 0, x->dtype, s);
    return;
  }
  for (size_t i = 0; i < s.size(); ++i) {
    if ((*rep)[i] < 0) throw InputError(c.where() + ": negative repeat");
    s[i] = s[i].known() ? Dim::of(checked_mul(s[i].value, (*rep)[i], c.where()))
                        : ((*rep)[i] == 1 ? s[i] : Dim{});
  }
  set_out(c, 0, x->dtype, s);
  if (x->int_value && s.size() == 1 && s[0].known() && static_cast<size_t>(s[0].value) <= kMaxValues) {
    std::vector<int64_t> v;
    for (int64_t k = 0; k < (*rep)[0]; ++k) v.insert(v.end(), x->int_value->begin(), x->int_value->end());
    c.out(0).int_value = v;
  }
}

void rule_pad(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  if (!x->has_shape) { set_dtype(c, 0, x->dtype); return; }
  const int64_t r = static_cast<int64_t>(x->shape.size());
  std::vector<int64_t> pads;
  bool known_pads = true;
  if (c.opset() < 11) pads = c.n.attr_ints("pads");
  else if (c.value(1)) pads = *c.value(1);
  else known_pads = false;
  std::vector<int64_t> axes;
  if (c.has_in(3)) {
    if (!c.value(3)) known_pads = false;
    else axes = *c.value(3);
  }
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  Shape s = x->shape;
  if (!known_pads || pads.size() != 2 * axes.size()) {
    for (auto& d : s) d = Dim{};
    set_out(c, 0, x->dtype, s);
    return;
  }
  const size_t na = axes.size();
  for (size_t k = 0; k < na; ++k) {
    const int64_t a = norm_axis(axes[k], r, c);
    if (!s[a].known()) continue;
    const int64_t v = s[a].value + pads[k] + pads[k + na];
    if (v < 0) throw InputError(c.where() + ": padding makes a dimension negative");
    s[a] = Dim::of(v);
  }
  set_out(c, 0, x->dtype, s);
}

// Resize / Upsample: sizes when given, else floor(dim * scale).
void rule_resize(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  if (!x->has_shape) { set_dtype(c, 0, x->dtype); return; }
  const int64_t r = static_cast<int64_t>(x->shape.size());
  Shape s = x->shape;
  const bool upsample = c.n.op_type == "Upsample";
  const size_t scales_in = upsample ? 1 : (c.opset() >= 11 ? 2 : 1);
  std::vector<int64_t> axes = c.n.attr_ints("axes");
  auto axis_list = [&](size_t n) {
    std::vector<int64_t> a = axes;
    if (a.empty()) for (size_t i = 0; i < n; ++i) a.push_back(static_cast<int64_t>(i));
    for (auto& v : a) v = norm_axis(v, r, c);
    return a;
  };
  // Without `axes`, scales and sizes have one value per input dim (onnxruntime refuses others).
  auto check_count = [&](size_t n, const char* what) {
    const size_t want = axes.empty() ? static_cast<size_t>(r) : axes.size();
    if (n != want)
      throw InputError(c.where() + ": " + what + " has " + std::to_string(n) + " values for " +
                       (axes.empty() ? "a rank-" + std::to_string(r) + " input" : std::to_string(want) + " axes"));
  };
  if (!upsample && c.opset() >= 11 && c.value(3) && !c.value(3)->empty()) {
    const auto& sizes = *c.value(3);
    check_count(sizes.size(), "sizes");
    auto a = axis_list(sizes.size());
    const std::string policy = c.n.attr_s("keep_aspect_ratio_policy", "stretch");
    if (policy == "stretch") {
      for (size_t k = 0; k < a.size(); ++k) s[a[k]] = Dim::of(sizes[k]);
    } else {
      // not_larger / not_smaller: one scale for all axes, chosen from the ratios.
      double scale = policy == "not_larger" ? 1e300 : 0;
      bool ok = true;
      for (size_t k = 0; k < a.size(); ++k) {
        if (!x->shape[a[k]].known() || x->shape[a[k]].value == 0) { ok = false; break; }
        const double q = double(sizes[k]) / double(x->shape[a[k]].value);
        scale = policy == "not_larger" ? std::min(scale, q) : std::max(scale, q);
      }
      for (size_t k = 0; k < a.size(); ++k)
        s[a[k]] = ok ? Dim::of(static_cast<int64_t>(std::round(scale * double(x->shape[a[k]].value)))) : Dim{};
    }
    set_out(c, 0, x->dtype, s);
    return;
  }
  // Scales: float tensor; the frontend keeps only integral float values, so read the
  // attribute (Upsample-7) or the integral values; anything else leaves dims unknown.
  std::vector<double> scales;
  if (const Attribute* a = c.n.attr("scales")) scales = a->floats;
  else if (c.value(scales_in)) for (auto v : *c.value(scales_in)) scales.push_back(double(v));
  else if (const TensorInfo* st = c.in(scales_in); st && st->has_shape && st->shape.size() == 1 &&
                                                    st->shape[0].known() && st->shape[0].value > 0) {
    // Non-integral scales (e.g. 0.5): their values are not kept; use the ONNX hint.
    check_count(static_cast<size_t>(st->shape[0].value), "scales");
  }
  if (!scales.empty()) check_count(scales.size(), "scales");
  if (scales.empty()) {
    for (auto& d : s) d = Dim{};
    set_out(c, 0, x->dtype, s);
    return;
  }
  auto a = axis_list(scales.size());
  for (size_t k = 0; k < a.size() && k < scales.size(); ++k) {
    if (!x->shape[a[k]].known()) continue;
    s[a[k]] = Dim::of(static_cast<int64_t>(std::floor(double(x->shape[a[k]].value) * scales[k] + 1e-9)));
  }
  set_out(c, 0, x->dtype, s);
}

void rule_depth_space(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x || !x->has_shape || x->shape.size() != 4) { if (x) set_dtype(c, 0, x->dtype); return; }
  const int64_t b = c.n.attr_i("blocksize", 1);
  if (b <= 0) throw InputError(c.where() + ": blocksize must be positive");
  Shape s = x->shape;
  auto mul = [&](const Dim& d) { return d.known() ? Dim::of(checked_mul(d.value, b, c.where())) : Dim{}; };
  auto div = [&](const Dim& d, int64_t q) { return d.known() ? Dim::of(d.value / q) : Dim{}; };
  if (c.n.op_type == "DepthToSpace") {
    s[1] = div(s[1], b * b);
    s[2] = mul(s[2]);
    s[3] = mul(s[3]);
  } else {
    s[1] = s[1].known() ? Dim::of(checked_mul(s[1].value, b * b, c.where())) : Dim{};
    s[2] = div(s[2], b);
    s[3] = div(s[3], b);
  }
  set_out(c, 0, x->dtype, s);
}

void rule_gather_elements(Ctx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* idx = c.in(1);
  if (!x) return;
  if (idx && idx->has_shape) set_out(c, 0, x->dtype, idx->shape);
  else set_dtype(c, 0, x->dtype);
}

void rule_gather_nd(Ctx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* idx = c.in(1);
  if (!x) return;
  if (!idx || !x->has_shape || !idx->has_shape || idx->shape.empty() || !idx->shape.back().known()) {
    set_dtype(c, 0, x->dtype);
    return;
  }
  const size_t b = static_cast<size_t>(std::max<int64_t>(c.n.attr_i("batch_dims", 0), 0));
  const size_t last = static_cast<size_t>(idx->shape.back().value);
  if (b + last > x->shape.size()) throw InputError(c.where() + ": GatherND index depth exceeds the data rank");
  Shape s(idx->shape.begin(), idx->shape.end() - 1);
  s.insert(s.end(), x->shape.begin() + static_cast<std::ptrdiff_t>(b + last), x->shape.end());
  set_out(c, 0, x->dtype, s);
}

void rule_topk(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  if (!x->has_shape) { set_dtype(c, 0, x->dtype); set_dtype(c, 1, DType::i64); return; }
  const int64_t r = static_cast<int64_t>(x->shape.size());
  const int64_t axis = norm_axis(c.n.attr_i("axis", -1), r, c);
  const int64_t k = c.opset() < 10 ? c.n.attr_i("k", -1) : scalar_value(c, 1, -1);
  Shape s = x->shape;
  s[axis] = k >= 0 ? Dim::of(k) : Dim{};
  set_out(c, 0, x->dtype, s);
  set_out(c, 1, DType::i64, s);
}

void rule_onehot(Ctx& c) {
  const TensorInfo* idx = c.in(0);
  const TensorInfo* values = c.in(2);
  const DType dt = values ? values->dtype : DType::undefined;
  if (!idx || !idx->has_shape) { set_dtype(c, 0, dt); return; }
  const int64_t r = static_cast<int64_t>(idx->shape.size()) + 1;
  const int64_t axis = norm_axis(c.n.attr_i("axis", -1), r, c);
  Shape s = idx->shape;
  const int64_t depth = scalar_value(c, 1, -1);
  s.insert(s.begin() + axis, depth >= 0 ? Dim::of(depth) : Dim{});
  set_out(c, 0, dt, s);
}

void rule_nonzero(Ctx& c) {
  const TensorInfo* x = c.in(0);
  Shape s{x && x->has_shape ? Dim::of(static_cast<int64_t>(x->shape.size())) : Dim{}, Dim{}};
  if (x && x->int_value) {
    int64_t n = 0;
    for (auto v : *x->int_value) n += v != 0;
    if (x->shape.size() <= 1) {
      s[1] = Dim::of(n);
      std::vector<int64_t> where;
      for (size_t i = 0; i < x->int_value->size(); ++i)
        if ((*x->int_value)[i] != 0) where.push_back(static_cast<int64_t>(i));
      set_out(c, 0, DType::i64, s);
      if (x->shape.size() == 1) c.out(0).int_value = where;
      return;
    }
    s[1] = Dim::of(n);
  }
  set_out(c, 0, DType::i64, s);
}

void rule_einsum(Ctx& c) {
  std::string eq = c.n.attr_s("equation", "");
  eq.erase(std::remove_if(eq.begin(), eq.end(), [](unsigned char ch) { return std::isspace(ch); }), eq.end());
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t p = 0;;) {
    size_t q = lhs.find(',', p);
    terms.push_back(lhs.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  DType dt = c.in(0) ? c.in(0)->dtype : DType::undefined;
  if (terms.size() != c.n.inputs.size()) { set_dtype(c, 0, dt); return; }
  std::map<char, Dim> letter;
  std::map<char, int> count;
  std::string order;
  Shape ellipsis;
  for (size_t i = 0; i < terms.size(); ++i) {
    const TensorInfo* t = c.in(i);
    if (!t || !t->has_shape) { set_dtype(c, 0, dt); return; }
    const std::string& term = terms[i];
    const size_t ell = term.find("...");
    const size_t named = term.size() - (ell == std::string::npos ? 0 : 3);
    if (named > t->shape.size()) throw InputError(c.where() + ": Einsum term '" + term + "' exceeds the input rank");
    const size_t ell_rank = t->shape.size() - named;
    size_t d = 0;
    for (size_t k = 0; k < term.size();) {
      if (term.compare(k, 3, "...") == 0) {
        Shape e(t->shape.begin() + static_cast<std::ptrdiff_t>(d), t->shape.begin() + static_cast<std::ptrdiff_t>(d + ell_rank));
        ellipsis = ellipsis.empty() ? e : broadcast(ellipsis, e, c);
        d += ell_rank;
        k += 3;
        continue;
      }
      const char ch = term[k++];
      const Dim& dim = t->shape[d++];
      auto it = letter.find(ch);
      // A label's sizes agree across the operands (1 broadcasts), as onnxruntime requires.
      if (it != letter.end() && it->second.known() && dim.known() && it->second.value != dim.value &&
          it->second.value != 1 && dim.value != 1)
        throw InputError(c.where() + ": Einsum label '" + std::string(1, ch) + "' is " + std::to_string(it->second.value) +
                         " in one operand and " + std::to_string(dim.value) + " in '" + term + "'");
      if (it == letter.end() || (!it->second.known() && dim.known()) || (it->second.known() && it->second.value == 1))
        letter[ch] = dim;
      if (!count[ch]++) order.push_back(ch);
    }
  }
  std::string out;
  bool out_ellipsis = false;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    if (size_t e = out.find("..."); e != std::string::npos) { out_ellipsis = true; out.erase(e, 3); }
  } else {
    out_ellipsis = true;
    std::string single;
    for (char ch : order) if (count[ch] == 1) single.push_back(ch);
    std::sort(single.begin(), single.end());
    out = single;
  }
  Shape s;
  const std::string full = arrow != std::string::npos ? eq.substr(arrow + 2) : "..." + out;
  for (size_t k = 0; k < full.size();) {
    if (full.compare(k, 3, "...") == 0) { s.insert(s.end(), ellipsis.begin(), ellipsis.end()); k += 3; continue; }
    const char ch = full[k++];
    auto it = letter.find(ch);
    if (it == letter.end()) throw InputError(c.where() + ": Einsum output letter '" + std::string(1, ch) + "' not in inputs");
    s.push_back(it->second);
  }
  (void)out_ellipsis;
  set_out(c, 0, dt, s);
}

// LSTM / GRU / RNN: Y [seq, dirs, batch, hidden], Y_h (and Y_c) [dirs, batch, hidden].
void rule_rnn(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  const int64_t hidden = c.n.attr_i("hidden_size", -1);
  const int64_t dirs = c.n.attr_s("direction", "forward") == "bidirectional" ? 2 : 1;
  const bool batch_first = c.n.attr_i("layout", 0) != 0;
  if (!x->has_shape) {
    for (size_t i = 0; i < c.num_out(); ++i) set_dtype(c, i, x->dtype);
    return;
  }
  // X is [seq, batch, input] (or [batch, seq, input] with layout 1) and nothing else: a
  // runtime refuses another rank, so a shape that reaches here with one cannot run (an If
  // branch that does so is not the one that runs, rules_control_flow.cpp rule_if).
  if (x->shape.size() != 3)
    throw InputError(c.where() + ": input X is " + shape_text(x->shape) + " (rank " + std::to_string(x->shape.size()) +
                     "); " + c.n.op_type + " takes a rank-3 " + (batch_first ? "[batch, seq, input]" : "[seq, batch, input]"));
  const Dim seq = x->shape[batch_first ? 1 : 0], batch = x->shape[batch_first ? 0 : 1];
  const Dim h = hidden >= 0 ? Dim::of(hidden) : Dim{};
  if (batch_first) {
    set_out(c, 0, x->dtype, {batch, seq, Dim::of(dirs), h});
    for (size_t i = 1; i < c.num_out(); ++i) set_out(c, i, x->dtype, {batch, Dim::of(dirs), h});
  } else {
    set_out(c, 0, x->dtype, {seq, Dim::of(dirs), batch, h});
    for (size_t i = 1; i < c.num_out(); ++i) set_out(c, i, x->dtype, {Dim::of(dirs), batch, h});
  }
}

void rule_quantize(Ctx& c) {
  DType dt = DType::u8;
  if (const TensorInfo* zp = c.in(2)) dt = zp->dtype;
  if (const Attribute* a = c.n.attr("output_dtype"); a && a->i) dt = static_cast<DType>(a->i);
  same_as(c, 0, dt);
}

void rule_dequantize(Ctx& c) {
  DType dt = DType::f32;
  if (const TensorInfo* sc = c.in(1)) dt = sc->dtype;
  if (const Attribute* a = c.n.attr("output_dtype"); a && a->i) dt = static_cast<DType>(a->i);
  same_as(c, 0, dt);
}

void rule_dynamic_quantize(Ctx& c) {
  same_as(c, 0, DType::u8);
  set_out(c, 1, DType::f32, {});
  set_out(c, 2, DType::u8, {});
}

void rule_qlinear_matmul(Ctx& c) {
  // Inputs: a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp. Reuse MatMul on (a, b).
  const TensorInfo* a = c.in(0);
  const TensorInfo* b = c.in(3);
  if (!a || !b) return;
  Node n = c.n;
  n.inputs = {c.n.inputs[0], c.n.inputs[3]};
  Ctx c2{c.g, c.model, n, c.result, c.hints, c.depth};
  rule_matmul(c2);
  const TensorInfo* zp = c.in(7);
  set_dtype(c, 0, zp ? zp->dtype : a->dtype);
}

void rule_random(Ctx& c) {
  const DType dt = static_cast<DType>(c.n.attr_i("dtype", 1));
  set_out(c, 0, dt, dims_of(c.n.attr_ints("shape")));
}

void rule_random_like(Ctx& c) {
  const Attribute* a = c.n.attr("dtype");
  same_as(c, 0, a ? static_cast<DType>(a->i) : DType::undefined);
}

void rule_eyelike(Ctx& c) {
  const Attribute* a = c.n.attr("dtype");
  same_as(c, 0, a ? static_cast<DType>(a->i) : DType::undefined);
}

// Opset-23 Attention: Q [B, q_heads, L, h] or [B, L, q_hidden]; output like Q with the
// value head size; optional present K/V and qk matmul output.
void rule_attention23(Ctx& c) {
  const TensorInfo* q = c.in(0);
  const TensorInfo* k = c.in(1);
  const TensorInfo* v = c.in(2);
  if (!q) return;
  if (!q->has_shape || !k || !v || !k->has_shape || !v->has_shape) {
    for (size_t i = 0; i < c.num_out(); ++i) set_dtype(c, i, q->dtype);
    return;
  }
  const int64_t qh = c.n.attr_i("q_num_heads", 0), kvh = c.n.attr_i("kv_num_heads", 0);
  Shape out = q->shape;
  Shape pk = k->shape, pv = v->shape;
  if (q->shape.size() == 3) {
    // [B, L, heads*h]: output hidden = q_heads * v_head_size.
    if (v->shape.size() == 3 && v->shape[2].known() && kvh > 0 && qh > 0)
      out[2] = Dim::of(checked_mul(v->shape[2].value / kvh, qh, c.where()));
    auto to4 = [&](const Shape& s) {
      if (kvh <= 0 || !s[2].known()) return Shape{s[0], Dim::of(std::max<int64_t>(kvh, 0)), s[1], Dim{}};
      return Shape{s[0], Dim::of(kvh), s[1], Dim::of(s[2].value / kvh)};
    };
    pk = to4(k->shape);
    pv = to4(v->shape);
  } else if (q->shape.size() == 4 && v->shape.size() == 4) {
    out[3] = v->shape[3];
  }
  set_out(c, 0, q->dtype, out);
  // past_key (4) / past_value (5) are concatenated along the sequence axis.
  auto with_past = [&](Shape s, size_t past_in) {
    const TensorInfo* p = c.in(past_in);
    if (!p) return s;
    if (!p->has_shape || p->shape.size() != 4) { s[2] = Dim{}; return s; }
    s[2] = (s[2].known() && p->shape[2].known()) ? Dim::of(s[2].value + p->shape[2].value) : Dim{};
    return s;
  };
  if (c.num_out() > 1) set_out(c, 1, k->dtype, with_past(pk, 4));
  if (c.num_out() > 2) set_out(c, 2, v->dtype, with_past(pv, 5));
  if (c.num_out() > 3) {
    const TensorInfo* o1 = c.num_out() > 1 && !c.n.outputs[1].empty() ? c.g.find(c.n.outputs[1]) : nullptr;
    Dim b = out[0];
    Dim heads = q->shape.size() == 4 ? q->shape[1] : (qh > 0 ? Dim::of(qh) : Dim{});
    Dim lq = q->shape.size() == 4 ? q->shape[2] : q->shape[1];
    Dim lk = o1 && o1->has_shape && o1->shape.size() == 4 ? o1->shape[2] : with_past(pk, 4)[2];
    set_out(c, 3, q->dtype, {b, heads, lq, lk});
  }
}

void rule_compress(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  const auto* cond = c.value(1);
  int64_t n = -1;
  if (cond) { n = 0; for (auto v : *cond) n += v != 0; }
  const Attribute* axis = c.n.attr("axis");
  if (!axis) { set_out(c, 0, x->dtype, {n >= 0 ? Dim::of(n) : Dim{}}); return; }
  if (!x->has_shape) { set_dtype(c, 0, x->dtype); return; }
  Shape s = x->shape;
  const int64_t a = norm_axis(axis->i, static_cast<int64_t>(s.size()), c);
  s[a] = n >= 0 ? Dim::of(n) : Dim{};
  set_out(c, 0, x->dtype, s);
}

void rule_col2im(Ctx& c) {
  const TensorInfo* x = c.in(0);
  const auto* img = c.value(1);
  const auto* blk = c.value(2);
  if (!x || !x->has_shape || x->shape.size() != 3 || !img) { if (x) set_dtype(c, 0, x->dtype); return; }
  Shape s{x->shape[0]};
  __int128 prod = 1;  // the block's elements; 0 when a block extent is not positive
  if (blk)
    for (auto b : *blk) prod = b > 0 && prod <= kMaxDim ? prod * b : 0;
  s.push_back(x->shape[1].known() && blk && prod > 0 && prod <= kMaxDim ? Dim::of(x->shape[1].value / int64_t(prod)) : Dim{});
  for (auto v : *img) {
    if (v < 0) throw InputError(c.where() + ": negative image extent in Col2Im");
    s.push_back(Dim::of(v));
  }
  set_out(c, 0, x->dtype, s);
}

void rule_grid_sample(Ctx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* grid = c.in(1);
  if (!x) return;
  if (!x->has_shape || !grid || !grid->has_shape || grid->shape.size() < 3) { set_dtype(c, 0, x->dtype); return; }
  Shape s{x->shape[0], x->shape.size() > 1 ? x->shape[1] : Dim{}};
  s.insert(s.end(), grid->shape.begin() + 1, grid->shape.end() - 1);
  set_out(c, 0, x->dtype, s);
}

void rule_window(Ctx& c) {
  const int64_t n = scalar_value(c, 0, -1);
  set_out(c, 0, static_cast<DType>(c.n.attr_i("output_datatype", 1)), {n >= 0 ? Dim::of(n) : Dim{}});
}

void rule_loss(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  const std::string red = c.n.attr_s("reduction", "mean");
  if (red == "none") {
    const TensorInfo* t = c.in(1);
    if (t && t->has_shape) set_out(c, 0, x->dtype, t->shape);
    else set_dtype(c, 0, x->dtype);
  } else {
    set_out(c, 0, x->dtype, {});
  }
  if (c.num_out() > 1) same_as(c, 0, DType::undefined, 1);
}

void rule_max_unpool(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  if (const auto* os = c.value(2)) { set_out(c, 0, x->dtype, dims_of(*os)); return; }
  if (!x->has_shape || x->shape.size() < 3) { set_dtype(c, 0, x->dtype); return; }
  const size_t sd = x->shape.size() - 2;
  auto k = c.n.attr_ints("kernel_shape");
  auto st = c.n.attr_ints("strides");
  auto p = c.n.attr_ints("pads");
  k.resize(sd, 1);
  st.resize(sd, 1);
  p.resize(2 * sd, 0);
  Shape s{x->shape[0], x->shape[1]};
  for (size_t i = 0; i < sd; ++i) {
    const Dim& d = x->shape[2 + i];
    s.push_back(d.known() ? Dim::of((d.value - 1) * st[i] + k[i] - p[i] - p[i + sd]) : Dim{});
  }
  set_out(c, 0, x->dtype, s);
}

void rule_roi(Ctx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* rois = c.in(1);
  if (!x) return;
  Dim n = rois && rois->has_shape && !rois->shape.empty() ? rois->shape[0] : Dim{};
  Dim ch = x->has_shape && x->shape.size() > 1 ? x->shape[1] : Dim{};
  std::vector<int64_t> pooled = c.n.attr_ints("pooled_shape");
  const int64_t oh = pooled.size() == 2 ? pooled[0] : c.n.attr_i("output_height", 1);
  const int64_t ow = pooled.size() == 2 ? pooled[1] : c.n.attr_i("output_width", 1);
  set_out(c, 0, x->dtype, {n, ch, Dim::of(oh), Dim::of(ow)});
}

void rule_bitwise_not(Ctx& c) { same_as(c, 0); }

// STFT: signal [B, L, 1|2] -> [B, frames, bins, 2], frames = (L - frame_length) / step + 1.
void rule_stft(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  const DType dt = x->dtype;
  if (!x->has_shape || x->shape.size() != 3) { set_dtype(c, 0, dt); return; }
  const int64_t step = scalar_value(c, 1, -1);
  int64_t frame = scalar_value(c, 3, -1);
  if (frame < 0)
    if (const TensorInfo* w = c.in(2); w && w->has_shape && w->shape.size() == 1 && w->shape[0].known()) frame = w->shape[0].value;
  const bool onesided = c.n.attr_i("onesided", 1) != 0;
  Dim frames{}, bins{};
  if (frame > 0 && step > 0 && x->shape[1].known() && x->shape[1].value >= frame)
    frames = Dim::of((x->shape[1].value - frame) / step + 1);
  if (frame > 0) bins = Dim::of(onesided ? frame / 2 + 1 : frame);
  set_out(c, 0, dt, {x->shape[0], frames, bins, Dim::of(2)});
}

void rule_mel(Ctx& c) {
  const int64_t mel = scalar_value(c, 0, -1), dft = scalar_value(c, 1, -1);
  set_out(c, 0, static_cast<DType>(c.n.attr_i("output_datatype", 1)),
          {dft >= 0 ? Dim::of(dft / 2 + 1) : Dim{}, mel >= 0 ? Dim::of(mel) : Dim{}});
}

}  // namespace

void add_standard_rules(RuleTable& t) {
  t["Tile"] = rule_tile;
  t["Pad"] = rule_pad;
  t["Resize"] = rule_resize;
  t["Upsample"] = rule_resize;
  t["DepthToSpace"] = rule_depth_space;
  t["SpaceToDepth"] = rule_depth_space;
  t["GatherElements"] = rule_gather_elements;
  t["GatherND"] = rule_gather_nd;
  for (const char* op : {"ScatterElements", "Scatter", "ScatterND", "TensorScatter"})
    t[op] = [](Ctx& c) { same_as(c, 0); };
  t["TopK"] = rule_topk;
  t["OneHot"] = rule_onehot;
  t["NonZero"] = rule_nonzero;
  t["Einsum"] = rule_einsum;
  t["LSTM"] = rule_rnn;
  t["GRU"] = rule_rnn;
  t["RNN"] = rule_rnn;
  t["QuantizeLinear"] = rule_quantize;
  t["DequantizeLinear"] = rule_dequantize;
  t["DynamicQuantizeLinear"] = rule_dynamic_quantize;
  t["QLinearMatMul"] = rule_qlinear_matmul;
  t["RandomNormal"] = rule_random;
  t["RandomUniform"] = rule_random;
  t["RandomNormalLike"] = rule_random_like;
  t["RandomUniformLike"] = rule_random_like;
  t["Bernoulli"] = rule_random_like;
  t["EyeLike"] = rule_eyelike;
  t["Attention"] = rule_attention23;
  t["Compress"] = rule_compress;
  t["Col2Im"] = rule_col2im;
  t["GridSample"] = rule_grid_sample;
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) t[op] = rule_window;
  t["SoftmaxCrossEntropyLoss"] = rule_loss;
  t["NegativeLogLikelihoodLoss"] = rule_loss;
  t["MaxUnpool"] = rule_max_unpool;
  t["RoiAlign"] = rule_roi;
  t["MaxRoiPool"] = rule_roi;
  t["BitwiseNot"] = rule_bitwise_not;
  t["STFT"] = rule_stft;
  t["MelWeightMatrix"] = rule_mel;
  for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"})
    t[op] = [](Ctx& c) { rule_broadcast(c, DType::undefined, nullptr); };
  for (const char* op : {"GroupNormalization", "RotaryEmbedding", "LpNormalization"})
    if (!t.contains("", op)) t[op] = rule_unary;
  t["RotaryEmbedding"] = rule_unary;
  t["GroupNormalization"] = rule_unary;
  t["Det"] = [](Ctx& c) {
    const TensorInfo* x = c.in(0);
    if (!x) return;
    if (!x->has_shape || x->shape.size() < 2) { set_dtype(c, 0, x->dtype); return; }
    set_out(c, 0, x->dtype, Shape(x->shape.begin(), x->shape.end() - 2));
  };
}

}  // namespace neusight::shape_rules
