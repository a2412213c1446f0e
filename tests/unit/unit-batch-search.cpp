// unit-batch-search.cpp - the largest batch that meets a target (api/src/batch_search.h):
// the answer bisection gives, in fewer probes where a score says how far each batch is.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <set>
#include <string>

#include "batch_search.h"

namespace neusight {
namespace {

// A time per token that grows with the batch: affine, convex, or with the steps tiles make.
struct Curve {
  double a, b, c, step;
  double at(int64_t batch) const {
    const double x = double(batch);
    return a + b * x + c * x * x + (step > 0 ? step * std::floor(x / 64) : 0);
  }
};

struct Search {
  int64_t batch = 0;
  int probes = 0;
  std::set<int64_t> seen;
};

Search run(const Curve& f, double target, int64_t cap, BatchBracket bracket, bool scored) {
  Search s;
  auto at = [&](int64_t batch) {
    ++s.probes;
    s.seen.insert(batch);
    Report r;
    r.e2e_latency_ms = f.at(batch);
    r.model_name = std::to_string(batch);  // which batch the report is of
    return r;
  };
  auto meets = [&](const Report& r) { return r.e2e_latency_ms <= target; };
  auto missed = [&](int64_t batch, const Report&) { CHECK(batch > 1); };
  Report best = at(1);
  s.probes = 0;
  s.seen.clear();
  REQUIRE(meets(best));
  if (scored)
    s.batch = largest_batch_meeting(best, cap, bracket, at, meets, missed,
                                    [&](const Report& r) { return r.e2e_latency_ms / target; });
  else
    s.batch = largest_batch_meeting(best, cap, bracket, at, meets, missed);
  CHECK(best.model_name == std::to_string(s.batch));
  return s;
}

}  // namespace

TEST_CASE("batch search: the largest batch that meets the target, scored or bisected, from a cap or by doubling") {
  std::mt19937_64 g(7);
  std::uniform_real_distribution<double> u(0, 1);
  int scored_probes = 0, bisect_probes = 0, cases = 0;
  for (int i = 0; i < 400; ++i) {
    const Curve f{1 + 10 * u(g), 0.01 + u(g), i % 3 == 1 ? 1e-4 * u(g) : 0, i % 3 == 2 ? 2 * u(g) : 0};
    const int64_t cap = 2 + static_cast<int64_t>(4000 * u(g));
    const double target = f.at(1) + (f.at(cap) - f.at(1)) * 1.2 * u(g);
    int64_t truth = 1;
    while (truth < cap && f.at(truth + 1) <= target) ++truth;
    for (BatchBracket bracket : {BatchBracket::kFromCap, BatchBracket::kDouble}) {
      CAPTURE(i);
      const Search bisected = run(f, target, cap, bracket, false);
      const Search scored = run(f, target, cap, bracket, true);
      CHECK(bisected.batch == truth);
      CHECK(scored.batch == truth);
      // Never more than about twice bisection's probes.
      CHECK(scored.probes <= 2 * bisected.probes + 2);
      CHECK(scored.seen.count(1) == 0);  // batch 1 is given, never probed again
      scored_probes += scored.probes;
      bisect_probes += bisected.probes;
      ++cases;
    }
  }
  MESSAGE("probes per search: scored " << double(scored_probes) / cases << ", bisection "
                                       << double(bisect_probes) / cases);
  // The scored search takes fewer probes overall.
  CHECK(scored_probes * 3 < bisect_probes * 2);
}

}  // namespace neusight
