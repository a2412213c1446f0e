// checkpoint.cpp - the model's data path, and activation checkpointing on it.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "data_path.h"
#include "neusight/parallel.h"
#include "neusight/parameters.h"

namespace neusight {

namespace {

// The tensors of the model's data path: the float graph inputs, what a node computes from a
// weight (parameters.h reads_weight: the weight operand of a GEMM or convolution, a
// normalization's scale, the table of an embedding lookup, held as an initializer or a
// Constant node's value) and everything computed from those. The rest
// (a mask, position ids, a rotary table: from the inputs' integers and small constants) each
// pipeline stage computes for itself, as Megatron-LM's stages do; it crosses no cut.
std::set<std::string> data_path(const Graph& g) {
  std::set<std::string> path;
  for (const auto& in : g.inputs) {
    const TensorInfo* t = g.find(in);
    if (t && !t->is_initializer && is_float(t->dtype)) path.insert(in);
  }
  const std::unordered_set<std::string> held = held_values(g);
  auto weight = [&](const Node& n, size_t i) { return reads_weight(g, held, n, i); };
  for (const Node& n : g.nodes) {  // topological order
    bool on = false;
    for (size_t i = 0; i < n.inputs.size() && !on; ++i)
      on = !n.inputs[i].empty() && (path.count(n.inputs[i]) || weight(n, i));
    if (on)
      for (const auto& o : n.outputs)
        if (!o.empty()) path.insert(o);
  }
  return path;
}

bool in_range(int node, size_t n) { return node >= 0 && static_cast<size_t>(node) < n; }

// One choice of checkpoints, evaluated.
struct Choice {
  std::vector<int> positions;
  double peak = INFINITY;
};

// The peak activation bytes of checkpoints at `positions` (ascending): the path tensors
// crossing them, the activations kept outside segments or written before theirs, and the
// largest segment's.
double peak_of(const std::vector<int>& positions, const std::vector<PathTensor>& tensors,
               const std::vector<SavedActivation>& saved, size_t nodes) {
  if (positions.size() < 2) return INFINITY;
  auto segment = [&](int node) {
    if (node < positions.front() || node >= positions.back()) return -1;
    return static_cast<int>(std::upper_bound(positions.begin(), positions.end(), node) - positions.begin()) - 1;
  };
  const std::vector<char> crossing = parallel_detail::crossing_any(positions, tensors, nodes);
  std::set<std::string> kept;
  double kept_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (crossing[i]) {
      kept.insert(tensors[i].name);
      kept_bytes += tensors[i].bytes;
    }
  std::vector<double> transient(positions.size(), 0);
  for (const SavedActivation& a : saved) {
    const int s = in_range(a.keeper, nodes) ? segment(a.keeper) : -1;
    if (s >= 0 && in_range(a.writer, nodes) && segment(a.writer) == s) transient[static_cast<size_t>(s)] += a.bytes;
    else if (a.tensor.empty() || !kept.count(a.tensor)) kept_bytes += a.bytes;
  }
  return kept_bytes + *std::max_element(transient.begin(), transient.end());
}

}  // namespace

namespace parallel_detail {

std::vector<double> crossing_bytes(const std::vector<PathTensor>& tensors, size_t nodes) {
  std::vector<double> diff(nodes + 2, 0);
  for (const PathTensor& t : tensors) {
    diff[static_cast<size_t>(t.producer) + 1] += t.bytes;
    diff[static_cast<size_t>(t.last_use) + 1] -= t.bytes;
  }
  std::vector<double> cross(nodes + 1, 0);
  double run = 0;
  for (size_t c = 0; c <= nodes; ++c) {
    run += diff[c];
    cross[c] = run;
  }
  return cross;
}

std::vector<double> crossing_bounds(std::vector<double> sizes) {
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  if (sizes.size() <= kMostBounds) return sizes;
  std::vector<double> spread;
  for (size_t k = 0; k < kMostBounds; ++k) spread.push_back(sizes[k * (sizes.size() - 1) / (kMostBounds - 1)]);
  return spread;
}

std::vector<char> crossing_any(const std::vector<int>& positions, const std::vector<PathTensor>& tensors, size_t nodes) {
  std::vector<int> upto(nodes + 2, 0);  // checkpoints at positions <= c
  for (int c : positions) upto[static_cast<size_t>(c)] += 1;
  for (size_t c = 1; c < upto.size(); ++c) upto[c] += upto[c - 1];
  std::vector<char> crossing(tensors.size(), 0);
  for (size_t i = 0; i < tensors.size(); ++i)
    crossing[i] = upto[static_cast<size_t>(tensors[i].last_use)] - upto[static_cast<size_t>(tensors[i].producer)] > 0;
  return crossing;
}

}  // namespace parallel_detail

std::vector<PathTensor> data_path_tensors(const Graph& g, DType compute) {
  const size_t n = g.nodes.size();
  const std::set<std::string> path = data_path(g);
  std::map<std::string, int> producer;
  for (size_t i = 0; i < n; ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty() && path.count(o)) producer[o] = static_cast<int>(i);
  std::map<std::string, int> last_use;
  for (size_t i = 0; i < n; ++i)
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty() && producer.count(in)) last_use[in] = static_cast<int>(i);
  std::vector<PathTensor> out;
  for (const auto& [name, q] : last_use) {
    const int p = producer[name];
    const TensorInfo* t = g.find(name);
    if (!t || !is_float(t->dtype) || q <= p || t->num_elements() <= 0) continue;
    out.push_back({name, p, q, double(t->num_elements()) * element_bytes(compute == DType::undefined ? t->dtype : compute)});
  }
  return out;
}

CheckpointPlan plan_checkpoints(const Graph& g, DType compute, const std::vector<SavedActivation>& saved) {
  const size_t n = g.nodes.size();
  const std::vector<PathTensor> tensors = data_path_tensors(g, compute);
  const std::vector<double> cross = parallel_detail::crossing_bytes(tensors, n);
  std::vector<double> sizes;
  for (size_t c = 1; c < n; ++c)
    if (cross[c] > 0) sizes.push_back(cross[c]);
  Choice best;
  for (const double bound : parallel_detail::crossing_bounds(std::move(sizes))) {
    Choice c;
    for (size_t p = 1; p < n; ++p)
      if (cross[p] > 0 && cross[p] <= bound) c.positions.push_back(static_cast<int>(p));
    c.peak = peak_of(c.positions, tensors, saved, n);
    if (c.peak < best.peak) best = std::move(c);
  }
  CheckpointPlan plan;
  plan.segment_of.assign(n, -1);
  double without = 0;  // every activation kept
  for (const SavedActivation& a : saved) without += a.bytes;
  if (!std::isfinite(best.peak) || best.peak >= without) return plan;
  // A segment that keeps no activation (a mask's or a shape's nodes) joins the next one; before
  // the first that keeps one, the nodes run once.
  std::vector<char> keeps(n + 1, 0);
  for (const SavedActivation& a : saved)
    if (in_range(a.keeper, n)) keeps[static_cast<size_t>(a.keeper)] = 1;
  std::vector<int> kept_positions;
  for (size_t j = 0; j < best.positions.size(); ++j) {
    const bool last = j + 1 == best.positions.size();
    bool any = last;
    for (int i = best.positions[j]; !last && i < best.positions[j + 1] && !any; ++i) any = keeps[static_cast<size_t>(i)];
    if (any) kept_positions.push_back(best.positions[j]);
  }
  best.positions = std::move(kept_positions);
  if (best.positions.size() < 2) return plan;
  plan.positions = best.positions;
  plan.segments = static_cast<int>(best.positions.size()) - 1;
  size_t s = 0;
  for (int i = best.positions.front(); i < best.positions.back(); ++i) {
    while (s + 1 < best.positions.size() && best.positions[s + 1] <= i) ++s;
    plan.segment_of[static_cast<size_t>(i)] = static_cast<int>(s);
  }
  const std::vector<char> crossing = parallel_detail::crossing_any(best.positions, tensors, n);
  for (size_t i = 0; i < tensors.size(); ++i)
    if (crossing[i]) plan.kept.push_back(tensors[i]);
  return plan;
}

CheckpointPlan plan_attention_recompute(const Graph& g, const std::vector<char>& flash) {
  const size_t n = g.nodes.size();
  CheckpointPlan plan;
  plan.segment_of.assign(n, -1);
  const std::unordered_set<std::string> held = held_values(g);
  std::map<std::string, int> producer;
  std::map<std::string, std::vector<int>> consumers;
  for (size_t i = 0; i < n; ++i) {
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer[o] = static_cast<int>(i);
    for (const auto& x : g.nodes[i].inputs)
      if (!x.empty()) consumers[x].push_back(static_cast<int>(i));
  }
  auto activation = [&](const std::string& t) { return !t.empty() && !held.count(t) && producer.count(t); };
  for (size_t si = 0; si < n; ++si) {
    const Node& sm = g.nodes[si];
    if (sm.op_type != "Softmax" || sm.inputs.empty() || sm.outputs.empty()) continue;
    std::vector<int> core = {static_cast<int>(si)};
    // Back to Q K^T through the scale and the mask (one-input-path elementwise ops).
    std::string t = sm.inputs[0];
    int qk = -1;
    for (int guard = 0; guard < 6 && qk < 0; ++guard) {
      const auto p = producer.find(t);
      if (p == producer.end()) break;
      const Node& pn = g.nodes[static_cast<size_t>(p->second)];
      if (pn.op_type == "MatMul" && pn.inputs.size() == 2 && activation(pn.inputs[0]) && activation(pn.inputs[1])) qk = p->second;
      else if ((pn.op_type == "Add" || pn.op_type == "Mul" || pn.op_type == "Div" || pn.op_type == "Where" ||
                pn.op_type == "Tanh" || pn.op_type == "Sub") && !pn.inputs.empty()) {
        core.push_back(p->second);
        t = pn.op_type == "Where" && pn.inputs.size() == 3 ? pn.inputs[1] : pn.inputs[0];
      } else break;
    }
    // Forward to P V through a dropout.
    int pv = -1;
    t = sm.outputs[0];
    for (int guard = 0; guard < 3 && pv < 0; ++guard) {
      const auto c = consumers.find(t);
      if (c == consumers.end() || c->second.size() != 1) break;
      const Node& cn = g.nodes[static_cast<size_t>(c->second[0])];
      if (cn.op_type == "MatMul" && cn.inputs.size() == 2 && cn.inputs[0] == t && activation(cn.inputs[1])) pv = c->second[0];
      else if (cn.op_type == "Dropout" && !cn.outputs.empty()) {
        core.push_back(c->second[0]);
        t = cn.outputs[0];
      } else break;
    }
    if (qk < 0 || pv < 0) continue;
    core.push_back(qk);
    core.push_back(pv);
    if (std::any_of(core.begin(), core.end(), [&](int m) {
          return plan.segment_of[static_cast<size_t>(m)] >= 0 || (static_cast<size_t>(m) < flash.size() && flash[static_cast<size_t>(m)]);
        }))
      continue;
    for (int m : core) plan.segment_of[static_cast<size_t>(m)] = plan.segments;
    ++plan.segments;
  }
  return plan;
}

std::vector<SavedActivation> apply_checkpoints(const std::vector<SavedActivation>& saved, const CheckpointPlan& plan) {
  if (plan.segments <= 0) return saved;
  const size_t n = plan.segment_of.size();
  auto segment = [&](int node) { return in_range(node, n) ? plan.segment_of[static_cast<size_t>(node)] : -1; };
  std::set<std::string> kept;
  for (const PathTensor& t : plan.kept) kept.insert(t.name);
  std::vector<SavedActivation> out;
  std::set<std::string> listed;
  for (SavedActivation a : saved) {
    const int s = segment(a.keeper);
    if (s >= 0 && segment(a.writer) == s) a.segment = s;
    else if (!a.tensor.empty() && kept.count(a.tensor)) listed.insert(a.tensor);
    out.push_back(a);
  }
  for (const PathTensor& t : plan.kept) {
    if (listed.count(t.name)) continue;
    // Kept by the first checkpoint it crosses: the node after it.
    const auto c = std::upper_bound(plan.positions.begin(), plan.positions.end(), t.producer);
    out.push_back({c != plan.positions.end() ? *c : t.producer + 1, t.producer, t.bytes, t.name, -1});
  }
  return out;
}

double peak_saved_bytes(const std::vector<SavedActivation>& saved) {
  double kept = 0;
  std::map<int, double> segment;
  for (const SavedActivation& a : saved) (a.segment >= 0 ? segment[a.segment] : kept) += a.bytes;
  double largest = 0;
  for (const auto& [s, b] : segment) largest = std::max(largest, b);
  return kept + largest;
}

KernelList with_recompute(const KernelList& in, const CheckpointPlan& plan) {
  if (plan.segments <= 0) return in;
  const size_t n = plan.segment_of.size();
  auto segment = [&](int node) { return in_range(node, n) ? plan.segment_of[static_cast<size_t>(node)] : -1; };
  std::vector<std::vector<const Kernel*>> forward(static_cast<size_t>(plan.segments));
  for (const Kernel& k : in.kernels)
    if (k.phase == Phase::forward && segment(k.node) >= 0) forward[static_cast<size_t>(segment(k.node))].push_back(&k);
  KernelList out = in;
  out.kernels.clear();
  out.kernels.reserve(in.kernels.size() * 2);
  std::vector<char> done(static_cast<size_t>(plan.segments), 0);
  for (const Kernel& k : in.kernels) {
    const int s = k.phase == Phase::backward ? segment(k.node) : -1;
    if (s >= 0 && !done[static_cast<size_t>(s)]) {
      done[static_cast<size_t>(s)] = 1;
      for (const Kernel* f : forward[static_cast<size_t>(s)]) {
        Kernel r = *f;
        r.phase = Phase::backward;
        r.recomputed = true;
        r.note = "recomputed forward (activation checkpointing)" + (r.note.empty() ? std::string() : "; " + r.note);
        out.kernels.push_back(std::move(r));
      }
    }
    out.kernels.push_back(k);
  }
  return out;
}

}  // namespace neusight
