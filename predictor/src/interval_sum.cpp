// interval_sum.cpp - the 80% interval of a sum of one GPU's kernel latencies (predictor.h).
#include <algorithm>
#include <cmath>

#include "neusight/predictor.h"

namespace neusight {

void IntervalSum::add(const Prediction& p, double weight) {
  if (!(weight > 0)) return;
  latency_ms_ += weight * p.latency_ms;
  Distinct& d = distinct_[{p.latency_ms, p.low_ms(), p.high_ms()}];
  d.latency_ms += weight * p.latency_ms;
  d.low_dev += weight * std::max(0.0, p.latency_ms - p.low_ms());
  d.high_dev += weight * std::max(0.0, p.high_ms() - p.latency_ms);
}

double IntervalSum::deviation(bool upper, double rho) const {
  rho = std::clamp(rho, 0.0, 1.0);
  double sum = 0, squares = 0;
  for (const auto& [key, d] : distinct_) {
    const double v = upper ? d.high_dev : d.low_dev;
    sum += v;
    squares += v * v;
  }
  return std::sqrt(std::max(0.0, (1 - rho) * squares + rho * sum * sum));
}

// The lower deviation is at most the sum of the kernels' own (rho = 1), so the bound stays at
// or above the sum of their lower bounds, which are positive.
double IntervalSum::low_ms(double rho) const { return latency_ms_ - deviation(false, rho); }
double IntervalSum::high_ms(double rho) const { return latency_ms_ + deviation(true, rho); }

SpeedupInterval gpu_speedup_interval(double a, double a_low, double a_high, double b, double b_low, double b_high) {
  SpeedupInterval s;
  if (!(a > 0) || !(b > 0)) return s;
  s.speedup = s.low = s.high = a / b;
  // Each side's log deviation, 0 where it has no interval.
  auto dev = [](double from, double to) { return from > 0 && to > 0 ? std::fabs(std::log(to / from)) : 0.0; };
  s.high = s.speedup * std::exp(std::hypot(dev(a, a_high), dev(b, b_low)));
  s.low = s.speedup * std::exp(-std::hypot(dev(a, a_low), dev(b, b_high)));
  return s;
}

RatioInterval ratio_interval(const IntervalSum& a, const IntervalSum& b, double rho) {
  RatioInterval r;
  if (!(a.latency_ms() > 0) || !(b.latency_ms() > 0)) return r;
  r.ratio = r.low = r.high = a.latency_ms() / b.latency_ms();
  rho = std::clamp(rho, 0.0, 1.0);
  // Each distinct prediction's log half-width, weighted by its share of a less its share of b.
  std::map<IntervalSum::Key, double> c;
  auto share = [&](const IntervalSum& s, double sign) {
    for (const auto& [key, d] : s.distinct()) {
      const auto& [ms, low, high] = key;
      if (!(low > 0) || !(high > low)) continue;
      c[key] += sign * (d.latency_ms / s.latency_ms()) * 0.5 * std::log(high / low);
    }
  };
  share(a, 1);
  share(b, -1);
  double sum = 0, squares = 0;
  for (const auto& [key, v] : c) {
    sum += v;
    squares += v * v;
  }
  const double dev = std::sqrt(std::max(0.0, (1 - rho) * squares + rho * sum * sum));
  r.low = r.ratio * std::exp(-dev);
  r.high = r.ratio * std::exp(dev);
  return r;
}

}  // namespace neusight
