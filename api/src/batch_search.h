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
#include <cstdint>
#include <utility>

#include "neusight/report.h"

namespace neusight {

// Bracketing: kDouble doubles from batch 1 up to `cap` until a batch misses; kFromCap probes
// `cap` first (a bound known to miss or be the answer). Then bisection between the last batch
// that meets the target and the first that does not.
enum class BatchBracket { kDouble, kFromCap };

template <class At, class Meets, class Missed>
int64_t largest_batch_meeting(Report& best, int64_t cap, BatchBracket bracket, At&& at, Meets&& meets,
                              Missed&& missed) {
  int64_t lo = 1, hi = bracket == BatchBracket::kDouble ? 0 : cap + 1;  // hi 0: no miss yet
  auto probe = [&](int64_t batch) {
    Report r = at(batch);
    if (meets(r)) {
      lo = batch;
      best = std::move(r);
    } else {
      hi = batch;
      missed(batch, r);
    }
  };
  if (bracket == BatchBracket::kDouble)
    while (hi == 0 && lo < cap) probe(std::min(lo * 2, cap));
  else if (cap > 1)
    probe(cap);
  while (hi > 0 && hi - lo > 1) probe(lo + (hi - lo) / 2);
  return lo;
}

}  // namespace neusight
