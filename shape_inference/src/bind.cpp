// bind.cpp - bind input dims from --batch / --seq / --dim / --shape, and scalar input values
// from --value.
#include <algorithm>
#include <cmath>
#include <set>

#include "rules.h"

namespace neusight {
namespace {

using shape_rules::shape_text;

std::string list_text(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// "no graph input named 'y' (inputs: a, b)".
std::string no_input(const Graph& g, const std::string& name) {
  std::vector<std::string> names;
  for (const auto& in : g.inputs) names.push_back(in);
  return "no graph input named '" + name + "' (inputs: " + (names.empty() ? "none" : list_text(names)) + ")";
}

// Applies one --shape: every dim of input `name` set. Symbolic names it fixes go to `names`.
void apply_shape(Graph& g, const std::string& name, const std::vector<int64_t>& dims,
                 std::map<std::string, int64_t>& names, std::vector<std::string>& warnings) {
  if (std::find(g.inputs.begin(), g.inputs.end(), name) == g.inputs.end())
    throw InputError("--shape " + name + ": " + no_input(g, name));
  TensorInfo& t = g.tensor(name);
  std::string text;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0 || dims[i] > shape_rules::kMaxDim)
      throw InputError("--shape " + name + ": dim " + std::to_string(i) + " must be between 0 and 2^62, got " +
                       std::to_string(dims[i]));
    text += (i ? "x" : "") + std::to_string(dims[i]);
  }
  if (t.kind != ValueKind::tensor) throw InputError("--shape " + name + ": input '" + name + "' is not a tensor");
  if (t.has_shape && t.shape.size() != dims.size())
    throw InputError("--shape " + name + "=" + text + ": input '" + name + "' has rank " +
                     std::to_string(t.shape.size()) + " " + shape_text(t.shape) + ", not " + std::to_string(dims.size()));
  std::string changed;
  for (size_t i = 0; t.has_shape && i < dims.size(); ++i) {
    const Dim& d = t.shape[i];
    if (d.known() && d.value != dims[i])
      changed += (changed.empty() ? "" : ", ") + ("axis " + std::to_string(i) + " " + std::to_string(d.value) +
                                                  " -> " + std::to_string(dims[i]));
    if (!d.known() && !d.param.empty()) {
      auto [it, fresh] = names.emplace(d.param, dims[i]);
      if (!fresh && it->second != dims[i])
        throw InputError("--shape " + name + "=" + text + ": dim '" + d.param + "' (axis " + std::to_string(i) +
                         ") is already bound to " + std::to_string(it->second));
    }
  }
  if (!changed.empty())
    warnings.push_back("--shape " + name + "=" + text + " changes fixed dims of '" + name + "' " +
                       shape_text(t.shape) + ": " + changed);
  t.has_shape = true;
  t.shape.clear();
  for (int64_t v : dims) t.shape.push_back(Dim::of(v));
}

void apply_value(Graph& g, const std::string& name, double v) {
  if (std::find(g.inputs.begin(), g.inputs.end(), name) == g.inputs.end())
    throw InputError("--value " + name + ": " + no_input(g, name));
  TensorInfo& t = g.tensor(name);
  if (t.kind != ValueKind::tensor || t.dtype == DType::string)
    throw InputError("--value " + name + ": input '" + name + "' is not a numeric tensor");
  if (!t.has_shape) {
    t.has_shape = true;
    t.shape.clear();
  }
  const int64_t e = t.num_elements();
  if (e != 1)
    throw InputError("--value " + name + ": input '" + name + "' " + shape_text(t.shape) +
                     " is not a single value (use --shape to bind its dims)");
  if (!is_float(t.dtype) && !(v >= -9.0e18 && v <= 9.0e18))
    throw InputError("--value " + name + ": " + std::to_string(v) + " is out of range for " + dtype_name(t.dtype));
  if (!is_float(t.dtype) && v != std::floor(v))
    throw InputError("--value " + name + ": input '" + name + "' is " + dtype_name(t.dtype) + ", got " +
                     std::to_string(v));
  if (t.dtype == DType::boolean) v = v != 0 ? 1 : 0;
  shape_rules::set_numbers(t, {v});
}

// Names that say what a dim is (case-insensitive): batch, batch_size, ...; seq, seq_len,
// sequence_length, ... (not past_ / total_ lengths).
std::string lower_name(const std::string& n) {
  std::string l = n;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return l;
}
bool batch_like(const std::string& n) {
  const std::string l = lower_name(n);
  return l == "batch" || l == "batch_size" || l == "batchsize" || l == "bs" || l == "batch_dim";
}
bool sequence_like(const std::string& n) {
  const std::string l = lower_name(n);
  return l == "seq" || l == "seq_len" || l == "seqlen" || l == "seq_length" || l == "sequence" ||
         l == "sequence_len" || l == "sequence_length" || l == "sequencelength";
}

// Replaces every unknown input dim: a symbolic one by its value in `values`, an unnamed first
// or second one by --batch / --seq (setting `batch_used` / `seq_used`). Throws InputError
// listing the dims left unbound and the --shape line that would bind each input.
void bind_input_dims(Graph& graph, const DimBindings& b, const std::map<std::string, int64_t>& values,
                     bool& batch_used, bool& seq_used, const std::string& hint) {
  std::vector<std::string> unbound;  // "'x' axis 0 (unnamed)"
  std::vector<std::string> lines;    // the --shape line that binds each input
  for (const auto& in : graph.inputs) {
    TensorInfo& t = graph.tensor(in);
    if (!t.has_shape) continue;
    bool open = false;
    for (size_t axis = 0; axis < t.shape.size(); ++axis) {
      Dim& d = t.shape[axis];
      if (d.known()) continue;
      if (!d.param.empty()) {
        auto it = values.find(d.param);
        if (it != values.end()) {
          d = Dim::of(it->second);
          continue;
        }
      } else if (axis == 0 && b.batch > 0) {
        d = Dim::of(b.batch);
        batch_used = true;
        continue;
      } else if (axis == 1 && b.seq > 0) {
        d = Dim::of(b.seq);
        seq_used = true;
        continue;
      }
      open = true;
      unbound.push_back("'" + in + "' axis " + std::to_string(axis) +
                        (d.param.empty() ? " (unnamed)" : " ('" + d.param + "')"));
    }
    if (!open) continue;
    std::string line = "--shape " + in + "=";
    for (size_t axis = 0; axis < t.shape.size(); ++axis)
      line += (axis ? "x" : "") + (t.shape[axis].known() ? std::to_string(t.shape[axis].value) : std::string("N"));
    lines.push_back(line);
  }
  if (!unbound.empty())
    throw InputError("unbound input dims: " + list_text(unbound) +
                     " (bind them with --batch, --seq, --dim NAME=VALUE or " + list_text(lines) + ")" +
                     (hint.empty() ? "" : "; " + hint));
}

// --batch / --seq where they bound a dim, else a bound symbolic dim named like one.
BoundDims bound_dims(const DimBindings& b, bool batch_used, bool seq_used, const std::map<std::string, int64_t>& values) {
  auto named = [&](bool (*like)(const std::string&)) -> int64_t {
    for (const auto& [name, v] : values)
      if (like(name)) return v;
    return 0;
  };
  return BoundDims{b.batch > 0 && batch_used ? b.batch : named(batch_like), b.seq > 0 && seq_used ? b.seq : named(sequence_like)};
}

}  // namespace

std::vector<std::string> bind_dims(Graph& graph, const DimBindings& b, BoundDims* bound) {
  for (const auto& [name, v] : b.named)
    if (v < 0) throw InputError("--dim " + name + "=" + std::to_string(v) + ": dims must be non-negative");
  if (b.batch == 0 || b.batch < -1) throw InputError("--batch must be a positive integer");
  if (b.seq == 0 || b.seq < -1) throw InputError("--seq must be a positive integer");
  std::vector<std::string> warnings;

  // --dim names that no input dim carries (checked on the inputs as loaded).
  std::set<std::string> params;
  for (const auto& in : graph.inputs)
    if (const TensorInfo* t = graph.find(in); t && t->has_shape)
      for (const auto& d : t->shape)
        if (!d.known() && !d.param.empty()) params.insert(d.param);

  // --shape first: it fixes whole inputs, and the symbolic names it sets bind other inputs.
  std::map<std::string, int64_t> values = b.named;
  std::map<std::string, int64_t> from_shapes;
  for (const auto& [name, dims] : b.shapes) apply_shape(graph, name, dims, from_shapes, warnings);
  for (const auto& [name, v] : from_shapes) {
    auto it = values.find(name);
    if (it != values.end() && it->second != v)
      throw InputError("--dim " + name + "=" + std::to_string(it->second) + " conflicts with --shape, which sets '" +
                       name + "' to " + std::to_string(v));
    values[name] = v;
  }

  // The first and second distinct symbolic names left on the inputs are batch and sequence
  // unless --dim names them explicitly.
  std::vector<std::string> order;
  for (const auto& in : graph.inputs) {
    const TensorInfo* t = graph.find(in);
    if (!t || !t->has_shape) continue;
    for (const auto& d : t->shape)
      if (!d.known() && !d.param.empty() && std::find(order.begin(), order.end(), d.param) == order.end())
        order.push_back(d.param);
  }
  size_t next = 0;
  // Binds the next symbolic name no flag named; returns it ("" when none is left).
  auto assign_next = [&](int64_t v) {
    while (next < order.size() && values.count(order[next])) ++next;
    if (next >= order.size()) return std::string();
    values[order[next]] = v;
    return order[next++];
  };
  // --batch (--seq) given with --dim naming the dim it takes by position and by name (the
  // first symbolic dim, named like a batch): both bind that dim, so their values must agree;
  // otherwise the flag would move on to the next dim, a sequence length bound by --batch.
  auto named_too = [&](int64_t v, size_t slot, const char* flag, bool (*like)(const std::string&)) {
    if (v <= 0 || slot >= order.size() || !like(order[slot])) return std::string();
    const auto it = b.named.find(order[slot]);
    if (it == b.named.end()) return std::string();
    if (it->second != v)
      throw InputError(std::string(flag) + " " + std::to_string(v) + " and --dim " + it->first + "=" +
                       std::to_string(it->second) + " both bind '" + it->first + "'; give one");
    return it->first;
  };
  std::string batch_name = named_too(b.batch, 0, "--batch", batch_like);
  if (batch_name.empty() && b.batch > 0) batch_name = assign_next(b.batch);
  std::string seq_name = named_too(b.seq, 1, "--seq", sequence_like);
  if (seq_name.empty() && b.seq > 0) seq_name = assign_next(b.seq);
  bool batch_used = !batch_name.empty(), seq_used = !seq_name.empty();
  // --batch / --seq take the first and second symbolic names by position (the CLI contract);
  // say so when another input dim is named for the flag and stays for --dim.
  std::string hint;
  auto named_for = [&](const std::string& bound, const char* flag, const char* which, bool (*like)(const std::string&)) {
    if (bound.empty() || like(bound)) return;
    for (const auto& name : order)
      if (like(name) && !b.named.count(name)) {
        hint += std::string(hint.empty() ? "" : "; ") + flag + " bound '" + bound + "' (the " + which +
                " symbolic input dim), not '" + name + "': --dim " + name + "=N binds a dim by name";
        return;
      }
  };
  named_for(batch_name, "--batch", "first", batch_like);
  named_for(seq_name, "--seq", "second", sequence_like);

  bind_input_dims(graph, b, values, batch_used, seq_used, hint);
  if (!hint.empty()) warnings.push_back(hint);

  for (const auto& [name, v] : b.values) apply_value(graph, name, v);

  auto nothing = [&](const std::string& flag) {
    std::vector<std::string> shapes;
    for (const auto& in : graph.inputs)
      if (const TensorInfo* t = graph.find(in); t && t->has_shape) shapes.push_back(in + " " + shape_text(t->shape));
    warnings.push_back(flag + " binds no input dim: no symbolic or unknown dim is left for it (inputs: " +
                       (shapes.empty() ? "none" : list_text(shapes)) + "); --shape NAME=DIMS sets any input's dims");
  };
  if (bound) *bound = bound_dims(b, batch_used, seq_used, values);
  if (b.batch > 0 && !batch_used) nothing("--batch " + std::to_string(b.batch));
  if (b.seq > 0 && !seq_used) nothing("--seq " + std::to_string(b.seq));
  for (const auto& [name, v] : b.named)
    if (!params.count(name)) {
      std::vector<std::string> p(params.begin(), params.end());
      warnings.push_back("--dim " + name + "=" + std::to_string(v) + " binds no input dim: no input has a dim named '" +
                         name + "' (symbolic input dims: " + (p.empty() ? "none" : list_text(p)) + ")");
    }
  return warnings;
}

}  // namespace neusight
