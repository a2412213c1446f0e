// op_registry.h - per-op rules keyed by (domain, op type, opset), as onnxruntime keys its
// kernel registry. Shape inference and lowering each keep one OpRegistry of their rules.
//
// A rule registered since version V of its domain serves a model whose opset for that domain
// is V or later, up to the next registration of the same op: Softmax since 1 (the input is
// flattened from `axis` on) and since 13 (one axis) are two rules, and an opset-11 model gets
// the first. Domain "" is ai.onnx ("ai.onnx" is accepted as a spelling of it). An op of
// another domain with no rule there falls back to the ai.onnx rule of the same name (contrib
// domains re-register many standard ops, e.g. com.microsoft's Gelu).
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace neusight {

template <class Rule>
class OpRegistry {
 public:
  // Registers `rule` for `op` of `domain` from opset `since` on (1: every opset).
  void add(const std::string& domain, const std::string& op, Rule rule, int64_t since = 1) {
    table_[key(domain, op)][since] = std::move(rule);
  }

  // The rule registered from opset 1 under "Op" (ai.onnx) or "domain:Op": for tables written
  // as assignments (`r["Relu"] = ...`, `r["com.microsoft:FastGelu"] = ...`).
  Rule& operator[](const std::string& spelled) {
    const auto colon = spelled.rfind(':');
    if (colon == std::string::npos) return table_[key("", spelled)][1];
    return table_[key(spelled.substr(0, colon), spelled.substr(colon + 1))][1];
  }

  // The rule serving `op` of `domain` in a model whose opset for that domain is `opset`
  // (0 or below: the latest rule); nullptr when none (an opset older than every rule's
  // `since` included).
  const Rule* find(const std::string& domain, const std::string& op, int64_t opset) const {
    if (const Rule* r = find_exact(canonical(domain), op, opset)) return r;
    if (!canonical(domain).empty()) return find_exact("", op, 0);
    return nullptr;
  }

  bool contains(const std::string& domain, const std::string& op) const { return table_.count(key(domain, op)) > 0; }

  // Every registered (domain, op), sorted; versions() gives the opsets each rule starts at.
  std::vector<std::pair<std::string, std::string>> ops() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [k, versions] : table_) {
      const auto bar = k.find('\x1f');
      out.emplace_back(k.substr(0, bar), k.substr(bar + 1));
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  std::vector<int64_t> versions(const std::string& domain, const std::string& op) const {
    std::vector<int64_t> out;
    auto it = table_.find(key(domain, op));
    if (it != table_.end())
      for (const auto& [since, rule] : it->second) out.push_back(since);
    return out;
  }

  static std::string canonical(const std::string& domain) { return domain == "ai.onnx" ? std::string() : domain; }

 private:
  static std::string key(const std::string& domain, const std::string& op) { return canonical(domain) + '\x1f' + op; }

  const Rule* find_exact(const std::string& domain, const std::string& op, int64_t opset) const {
    auto it = table_.find(key(domain, op));
    if (it == table_.end() || it->second.empty()) return nullptr;
    const auto& versions = it->second;
    if (opset <= 0) return &versions.rbegin()->second;
    auto v = versions.upper_bound(opset);  // first rule newer than the model
    if (v == versions.begin()) return nullptr;
    return &std::prev(v)->second;
  }

  std::unordered_map<std::string, std::map<int64_t, Rule>> table_;
};

}  // namespace neusight
