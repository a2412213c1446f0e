// interval_sum.cpp - the 80% interval of a sum of one GPU's kernel latencies (predictor.h).
#include <algorithm>
#include <cmath>

#include "neusight/predictor.h"

namespace neusight {

void IntervalSum::add(const Prediction& p) {
  latency_ms_ += p.latency_ms;
  auto& d = distinct_[{p.latency_ms, p.low_ms(), p.high_ms()}];
  d.first += std::max(0.0, p.latency_ms - p.low_ms());
  d.second += std::max(0.0, p.high_ms() - p.latency_ms);
}

double IntervalSum::deviation(bool upper, double rho) const {
  rho = std::clamp(rho, 0.0, 1.0);
  double sum = 0, squares = 0;
  for (const auto& [key, d] : distinct_) {
    const double v = upper ? d.second : d.first;
    sum += v;
    squares += v * v;
  }
  return std::sqrt(std::max(0.0, (1 - rho) * squares + rho * sum * sum));
}

// The lower deviation is at most the sum of the kernels' own (rho = 1), so the bound stays at
// or above the sum of their lower bounds, which are positive.
double IntervalSum::low_ms(double rho) const { return latency_ms_ - deviation(false, rho); }
double IntervalSum::high_ms(double rho) const { return latency_ms_ + deviation(true, rho); }

}  // namespace neusight
