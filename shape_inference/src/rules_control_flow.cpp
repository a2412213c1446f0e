// rules_control_flow.cpp - If, Loop and Scan: infer the bodies (outer scope visible) and
// give the node's outputs the body outputs' shapes (Loop/Scan outputs gain the iteration axis).
#include <algorithm>
#include <optional>

#include "rules.h"

namespace neusight::shape_rules {
namespace {

const Graph* body_attr(const Ctx& c, const char* key) {
  const Attribute* a = c.n.attr(key);
  return a && !a->graphs.empty() && a->graphs[0] ? a->graphs[0].get() : nullptr;
}

// A loop-carried value: assumed to keep its shape across iterations (as onnxruntime's
// symbolic inference does); dims the body leaves unknown take the initial value's, dims
// that provably change become unknown.
TensorInfo carried_merge(const TensorInfo& body, const TensorInfo& init) {
  if (body.kind != ValueKind::tensor || init.kind != ValueKind::tensor) return join(body, init);
  if (!body.has_shape || (init.has_shape && body.shape.size() != init.shape.size())) {
    TensorInfo m = init;
    m.int_value.reset();
    if (body.has_shape) { m.has_shape = false; m.shape.clear(); }
    if (m.dtype == DType::undefined) m.dtype = body.dtype;
    return m;
  }
  TensorInfo m = body;
  m.int_value.reset();
  if (!init.has_shape) return m;
  for (size_t i = 0; i < m.shape.size(); ++i) {
    const Dim& x = body.shape[i];
    const Dim& y = init.shape[i];
    if (!x.known() && x.param.empty()) m.shape[i] = y;
    else if (x.known() && y.known() && x.value != y.value) m.shape[i] = Dim{};
  }
  return m;
}

void copy_to_out(Ctx& c, size_t i, const TensorInfo& t) { set_value(c, i, t); }

// Sets body input `k` from an outer TensorInfo (or a given dtype/shape).
void set_body_input(Graph& body, size_t k, const TensorInfo* from) {
  if (k >= body.inputs.size() || !from) return;
  if (from->kind != ValueKind::tensor) {  // a sequence / optional: what every iteration may see
    set_body_value(body, k, join(*from, *from));
    return;
  }
  TensorInfo& t = body.tensor(body.inputs[k]);
  t.dtype = from->dtype != DType::undefined ? from->dtype : t.dtype;
  if (from->has_shape) { t.has_shape = true; t.shape = from->shape; }
  t.int_value.reset();
}

TensorInfo body_out(const Graph& body, size_t k) {
  if (k >= body.outputs.size()) return {};
  const TensorInfo* t = body.find(body.outputs[k]);
  return t ? *t : TensorInfo{};
}

// Nodes of `g` and of every body nested in it (what re-inferring it costs).
int64_t count_nodes(const Graph& g, int depth = 0) {
  int64_t n = static_cast<int64_t>(g.nodes.size());
  if (depth > 64) return n;
  for (const auto& node : g.nodes)
    for (const auto& [k, a] : node.attributes)
      for (const auto& sg : a.graphs)
        if (sg) n += count_nodes(*sg, depth + 1);
  return n;
}

// Re-infers a body whose carried values (body inputs in0.., outputs out0..) change shape
// between iterations, until the carried inputs it is given are what it gives back (dims that
// change become unknown; after a few rounds the rank too). `setup` fills a fresh copy's
// inputs from the carried values. Each round is charged to the unroll budget; false (body
// not kept) when the budget runs out.
template <class Setup>
bool settle(Ctx& c, const Graph& bg, Graph& body, std::vector<TensorInfo> seen, size_t in0, size_t out0, Setup setup) {
  const int64_t cost = std::max<int64_t>(1, count_nodes(bg));
  for (int round = 0;; ++round) {
    bool stable = true;
    for (size_t k = 0; k < seen.size(); ++k) {
      if (in0 + k >= body.inputs.size()) break;
      TensorInfo next = carried_merge(body_out(body, out0 + k), seen[k]);
      if (round >= 4 && next.kind == ValueKind::tensor) {  // not settling: rank unknown
        next.has_shape = false;
        next.shape.clear();
      }
      if (same_info(next, seen[k])) continue;
      stable = false;
      seen[k] = next;
    }
    if (stable) return true;
    if (round > 4 || !c.unroll_budget || *c.unroll_budget < cost) return false;
    *c.unroll_budget -= cost;
    body = bg;
    setup(body, seen);
    infer_subgraph(c, body);
  }
}

// Keeps the body of a Loop / Scan inferred once on the initial carried values: as is when
// they keep their shapes, else re-inferred on the shapes every iteration agrees on. `body`
// itself (what the node's outputs come from) is left as it is.
template <class Setup>
void keep_settled(Ctx& c, const Graph& bg, const Graph& body, size_t carried, size_t in0, size_t out0, Setup setup) {
  if (!c.bodies) return;
  std::vector<TensorInfo> seen;
  for (size_t k = 0; k < carried && in0 + k < body.inputs.size(); ++k) {
    const TensorInfo* t = body.find(body.inputs[in0 + k]);
    seen.push_back(t ? *t : TensorInfo{});
  }
  Graph kept = body;
  if (settle(c, bg, kept, std::move(seen), in0, out0, setup)) keep_body(c, "body", std::move(kept));
}

void rule_if(Ctx& c) {
  const Graph* then_g = body_attr(c, "then_branch");
  const Graph* else_g = body_attr(c, "else_branch");
  if (!then_g || !else_g) return;
  Graph a = *then_g, b = *else_g;
  const auto* cond = c.value(0);
  const bool pick = cond && cond->size() == 1;
  // With the condition unknown, a branch whose shapes are impossible for these inputs (a
  // Reshape no element count fits, an input length only the other branch takes) is not the
  // one that runs: the If is the other branch, and a warning says so. Both impossible (or a
  // known condition's branch): the error stands.
  std::string then_error, else_error;
  auto infer_branch = [&](Graph& body, std::string& error) {
    if (pick) return infer_subgraph(c, body);
    try {
      infer_subgraph(c, body);
    } catch (const InputError& e) {
      error = e.what();
    }
  };
  if (!pick || (*cond)[0]) infer_branch(a, then_error);
  if (!pick || !(*cond)[0]) infer_branch(b, else_error);
  if (!then_error.empty() && !else_error.empty()) throw InputError(then_error);
  const bool only_then = !else_error.empty(), only_else = !then_error.empty();
  if (only_then || only_else)
    c.result.warnings.push_back({WarningCode::branch_infeasible,
                                 "If '" + c.n.name + "': its " + (only_then ? "else" : "then") +
                                     " branch cannot run on these inputs (" + (only_then ? else_error : then_error) +
                                     "), so the If is its " + (only_then ? "then" : "else") + " branch"});
  for (size_t i = 0; i < c.num_out(); ++i) {
    if (pick) copy_to_out(c, i, body_out((*cond)[0] ? a : b, i));
    else if (only_then || only_else) copy_to_out(c, i, body_out(only_then ? a : b, i));
    else copy_to_out(c, i, join(body_out(a, i), body_out(b, i)));
  }
  // The branches that may run keep their shapes (a branch never taken, or impossible for
  // these inputs, stays as loaded).
  const bool then_runs = (!pick || (*cond)[0]) && !only_else, else_runs = (!pick || !(*cond)[0]) && !only_then;
  if (then_runs) keep_body(c, "then_branch", std::move(a));
  if (else_runs) keep_body(c, "else_branch", std::move(b));
}

// True when the body's condition output is the condition input passed through unchanged
// (then the trip count M alone decides how many iterations run).
bool cond_passthrough(const Graph& body) {
  if (body.inputs.size() < 2 || body.outputs.empty()) return false;
  const std::string& cin = body.inputs[1];
  std::string cout = body.outputs[0];
  for (int guard = 0; guard < 8; ++guard) {
    if (cout == cin) return true;
    auto it = std::find_if(body.nodes.begin(), body.nodes.end(), [&](const Node& n) {
      return std::find(n.outputs.begin(), n.outputs.end(), cout) != n.outputs.end();
    });
    if (it == body.nodes.end() || it->op_type != "Identity" || it->inputs.empty()) return false;
    cout = it->inputs[0];
  }
  return false;
}

// Scan outputs of an unrolled loop: the per-iteration values stacked on a new first axis.
TensorInfo stack(const std::vector<TensorInfo>& its) {
  TensorInfo s = its[0];
  for (size_t i = 1; i < its.size(); ++i) s = join(s, its[i]);
  s.int_value.reset();
  s.float_value.reset();
  s.string_value.reset();
  if (s.kind != ValueKind::tensor) return TensorInfo{};
  if (s.has_shape) s.shape.insert(s.shape.begin(), Dim::of(static_cast<int64_t>(its.size())));
  std::vector<int64_t> v;
  for (const auto& t : its) {
    if (!t.int_value || v.size() + t.int_value->size() > kMaxValues) return s;
    v.insert(v.end(), t.int_value->begin(), t.int_value->end());
  }
  if (!is_float(s.dtype)) s.int_value = v;
  return s;
}

// Runs the body iteration by iteration when the trip count and the condition are known
// values at every step (and the unroll budget lasts): carried values, sequences included,
// then keep their exact shapes and values. False: not unrollable, nothing written.
bool unroll_loop(Ctx& c, const Graph& bg, size_t carried) {
  constexpr int64_t kMaxTrips = 4096;
  if (!c.unroll_budget) return false;
  std::optional<int64_t> trips;
  if (c.has_in(0)) {
    const auto* m = c.value(0);
    if (!m || m->size() != 1) return false;
    trips = (*m)[0];
  }
  bool cond = true;
  if (c.has_in(1)) {
    const auto* cv = c.value(1);
    if (!cv || cv->size() != 1) return false;
    cond = (*cv)[0] != 0;
  }
  if (!trips && !c.has_in(1)) return false;  // runs forever (or until a break no value shows)
  const int64_t cost = std::max<int64_t>(1, static_cast<int64_t>(bg.nodes.size()));
  std::vector<TensorInfo> state;
  for (size_t k = 0; k < carried; ++k) {
    const TensorInfo* t = c.in(2 + k);
    if (!t) return false;
    state.push_back(*t);
  }
  const size_t nscan = c.num_out() > carried ? c.num_out() - carried : 0;
  std::vector<std::vector<TensorInfo>> scans(nscan);
  std::vector<Graph> bodies;  // each iteration's body, kept for the lowering
  int64_t i = 0;
  for (; cond && (!trips || i < *trips); ++i) {
    // Nested loops draw on the same budget; an abandoned unroll keeps what it spent.
    if (i >= kMaxTrips || *c.unroll_budget < cost) return false;
    *c.unroll_budget -= cost;
    Graph body = bg;
    TensorInfo iter;
    iter.dtype = DType::i64;
    iter.has_shape = true;
    iter.int_value = std::vector<int64_t>{i};
    TensorInfo cin;
    cin.dtype = DType::boolean;
    cin.has_shape = true;
    cin.int_value = std::vector<int64_t>{1};
    set_body_value(body, 0, iter);
    set_body_value(body, 1, cin);
    for (size_t k = 0; k < carried; ++k) set_body_value(body, 2 + k, state[k]);
    infer_subgraph(c, body);
    const TensorInfo co = body_out(body, 0);
    if (!co.int_value || co.int_value->size() != 1) return false;
    cond = (*co.int_value)[0] != 0;
    for (size_t k = 0; k < carried; ++k) state[k] = body_out(body, 1 + k);
    for (size_t j = 0; j < nscan; ++j) scans[j].push_back(body_out(body, 1 + carried + j));
    bodies.push_back(std::move(body));
  }
  if (i == 0) return false;  // no iteration: the generic rule knows the scan outputs' element types
  for (size_t k = 0; k < carried; ++k) copy_to_out(c, k, state[k]);
  for (size_t j = 0; j < nscan; ++j) copy_to_out(c, carried + j, stack(scans[j]));
  keep_body(c, "body", Graph{}, std::move(bodies));
  return true;
}

void rule_loop(Ctx& c) {
  const Graph* bg = body_attr(c, "body");
  if (!bg) return;
  const size_t carried = c.n.inputs.size() > 2 ? c.n.inputs.size() - 2 : 0;
  if (unroll_loop(c, *bg, carried)) return;
  Graph body = *bg;
  TensorInfo iter;
  iter.dtype = DType::i64;
  iter.has_shape = true;
  TensorInfo cond;
  cond.dtype = DType::boolean;
  cond.has_shape = true;
  set_body_input(body, 0, &iter);
  set_body_input(body, 1, &cond);
  for (size_t k = 0; k < carried; ++k) set_body_input(body, 2 + k, c.in(2 + k));
  infer_subgraph(c, body);
  keep_settled(c, *bg, body, carried, 2, 1, [&](Graph& g, const std::vector<TensorInfo>& seen) {
    set_body_input(g, 0, &iter);
    set_body_input(g, 1, &cond);
    for (size_t k = 0; k < seen.size(); ++k) set_body_input(g, 2 + k, &seen[k]);
  });
  // Iterations: M when the condition cannot stop the loop early.
  Dim trips{};
  const auto* m = c.value(0);
  const auto* cv = c.value(1);
  const bool cond_free = !c.has_in(1) || cond_passthrough(body);
  if (m && m->size() == 1 && cond_free && (!cv || (cv->size() == 1 && (*cv)[0]))) trips = Dim::of(std::max<int64_t>((*m)[0], 0));
  if (cv && cv->size() == 1 && !(*cv)[0]) trips = Dim::of(0);
  for (size_t k = 0; k < carried; ++k) {
    const TensorInfo* init = c.in(2 + k);
    TensorInfo out = body_out(body, 1 + k);
    copy_to_out(c, k, init ? carried_merge(out, *init) : out);
    if (k < c.num_out() && !c.n.outputs[k].empty() && init && init->int_value && trips.known() && trips.value == 0)
      c.out(k).int_value = init->int_value;
  }
  for (size_t k = carried; k < c.num_out(); ++k) {
    TensorInfo out = body_out(body, 1 + k);
    out.int_value.reset();
    if (out.has_shape) out.shape.insert(out.shape.begin(), trips);
    copy_to_out(c, k, out);
  }
}

void rule_scan(Ctx& c) {
  const Graph* bg = body_attr(c, "body");
  if (!bg || c.opset() < 9) return;  // Scan-8 (batched) is left to ONNX's inference
  Graph body = *bg;
  const int64_t m = c.n.attr_i("num_scan_inputs", 0);
  const int64_t total = static_cast<int64_t>(c.n.inputs.size());
  const int64_t n_state = total - m;
  if (m <= 0 || n_state < 0) throw InputError(c.where() + ": num_scan_inputs does not match the inputs");
  std::vector<int64_t> in_axes = c.n.attr_ints("scan_input_axes");
  std::vector<int64_t> out_axes = c.n.attr_ints("scan_output_axes");
  in_axes.resize(static_cast<size_t>(m), 0);
  Dim seq{};
  for (int64_t k = 0; k < n_state; ++k) set_body_input(body, static_cast<size_t>(k), c.in(static_cast<size_t>(k)));
  for (int64_t k = 0; k < m; ++k) {
    const TensorInfo* x = c.in(static_cast<size_t>(n_state + k));
    if (!x || !x->has_shape) continue;
    TensorInfo slice = *x;
    const int64_t a = norm_axis(in_axes[static_cast<size_t>(k)], static_cast<int64_t>(x->shape.size()), c);
    if (!seq.known()) seq = x->shape[static_cast<size_t>(a)];
    slice.shape.erase(slice.shape.begin() + a);
    set_body_input(body, static_cast<size_t>(n_state + k), &slice);
  }
  infer_subgraph(c, body);
  keep_settled(c, *bg, body, static_cast<size_t>(n_state), 0, 0, [&](Graph& g, const std::vector<TensorInfo>& seen) {
    for (size_t k = 0; k < seen.size(); ++k) set_body_input(g, k, &seen[k]);
    for (size_t k = static_cast<size_t>(n_state); k < body.inputs.size() && k < g.inputs.size(); ++k)
      if (const TensorInfo* t = body.find(body.inputs[k])) set_body_input(g, k, t);
  });
  for (size_t k = 0; k < c.num_out(); ++k) {
    TensorInfo out = body_out(body, k);
    out.int_value.reset();
    if (static_cast<int64_t>(k) < n_state) {
      if (const TensorInfo* init = c.in(k)) out = carried_merge(out, *init);
    } else if (out.has_shape) {
      const size_t j = k - static_cast<size_t>(n_state);
      const int64_t r = static_cast<int64_t>(out.shape.size()) + 1;
      const int64_t a = norm_axis(j < out_axes.size() ? out_axes[j] : 0, r, c);
      out.shape.insert(out.shape.begin() + a, seq);
    }
    copy_to_out(c, k, out);
  }
}

}  // namespace

bool same_info(const TensorInfo& a, const TensorInfo& b) {
  if (a.kind != b.kind || a.dtype != b.dtype || a.has_shape != b.has_shape || a.shape.size() != b.shape.size() ||
      a.elements_known != b.elements_known || a.elements.size() != b.elements.size())
    return false;
  for (size_t i = 0; i < a.shape.size(); ++i)
    if (a.shape[i].value != b.shape[i].value || a.shape[i].param != b.shape[i].param) return false;
  for (size_t i = 0; i < a.elements.size(); ++i)
    if (!same_info(a.elements[i], b.elements[i])) return false;
  return true;
}

namespace {

bool same_shapes(const Graph& a, const Graph& b, int depth = 0);

bool same_attr_bodies(const Attribute& x, const Attribute& y, int depth) {
  if (x.graphs.size() != y.graphs.size() || x.trips.size() != y.trips.size() || depth > 64) return false;
  for (size_t i = 0; i < x.graphs.size(); ++i)
    if (x.graphs[i] != y.graphs[i] && (!x.graphs[i] || !y.graphs[i] || !same_shapes(*x.graphs[i], *y.graphs[i], depth + 1)))
      return false;
  for (size_t i = 0; i < x.trips.size(); ++i)
    if (x.trips[i] != y.trips[i] && (!x.trips[i] || !y.trips[i] || !same_shapes(*x.trips[i], *y.trips[i], depth + 1)))
      return false;
  return true;
}

// Same tensors with the same shapes, nested bodies included (two iterations of one body).
bool same_shapes(const Graph& a, const Graph& b, int depth) {
  if (a.tensors.size() != b.tensors.size() || a.nodes.size() != b.nodes.size()) return false;
  for (const auto& [name, t] : a.tensors) {
    const TensorInfo* u = b.find(name);
    if (!u || !same_info(t, *u)) return false;
  }
  for (size_t i = 0; i < a.nodes.size(); ++i)
    for (const auto& [k, x] : a.nodes[i].attributes) {
      if (x.graphs.empty()) continue;
      const Attribute* y = b.nodes[i].attr(k);
      if (!y || !same_attr_bodies(x, *y, depth)) return false;
    }
  return true;
}

// `common` becomes what it and `t` agree on: differing dims unknown, differing values dropped.
void merge_into(Graph& common, const Graph& t) {
  for (auto& [name, x] : common.tensors) {
    const TensorInfo* y = t.find(name);
    if (!y) continue;
    if (!same_info(x, *y)) {
      TensorInfo m = join(x, *y);
      m.name = x.name;
      m.is_initializer = x.is_initializer;
      m.is_graph_input = x.is_graph_input;
      m.external_data = x.external_data;
      x = std::move(m);
    } else {
      if (x.int_value != y->int_value) x.int_value.reset();
      if (x.float_value != y->float_value) x.float_value.reset();
      if (x.string_value != y->string_value) x.string_value.reset();
    }
  }
}

}  // namespace

void keep_body(Ctx& c, const std::string& key, Graph body, std::vector<Graph> trips) {
  if (!c.bodies) return;
  const Attribute* a = c.n.attr(key);
  if (!a || a->graphs.empty()) return;
  Attribute kept = *a;
  kept.trips.clear();
  if (!trips.empty()) {
    Graph common = trips[0];
    std::shared_ptr<const Graph> prev;
    for (size_t i = 0; i < trips.size(); ++i) {
      if (i > 0) merge_into(common, trips[i]);
      if (!prev || !same_shapes(*prev, trips[i])) prev = std::make_shared<const Graph>(std::move(trips[i]));
      kept.trips.push_back(prev);
    }
    body = std::move(common);
  }
  kept.graphs[0] = std::make_shared<Graph>(std::move(body));
  c.bodies->emplace_back(key, std::move(kept));
}

void add_control_flow_rules(RuleTable& t) {
  t["If"] = rule_if;
  t["Loop"] = rule_loop;
  t["Scan"] = rule_scan;
}

}  // namespace neusight::shape_rules
