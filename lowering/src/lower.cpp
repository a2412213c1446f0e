// lower.cpp - the lowering driver: plan fusion, run one rule per node (or group), lower
// control-flow bodies, then add training kernels.
#include <algorithm>
#include <functional>
#include <set>
#include <unordered_map>

#include "internal.h"

namespace neusight {

const char* kernel_class_name(KernelClass c) {
  switch (c) {
    case KernelClass::gemm: return "gemm";
    case KernelClass::elementwise: return "elementwise";
    case KernelClass::softmax: return "softmax";
    case KernelClass::layernorm: return "layernorm";
    case KernelClass::reduce: return "reduce";
    case KernelClass::memory: return "memory";
    case KernelClass::collective: return "collective";
    case KernelClass::unknown: return "unknown";
  }
  return "unknown";
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::update: return "update";
  }
  return "forward";
}

const char* fusion_name(Fusion f) {
  switch (f) {
    case Fusion::none: return "none";
    case Fusion::eager: return "eager";
    case Fusion::full: return "full";
  }
  return "eager";
}

namespace lowering_detail {

int64_t numel(const TensorInfo* t) { return t ? std::max<int64_t>(t->num_elements(), 0) : 0; }

void rows_cols(const TensorInfo* t, int64_t& rows, int64_t& cols) {
  rows = 0;
  cols = 0;
  if (!t || !t->fully_known()) return;
  if (t->shape.empty()) {
    rows = 1;
    cols = 1;
    return;
  }
  cols = t->shape.back().value;
  rows = cols > 0 ? t->num_elements() / cols : 0;
}

bool is_integer_like(DType t) {
  switch (t) {
    case DType::u8: case DType::i8: case DType::u16: case DType::i16: case DType::i32: case DType::i64:
    case DType::u32: case DType::u64: case DType::boolean: case DType::u4: case DType::i4:
      return true;
    default:
      return false;
  }
}

bool is_quantized_storage(DType t) {
  return t == DType::u8 || t == DType::i8 || t == DType::u4 || t == DType::i4 || is_fp8(t);
}

Consumers consumers_of(const Graph& g) {
  Consumers c;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty()) {
        auto& v = c[in];
        if (v.empty() || v.back() != static_cast<int>(i)) v.push_back(static_cast<int>(i));
      }
  for (const auto& o : g.outputs) c[o].push_back(-1);
  return c;
}

const TensorInfo* LowerCtx::in(size_t i) const {
  if (i >= n.inputs.size() || n.inputs[i].empty()) return nullptr;
  return g.find(n.inputs[i]);
}

bool LowerCtx::held(size_t i) const {
  const TensorInfo* t = in(i);
  if (!t) return false;
  if (t->is_initializer) return true;
  if (!plan) return false;
  const auto it = plan->producer.find(n.inputs[i]);
  if (it == plan->producer.end() || it->second < 0 || static_cast<size_t>(it->second) >= g.nodes.size()) return false;
  const Node& p = g.nodes[static_cast<size_t>(it->second)];
  return p.op_type == "Constant" && p.domain.empty();
}

const TensorInfo* LowerCtx::outp(size_t i) const {
  if (i >= n.outputs.size() || n.outputs[i].empty()) return nullptr;
  return g.find(n.outputs[i]);
}

DType LowerCtx::dtype(const TensorInfo* t) const {
  if (plan && t && !plan->tensor_dtype.empty()) {
    if (auto it = plan->read_dtype.find({index, t->name}); it != plan->read_dtype.end()) return it->second;
    if (auto it = plan->tensor_dtype.find(t->name); it != plan->tensor_dtype.end()) return it->second;
  }
  if (opt.compute_dtype != DType::undefined && t && is_float(t->dtype)) return activation_dtype(opt);
  return t && t->dtype != DType::undefined ? t->dtype : DType::f32;
}

Kernel LowerCtx::base(KernelClass cls, const std::string& op) const {
  Kernel k;
  k.cls = cls;
  k.op = op;
  k.node = index;
  k.dtype = dtype(outp(0) ? outp(0) : in(0));
  return k;
}

void LowerCtx::unknown(const std::string& why) const {
  Kernel k = base(KernelClass::unknown, n.op_type);
  k.note = why;
  out.push_back(k);
}

bool LowerCtx::all_known(std::initializer_list<const TensorInfo*> ts) const {
  for (const TensorInfo* t : ts)
    if (!t || !t->fully_known()) return false;
  return true;
}

bool LowerCtx::transposed_view(size_t i) const {
  if (!plan || i >= n.inputs.size()) return false;
  auto it = plan->producer.find(n.inputs[i]);
  if (it == plan->producer.end()) return false;
  return g.nodes[static_cast<size_t>(it->second)].op_type == "Transpose" &&
         plan->free_reason[static_cast<size_t>(it->second)] != FreeReason::none;
}

namespace {

// A Transpose's permutation over `rank` dims, negative axes normalised (ONNX's default
// reverses the dims); false when it does not describe a permutation of that rank.
bool transpose_perm(const Node& tr, size_t rank, std::vector<size_t>& perm) {
  std::vector<int64_t> p = tr.attr_ints("perm");
  if (p.empty())
    for (size_t d = rank; d-- > 0;) p.push_back(static_cast<int64_t>(d));
  if (p.size() != rank) return false;
  perm.resize(rank);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t a = p[d] < 0 ? p[d] + static_cast<int64_t>(rank) : p[d];
    if (a < 0 || a >= static_cast<int64_t>(rank)) return false;
    perm[d] = static_cast<size_t>(a);
  }
  return true;
}

}  // namespace

LowerCtx::StridedRead LowerCtx::strided_read(size_t i) const {
  StridedRead r;
  if (!plan || i >= n.inputs.size()) return r;
  auto it = plan->producer.find(n.inputs[i]);
  if (it == plan->producer.end() || plan->free_reason[static_cast<size_t>(it->second)] != FreeReason::strided_view_read_by_elementwise)
    return r;
  const Node& tr = g.nodes[static_cast<size_t>(it->second)];
  const TensorInfo* x = tr.inputs.empty() ? nullptr : g.find(tr.inputs[0]);
  const TensorInfo* v = in(i);
  const double eb = element_bytes(dtype(v));
  r.elem_bytes = eb;
  // A slice's view keeps the stored order: runs of its innermost dimension, read whole.
  if (tr.op_type != "Transpose" || !x || !x->fully_known() || x->shape.empty()) return r;
  const size_t rank = x->shape.size();
  std::vector<size_t> perm;
  if (!transpose_perm(tr, rank, perm)) return r;
  // The view's innermost dimension of more than one element, and its stride in the stored
  // (contiguous) input: consecutive output elements lie that far apart.
  constexpr double kSectorBytes = 32;
  for (size_t d = rank; d-- > 0;) {
    const size_t src = perm[d];
    if (x->shape[src].value <= 1) continue;
    double stride = 1;
    for (size_t k = src + 1; k < rank; ++k) stride *= double(std::max<int64_t>(x->shape[k].value, 1));
    r.elem_bytes = std::max(eb, std::min(kSectorBytes, stride * eb));
    break;
  }
  // Elements sharing a sector are neighbours along the stored innermost dimension (of more
  // than one element); the view dimension it became, aligned to the output's trailing dims.
  const TensorInfo* y = outp(0);
  if (r.elem_bytes <= eb || !y || !y->fully_known()) return r;
  size_t last = rank;
  for (size_t k = rank; k-- > 0;)
    if (x->shape[k].value > 1) { last = k; break; }
  if (last == rank) return r;
  const size_t vd = static_cast<size_t>(std::find(perm.begin(), perm.end(), last) - perm.begin());
  const size_t ry = y->shape.size();
  if (vd >= rank || ry < rank) return r;
  double inside = 1;
  for (size_t k = vd + (ry - rank) + 1; k < ry; ++k) inside *= double(std::max<int64_t>(y->shape[k].value, 1));
  r.reuse_elems = inside;
  return r;
}

bool LowerCtx::batch_fold_copies(size_t i) const {
  const TensorInfo* v = in(i);
  if (!plan || !v || !v->fully_known() || v->shape.size() < 4) return false;
  const size_t rank = v->shape.size();
  // Compose the permutations back to the stored tensor: view dim d is stored dim src[d].
  std::vector<size_t> src(rank);
  for (size_t d = 0; d < rank; ++d) src[d] = d;
  std::string t = n.inputs[i];
  const TensorInfo* stored = nullptr;
  bool permuted = false;
  std::vector<size_t> perm;
  for (int hops = 0; hops < 16; ++hops) {
    auto it = plan->producer.find(t);
    if (it == plan->producer.end()) break;
    const Node& tr = g.nodes[static_cast<size_t>(it->second)];
    if (tr.op_type != "Transpose" || plan->free_reason[static_cast<size_t>(it->second)] == FreeReason::none || tr.inputs.empty()) break;
    if (!transpose_perm(tr, rank, perm)) return false;
    for (size_t d = 0; d < rank; ++d) src[d] = perm[src[d]];
    permuted = true;
    t = tr.inputs[0];
    stored = g.find(t);
  }
  if (!permuted || !stored || !stored->fully_known() || stored->shape.size() != rank) return false;
  std::vector<double> stride(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) stride[d] = stride[d + 1] * double(std::max<int64_t>(stored->shape[d + 1].value, 1));
  // The batch dims of more than one element, outermost first: foldable when each one's
  // stride is the next one's stride times its size (size-1 dims fold freely).
  std::vector<size_t> batch;
  for (size_t d = 0; d + 2 < rank; ++d)
    if (v->shape[d].value > 1) batch.push_back(d);
  for (size_t j = 0; j + 1 < batch.size(); ++j)
    if (stride[src[batch[j]]] != stride[src[batch[j + 1]]] * double(v->shape[batch[j + 1]].value)) return true;
  return false;
}

void add_broadcast_reuse(Kernel& k, int operand, const TensorInfo* t, const TensorInfo* y, double own,
                         double stream_bytes_per_out) {
  if (!t || !y || !t->fully_known() || !y->fully_known()) return;
  const int64_t e = numel(t);
  if (e <= 1 || e == numel(y)) return;
  const Shape& ts = t->shape;
  const Shape& ys = y->shape;
  const size_t ry = ys.size(), rt = ts.size();
  if (rt > ry) return;
  std::vector<std::pair<double, double>> bdims;  // (footprint, repeats) per broadcast dim, inner first
  double inside = 1;                             // operand elements in the dims after d
  double out_inside = 1;                         // output elements in the dims after d
  for (size_t d = ry; d-- > 0;) {
    const int64_t od = d + rt >= ry ? ts[d + rt - ry].value : 1;
    if (od != 1 && od != ys[d].value) return;  // not a broadcast of t to y
    if (od == 1 && ys[d].value > 1)
      bdims.push_back({inside * own + out_inside * stream_bytes_per_out, double(ys[d].value)});
    inside *= double(std::max<int64_t>(od, 1));
    out_inside *= double(std::max<int64_t>(ys[d].value, 1));
  }
  const double once = double(e) * own;
  for (size_t b = 0; b < bdims.size(); ++b) {
    double repeats = 1;
    for (size_t o = b; o < bdims.size(); ++o) repeats *= bdims[o].second;
    k.l2_reuse.push_back({operand, bdims[b].first, once * (repeats - 1)});
  }
}

double stream_bytes_per_output(const LowerCtx& c, const TensorInfo* y) {
  if (!y || !y->fully_known()) return 0;
  const int64_t n = numel(y);
  double b = element_bytes(c.dtype(y));
  for (size_t i = 0; i < c.n.inputs.size(); ++i)
    if (const TensorInfo* t = c.in(i); t && t->fully_known() && numel(t) == n) b += element_bytes(c.dtype(t));
  return b;
}

double tensor_bytes(const LowerCtx& c, const TensorInfo* t) {
  return t ? double(numel(t)) * element_bytes(c.dtype(t)) : 0;
}

DType LowerCtx::quantized_operand(size_t i) const {
  if (!plan || i >= n.inputs.size() || n.inputs[i].empty()) return DType::undefined;
  auto it = plan->producer.find(n.inputs[i]);
  if (it == plan->producer.end()) return DType::undefined;
  const size_t p = static_cast<size_t>(it->second);
  if (plan->free_reason[p] != FreeReason::dequantize_into_gemm) return DType::undefined;
  const Node& dq = g.nodes[p];
  const TensorInfo* x = dq.inputs.empty() ? nullptr : g.find(dq.inputs[0]);
  return x ? x->dtype : DType::undefined;
}

const RuleTable& rules() {
  static const RuleTable t = [] {
    RuleTable r;
    add_gemm_rules(r);
    add_attention_rules(r);
    add_vector_rules(r);
    add_memory_rules(r);
    add_contrib_rules(r);
    add_signal_rules(r);
    add_optimizer_rules(r);
    return r;
  }();
  return t;
}

const Rule* find_rule(const Node& n, const LoweringOptions& o) {
  const std::string d = RuleTable::canonical(n.domain);
  auto it = o.opsets.find(d);
  const int64_t opset = it != o.opsets.end() ? it->second : d.empty() ? o.opset : 0;
  return rules().find(n.domain, n.op_type, opset);
}

namespace {

std::string qualified(const Node& n) { return n.domain.empty() ? n.op_type : n.domain + "." + n.op_type; }

// Kernels that control-flow bodies may add in one lowering (counted at every nesting level):
// nested loops multiply their trip counts, and a bad model must not exhaust memory.
constexpr int64_t kMaxBodyKernels = 1000000;

// The graph inputs whose values `name` is computed from (through the nodes of `g`), in
// graph order; the tensor itself when it is one.
std::vector<std::string> source_inputs(const Graph& g, const std::string& name) {
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer[o] = i;
  std::set<std::string> seen, inputs;
  std::vector<std::string> todo = {name};
  while (!todo.empty() && seen.size() < 4096) {
    const std::string t = todo.back();
    todo.pop_back();
    if (t.empty() || !seen.insert(t).second) continue;
    if (const TensorInfo* info = g.find(t); info && info->is_graph_input) inputs.insert(t);
    auto it = producer.find(t);
    if (it != producer.end())
      for (const auto& in : g.nodes[it->second].inputs) todo.push_back(in);
  }
  return {inputs.begin(), inputs.end()};
}

// "; set it with --value x=V" for the scalar graph inputs among `inputs` (else names them).
std::string value_hint(const Graph& g, const std::vector<std::string>& inputs) {
  std::string scalars, others;
  for (const auto& in : inputs) {
    const TensorInfo* t = g.find(in);
    std::string& list = t && t->num_elements() == 1 ? scalars : others;
    list += (list.empty() ? "" : ", ") + in;
  }
  if (!scalars.empty())
    return "; it comes from input " + scalars + ": set it with --value " +
           (scalars.find(',') == std::string::npos ? scalars : std::string("NAME")) + "=V";
  if (!others.empty()) return "; it comes from input " + others;
  return "";
}

struct Lowering {
  const LoweringOptions& opt;
  std::set<std::string> unknown;
  std::vector<std::string> warnings;
  int64_t body_kernels = 0;  // kernels added by control-flow bodies so far

  // Counts `n` more body kernels; InputError beyond kMaxBodyKernels.
  void charge(const Node& n, size_t count) {
    body_kernels += static_cast<int64_t>(count);
    if (body_kernels > kMaxBodyKernels)
      throw InputError("node '" + n.name + "' (" + n.op_type + "): control-flow bodies expand to more than " +
                       std::to_string(kMaxBodyKernels) + " kernels (nested loops multiply their trip counts)");
  }

  // Lowers one graph's forward kernels. `owner` >= 0: every kernel is attributed to that
  // node of the outermost graph (kernels of control-flow bodies).
  // `owner_name`: that node's name (body kernels are named "<owner>/<body node>").
  void forward(const Graph& g, std::vector<Kernel>& out, int owner, const std::string& owner_name, KernelList* top);
  // If, Loop, Scan, SequenceMap: the kernels of their bodies, per branch and trip.
  void control_flow(const Graph& g, const Node& n, int index, std::vector<Kernel>& out);
  // Lowers one body graph of `n` (its kernels attributed to node `index`).
  void lower_body(const Graph& g, const Node& n, int index, const Graph& body, std::vector<Kernel>& out);
  // If: the branch a known condition picks, else the dearer branch (noted).
  void if_branches(const Graph& g, const Node& n, int index, std::vector<Kernel>& out);
};

// A body graph sees the enclosing graph's tensors (outer-scope names): those its nodes, the
// bodies nested in it and its outputs read are copied in (never the whole enclosing graph).
Graph body_with_outer_scope(const Graph& body, const Graph& outer) {
  Graph b = body;
  auto take = [&](const std::string& name) {
    if (name.empty() || b.tensors.count(name)) return;
    if (const TensorInfo* t = outer.find(name)) b.tensors[name] = *t;
  };
  std::function<void(const Graph&, int)> import = [&](const Graph& sg, int depth) {
    for (const auto& n : sg.nodes) {
      for (const auto& in : n.inputs) take(in);
      if (depth < 64)
        for (const auto& [k, a] : n.attributes)
          for (const auto& s : a.graphs)
            if (s) import(*s, depth + 1);
    }
    for (const auto& o : sg.outputs) take(o);
  };
  import(body, 0);
  return b;
}

int64_t body_cost_rank(const std::vector<Kernel>& ks) {
  double w = 0;
  for (const auto& k : ks) w += k.flops + k.bytes;
  return static_cast<int64_t>(w);
}

// Input `i` of `n` where it is one value known before the run (a constant, a --value), else null.
const int64_t* known_scalar(const Graph& g, const Node& n, size_t i) {
  const TensorInfo* t = i < n.inputs.size() && !n.inputs[i].empty() ? g.find(n.inputs[i]) : nullptr;
  return t && t->int_value && t->int_value->size() == 1 ? &(*t->int_value)[0] : nullptr;
}

// Iterations of a Loop (its trip count input; none when its condition is false on entry), Scan (the first scan input's length along
// its scan axis) or SequenceMap (the input sequence's length) when known before the run;
// -1 otherwise, with `why` saying what the prediction assumes instead.
int64_t static_trip_count(const Graph& g, const Node& n, std::string& why) {
  int64_t trips = -1;
  if (n.op_type == "Loop") {
    // A condition false on entry runs no iteration, whatever the trip count.
    if (const int64_t* cond = known_scalar(g, n, 1); cond && *cond == 0) return 0;
    if (const int64_t* m = known_scalar(g, n, 0)) trips = std::max<int64_t>(*m, 0);
    else why = "trip count not known at compile time: body counted once";
  } else if (n.op_type == "SequenceMap") {  // iterations = elements of the input sequence
    const TensorInfo* s = n.inputs.empty() || n.inputs[0].empty() ? nullptr : g.find(n.inputs[0]);
    if (s && s->kind == ValueKind::sequence && s->elements_known) trips = static_cast<int64_t>(s->elements.size());
    else why = "sequence length not known: body counted once";
  } else {  // Scan: iterations = length of the first scan input along its scan axis
    const int64_t num_scan = n.attr_i("num_scan_inputs", 1);
    const size_t first_scan = n.inputs.size() >= static_cast<size_t>(num_scan) ? n.inputs.size() - num_scan : 0;
    const TensorInfo* x = first_scan < n.inputs.size() ? g.find(n.inputs[first_scan]) : nullptr;
    const auto axes = n.attr_ints("scan_input_axes");
    int64_t axis = axes.empty() ? 0 : axes[0];
    if (x && x->has_shape && !x->shape.empty()) {
      if (axis < 0) axis += static_cast<int64_t>(x->shape.size());
      if (axis >= 0 && axis < static_cast<int64_t>(x->shape.size()) && x->shape[axis].known())
        trips = x->shape[axis].value;
    }
    if (trips < 0) why = "scan length not known: body counted once";
  }
  return trips;
}

void Lowering::lower_body(const Graph& g, const Node& n, int index, const Graph& body, std::vector<Kernel>& out) {
  Graph scoped = body_with_outer_scope(body, g);
  forward(scoped, out, index, n.name, nullptr);
}

void Lowering::if_branches(const Graph& g, const Node& n, int index, std::vector<Kernel>& out) {
  auto lower_branch = [&](const Attribute* a, std::vector<Kernel>& ks) {
    if (a && !a->graphs.empty() && a->graphs[0]) lower_body(g, n, index, *a->graphs[0], ks);
  };
  // A condition known at compile time picks its branch.
  if (const int known = known_if_condition(g, n); known >= 0) {
    const bool taken = known != 0;
    std::vector<Kernel> ks;
    lower_branch(n.attr(taken ? "then_branch" : "else_branch"), ks);
    for (Kernel k : ks) {
      k.note = std::string(taken ? "then" : "else") + " branch (condition known)" + (k.note.empty() ? "" : "; " + k.note);
      out.push_back(k);
    }
    return;
  }
  // Otherwise one branch runs; the cost is that of the dearer branch (a bound, noted). Each
  // branch is lowered with unknown ops and warnings of its own, and only the priced branch's
  // are reported: the other's say nothing of what is predicted (a branch whose shapes cannot be
  // inferred for these inputs, e.g. an input length only the other branch takes, would list
  // every op type in it as unknown).
  struct Branch {
    std::vector<Kernel> ks;
    std::set<std::string> unknown;
    std::vector<std::string> warnings;
  };
  auto lower_apart = [&](const char* attr) {
    Branch b;
    std::swap(unknown, b.unknown);
    std::swap(warnings, b.warnings);
    lower_branch(n.attr(attr), b.ks);
    std::swap(unknown, b.unknown);
    std::swap(warnings, b.warnings);
    return b;
  };
  Branch then_b = lower_apart("then_branch"), else_b = lower_apart("else_branch");
  const bool pick_then = body_cost_rank(then_b.ks) >= body_cost_rank(else_b.ks);
  Branch& picked = pick_then ? then_b : else_b;
  const Branch& other = pick_then ? else_b : then_b;
  unknown.insert(picked.unknown.begin(), picked.unknown.end());
  for (auto& w : picked.warnings) warnings.push_back(std::move(w));
  const std::string cond_name = n.inputs.empty() ? "" : n.inputs[0];
  const auto unpriced = std::count_if(other.ks.begin(), other.ks.end(), [](const Kernel& k) { return k.cls == KernelClass::unknown; });
  std::string ops;  // the other branch's op types without kernels, the first three of them
  int listed = 0;
  for (const auto& u : other.unknown)
    if (++listed <= 3) ops += (ops.empty() ? "" : ", ") + u;
  if (listed > 3) ops += ", ...";
  const std::string why =
      unpriced > 0 ? " and " + std::to_string(unpriced) + " of its " + (pick_then ? "else" : "then") +
                         " branch's kernels cannot be priced for these inputs (" + ops +
                         ": shapes not inferred or no kernel rule), so the " + (pick_then ? "then" : "else") + " branch is priced"
                   : std::string(", so the dearer branch (") + (pick_then ? "then" : "else") + ") is priced";
  warnings.push_back("If '" + n.name + "': condition '" + cond_name + "' is not known before the run" + why +
                     value_hint(g, source_inputs(g, cond_name)));
  for (Kernel k : picked.ks) {
    k.note = std::string(pick_then ? "then" : "else") + " branch (the dearer one)" + (k.note.empty() ? "" : "; " + k.note);
    out.push_back(k);
  }
}

void Lowering::control_flow(const Graph& g, const Node& n, int index, std::vector<Kernel>& out) {
  if (n.op_type == "If") {
    if_branches(g, n, index, out);
    return;
  }
  // Iterations that shape inference ran one by one: each is lowered with its own shapes (and
  // the iteration count is exact). Consecutive iterations with the same shapes share one graph.
  if (const Attribute* a = n.attr("body"); a && !a->trips.empty()) {
    std::vector<Kernel> ks;
    const Graph* last = nullptr;
    for (size_t r = 0; r < a->trips.size(); ++r) {
      if (!a->trips[r]) continue;
      if (a->trips[r].get() != last) {
        ks.clear();
        lower_body(g, n, index, *a->trips[r], ks);
        last = a->trips[r].get();
      }
      charge(n, ks.size());
      for (Kernel k : ks) {
        k.steps = static_cast<int64_t>(r) + 1;
        out.push_back(k);
      }
    }
    return;
  }
  std::vector<Kernel> body;
  const Attribute* body_attr = n.attr("body");
  if (body_attr && !body_attr->graphs.empty() && body_attr->graphs[0]) {
    lower_body(g, n, index, *body_attr->graphs[0], body);
  } else {
    Kernel k;
    k.cls = KernelClass::unknown;
    k.op = n.op_type;
    k.node = index;
    k.note = "control-flow node without a body";
    out.push_back(k);
    unknown.insert(qualified(n));
    return;
  }
  std::string why;
  const int64_t trips = static_trip_count(g, n, why);
  if (trips < 0) {
    const std::string count = n.op_type == "Loop" && !n.inputs.empty() ? n.inputs[0] : "";
    warnings.push_back(n.op_type + " '" + n.name + "': " + why +
                       (count.empty() ? "" : value_hint(g, source_inputs(g, count))));
  }
  const int64_t reps = trips < 0 ? 1 : trips;
  for (int64_t r = 0; r < reps; ++r) {
    charge(n, body.size());
    for (Kernel k : body) {
      k.steps = r + 1;
      if (!why.empty()) k.note = why + (k.note.empty() ? "" : "; " + k.note);
      out.push_back(k);
    }
  }
}

// A kernel with nothing to write: a vector kernel over no elements, a GEMM without output rows
// or columns.
bool empty_output(const Kernel& k) {
  switch (k.cls) {
    case KernelClass::gemm: return k.gemm.batch == 0 || k.gemm.m == 0 || k.gemm.n == 0;
    case KernelClass::elementwise: case KernelClass::softmax: case KernelClass::layernorm:
    case KernelClass::reduce: case KernelClass::memory:
      return k.rows == 0 || k.cols == 0;
    default: return false;
  }
}

void Lowering::forward(const Graph& g, std::vector<Kernel>& out, int owner, const std::string& owner_name,
                       KernelList* top) {
  const Consumers cons = consumers_of(g);
  const Plan plan = make_plan(g, opt, cons);
  if (top) {
    top->fused_into.assign(g.nodes.size(), -1);
    top->free_reason = plan.free_reason;
    // A quantize-dequantize (QDQ) model priced as written: say what a fusing engine runs.
    const int64_t qdq = plan.unfused_dequantize;
    if (qdq > 0)
      warnings.push_back(std::to_string(qdq) + " DequantizeLinear node" + (qdq == 1 ? "" : "s") +
                         " feed GEMM operands and run as written (onnxruntime's CUDA kernels); engines that fuse "
                         "quantize-dequantize pairs (TensorRT) run those GEMMs on the quantized operands: --fusion "
                         "full prices that");
  }
  const size_t first = out.size();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    // Work counts are 64-bit: a tensor whose element count does not fit is bad input.
    for (const auto* names : {&n.inputs, &n.outputs})
      for (const auto& name : *names) {
        const TensorInfo* t = name.empty() ? nullptr : g.find(name);
        if (t && t->fully_known() && t->num_elements() < 0)
          throw InputError("node '" + n.name + "': tensor '" + name + "' has more elements than 64 bits can count");
      }
    if (plan.free_reason[i] != FreeReason::none) continue;
    for (auto [it, end] = plan.casts_before.equal_range(static_cast<int>(i)); it != end; ++it) {
      const LowerCtx c{g, opt, n, static_cast<int>(i), out, &plan};
      emit_cast_copy(c, g.find(it->second.first), it->second.second);
    }
    if (plan.group_of[i] >= 0) {
      const Group& grp = plan.groups[static_cast<size_t>(plan.group_of[i])];
      if (top)
        for (int m : grp.nodes)
          if (m != grp.anchor) top->fused_into[static_cast<size_t>(m)] = grp.anchor;
      if (grp.emit_at == static_cast<int>(i)) emit_group(g, opt, plan, grp, cons, out);
      continue;
    }
    if (n.op_type == "If" || n.op_type == "Loop" || n.op_type == "Scan" || n.op_type == "SequenceMap") {
      control_flow(g, n, static_cast<int>(i), out);
      continue;
    }
    LowerCtx c{g, opt, n, static_cast<int>(i), out, &plan};
    if (const Rule* rule = find_rule(n, opt)) {
      (*rule)(c);
    } else {
      c.unknown("no lowering rule for " + qualified(n));
    }
  }
  for (size_t k = first; k < out.size(); ++k) {
    // An empty output (a dim bound to 0) launches no kernel: PyTorch's and onnxruntime's
    // kernels return before any work when there is nothing to write, and cuBLAS when a GEMM
    // has no rows or columns (one of no reduction still writes its output).
    if (empty_output(out[k])) {
      out[k].flops = 0;
      out[k].bytes = 0;
    }
    // vLLM's rms_norm or fused_add_rms_norm (LoweringOptions::serving_kernels), however the
    // graph spells RMSNorm:
    // described for the memory-parallelism bound of a latency-limited row kernel (precision.h
    // memory_parallelism_ms).
    Kernel& kr = out[k];
    if (opt.serving_kernels && kr.cls == KernelClass::layernorm && kr.op == "rmsnorm" && element_bytes(kr.dtype) == 2 &&
        kr.cols > 0 && kr.access.bytes_per_load == 0)
      kr.access = kr.residual_add ? vllm_fused_add_rms_norm_access(kr.rows, kr.cols) : vllm_rms_norm_access(kr.cols);
    // ... and the gated activation as vLLM's silu_and_mul.
    if (opt.serving_kernels && kr.cls == KernelClass::elementwise && kr.op == "silu_and_mul" &&
        element_bytes(kr.dtype) == 2 && kr.cols > 0 && kr.access.bytes_per_load == 0)
      kr.access = vllm_act_and_mul_access(kr.cols);
    // A body's kernel (body_node set) names its own op, counted when its body was lowered:
    // the If / Loop / Scan that owns it is no unknown op.
    if (out[k].cls == KernelClass::unknown && out[k].body_node.empty() && out[k].node >= 0 &&
        static_cast<size_t>(out[k].node) < g.nodes.size())
      unknown.insert(qualified(g.nodes[static_cast<size_t>(out[k].node)]));
    if (owner >= 0) {
      const std::string inner = !out[k].body_node.empty() ? out[k].body_node
                                : out[k].node >= 0 && static_cast<size_t>(out[k].node) < g.nodes.size()
                                    ? g.nodes[static_cast<size_t>(out[k].node)].name
                                    : std::string("?");
      out[k].body_node = owner_name + "/" + inner;
      out[k].node = owner;
      out[k].fused_nodes.clear();
    }
  }
}

}  // namespace
}  // namespace lowering_detail

std::vector<std::pair<std::string, std::string>> lowering_rule_ops() { return lowering_detail::rules().ops(); }

ThreadAccess vllm_fused_add_rms_norm_access(int64_t rows, int64_t cols) {
  const int64_t max_block = rows < 256 ? 1024 : 256;
  ThreadAccess a{cols % 8 == 0 ? 16 : 2, 2, static_cast<int>(std::min(cols, max_block)), 1, 2, true};
  a.row_tensors = 2;  // x and the residual
  return a;
}

ThreadAccess vllm_rotary_access(int64_t q_width) {
  ThreadAccess a{2, 2, static_cast<int>(std::clamp<int64_t>(q_width / 2, 1, 512)), 0, 0, false};
  a.row_tensors = 1;
  a.index_loads = 1;  // positions[token]
  return a;
}

ThreadAccess vllm_act_and_mul_access(int64_t cols) {
  ThreadAccess a{2, 2, static_cast<int>(std::clamp<int64_t>(cols, 1, 1024)), 0, 0, false};
  a.row_tensors = 2;  // the gate and up halves
  return a;
}

ThreadAccess vllm_rms_norm_access(int64_t cols) {
  ThreadAccess a{2, 1, static_cast<int>(std::min<int64_t>(cols, 1024)), 1, 1, true};
  a.row_tensors = 1;  // the first pass reads the row of x; the weight comes with the second
  return a;
}

KernelList lower(const Graph& graph, const LoweringOptions& options) {
  using namespace lowering_detail;
  KernelList result;
  Lowering l{options, {}, {}, 0};
  std::vector<Kernel> fwd;
  fwd.reserve(graph.nodes.size());
  l.forward(graph, fwd, -1, "", &result);
  // LoRA's adapters: trained beside the frozen model, or in inference served unmerged (PEFT's
  // forward before merge_and_unload, vLLM's --enable-lora).
  const LoraTargets lora = lora_targets(graph, fwd, options.lora);
  result.kernels = with_lora_forward(fwd, lora, options);
  if (options.mode == Mode::training) add_training_kernels(graph, fwd, options, lora, result.kernels, l.warnings);
  if (options.sparsity.two_four)
    result.sparse_weights = mark_sparse_2_4(graph, result.kernels, options.sparsity, result.free_reason, l.warnings);
  result.unknown_ops.assign(l.unknown.begin(), l.unknown.end());
  for (auto& w : l.warnings)  // a body lowered once per trip says it once
    if (std::find(result.warnings.begin(), result.warnings.end(), w) == result.warnings.end())
      result.warnings.push_back(std::move(w));
  return result;
}

Graph with_outer_scope(const Graph& body, const Graph& outer) { return lowering_detail::body_with_outer_scope(body, outer); }

int known_if_condition(const Graph& g, const Node& n) {
  const int64_t* cond = lowering_detail::known_scalar(g, n, 0);
  return cond ? (*cond != 0 ? 1 : 0) : -1;
}

}  // namespace neusight
