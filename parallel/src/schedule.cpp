// schedule.cpp - pipeline schedules (GPipe, 1F1B) simulated task by task, and the bubble.
#include <algorithm>

#include "neusight/parallel.h"

namespace neusight {

double bubble_fraction(int pp, int microbatches) {
  if (pp < 1 || microbatches < 1) return 0;
  return double(pp - 1) / double(microbatches + pp - 1);
}

namespace {

struct Task {
  bool forward;
  int mb;
};

// The order one stage runs its forward (F) and backward (B) passes in.
std::vector<Task> stage_order(int stage, int stages, int m, PipelineSchedule schedule) {
  std::vector<Task> t;
  if (schedule == PipelineSchedule::gpipe) {
    for (int i = 0; i < m; ++i) t.push_back({true, i});
    for (int i = 0; i < m; ++i) t.push_back({false, i});
    return t;
  }
  // 1F1B (PipeDream-flush / Megatron non-interleaved): warm-up forwards, then one forward
  // and one backward alternately, then the remaining backwards.
  const int warmup = std::min(stages - 1 - stage, m);
  for (int i = 0; i < warmup; ++i) t.push_back({true, i});
  for (int i = 0; i < m - warmup; ++i) {
    t.push_back({true, warmup + i});
    t.push_back({false, i});
  }
  for (int i = m - warmup; i < m; ++i) t.push_back({false, i});
  return t;
}

}  // namespace

PipelineTiming simulate_pipeline(const std::vector<double>& fwd, const std::vector<double>& bwd, int m,
                                 PipelineSchedule schedule, double hop_ms) {
  const int p = static_cast<int>(fwd.size());
  if (p == 0 || bwd.size() != fwd.size() || m < 1) throw RuntimeError("simulate_pipeline: bad stage list");
  std::vector<std::vector<Task>> order(p);
  for (int s = 0; s < p; ++s) order[s] = stage_order(s, p, m, schedule);
  const double undone = -1;
  std::vector<std::vector<double>> end_f(p, std::vector<double>(m, undone)), end_b = end_f;
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0);
  size_t remaining = size_t(p) * 2 * m;
  while (remaining > 0) {
    bool progress = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < order[s].size()) {
        const Task t = order[s][next[s]];
        double ready = 0;
        if (t.forward) {
          if (s > 0) {
            if (end_f[s - 1][t.mb] < 0) break;
            ready = end_f[s - 1][t.mb] + hop_ms;
          }
        } else {
          if (end_f[s][t.mb] < 0) break;
          ready = end_f[s][t.mb];
          if (s < p - 1) {
            if (end_b[s + 1][t.mb] < 0) break;
            ready = std::max(ready, end_b[s + 1][t.mb] + hop_ms);
          }
        }
        const double start = std::max(ready, free_at[s]);
        const double end = start + (t.forward ? fwd[s] : bwd[s]);
        (t.forward ? end_f : end_b)[s][t.mb] = end;
        free_at[s] = end;
        ++next[s];
        --remaining;
        progress = true;
      }
    }
    if (!progress) throw RuntimeError("simulate_pipeline: schedule deadlocked");
  }
  PipelineTiming r;
  double busiest = 0;
  for (int s = 0; s < p; ++s) {
    r.stage_busy_ms.push_back(m * (fwd[s] + bwd[s]));
    r.stage_end_ms.push_back(free_at[s]);
    r.span_ms = std::max(r.span_ms, free_at[s]);
    busiest = std::max(busiest, r.stage_busy_ms.back());
  }
  r.bubble_ms = std::max(0.0, r.span_ms - busiest);
  return r;
}

}  // namespace neusight
