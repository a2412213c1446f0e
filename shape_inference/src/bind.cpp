// bind.cpp - bind symbolic input dims from --batch / --seq / --dim.
#include <algorithm>
#include <set>

#include "neusight/shape_inference.h"

namespace neusight {

void bind_dims(Graph& graph, const DimBindings& b) {
  for (const auto& [name, v] : b.named)
    if (v < 0) throw InputError("--dim " + name + "=" + std::to_string(v) + ": dims must be non-negative");
  if (b.batch == 0 || b.batch < -1) throw InputError("--batch must be a positive integer");
  if (b.seq == 0 || b.seq < -1) throw InputError("--seq must be a positive integer");

  // The first and second distinct symbolic names seen on the inputs are batch and sequence
  // unless --dim names them explicitly.
  std::map<std::string, int64_t> values = b.named;
  std::vector<std::string> order;
  for (const auto& in : graph.inputs) {
    const TensorInfo* t = graph.find(in);
    if (!t || !t->has_shape) continue;
    for (const auto& d : t->shape)
      if (!d.known() && !d.param.empty() &&
          std::find(order.begin(), order.end(), d.param) == order.end())
        order.push_back(d.param);
  }
  size_t next = 0;
  auto assign_next = [&](int64_t v) {
    while (next < order.size() && values.count(order[next])) ++next;
    if (next < order.size()) values[order[next++]] = v;
  };
  if (b.batch > 0) assign_next(b.batch);
  if (b.seq > 0) assign_next(b.seq);

  std::set<std::string> unbound;
  for (const auto& in : graph.inputs) {
    TensorInfo& t = graph.tensor(in);
    if (!t.has_shape) continue;
    for (auto& d : t.shape) {
      if (d.known()) continue;
      if (!d.param.empty()) {
        auto it = values.find(d.param);
        if (it != values.end()) d = Dim::of(it->second);
        else unbound.insert(d.param);
      } else {
        unbound.insert("?" + in);
      }
    }
  }
  if (!unbound.empty()) {
    std::string list;
    for (const auto& u : unbound) list += (list.empty() ? "" : ", ") + u;
    throw InputError("unbound symbolic dims: " + list +
                     " (bind them with --batch, --seq or --dim NAME=VALUE)");
  }
}

}  // namespace neusight
