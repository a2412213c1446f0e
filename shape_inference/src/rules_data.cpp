// rules_data.cpp - ops whose output size depends on data (NonMaxSuppression, Unique,
// StringNormalizer): the rank always, the sizes by evaluating them when their inputs are
// known constants (small tensors only: values are kept up to kMaxValues elements).
#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "rules.h"

namespace neusight::shape_rules {
namespace {

std::optional<int64_t> scalar_int(const Ctx& c, size_t i) {
  const auto* v = c.value(i);
  if (!v || v->empty()) return std::nullopt;
  return (*v)[0];
}

std::optional<double> scalar_number(const Ctx& c, size_t i) {
  auto v = numbers(c.in(i));
  if (!v || v->empty()) return std::nullopt;
  return (*v)[0];
}

// Box i of batch b as (y1, x1, y2, x2) with y1 <= y2, x1 <= x2.
struct Box {
  double y1, x1, y2, x2;
};

Box box_at(const std::vector<double>& boxes, int64_t n_boxes, int64_t b, int64_t i, bool center) {
  const double* p = &boxes[static_cast<size_t>((b * n_boxes + i) * 4)];
  if (center) {  // [x_center, y_center, width, height]
    return {p[1] - p[3] / 2, p[0] - p[2] / 2, p[1] + p[3] / 2, p[0] + p[2] / 2};
  }
  return {std::min(p[0], p[2]), std::min(p[1], p[3]), std::max(p[0], p[2]), std::max(p[1], p[3])};
}

bool suppresses(const Box& a, const Box& b, double iou_threshold) {
  const double area_a = (a.y2 - a.y1) * (a.x2 - a.x1), area_b = (b.y2 - b.y1) * (b.x2 - b.x1);
  if (area_a <= 0 || area_b <= 0) return false;
  const double ih = std::max(0.0, std::min(a.y2, b.y2) - std::max(a.y1, b.y1));
  const double iw = std::max(0.0, std::min(a.x2, b.x2) - std::max(a.x1, b.x1));
  const double inter = ih * iw;
  return inter / (area_a + area_b - inter) > iou_threshold;
}

// NonMaxSuppression: selected_indices [num_selected, 3] (batch, class, box), int64.
void rule_nms(Ctx& c) {
  set_out(c, 0, DType::i64, {Dim{}, Dim::of(3)});
  const TensorInfo* bt = c.in(0);
  const TensorInfo* st = c.in(1);
  const auto boxes = numbers(bt);
  const auto scores = numbers(st);
  if (!boxes || !scores || !bt->fully_known() || !st->fully_known() || bt->shape.size() != 3 || st->shape.size() != 3)
    return;
  const int64_t nb = bt->shape[0].value, n = bt->shape[1].value, nc = st->shape[1].value;
  if (bt->shape[2].value != 4 || st->shape[0].value != nb || st->shape[2].value != n)
    throw InputError(c.where() + ": boxes and scores shapes do not match");
  // Defaults: no box selected without max_output_boxes_per_class; thresholds 0 / none.
  int64_t max_out = 0;
  if (c.has_in(2)) {
    const auto m = scalar_int(c, 2);
    if (!m) return;
    max_out = *m;
  }
  double iou = 0;
  if (c.has_in(3)) {
    const auto v = scalar_number(c, 3);
    if (!v) return;
    iou = *v;
  }
  std::optional<double> score_min;
  if (c.has_in(4)) {
    score_min = scalar_number(c, 4);
    if (!score_min) return;
  }
  const bool center = c.n.attr_i("center_point_box", 0) != 0;
  std::vector<int64_t> selected;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t k = 0; k < nc; ++k) {
      std::vector<int64_t> order;
      for (int64_t i = 0; i < n; ++i)
        if (!score_min || (*scores)[static_cast<size_t>((b * nc + k) * n + i)] > *score_min) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
        return (*scores)[static_cast<size_t>((b * nc + k) * n + x)] > (*scores)[static_cast<size_t>((b * nc + k) * n + y)];
      });
      std::vector<Box> kept;
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        const Box bx = box_at(*boxes, n, b, i, center);
        bool drop = false;
        for (const Box& o : kept)
          if (suppresses(bx, o, iou)) { drop = true; break; }
        if (drop) continue;
        kept.push_back(bx);
        selected.insert(selected.end(), {b, k, i});
      }
    }
  const int64_t count = static_cast<int64_t>(selected.size() / 3);
  set_out(c, 0, DType::i64, {Dim::of(count), Dim::of(3)});
  if (selected.size() <= kMaxValues) c.out(0).int_value = selected;
}

// Unique: Y, indices, inverse_indices, counts. Without axis X is flattened.
void rule_unique(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  const Attribute* axis_attr = c.n.attr("axis");
  const DType dt = x->dtype;
  const int64_t r = x->has_shape ? static_cast<int64_t>(x->shape.size()) : -1;
  const int64_t axis = axis_attr && r >= 0 ? norm_axis(axis_attr->i, r, c) : -1;
  // Shapes with the unique count unknown.
  auto emit = [&](Dim u, Dim inverse_len) {
    if (axis_attr && x->has_shape) {
      Shape s = x->shape;
      s[static_cast<size_t>(axis)] = u;
      set_out(c, 0, dt, s);
    } else {
      set_out(c, 0, dt, {u});
    }
    set_out(c, 1, DType::i64, {u});
    set_out(c, 2, DType::i64, {inverse_len});
    set_out(c, 3, DType::i64, {u});
  };
  Dim inv{};
  if (axis_attr && x->has_shape) inv = x->shape[static_cast<size_t>(axis)];
  else if (x->num_elements() >= 0) inv = Dim::of(x->num_elements());
  emit(Dim{}, inv);
  if (!x->fully_known()) return;
  // Slices to compare: the whole tensor flattened (one element each) or slices along axis.
  std::vector<std::string> strs;
  std::vector<double> nums;
  if (x->string_value) strs = *x->string_value;
  else if (auto v = numbers(x)) nums = *v;
  else return;
  const int64_t total = x->num_elements();
  int64_t outer = 1, len = total, inner = 1;
  if (axis_attr) {
    len = x->shape[static_cast<size_t>(axis)].value;
    for (int64_t i = 0; i < axis; ++i) outer *= x->shape[static_cast<size_t>(i)].value;
    for (int64_t i = axis + 1; i < r; ++i) inner *= x->shape[static_cast<size_t>(i)].value;
  }
  // Key of slice j: its elements in order (strings or numbers, as text-free vectors).
  auto key_num = [&](int64_t j) {
    std::vector<double> k;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) k.push_back(nums[static_cast<size_t>((o * len + j) * inner + i)]);
    return k;
  };
  auto key_str = [&](int64_t j) {
    std::vector<std::string> k;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) k.push_back(strs[static_cast<size_t>((o * len + j) * inner + i)]);
    return k;
  };
  int64_t u = 0;
  std::vector<int64_t> first, inverse(static_cast<size_t>(len)), counts;
  if (!strs.empty() || nums.empty()) {
    std::map<std::vector<std::string>, int64_t> seen;
    for (int64_t j = 0; j < len; ++j) {
      auto [it, fresh] = seen.emplace(key_str(j), u);
      if (fresh) { first.push_back(j); counts.push_back(0); ++u; }
      inverse[static_cast<size_t>(j)] = it->second;
      ++counts[static_cast<size_t>(it->second)];
    }
  } else {
    std::map<std::vector<double>, int64_t> seen;
    for (int64_t j = 0; j < len; ++j) {
      auto [it, fresh] = seen.emplace(key_num(j), u);
      if (fresh) { first.push_back(j); counts.push_back(0); ++u; }
      inverse[static_cast<size_t>(j)] = it->second;
      ++counts[static_cast<size_t>(it->second)];
    }
    // sorted=1 (default): unique values in ascending order (first-seen order otherwise).
    if (c.n.attr_i("sorted", 1) != 0) {
      std::vector<int64_t> order(static_cast<size_t>(u));
      for (int64_t i = 0; i < u; ++i) order[static_cast<size_t>(i)] = i;
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key_num(first[static_cast<size_t>(a)]) < key_num(first[static_cast<size_t>(b)]); });
      std::vector<int64_t> rank(static_cast<size_t>(u)), f2, c2;
      for (int64_t i = 0; i < u; ++i) {
        rank[static_cast<size_t>(order[static_cast<size_t>(i)])] = i;
        f2.push_back(first[static_cast<size_t>(order[static_cast<size_t>(i)])]);
        c2.push_back(counts[static_cast<size_t>(order[static_cast<size_t>(i)])]);
      }
      for (auto& v : inverse) v = rank[static_cast<size_t>(v)];
      first = f2;
      counts = c2;
    }
  }
  emit(Dim::of(u), inv);
  if (!axis_attr && !nums.empty()) {
    std::vector<double> y;
    for (int64_t j : first) y.push_back(nums[static_cast<size_t>(j)]);
    if (c.num_out() && !c.n.outputs[0].empty()) set_numbers(c.out(0), y);
  }
  auto put = [&](size_t o, const std::vector<int64_t>& v) {
    if (o < c.num_out() && !c.n.outputs[o].empty() && v.size() <= kMaxValues) c.out(o).int_value = v;
  };
  put(1, first);
  put(2, inverse);
  put(3, counts);
}

std::string change_case(std::string s, const std::string& action) {
  if (action == "LOWER") for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (action == "UPPER") for (auto& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

// StringNormalizer: X [C] or [1, C] of strings; stopwords removed, case changed. When every
// string is removed the output holds one empty string.
void rule_string_normalizer(Ctx& c) {
  const TensorInfo* x = c.in(0);
  if (!x) return;
  if (!x->has_shape || x->shape.empty() || x->shape.size() > 2) { set_dtype(c, 0, DType::string); return; }
  const bool two = x->shape.size() == 2;
  Shape s = x->shape;
  s.back() = Dim{};
  set_out(c, 0, DType::string, s);
  if (!x->string_value) return;
  const bool sensitive = c.n.attr_i("is_case_sensitive", 0) != 0;
  const std::string action = c.n.attr_s("case_change_action", "NONE");
  std::set<std::string> stop;
  if (const Attribute* a = c.n.attr("stopwords"))
    for (const auto& w : a->strings) stop.insert(sensitive ? w : change_case(w, "LOWER"));
  std::vector<std::string> out;
  for (const auto& w : *x->string_value)
    if (!stop.count(sensitive ? w : change_case(w, "LOWER"))) out.push_back(change_case(w, action));
  if (out.empty()) out.push_back("");
  s.back() = Dim::of(static_cast<int64_t>(out.size()));
  if (two) s[0] = Dim::of(1);
  set_out(c, 0, DType::string, s);
  c.out(0).string_value = out;
}

}  // namespace

void add_data_rules(RuleTable& t) {
  t["NonMaxSuppression"] = rule_nms;
  t["Unique"] = rule_unique;
  t["StringNormalizer"] = rule_string_normalizer;
}

}  // namespace neusight::shape_rules
