// batch_search.h - the largest batch that meets a target (api-internal): --latency-slo
// (analyze.cpp) and --tpot-slo (generate.cpp) search the same way and differ in how they
// bracket it.
//
// Takes: batch 1's report (which meets the target), an upper bound, how to bracket, and three
// callables: at(batch) -> Report, meets(report) -> bool, missed(batch, report) (each batch
// probed that does not meet it; the last one is the nearest above the answer).
// Gives: the largest batch found to meet the target; `best` holds its report.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "neusight/report.h"

namespace neusight {

// Bracketing: kDouble doubles from batch 1 up to `cap` until a batch misses; kFromCap probes
// `cap` first (a bound known to miss or be the answer). Then the bracket between the last batch
// that meets the target and the first that does not is narrowed to adjacent batches.
//
// `score(report)`, when given: how far a batch is from its target as one number that rises
// with the batch, at most 1 where the target is met (the slowest time over its target, say).
// The next probe is then where the line through the bracket's two scores crosses 1 (regula
// falsi, as times grow about linearly with the batch), which finds the answer in a few probes,
// and never in more than about twice bisection's. Without it: bisection. Either way every
// probe lies strictly inside the bracket, and `meets` alone decides.
enum class BatchBracket { kDouble, kFromCap };

template <class At, class Meets, class Missed, class Score = std::nullptr_t>
int64_t largest_batch_meeting(Report& best, int64_t cap, BatchBracket bracket, At&& at, Meets&& meets,
                              Missed&& missed, Score&& score = nullptr) {
  constexpr bool kScored = !std::is_same_v<std::decay_t<Score>, std::nullptr_t>;
  int64_t lo = 1, hi = bracket == BatchBracket::kDouble ? 0 : cap + 1;  // hi 0: no miss yet
  // The scores of the bracket's two ends (a probe sets the high end before the search narrows).
  double s_lo = 0, s_hi = 0;
  if constexpr (kScored) s_lo = score(best);
  auto probe = [&](int64_t batch) {
    Report r = at(batch);
    [[maybe_unused]] double s = 0;
    if constexpr (kScored) s = score(r);
    if (meets(r)) {
      lo = batch;
      s_lo = s;
      best = std::move(r);
    } else {
      hi = batch;
      s_hi = s;
      missed(batch, r);
    }
  };
  if (bracket == BatchBracket::kDouble)
    while (hi == 0 && lo < cap) probe(std::min(lo * 2, cap));
  else if (cap > 1)
    probe(cap);
  // Regula falsi with the Illinois step: a side kept twice in a row has its score moved half
  // way to 1, so a curved score cannot pin the probes to one side. Past twice the probes
  // bisection would take, bisection.
  int kept = 0;  // > 0: the low side kept that many probes in a row; < 0: the high side
  int budget = 0;
  for (int64_t w = hi - lo; w > 1; w = (w + 1) / 2) budget += 2;
  while (hi > 0 && hi - lo > 1) {
    int64_t next = lo + (hi - lo) / 2;
    if (kScored && budget-- > 0 && s_lo <= 1 && s_hi > 1) {
      const double x = double(lo) + (1 - s_lo) * double(hi - lo) / (s_hi - s_lo);
      next = std::clamp<int64_t>(static_cast<int64_t>(x), lo + 1, hi - 1);
    }
    const int64_t was_lo = lo;
    probe(next);
    kept = lo != was_lo ? (kept < 0 ? kept - 1 : -1) : (kept > 0 ? kept + 1 : 1);
    if (kept <= -2) s_hi = 1 + (s_hi - 1) / 2;
    if (kept >= 2) s_lo = 1 - (1 - s_lo) / 2;
  }
  return lo;
}

}  // namespace neusight
