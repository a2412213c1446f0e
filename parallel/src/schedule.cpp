// schedule.cpp - pipeline schedules (GPipe, 1F1B) simulated task by task, and the bubble.
#include <algorithm>
#include <string>

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


// One microbatch-chunk step of a GPU: a forward or backward of microbatch `mb` on virtual
// stage `stage`.
struct Step {
  bool forward;
  int mb, stage;
};

// Runs each GPU's steps in its order (GPU d holds the stages s with s mod pp = d): a stage's
// forward waits for the stage before it, its backward for its forward and the stage after it,
// each hop `hop_ms` away. The timing per GPU.
PipelineTiming run_schedule(const std::vector<std::vector<Step>>& order, const std::vector<double>& fwd,
                            const std::vector<double>& bwd, int m, double hop_ms, const char* who) {
  const int pp = static_cast<int>(order.size()), stages = static_cast<int>(fwd.size());
  const double undone = -1;
  std::vector<std::vector<double>> end_f(static_cast<size_t>(stages), std::vector<double>(static_cast<size_t>(m), undone));
  std::vector<std::vector<double>> end_b = end_f;
  std::vector<size_t> next(static_cast<size_t>(pp), 0);
  std::vector<double> free_at(static_cast<size_t>(pp), 0);
  size_t remaining = 0;
  for (const auto& o : order) remaining += o.size();
  while (remaining > 0) {
    bool progress = false;
    for (size_t d = 0; d < order.size(); ++d) {
      while (next[d] < order[d].size()) {
        const Step t = order[d][next[d]];
        const auto s = static_cast<size_t>(t.stage), mb = static_cast<size_t>(t.mb);
        double ready = 0;
        if (t.forward) {
          if (t.stage > 0) {
            if (end_f[s - 1][mb] < 0) break;
            ready = end_f[s - 1][mb] + hop_ms;
          }
        } else {
          if (end_f[s][mb] < 0) break;
          ready = end_f[s][mb];
          if (t.stage < stages - 1) {
            if (end_b[s + 1][mb] < 0) break;
            ready = std::max(ready, end_b[s + 1][mb] + hop_ms);
          }
        }
        const double start = std::max(ready, free_at[d]);
        const double end = start + (t.forward ? fwd[s] : bwd[s]);
        (t.forward ? end_f : end_b)[s][mb] = end;
        free_at[d] = end;
        ++next[d];
        --remaining;
        progress = true;
      }
    }
    if (!progress) throw RuntimeError(std::string(who) + ": schedule deadlocked");
  }
  PipelineTiming r;
  double busiest = 0;
  for (int d = 0; d < pp; ++d) {
    double busy = 0;
    for (int st = d; st < stages; st += pp) busy += m * (fwd[static_cast<size_t>(st)] + bwd[static_cast<size_t>(st)]);
    r.stage_busy_ms.push_back(busy);
    r.stage_end_ms.push_back(free_at[static_cast<size_t>(d)]);
    r.span_ms = std::max(r.span_ms, free_at[static_cast<size_t>(d)]);
    busiest = std::max(busiest, busy);
  }
  r.bubble_ms = std::max(0.0, r.span_ms - busiest);
  return r;
}

}  // namespace

PipelineTiming simulate_pipeline(const std::vector<double>& fwd, const std::vector<double>& bwd, int m,
                                 PipelineSchedule schedule, double hop_ms) {
  const int p = static_cast<int>(fwd.size());
  if (p == 0 || bwd.size() != fwd.size() || m < 1) throw RuntimeError("simulate_pipeline: bad stage list");
  std::vector<std::vector<Step>> order(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s)
    for (const Task& t : stage_order(s, p, m, schedule)) order[static_cast<size_t>(s)].push_back({t.forward, t.mb, s});
  return run_schedule(order, fwd, bwd, m, hop_ms, "simulate_pipeline");
}

}  // namespace neusight

namespace neusight {

int interleaved_in_flight(int gpu, int pp, int vp, int m) { return std::min((pp - gpu - 1) * 2 + (vp - 1) * pp + 1, m * vp); }

PipelineTiming simulate_interleaved(const std::vector<double>& fwd, const std::vector<double>& bwd, int pp, int m,
                                    double hop_ms) {
  const int stages = static_cast<int>(fwd.size());
  if (pp < 1 || stages == 0 || stages % pp != 0 || bwd.size() != fwd.size() || m < 1)
    throw RuntimeError("simulate_interleaved: bad stage list");
  const int vp = stages / pp, total = m * vp;
  auto step = [&](int d, int k, bool forward) {
    int chunk = (k % (pp * vp)) / pp;
    if (!forward) chunk = vp - 1 - chunk;
    return Step{forward, (k / (pp * vp)) * pp + k % pp, chunk * pp + d};
  };
  std::vector<std::vector<Step>> order(static_cast<size_t>(pp));
  for (int d = 0; d < pp; ++d) {
    const int warmup = std::min((pp - d - 1) * 2 + (vp - 1) * pp, total);
    auto& o = order[static_cast<size_t>(d)];
    for (int k = 0; k < warmup; ++k) o.push_back(step(d, k, true));
    for (int i = 0; i < total - warmup; ++i) {
      o.push_back(step(d, warmup + i, true));
      o.push_back(step(d, i, false));
    }
    for (int k = total - warmup; k < total; ++k) o.push_back(step(d, k, false));
  }
  return run_schedule(order, fwd, bwd, m, hop_ms, "simulate_interleaved");
}

OverlapTiming overlap_sharded(const std::vector<double>& step_ms, const std::vector<double>& need_bytes,
                              const std::vector<double>& grad_bytes, double gather_bucket_bytes,
                              double grad_bucket_bytes, const std::function<double(double)>& gather_ms,
                              const std::function<double(double)>& reduce_ms) {
  // The gather buckets: their bytes and first step; each step's bucket (-1: needs none).
  std::vector<double> bucket_bytes;
  std::vector<size_t> first_step;
  std::vector<int> bucket_of(step_ms.size(), -1);
  bool open = false;
  for (size_t i = 0; i < step_ms.size() && i < need_bytes.size(); ++i) {
    if (!(need_bytes[i] > 0)) continue;
    if (!open) {
      bucket_bytes.push_back(0);
      first_step.push_back(i);
      open = true;
    }
    bucket_bytes.back() += need_bytes[i];
    bucket_of[i] = static_cast<int>(bucket_bytes.size()) - 1;
    if (bucket_bytes.back() >= gather_bucket_bytes) open = false;
  }
  OverlapTiming o;
  for (size_t b = 0; b + 1 < bucket_bytes.size(); ++b)
    o.live_gather_bytes = std::max(o.live_gather_bytes, bucket_bytes[b] + bucket_bytes[b + 1]);
  if (bucket_bytes.size() == 1) o.live_gather_bytes = bucket_bytes[0];
  double t = 0, link_free = 0, pending = 0, compute = 0;
  std::vector<double> gathered(bucket_bytes.size(), 0);  // when each bucket's gather ends
  auto transfer = [&](double ready, double d) {
    link_free = std::max(ready, link_free) + d;
    o.comm_ms += d;
    return link_free;
  };
  auto gather = [&](size_t b, double ready) {
    const double d = gather_ms(bucket_bytes[b]);
    gathered[b] = transfer(ready, d);
    o.gather_ms += d;
  };
  auto reduce = [&](double ready) {
    transfer(ready, reduce_ms(pending));
    ++o.buckets;
    pending = 0;
  };
  if (!bucket_bytes.empty()) gather(0, 0);
  for (size_t i = 0; i < step_ms.size(); ++i) {
    const int b = bucket_of[i];
    if (b >= 0 && first_step[static_cast<size_t>(b)] == i) {
      t = std::max(t, gathered[static_cast<size_t>(b)]);
      if (static_cast<size_t>(b) + 1 < bucket_bytes.size()) gather(static_cast<size_t>(b) + 1, t);
    }
    t += step_ms[i];
    compute += step_ms[i];
    pending += i < grad_bytes.size() ? grad_bytes[i] : 0;
    if (pending > 0 && pending >= grad_bucket_bytes) reduce(t);
  }
  if (pending > 0) reduce(t);
  o.end_ms = std::max(t, link_free);
  o.exposed_ms = o.end_ms - compute;
  return o;
}

}  // namespace neusight
