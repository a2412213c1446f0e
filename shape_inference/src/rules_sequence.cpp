// rules_sequence.cpp - sequence and optional values (SequenceConstruct/Insert/Erase/At/Length,
// SplitToSequence, ConcatFromSequence, SequenceMap, Optional*): element shapes are tracked
// one by one while the length is known, as one common element otherwise.
#include <algorithm>
#include <cmath>

#include "rules.h"

namespace neusight::shape_rules {

// Sequences longer than this keep one common element instead of one entry per element.
constexpr size_t kMaxElements = 4096;

std::optional<std::vector<double>> numbers(const TensorInfo* t) {
  if (!t || t->kind != ValueKind::tensor) return std::nullopt;
  if (t->float_value) return *t->float_value;
  if (t->int_value) return std::vector<double>(t->int_value->begin(), t->int_value->end());
  return std::nullopt;
}

void set_numbers(TensorInfo& t, const std::vector<double>& v) {
  if (v.size() > kMaxValues) return;
  const bool fl = is_float(t.dtype);
  std::vector<int64_t> ints;
  ints.reserve(v.size());
  for (double x : v) {
    if (!(x >= -9.0e18 && x <= 9.0e18)) return;  // NaN, inf, beyond int64: not kept
    if (fl && x != std::trunc(x)) {
      t.float_value = v;
      t.int_value.reset();
      return;
    }
    ints.push_back(t.dtype == DType::boolean ? int64_t(x != 0) : static_cast<int64_t>(x));
  }
  if (fl) t.float_value = v;
  t.int_value = std::move(ints);
}

TensorInfo as_element(const TensorInfo& t) {
  TensorInfo e = t;
  e.name.clear();
  e.is_initializer = e.is_graph_input = e.external_data = false;
  return e;
}

void set_value(Ctx& c, size_t i, const TensorInfo& v) {
  if (i >= c.num_out() || c.n.outputs[i].empty()) return;
  TensorInfo& o = c.out(i);
  const std::string name = o.name;
  o = as_element(v);
  o.name = name;
}

TensorInfo join(const TensorInfo& a, const TensorInfo& b) {
  TensorInfo m = as_element(a);
  m.int_value.reset();
  m.float_value.reset();
  m.string_value.reset();
  if (m.dtype == DType::undefined) m.dtype = b.dtype;
  if (a.kind != b.kind) {
    TensorInfo u;
    u.dtype = m.dtype;
    return u;
  }
  if (a.kind != ValueKind::tensor) {
    m.elements_known = false;
    m.elements.clear();
    const TensorInfo ea = common_element(a), eb = common_element(b);
    const bool ha = !a.elements.empty(), hb = !b.elements.empty();
    if (ha && hb) m.elements.push_back(join(ea, eb));
    else if (ha || hb) m.elements.push_back(ha ? ea : eb);
    return m;
  }
  if (!a.has_shape || !b.has_shape || a.shape.size() != b.shape.size()) {
    m.has_shape = false;
    m.shape.clear();
    return m;
  }
  for (size_t i = 0; i < m.shape.size(); ++i) {
    const Dim& x = a.shape[i];
    const Dim& y = b.shape[i];
    if (x.known() && y.known() && x.value == y.value) continue;
    if (!x.known() && !y.known() && x.param == y.param) continue;
    m.shape[i] = Dim{};
  }
  return m;
}

TensorInfo common_element(const TensorInfo& s) {
  if (s.elements.empty()) {
    TensorInfo e;
    e.dtype = s.dtype;
    return e;
  }
  TensorInfo e = as_element(s.elements[0]);
  for (size_t i = 1; i < s.elements.size(); ++i) e = join(e, s.elements[i]);
  if (s.elements.size() > 1 || !s.elements_known) {
    e.int_value.reset();
    e.float_value.reset();
    e.string_value.reset();
  }
  return e;
}

void set_body_value(Graph& body, size_t k, const TensorInfo& v) {
  if (k >= body.inputs.size()) return;
  TensorInfo& t = body.tensor(body.inputs[k]);
  const std::string name = t.name;
  const bool input = t.is_graph_input;
  t = as_element(v);
  t.name = name;
  t.is_graph_input = input;
}

namespace {

TensorInfo sequence_of(DType dt, std::vector<TensorInfo> elems, bool known) {
  TensorInfo s;
  s.kind = ValueKind::sequence;
  s.dtype = dt;
  if (known && elems.size() > kMaxElements) {
    TensorInfo tmp;
    tmp.kind = ValueKind::sequence;
    tmp.elements = std::move(elems);
    tmp.elements_known = true;
    elems = {common_element(tmp)};
    known = false;
  }
  if (s.dtype == DType::undefined && !elems.empty()) s.dtype = elems[0].dtype;
  s.elements_known = known;
  s.elements = std::move(elems);
  return s;
}

// An input read as a sequence: a value of unknown kind counts as a sequence of unknown length.
TensorInfo seq_in(const TensorInfo* t) {
  if (!t) return sequence_of(DType::undefined, {}, false);
  if (t->kind == ValueKind::sequence) return *t;
  return sequence_of(t->dtype, {}, false);
}

std::optional<int64_t> scalar(const Ctx& c, size_t i) {
  const auto* v = c.value(i);
  if (!v || v->size() != 1) return std::nullopt;
  return (*v)[0];
}

void rule_sequence_empty(Ctx& c) {
  set_value(c, 0, sequence_of(static_cast<DType>(c.n.attr_i("dtype", 1)), {}, true));
}

void rule_sequence_construct(Ctx& c) {
  std::vector<TensorInfo> elems;
  DType dt = DType::undefined;
  bool known = true;
  for (size_t i = 0; i < c.n.inputs.size(); ++i) {
    const TensorInfo* t = c.in(i);
    if (!t) { known = false; continue; }
    if (dt == DType::undefined) dt = t->dtype;
    elems.push_back(as_element(*t));
  }
  if (!known) {
    TensorInfo tmp = sequence_of(dt, elems, true);
    elems = {common_element(tmp)};
  }
  set_value(c, 0, sequence_of(dt, std::move(elems), known));
}

// Resolves a position against a length (negative counts from the back); -1 when invalid.
int64_t position(int64_t p, int64_t n, bool insert) {
  if (p < 0) p += n;
  return (p < 0 || p > n || (!insert && p == n)) ? -1 : p;
}

void rule_sequence_insert(Ctx& c) {
  TensorInfo s = seq_in(c.in(0));
  const TensorInfo* t = c.in(1);
  if (s.dtype == DType::undefined && t) s.dtype = t->dtype;
  const auto pos = scalar(c, 2);
  if (s.elements_known && t && (!c.has_in(2) || pos)) {
    const int64_t n = static_cast<int64_t>(s.elements.size());
    const int64_t p = c.has_in(2) ? position(*pos, n, true) : n;
    if (p < 0) throw InputError(c.where() + ": position " + std::to_string(*pos) + " outside the sequence");
    s.elements.insert(s.elements.begin() + p, as_element(*t));
    set_value(c, 0, sequence_of(s.dtype, std::move(s.elements), true));
    return;
  }
  // Length or position unknown: one element every element matches.
  TensorInfo e;
  e.dtype = s.dtype;
  if (!s.elements.empty()) e = t ? join(common_element(s), *t) : common_element(s);
  else if (s.elements_known && t) e = as_element(*t);  // an empty sequence: only the new one
  e.int_value.reset();
  e.float_value.reset();
  e.string_value.reset();
  set_value(c, 0, sequence_of(s.dtype, {e}, false));
}

void rule_sequence_erase(Ctx& c) {
  TensorInfo s = seq_in(c.in(0));
  const auto pos = scalar(c, 1);
  if (s.elements_known && (!c.has_in(1) || pos)) {
    const int64_t n = static_cast<int64_t>(s.elements.size());
    const int64_t p = c.has_in(1) ? position(*pos, n, false) : n - 1;
    if (p < 0) throw InputError(c.where() + ": erase outside the sequence");
    s.elements.erase(s.elements.begin() + p);
    set_value(c, 0, sequence_of(s.dtype, std::move(s.elements), true));
    return;
  }
  TensorInfo e = common_element(s);
  std::vector<TensorInfo> elems;
  if (!s.elements.empty()) elems.push_back(e);
  set_value(c, 0, sequence_of(s.dtype, std::move(elems), false));
}

void rule_sequence_at(Ctx& c) {
  const TensorInfo s = seq_in(c.in(0));
  const auto pos = scalar(c, 1);
  if (s.elements_known && pos) {
    const int64_t p = position(*pos, static_cast<int64_t>(s.elements.size()), false);
    if (p < 0) throw InputError(c.where() + ": position " + std::to_string(*pos) + " outside the sequence");
    set_value(c, 0, s.elements[static_cast<size_t>(p)]);
    return;
  }
  TensorInfo e = common_element(s);
  e.int_value.reset();
  e.float_value.reset();
  e.string_value.reset();
  set_value(c, 0, e);
}

void rule_sequence_length(Ctx& c) {
  set_out(c, 0, DType::i64, {});
  const TensorInfo* s = c.in(0);
  if (s && s->kind == ValueKind::sequence && s->elements_known && c.num_out())
    c.out(0).int_value = std::vector<int64_t>{static_cast<int64_t>(s->elements.size())};
}

void rule_split_to_sequence(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  TensorInfo piece = as_element(*x);
  piece.int_value.reset();
  piece.float_value.reset();
  piece.string_value.reset();
  if (!x->has_shape) { set_value(c, 0, sequence_of(x->dtype, {piece}, false)); return; }
  const int64_t r = static_cast<int64_t>(x->shape.size());
  const int64_t axis = norm_axis(c.n.attr_i("axis", 0), r, c);
  const Dim d = x->shape[static_cast<size_t>(axis)];
  std::vector<int64_t> sizes;
  bool known = d.known();
  if (!c.has_in(1)) {
    const bool keep = c.n.attr_i("keepdims", 1) != 0;
    piece.shape[static_cast<size_t>(axis)] = Dim::of(1);
    if (!keep) piece.shape.erase(piece.shape.begin() + axis);
    if (!known) { set_value(c, 0, sequence_of(x->dtype, {piece}, false)); return; }
    set_value(c, 0, sequence_of(x->dtype, std::vector<TensorInfo>(static_cast<size_t>(d.value), piece), true));
    return;
  }
  const TensorInfo* sp = c.in(1);
  const auto* v = c.value(1);
  if (v && sp->has_shape && sp->shape.empty() && v->size() == 1) {  // scalar: chunks of that size
    const int64_t k = (*v)[0];
    if (k <= 0) throw InputError(c.where() + ": split size must be positive");
    if (known)
      for (int64_t at = 0; at < d.value; at += k) sizes.push_back(std::min(k, d.value - at));
  } else if (v) {
    sizes = *v;
    int64_t sum = 0;
    for (auto s : sizes) {
      if (s < 0) throw InputError(c.where() + ": negative split size");
      sum += s;
    }
    if (known && sum != d.value) throw InputError(c.where() + ": split sizes do not add up to the dimension");
    known = true;
  } else {
    known = false;
  }
  if (!known) {
    piece.shape[static_cast<size_t>(axis)] = Dim{};
    set_value(c, 0, sequence_of(x->dtype, {piece}, false));
    return;
  }
  std::vector<TensorInfo> elems;
  for (auto s : sizes) {
    piece.shape[static_cast<size_t>(axis)] = Dim::of(s);
    elems.push_back(piece);
  }
  set_value(c, 0, sequence_of(x->dtype, std::move(elems), true));
}

void rule_concat_from_sequence(Ctx& c) {
  const TensorInfo s = seq_in(c.in(0));
  const bool new_axis = c.n.attr_i("new_axis", 0) != 0;
  const int64_t axis_attr = c.n.attr_i("axis", 0);
  const TensorInfo e = common_element(s);
  if (!e.has_shape) { set_dtype(c, 0, s.dtype); return; }
  const int64_t r = static_cast<int64_t>(e.shape.size()) + (new_axis ? 1 : 0);
  const size_t axis = static_cast<size_t>(norm_axis(axis_attr, r, c));
  Shape out = e.shape;
  if (!s.elements_known) {
    if (new_axis) out.insert(out.begin() + static_cast<std::ptrdiff_t>(axis), Dim{});
    else out[axis] = Dim{};
    set_out(c, 0, s.dtype, out);
    return;
  }
  if (s.elements.empty()) throw InputError(c.where() + ": ConcatFromSequence of an empty sequence");
  if (new_axis) {
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(axis), Dim::of(static_cast<int64_t>(s.elements.size())));
  } else {
    int64_t sum = 0;
    for (const auto& x : s.elements) {
      if (!x.has_shape || x.shape.size() != e.shape.size()) throw InputError(c.where() + ": elements differ in rank");
      const Dim& d = x.shape[axis];
      sum = (sum >= 0 && d.known()) ? sum + d.value : -1;
    }
    out[axis] = sum >= 0 ? Dim::of(sum) : Dim{};
  }
  set_out(c, 0, s.dtype, out);
  // Values of 1-D integer pieces (shape vectors) are concatenated.
  if (!new_axis && e.shape.size() == 1) {
    std::vector<int64_t> v;
    for (const auto& x : s.elements) {
      if (!x.int_value) return;
      v.insert(v.end(), x.int_value->begin(), x.int_value->end());
    }
    if (v.size() <= kMaxValues) c.out(0).int_value = v;
  }
}

// SequenceMap: the body runs once per element (while the budget lasts and the length is
// known), otherwise once on the common element.
void rule_sequence_map(Ctx& c) {
  const Attribute* a = c.n.attr("body");
  if (!a || a->graphs.empty() || !a->graphs[0]) return;
  const Graph& bg = *a->graphs[0];
  const TensorInfo* s0 = c.in(0);
  if (!s0) return;
  std::vector<const TensorInfo*> ins;
  for (size_t i = 0; i < c.n.inputs.size(); ++i) ins.push_back(c.in(i));
  // Length: every sequence input must agree.
  int64_t n = -1;
  bool known = true;
  for (const TensorInfo* t : ins) {
    if (!t || t->kind != ValueKind::sequence) continue;
    if (!t->elements_known) { known = false; continue; }
    const int64_t len = static_cast<int64_t>(t->elements.size());
    if (n >= 0 && n != len) throw InputError(c.where() + ": input sequences differ in length");
    n = len;
  }
  if (n < 0) known = false;
  const int64_t cost = std::max<int64_t>(1, static_cast<int64_t>(bg.nodes.size()));
  const size_t nout = c.num_out();
  std::vector<std::vector<TensorInfo>> outs(nout);
  if (known && c.unroll_budget && n * cost <= *c.unroll_budget && static_cast<size_t>(n) <= kMaxElements) {
    *c.unroll_budget -= n * cost;
    std::vector<Graph> bodies;  // each iteration's body, kept for the lowering
    for (int64_t i = 0; i < n; ++i) {
      Graph body = bg;
      for (size_t k = 0; k < ins.size(); ++k) {
        if (!ins[k]) continue;
        if (ins[k]->kind == ValueKind::sequence) set_body_value(body, k, ins[k]->elements[static_cast<size_t>(i)]);
        else set_body_value(body, k, *ins[k]);
      }
      infer_subgraph(c, body);
      for (size_t o = 0; o < nout && o < body.outputs.size(); ++o) {
        const TensorInfo* t = body.find(body.outputs[o]);
        outs[o].push_back(t ? as_element(*t) : TensorInfo{});
      }
      bodies.push_back(std::move(body));
    }
    for (size_t o = 0; o < nout; ++o) {
      const DType dt = outs[o].empty() ? DType::undefined : outs[o][0].dtype;
      set_value(c, o, sequence_of(dt, std::move(outs[o]), true));
    }
    if (!bodies.empty()) keep_body(c, "body", Graph{}, std::move(bodies));
    return;
  }
  Graph body = bg;
  for (size_t k = 0; k < ins.size(); ++k) {
    if (!ins[k]) continue;
    TensorInfo v = ins[k]->kind == ValueKind::sequence ? common_element(*ins[k]) : *ins[k];
    v.int_value.reset();
    v.float_value.reset();
    v.string_value.reset();
    set_body_value(body, k, v);
  }
  infer_subgraph(c, body);
  for (size_t o = 0; o < nout && o < body.outputs.size(); ++o) {
    const TensorInfo* t = body.find(body.outputs[o]);
    TensorInfo e = t ? as_element(*t) : TensorInfo{};
    e.int_value.reset();
    e.float_value.reset();
    e.string_value.reset();
    set_value(c, o, sequence_of(e.dtype, {e}, false));
  }
  keep_body(c, "body", std::move(body));
}

void rule_optional(Ctx& c) {
  TensorInfo o;
  o.kind = ValueKind::optional;
  o.elements_known = true;
  if (const TensorInfo* x = c.in(0)) {
    o.dtype = x->dtype;
    o.elements.push_back(as_element(*x));
  }
  set_value(c, 0, o);
}

void rule_optional_has_element(Ctx& c) {
  set_out(c, 0, DType::boolean, {});
  if (!c.num_out()) return;
  const TensorInfo* x = c.in(0);
  std::optional<bool> has;
  if (!x) has = false;
  else if (x->kind != ValueKind::optional) has = x->kind == ValueKind::sequence || x->dtype != DType::undefined ? std::optional<bool>(true) : std::nullopt;
  else if (x->elements_known) has = !x->elements.empty();
  if (has) c.out(0).int_value = std::vector<int64_t>{*has ? 1 : 0};
}

void rule_optional_get_element(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  if (x->kind != ValueKind::optional) { set_value(c, 0, *x); return; }
  if (x->elements_known && x->elements.empty()) throw InputError(c.where() + ": OptionalGetElement of an empty optional");
  if (!x->elements.empty()) set_value(c, 0, x->elements[0]);
  else set_dtype(c, 0, x->dtype);
}

}  // namespace

void add_sequence_rules(RuleTable& t) {
  t["SequenceEmpty"] = rule_sequence_empty;
  t["SequenceConstruct"] = rule_sequence_construct;
  t["SequenceInsert"] = rule_sequence_insert;
  t["SequenceErase"] = rule_sequence_erase;
  t["SequenceAt"] = rule_sequence_at;
  t["SequenceLength"] = rule_sequence_length;
  t["SplitToSequence"] = rule_split_to_sequence;
  t["ConcatFromSequence"] = rule_concat_from_sequence;
  t["SequenceMap"] = rule_sequence_map;
  t["Optional"] = rule_optional;
  t["OptionalHasElement"] = rule_optional_has_element;
  t["OptionalGetElement"] = rule_optional_get_element;
}

}  // namespace neusight::shape_rules
