// roofline.cpp - the plain roofline: the bound every prediction respects.
#include <algorithm>

#include "neusight/precision.h"
#include "neusight/predictor.h"

namespace neusight {

double roofline_ms(const Kernel& k, const Gpu& gpu) {
  // GEMMs at the rate their math runs at (precision.h): FP16 on a P100 or BF16 on a V100 / T4
  // at the FP32 SIMT rate, not at a tensor-core or 2x-SIMT peak they cannot use.
  const double peak = math_peak_gflops(k, gpu) * 1e9;
  const double bw = gpu.mem_bw_gbps * 1e9;              // B/s
  if (k.cls == KernelClass::unknown || k.cls == KernelClass::collective) return 0;
  const double t_compute = peak > 0 ? k.flops / peak : 0;
  const double t_memory = bw > 0 ? k.bytes / bw : 0;
  return std::max(t_compute, t_memory) * 1e3;
}

namespace {

class RooflinePredictor final : public Predictor {
 public:
  std::vector<Prediction> predict(const std::vector<Kernel>& kernels, const std::vector<Tiling>&,
                                  const Gpu& gpu) const override {
    std::vector<Prediction> out(kernels.size());
    for (size_t i = 0; i < kernels.size(); ++i) {
      const Kernel& k = kernels[i];
      Prediction& p = out[i];
      p.roofline_ms = roofline_ms(k, gpu);
      p.latency_ms = p.latency_low_ms = p.latency_high_ms = p.roofline_ms;
      p.utilization = p.latency_ms > 0 ? 1.0 : 0.0;
      const double peak = (k.cls == KernelClass::gemm ? gpu.gemm_peak_gflops(k.dtype) : gpu.peak_gflops(k.dtype)) * 1e9;
      const double bw = gpu.mem_bw_gbps * 1e9;
      p.compute_bound = k.flops / peak >= k.bytes / bw;
    }
    return out;
  }
  std::string name() const override { return "roofline"; }
};

}  // namespace

std::unique_ptr<Predictor> make_roofline_predictor() { return std::make_unique<RooflinePredictor>(); }

}  // namespace neusight
