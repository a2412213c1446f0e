// half_precision - prints how well FP16 (tensor-core) kernels are predicted.
//
// (1) DeepBench dense GEMMs (../shared/half-precision/deepbench_gemm.csv) on V100, T4, P100:
//     MAPE per GPU and precision (fp32 beside fp16), NeuSight predictor vs the plain roofline
//     at the dtype's peak.
// (2) Vidur's FP16 layer timings of LLMs on the A100 (../shared/half-precision/vidur_fp16/a100):
//     each layer's kernel derived from the model config (projections as GEMMs, norms,
//     activation, residual add, rotary embedding, embedding lookup), MAPE per layer type
//     against the median of the measured times. The A100 is never used for fitting anything.
// DeepBench convention: C[M x N] = A[M x K] B[K x N]; in the dataset's words output M x N,
// reduction K.
#include <algorithm>
#include <memory>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "neusight/dataset.h"
#include "neusight/neusight.h"
#include "neusight/neusight_model.h"
#include "neusight/precision.h"

using namespace neusight;

namespace {

// Errors of the NeuSight predictor in eager timing (its training data's convention), in the
// timing of the data being compared (kernel timing for DeepBench's GEMMs, called back to back
// from C++ with no framework between them, and for Vidur's profiler kernel durations;
// precision.h) and of the roofline.
struct Acc {
  double err = 0, dev = 0, roof = 0, ratio_log = 0, dev_ratio_log = 0;
  size_t n = 0;
  // The 80% interval of the prediction in the data's timing: rows measured inside it, and the
  // sum of log(high / low) (median-free summary: geo-mean width).
  size_t inside = 0, with_interval = 0;
  double log_width = 0;
  void add_interval(double low, double high, double meas) {
    if (!(high > 0) || !(low > 0)) return;
    ++with_interval;
    inside += meas >= low && meas <= high;
    log_width += std::log(high / low);
  }
  double coverage() const { return with_interval ? 100.0 * double(inside) / double(with_interval) : 0; }
  double width() const { return with_interval ? std::exp(log_width / double(with_interval)) : 0; }
  void add(double pred, double pred_dev, double roofl, double meas) {
    err += std::fabs(pred - meas) / meas;
    dev += std::fabs(pred_dev - meas) / meas;
    roof += std::fabs(roofl - meas) / meas;
    ratio_log += std::log(pred / meas);
    dev_ratio_log += std::log(pred_dev / meas);
    ++n;
  }
  void merge(const Acc& a) {
    err += a.err, dev += a.dev, roof += a.roof, ratio_log += a.ratio_log, dev_ratio_log += a.dev_ratio_log, n += a.n;
    inside += a.inside, with_interval += a.with_interval, log_width += a.log_width;
  }
  double mape() const { return n ? 100 * err / n : 0; }
  double dmape() const { return n ? 100 * dev / n : 0; }
  double rmape() const { return n ? 100 * roof / n : 0; }
  double gmean_ratio() const { return n ? std::exp(ratio_log / n) : 0; }
  double dev_gmean_ratio() const { return n ? std::exp(dev_ratio_log / n) : 0; }
};

std::vector<std::map<std::string, std::string>> read_csv(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    std::fprintf(stderr, "half_precision: cannot open %s\n", path.c_str());
    std::exit(1);
  }
  std::string line;
  std::getline(f, line);
  const auto header = split_csv_line(line);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(f, line)) {
    if (line.empty() || line == "\r") continue;
    const auto v = split_csv_line(line);
    if (v.size() != header.size()) continue;
    std::map<std::string, std::string> r;
    for (size_t i = 0; i < v.size(); ++i) r[header[i]] = v[i];
    rows.push_back(std::move(r));
  }
  return rows;
}

double dnum(const std::map<std::string, std::string>& r, const std::string& c) {
  auto it = r.find(c);
  return it == r.end() ? -1 : std::strtod(it->second.c_str(), nullptr);
}

std::string s(int64_t v) { return std::to_string(v); }

Kernel linear(int64_t m, int64_t reduction, int64_t out, const char* dtype) {
  return kernel_from_dataset("linear", {{"B", "1"}, {"M", s(m)}, {"N", s(reduction)}, {"K", s(out)}, {"dtype", dtype}});
}

// Streaming kernel over rows x cols elements: `reads` tensors read, `writes` written.
Kernel stream(KernelClass cls, const std::string& op, int64_t rows, int64_t cols, int reads, int writes,
              double flops_per_elem, double eb) {
  Kernel k;
  k.cls = cls;
  k.op = op;
  k.dtype = DType::f16;
  k.rows = rows;
  k.cols = cols;
  k.inputs = reads;
  const double e = double(rows) * double(cols);
  k.flops = flops_per_elem * e;
  k.bytes = eb * e * (reads + writes);
  return k;
}

struct Item {
  Kernel k;
  double meas;
  std::string group;
  int64_t tokens = 0;
  int launches = 1;  // identical kernels the timing covers, back to back
};

// The plain roofline at the dtype's spec-sheet peak: the GPU's FP16
// number for an FP16 GEMM even where the math cannot use it (P100: 2x SIMT rate, while cuBLAS
// accumulates in FP32). The product's roofline (roofline_ms) uses the rate the math runs at.
class DtypePeakRoofline final : public Predictor {
 public:
  std::vector<Prediction> predict(const std::vector<Kernel>& ks, const std::vector<Tiling>&, const Gpu& g) const override {
    std::vector<Prediction> out(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) {
      const Kernel& k = ks[i];
      const double peak = (k.cls == KernelClass::gemm ? g.gemm_peak_gflops(k.dtype) : g.peak_gflops(k.dtype)) * 1e9;
      const double t = std::max(peak > 0 ? k.flops / peak : 0.0, g.mem_bw_gbps > 0 ? k.bytes / (g.mem_bw_gbps * 1e9) : 0.0);
      out[i].latency_ms = out[i].roofline_ms = t * 1e3;
      out[i].utilization = 1;
    }
    return out;
  }
  std::string name() const override { return "roofline (dtype peak)"; }
};

FILE* g_dump = nullptr;  // --dump FILE: one CSV row per timing (for analysis)
const ModelSet* g_models = nullptr;

// MLP latency of a kernel and its fixed-cost part (the law evaluated with base_ms = 0).
std::pair<std::vector<double>, std::vector<double>> mlp_parts(const std::vector<Kernel>& ks, const std::vector<Tiling>& ts,
                                                             const Gpu& g) {
  std::vector<double> lat(ks.size(), 0), ov(ks.size(), 0);
  for (size_t i = 0; i < ks.size(); ++i) {
    UtilClass c;
    if (!util_class_of(ks[i], c) || ts[i].tiles <= 0) continue;
    TileFeatures f = tile_features(c, ks[i], ts[i], g);
    TileFeatures f0 = f;
    f0.base_ms = 0;
    const auto r = predict_latency_ms(g_models->classes[int(c)], {f, f0});
    lat[i] = r[0];
    ov[i] = r[1];
  }
  return {lat, ov};
}

void run(const std::vector<Item>& items, const Gpu& g, const Predictor& p, const Predictor& pd, const Predictor& rl,
         std::map<std::string, Acc>& acc, std::map<std::string, Acc>* by_tokens = nullptr) {
  std::vector<Kernel> ks, ks32;
  std::vector<Tiling> ts, ts32;
  for (const auto& it : items) {
    ks.push_back(it.k);
    ts.push_back(tile_kernel(it.k, g));
    Kernel k32 = it.k;
    k32.bytes = it.k.bytes * 4.0 / std::max(1, dtype_bits(it.k.dtype) / 8);
    k32.dtype = DType::f32;
    ks32.push_back(k32);
    ts32.push_back(tile_kernel(k32, g));
  }
  const auto pr = p.predict(ks, ts, g);
  const auto rr = rl.predict(ks, ts, g);
  const auto dr = pd.predict(ks, ts, g);
  const auto p32 = g_dump ? p.predict(ks32, ts32, g) : pr;
  std::pair<std::vector<double>, std::vector<double>> m32, m16;
  if (g_dump) {
    m32 = mlp_parts(ks32, ts32, g);
    m16 = mlp_parts(ks, ts, g);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    // A timing that covers several identical launches: their sum (the dump too).
    const double n = items[i].launches;
    const double pe = n * pr[i].latency_ms, pdv = n * dr[i].latency_ms, pro = n * rr[i].latency_ms;
    if (g_dump) {
      const Kernel& k = ks[i];
      const Tiling& t16 = pr[i].tiling ? *pr[i].tiling : ts[i];  // the tile priced
      const Tiling& t32 = p32[i].tiling ? *p32[i].tiling : ts32[i];
      std::fprintf(g_dump, "%s,%s,%s,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%.6g,%.6g,%.6g,%.6g,%.6g,%s,%lld,%lld,%s,%lld,%lld,%.6g,%.6g,%.6g,%.6g,%.6g\n",
                   g.alias().c_str(), items[i].group.c_str(), dtype_name(k.dtype), (long long)items[i].tokens,
                   (long long)k.gemm.batch, (long long)k.gemm.m, (long long)k.gemm.n, (long long)k.gemm.k,
                   (long long)k.rows, (long long)k.cols, items[i].meas, pe, pro,
                   p32[i].latency_ms, p32[i].roofline_ms, t16.tile.c_str(), (long long)t16.tiles,
                   (long long)t16.waves, t32.tile.c_str(), (long long)t32.tiles, (long long)t32.waves,
                   m32.first[i], m32.second[i], m16.first[i], m16.second[i], pdv);
    }
    acc[items[i].group].add(pe, pdv, pro, items[i].meas);
    acc[items[i].group].add_interval(n * dr[i].low_ms(), n * dr[i].high_ms(), items[i].meas);
    if (dr[i].compute_bound) acc[items[i].group + " compute-bound"].add(pe, pdv, pro, items[i].meas);
    if (by_tokens && items[i].tokens > 0) {
      const bool gemm = items[i].k.cls == KernelClass::gemm;
      const int64_t t = items[i].tokens;
      const char* bucket = t < 64 ? "1-63" : t < 512 ? "64-511" : t < 4096 ? "512-4095" : "4096+";
      (*by_tokens)[(gemm ? std::string("GEMMs") : items[i].group) + " tokens " + bucket].add(pe, pdv, pro,
                                                                                          items[i].meas);
      // Tiled GEMMs (more than the law's 16 tokens) by measured time: where the fixed time
      // (kGemmKernelFixedUs) weighs.
      if (gemm && t > 16) {
        const double us = items[i].meas * 1e3;
        const char* tb = us < 10 ? "<10 us" : us < 30 ? "10-30 us" : us < 100 ? "30-100 us" : "100+ us";
        (*by_tokens)[std::string("tiled GEMMs ") + tb].add(pe, pdv, pro, items[i].meas);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string shared = std::getenv("NEUSIGHT_SHARED_DIR") ? std::getenv("NEUSIGHT_SHARED_DIR") : NEUSIGHT_SHARED_DIR;
  std::string weights, dump_path;
  double port_weight = 1.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--port-weight" && i + 1 < argc) {
      port_weight = std::strtod(argv[++i], nullptr);
    } else if (a == "--dump" && i + 1 < argc) {
      dump_path = argv[++i];
      g_dump = std::fopen(dump_path.c_str(), "w");
      if (!g_dump) {
        std::fprintf(stderr, "half_precision: cannot write %s\n", argv[i]);
        return 1;
      }
      std::fprintf(g_dump, "gpu,group,dtype,tokens,batch,m,n,k,rows,cols,meas,pred,roof,pred32,roof32,tile,tiles,waves,tile32,tiles32,waves32,mlp32,ov32,mlp16,ov16,pred_device\n");
    } else if (a.rfind("-", 0) == 0) {
      std::fprintf(stderr, "usage: half_precision [--port-weight W] [--dump FILE] [WEIGHTS_DIR]\n"
                           "  (../shared from NEUSIGHT_SHARED_DIR or the build's default)\n");
      if (g_dump) {  // no partial dump
        std::fclose(g_dump);
        std::remove(dump_path.c_str());
      }
      return a == "--help" || a == "-h" ? 0 : 2;
    } else {
      weights = a;
    }
  }
  const std::string hp = shared + "/half-precision/";
  std::unique_ptr<Predictor> predictor;
  try {
    predictor = make_neusight_predictor(weights);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "half_precision: %s\n", e.what());
    if (g_dump) {  // no partial dump
      std::fclose(g_dump);
      std::remove(dump_path.c_str());
    }
    return 1;
  }
  // DeepBench calls cuBLAS back to back from C++: no framework's dispatch, kernel timing.
  auto device = make_neusight_predictor(weights, PrecisionOptions{Timing::kernel});
  // Vidur keeps profiler kernel durations: kernel timing (precision.h).
  auto kernel = make_neusight_predictor(weights, PrecisionOptions{Timing::kernel});
  // What-if: the tensor-core operand-port term (precision.h; --port-weight, default 1), kernel timing.
  PrecisionOptions port_options{Timing::kernel};
  port_options.operand_port_weight = port_weight;
  auto port = make_neusight_predictor(weights, port_options);
  std::map<std::string, Acc> port_acc;
  // What-if: tensor-core GEMMs on the tile cost model's choice alone (PrecisionOptions::
  // fastest_tile and fewer_sm_tilings off), kernel timing for both data sets.
  PrecisionOptions one_tile_device{Timing::kernel}, one_tile_kernel{Timing::kernel};
  one_tile_device.fastest_tile = one_tile_kernel.fastest_tile = false;
  one_tile_device.fewer_sm_tilings = one_tile_kernel.fewer_sm_tilings = false;
  auto one_tile_dev = make_neusight_predictor(weights, one_tile_device);
  auto one_tile_ker = make_neusight_predictor(weights, one_tile_kernel);
  std::map<std::string, Acc> one_tile_acc;
  std::map<std::string, Acc> interval_acc;  // the 80% interval's coverage, by data set
  const ModelSet models = load_model_set(weights.empty() ? data_dir() + "/weights" : weights);
  g_models = &models;
  auto roofline = std::make_unique<DtypePeakRoofline>();
  const GpuDatabase& db = GpuDatabase::builtin();

  // ---- (1) DeepBench ------------------------------------------------------------------
  // DeepBench ran V100 and P100 in SXM2 servers (its V100 FP16 rows reach 112 TFLOP/s, above
  // the PCIe card's 112 peak), so the SXM2 specs are used.
  const std::map<std::string, std::string> db_gpu = {
      {"Tesla V100", "v100-sxm2"}, {"Tesla T4", "t4"}, {"Tesla P100", "p100-sxm"}};
  std::map<std::string, std::vector<Item>> by_gpu;
  for (const auto& r : read_csv(hp + "deepbench_gemm.csv")) {
    const int64_t M = int64_t(dnum(r, "M")), N = int64_t(dnum(r, "N")), K = int64_t(dnum(r, "K"));
    const std::string prec = r.at("precision");
    Item it{linear(M, K, N, prec.c_str()), dnum(r, "time_ms"), prec};
    by_gpu[r.at("gpu")].push_back(it);
  }
  std::printf("DeepBench dense GEMMs: MAPE %% of NeuSight in eager / kernel timing / roofline at the dtype's peak,\n"
              "geo-mean pred/measured of eager and kernel timing. DeepBench times the device (cudaEvents over\n"
              "back-to-back calls); the NeuSight training data is PyTorch eager.\n");
  std::printf("%-12s %-10s %5s %34s %34s\n", "GPU", "spec used", "rows", "fp32", "fp16");
  Acc refit;  // compute-bound FP16 rows of the training GPUs with tensor cores (precision.h)
  for (const auto& [name, items] : by_gpu) {
    const Gpu g = db.resolve(db_gpu.at(name));
    std::map<std::string, Acc> acc;
    run(items, g, *predictor, *device, *roofline, acc);
    if (g.fp16_gflops > 0) refit.merge(acc["fp16 compute-bound"]);
    std::map<std::string, Acc> pa;
    FILE* dump = std::exchange(g_dump, nullptr);  // the what-ifs are not dumped
    run(items, g, *port, *port, *roofline, pa);
    port_acc[name] = pa["fp16"];
    std::map<std::string, Acc> oa;
    run(items, g, *one_tile_dev, *one_tile_dev, *roofline, oa);
    g_dump = dump;
    if (g.fp16_gflops > 0) one_tile_acc[name] = oa["fp16"];
    const Acc& a = acc["fp32"];
    const Acc& b = acc["fp16"];
    interval_acc["DeepBench " + name + " FP32 (kernel)"] = a;
    interval_acc["DeepBench " + name + " FP16 (kernel)"] = b;
    std::printf("%-12s %-10s %5zu %5.1f /%5.1f /%5.1f (x%.2f, x%.2f) %5.1f /%5.1f /%5.1f (x%.2f, x%.2f)\n", name.c_str(),
                g.alias().c_str(), a.n + b.n, a.mape(), a.dmape(), a.rmape(), a.gmean_ratio(), a.dev_gmean_ratio(),
                b.mape(), b.dmape(), b.rmape(), b.gmean_ratio(), b.dev_gmean_ratio());
  }

  // A compute-bound GEMM's time goes as 1 / fraction: the fraction that makes the rows' geo-mean
  // predicted / measured 1 is the shipped one times that ratio.
  std::printf("Sustained tensor-core fraction (precision.h, %.3f): refit on the %zu compute-bound FP16 rows of the\n"
              "training GPUs with tensor cores (V100, T4), geo-mean predicted / measured at that fraction x%.3f -> %.3f\n",
              kMatrixSustainedFraction, refit.n, refit.dev_gmean_ratio(), kMatrixSustainedFraction * refit.dev_gmean_ratio());

  // ---- (2) Vidur A100 FP16 ------------------------------------------------------------
  const Gpu a100 = db.resolve("a100-sxm4-80gb");
  const double eb = 2;  // fp16
  std::vector<Item> items;
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(hp + "vidur_fp16/a100"))
    if (e.path().extension() == ".csv") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  // The one-to-16-token projections, for the weight-streaming law's refit (precision.h): the
  // model's file, the kernel's stream time at the spec bandwidth (ms) and the measured time.
  struct StreamRow {
    size_t file;
    double x, meas;
  };
  std::vector<StreamRow> stream_rows;
  for (size_t fi = 0; fi < files.size(); ++fi) {
    const std::string& f = files[fi];
    for (const auto& r : read_csv(f)) {
      const int64_t nh = int64_t(dnum(r, "n_head")), nkv = int64_t(dnum(r, "n_kv_head"));
      const int64_t d = int64_t(dnum(r, "n_embd")), ff = int64_t(dnum(r, "n_expanded_embd"));
      const int64_t T = int64_t(dnum(r, "num_tokens")), tp = int64_t(dnum(r, "num_tensor_parallel_workers"));
      const bool gated = r.at("use_gated_mlp") == "True";
      const int64_t hd = d / nh;
      auto med = [&](const char* layer) { return dnum(r, std::string("time_stats.") + layer + ".median"); };
      auto push = [&](Kernel k, const char* layer, int launches = 1) {
        const double m = med(layer);
        if (m > 0 && k.cls == KernelClass::gemm && T <= 16)
          stream_rows.push_back({fi, k.bytes / (a100.mem_bw_gbps * 1e6), m});
        if (m > 0) items.push_back({std::move(k), m, layer, T, launches});
      };
      // Models without a post-attention norm (phi-2) run attention and MLP in parallel off
      // one norm, and their residual step sums three tensors, attn + mlp + residual: two
      // PyTorch adds in the one timed region (measured: 2048 x 2560 tokens 30 us, twice the
      // 15 us roofline of one add).
      const bool parallel_block = !(med("post_attention_layernorm") > 0);
      push(linear(T, d, (nh + 2 * nkv) * hd / tp, "fp16"), "attn_pre_proj");
      push(linear(T, d / tp, d, "fp16"), "attn_post_proj");
      push(linear(T, d, ff * (gated ? 2 : 1) / tp, "fp16"), "mlp_up_proj");
      push(linear(T, ff / tp, d, "fp16"), "mlp_down_proj");
      // The kernels Vidur times are vLLM's (sarathi-serve's), and their code is described
      // (Kernel::access, precision.h memory_parallelism_ms) like their dtype: rms_norm and
      // silu_and_mul run one block of min(width, 1024) threads per token, each thread loading
      // one 2-byte element per tensor per iteration of a loop over the row (rms_norm: a pass
      // for the sum of squares, a block reduction, a second pass re-reading the row from
      // cache; silu_and_mul: gate and up loaded together, then one store). Phi-2's LayerNorm
      // and GELU are PyTorch's vectorized kernels (measured: its GELU moves ~2000 GB/s) and
      // stay undescribed, as every kernel of the product's own lowering does.
      const bool rms = gated;  // the gated models here (Llama, Qwen, InternLM) use RMSNorm; phi-2 LayerNorm
      auto norm = [&] {
        Kernel k = kernel_from_dataset("ln", {{"B", s(T)}, {"H", s(d)}, {"dtype", "fp16"}});
        // rms_norm's steps after its first pass: one block reduction (blockReduceSum, then
        // s_variance through shared memory) and a second pass re-reading the row, which the
        // same SM read microseconds before (an L1 hit: at most two rows and the weight, 48 KB,
        // per SM), with the weight.
        if (rms) k.access = vllm_rms_norm_access(d);
        return k;
      };
      push(norm(), "input_layernorm");
      push(norm(), "post_attention_layernorm");
      // Gated: silu(gate) * up reads both halves and writes one; else gelu in place of one tensor.
      Kernel act = stream(KernelClass::elementwise, gated ? "silu" : "gelu", T, ff / tp, gated ? 2 : 1, 1, gated ? 5 : 8, eb);
      if (gated) act.access = vllm_act_and_mul_access(ff / tp);
      push(act, "mlp_act");
      push(kernel_from_dataset("add", {{"B", s(T)}, {"H", s(d)}, {"dtype", "fp16"}}), "add", parallel_block ? 2 : 1);
      // Rotary embedding in place on q and k (read + write), cos/sin cache reads are small.
      {
        Kernel rope = stream(KernelClass::elementwise, "rope", T, (nh + nkv) * hd / tp, 1, 1, 3, eb);
        rope.access = vllm_rotary_access(nh / tp * hd);
        push(rope, "attn_rope");
      }
      // Embedding lookup: gather T rows of the table, write them.
      push(stream(KernelClass::memory, "gather", T, d, 1, 1, 0, eb), "emb");
    }
  }
  std::map<std::string, Acc> acc, by_tokens;
  run(items, a100, *predictor, *kernel, *roofline, acc, &by_tokens);
  if (g_dump) std::fclose(g_dump);
  g_dump = nullptr;  // the what-ifs below are not dumped
  {
    std::vector<Item> gemms;
    for (const Item& it : items)
      if (it.k.cls == KernelClass::gemm) gemms.push_back(it);
    std::map<std::string, Acc> pa, pt;
    run(gemms, a100, *port, *port, *roofline, pa, &pt);
    for (const auto& [layer, a] : pa)
      if (layer.find("compute-bound") == std::string::npos) port_acc["A100 GEMMs"].merge(a);
    for (const auto& [bucket, a] : pt) port_acc["A100 " + bucket] = a;
    std::map<std::string, Acc> oa, ot;
    run(gemms, a100, *one_tile_ker, *one_tile_ker, *roofline, oa, &ot);
    for (const auto& [layer, a] : oa)
      if (layer.find("compute-bound") == std::string::npos) one_tile_acc["A100 Vidur GEMMs"].merge(a);
    for (const auto& [bucket, a] : ot) one_tile_acc["A100 Vidur " + bucket] = a;
  }
  std::printf("\nVidur FP16 LLM layers on %s (only the weight-streaming law is fitted on them, below): %zu\ntimings (median of each), 8 models, tp 1-8\n",
              a100.name.c_str(), items.size());
  std::printf("Kernel timing: Vidur keeps profiler kernel durations (the 1-token adds measure 2 us), precision.h.\n");
  std::printf("%-40s %5s %8s %8s %9s %10s %10s\n", "layer", "rows", "eager", "kernel", "roofline", "eager p/m",
              "kernel p/m");
  auto print_row = [](const char* name, const Acc& a) {
    std::printf("%-40s %5zu %7.1f%% %7.1f%% %8.1f%% %9.2fx %9.2fx\n", name, a.n, a.mape(), a.dmape(), a.rmape(),
                a.gmean_ratio(), a.dev_gmean_ratio());
  };
  const char* gemm_layers[] = {"attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"};
  const char* vec_layers[] = {"input_layernorm", "post_attention_layernorm", "mlp_act", "add"};
  const char* other_layers[] = {"attn_rope", "emb"};
  auto section = [&](const char* title, const char* const* layers, int n) {
    Acc all;
    for (int i = 0; i < n; ++i) {
      const Acc& a = acc[layers[i]];
      print_row(layers[i], a);
      all.merge(a);
    }
    print_row(title, all);
  };
  // The norms, activation and add rows (the streaming layers with a target).
  auto norm_act_add = [&] {
    std::vector<Item> v;
    for (const Item& it : items)
      if (it.k.cls != KernelClass::gemm && it.group != "attn_rope" && it.group != "emb") v.push_back(it);
    return v;
  };
  // Device MAPE and pred/meas of each of those layers, by token bucket, then their total.
  auto print_by_layer = [&](std::map<std::string, Acc>& pa, std::map<std::string, Acc>& pt) {
    Acc all;
    for (const char* layer : vec_layers) {
      std::printf("%-40s %5zu %7.1f%% %9.2fx  by tokens:", layer, pa[layer].n, pa[layer].dmape(), pa[layer].dev_gmean_ratio());
      for (const char* b : {"1-63", "64-511", "512-4095", "4096+"}) {
        const Acc& a = pt[std::string(layer) + " tokens " + b];
        std::printf(" %s %.1f%% (%.2fx)", b, a.dmape(), a.dev_gmean_ratio());
      }
      std::printf("\n");
      all.merge(pa[layer]);
    }
    std::printf("%-40s %5zu %7.1f%% %9.2fx\n", "  norms/act/add", all.n, all.dmape(), all.dev_gmean_ratio());
  };
  section("  all GEMMs (target 15)", gemm_layers, 4);
  section("  norms/act/add (target 20)", vec_layers, 4);
  section("  rope/emb", other_layers, 2);
  {
    // Leave one GPU out for the one constant of the tensor-core path fitted on measurements
    // (kMatrixSustainedFraction): refit on the compute-bound FP16 GEMMs of the other tensor-core
    // GPUs' DeepBench rows (two fixed-point steps of fraction x geo-mean predicted / measured),
    // then predict the GPU left out. The A100's Vidur GEMMs are never part of a fit. Device
    // timing for DeepBench, kernel timing for Vidur. Decode-shaped: at most 64 rows (tokens)
    // on the output's short side.
    auto predictor_at = [&](Timing t, double f) {
      PrecisionOptions o{t};
      o.matrix_fraction = f;
      return make_neusight_predictor(weights, o);
    };
    auto refit_on = [&](const std::vector<std::string>& names) {
      double f = kMatrixSustainedFraction;
      for (int step = 0; step < 2; ++step) {
        auto p = predictor_at(Timing::kernel, f);
        Acc cb;
        for (const auto& n : names) {
          std::map<std::string, Acc> a;
          run(by_gpu.at(n), db.resolve(db_gpu.at(n)), *p, *p, *roofline, a);
          cb.merge(a["fp16 compute-bound"]);
        }
        f = std::min(1.0, f * cb.dev_gmean_ratio());
      }
      return f;
    };
    auto decode = [](const Item& it) {
      const GemmShape& g = it.k.gemm;
      return it.tokens > 0 ? it.tokens <= 64 : std::min(g.m, g.n) <= 64;
    };
    std::printf("\nLeave one GPU out, FP16 tensor-core GEMMs: the sustained fraction refit without the GPU, then\n"
                "its GEMMs predicted (MAPE %%, geo-mean pred/meas; roofline at the dtype peak); decode-shaped rows\n"
                "(<= 64 tokens / rows on the output's short side) on their own:\n");
    std::printf("%-22s %-14s %8s %6s %8s %9s %9s %6s %8s %9s\n", "held out", "fit on", "fraction", "rows", "MAPE%",
                "pred/meas", "roofline%", "decode", "MAPE%", "pred/meas");
    struct Set { std::string name, gpu_key; std::vector<std::string> fit; };
    const std::vector<Set> sets = {{"Tesla V100 DeepBench", "Tesla V100", {"Tesla T4"}},
                                   {"Tesla T4 DeepBench", "Tesla T4", {"Tesla V100"}},
                                   {"A100 Vidur (note 1)", "", {"Tesla V100", "Tesla T4"}}};
    for (const Set& set : sets) {
      const double f = refit_on(set.fit);
      auto p = predictor_at(Timing::kernel, f);
      std::vector<Item> rows;
      if (set.gpu_key.empty()) {
        for (const Item& it : items)
          if (it.k.cls == KernelClass::gemm) rows.push_back(it);
      } else {
        for (const Item& it : by_gpu.at(set.gpu_key))
          if (it.k.dtype == DType::f16) rows.push_back(it);
      }
      std::vector<Item> dec;
      for (const Item& it : rows)
        if (decode(it)) dec.push_back(it);
      const Gpu g = set.gpu_key.empty() ? a100 : db.resolve(db_gpu.at(set.gpu_key));
      auto total = [&](const std::vector<Item>& v) {
        std::map<std::string, Acc> a;
        run(v, g, *p, *p, *roofline, a);
        Acc all;
        for (const auto& [k, x] : a)
          if (k.find("compute-bound") == std::string::npos) all.merge(x);
        return all;
      };
      const Acc all = total(rows), d = total(dec);
      std::string fit;
      for (const auto& n : set.fit) fit += (fit.empty() ? "" : "+") + n.substr(n.find(' ') + 1);
      std::printf("%-22s %-14s %8.3f %6zu %7.1f%% %8.2fx %8.1f%% %6zu %7.1f%% %8.2fx\n", set.name.c_str(), fit.c_str(), f,
                  all.n, all.dmape(), all.dev_gmean_ratio(), all.rmape(), d.n, d.dmape(), d.dev_gmean_ratio());
    }
    std::printf("(P100: no tensor cores; its FP16 GEMMs run at the FP32 SIMT rate and use no fraction.)\n");
    std::printf("(1: never in the fraction's fit; its one-to-16-token rows are the weight-streaming law's fit, below.)\n");
  }
  {
    // The weight-streaming law (precision.h): time = stream / fraction + setup, fitted by least
    // relative squares on the one-to-16-token projections; then each half of the models
    // (alphabetical, first four / last four) predicted with the other half's fit.
    struct Law {
      double fraction = 0, setup_ms = 0;
    };
    auto fit = [&](auto keep) {
      double uu = 0, uv = 0, vv = 0, u1 = 0, v1 = 0;
      for (const StreamRow& r : stream_rows) {
        if (!keep(r)) continue;
        const double u = r.x / r.meas, v = 1 / r.meas;
        uu += u * u, uv += u * v, vv += v * v, u1 += u, v1 += v;
      }
      const double det = uu * vv - uv * uv;
      Law l;
      if (!(std::fabs(det) > 0)) return l;
      const double a = (u1 * vv - v1 * uv) / det, c = (uu * v1 - uv * u1) / det;
      l.fraction = 1 / a;
      l.setup_ms = c;
      return l;
    };
    auto mape = [&](const Law& l, auto keep) {
      double e = 0, lr = 0;
      size_t n = 0;
      for (const StreamRow& r : stream_rows) {
        if (!keep(r)) continue;
        const double pr = r.x / l.fraction + l.setup_ms;
        e += std::fabs(pr - r.meas) / r.meas, lr += std::log(pr / r.meas), ++n;
      }
      return std::make_pair(n ? 100 * e / n : 0.0, n ? std::exp(lr / n) : 0.0);
    };
    auto all = [](const StreamRow&) { return true; };
    const size_t half = files.size() / 2;
    auto first = [&](const StreamRow& r) { return r.file < half; };
    auto second = [&](const StreamRow& r) { return r.file >= half; };
    const Law shipped{kWeightStreamDramFraction, kWeightStreamSetupUs * 1e-3}, refit = fit(all);
    const auto [sm, sg] = mape(shipped, all);
    std::printf("\nWeight-streaming law (precision.h, fraction %.2f of the DRAM bandwidth + %.1f us): refit on the\n"
                "%zu one-to-16-token projections above: fraction %.3f, setup %.2f us; at the shipped constants\n"
                "%.1f%% MAPE (%.2fx). Each half of the models with the other half's fit:",
                kWeightStreamDramFraction, kWeightStreamSetupUs, stream_rows.size(), refit.fraction,
                refit.setup_ms * 1e3, sm, sg);
    for (int h = 0; h < 2; ++h) {
      const Law l = h == 0 ? fit(second) : fit(first);
      const auto [m, g] = h == 0 ? mape(l, first) : mape(l, second);
      std::printf(" %s %.1f%% (%.2fx; fit %.3f, %.2f us)", h == 0 ? "first four" : "last four", m, g, l.fraction,
                  l.setup_ms * 1e3);
    }
    std::printf("\n");
  }
  std::printf("\nBy token count (GEMMs: the four projections together):\n");
  for (const char* kind : {"GEMMs", "input_layernorm", "post_attention_layernorm", "mlp_act", "add", "attn_rope", "emb"})
    for (const char* b : {"1-63", "64-511", "512-4095", "4096+"}) {
      const std::string key = std::string(kind) + " tokens " + b;
      if (by_tokens.count(key)) print_row(key.c_str(), by_tokens[key]);
    }
  {
    Acc g, v;
    for (const char* l : {"attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"}) g.merge(acc[l]);
    for (const char* l : {"input_layernorm", "post_attention_layernorm", "mlp_act", "add"}) v.merge(acc[l]);
    interval_acc["Vidur A100 GEMMs (kernel)"] = g;
    interval_acc["Vidur A100 norms/act/add (kernel)"] = v;
  }
  std::printf("Tiled GEMMs (17 tokens and more) by measured time:\n");
  for (const char* b : {"<10 us", "10-30 us", "30-100 us", "100+ us"}) {
    const std::string key = std::string("tiled GEMMs ") + b;
    if (by_tokens.count(key)) print_row(key.c_str(), by_tokens[key]);
  }
  {
    // The vLLM kernels without their description (Kernel::access), i.e. predicted like
    // PyTorch's vectorized kernels by the NeuSight law, as before the memory-parallelism bound.
    std::vector<Item> vec = norm_act_add();
    for (Item& it : vec) it.k.access = {};
    std::map<std::string, Acc> pa, pt;
    run(vec, a100, *predictor, *kernel, *roofline, pa, &pt);
    std::printf("\nThe vLLM norms and activation predicted as PyTorch kernels (no Kernel::access; kernel-timing MAPE,\n"
                "pred/meas), against the described kernels above (memory-parallelism bound, precision.h):\n");
    print_by_layer(pa, pt);
    // The steps after rms_norm's first pass (Kernel::access block_reductions, cached_pass_level):
    // none (the bound before they were described), the reduction only, and the second pass
    // hitting L1 (the product's description) or L2.
    {
      std::printf("RMSNorm steps after the first pass (kernel-timing MAPE, pred/meas; the two norm layers together):\n");
      struct Variant { const char* name; int reductions, level; bool weight; };
      for (const Variant& v : {Variant{"first pass only (before)", 0, 0, false}, Variant{"+ block reduction", 1, 0, false},
                               Variant{"+ reduction + 2nd pass L1", 1, 1, false},
                               Variant{"+ ... weight from L2 in wave 1 (shipped)", 1, 1, true},
                               Variant{"+ reduction + 2nd pass all L2", 1, 2, true}}) {
        std::vector<Item> des;
        for (const Item& it : items)
          if (it.k.access.block_reductions > 0) {
            des.push_back(it);
            des.back().k.access.block_reductions = v.reductions;
            des.back().k.access.cached_pass_level = v.level;
            des.back().k.access.cached_pass_weight = v.weight;
          }
        std::map<std::string, Acc> ps, pt;
        run(des, a100, *kernel, *kernel, *roofline, ps, &pt);
        Acc tot;
        for (const char* layer : {"input_layernorm", "post_attention_layernorm"}) tot.merge(ps[layer]);
        std::printf("  %-42s %5zu %6.1f%% (%.2fx)  by tokens:", v.name, tot.n, tot.dmape(), tot.dev_gmean_ratio());
        for (const char* b : {"1-63", "64-511", "512-4095", "4096+"}) {
          Acc a;
          for (const char* layer : {"input_layernorm", "post_attention_layernorm"})
            a.merge(pt[std::string(layer) + " tokens " + b]);
          std::printf(" %s %.1f%% (%.2fx)", b, a.dmape(), a.dev_gmean_ratio());
        }
        std::printf("\n");
      }
    }
    // Sensitivity to the memory latency (precision.h kGlobalMemoryLatencyCycles), described kernels.
    std::printf("Memory-parallelism bound with another latency (norms/act/add, kernel-timing MAPE, pred/meas):");
    for (double scale : {0.75, 1.0, 1.25, 1.5}) {
      Gpu g = a100;
      g.boost_mhz = a100.boost_mhz / scale;  // latency = cycles / clock (only the bound reads the clock)
      const std::vector<Item> des = norm_act_add();
      std::map<std::string, Acc> ps;
      run(des, g, *kernel, *kernel, *roofline, ps);
      Acc tot;
      for (const auto& [layer, a] : ps)
        if (layer.find("compute-bound") == std::string::npos) tot.merge(a);
      std::printf("  %.0f ns: %.1f%% (%.2fx)", global_memory_latency_ms(g) * 1e6, tot.dmape(), tot.dev_gmean_ratio());
    }
    std::printf("\n");
  }
  {
    // What-if: the described vLLM kernels hold more than 32 registers per thread (their
    // register count is not known here: no compiled code), so one 1024-thread block per SM
    // instead of two (Kernel::access regs_per_thread, precision.h).
    std::vector<Item> vec = norm_act_add();
    for (Item& it : vec)
      if (it.k.access.block_threads > 0) it.k.access.regs_per_thread = 40;
    std::map<std::string, Acc> pa, pt;
    run(vec, a100, *kernel, *kernel, *roofline, pa, &pt);
    std::printf("\nWhat-if: the described vLLM kernels at more than 32 registers per thread (one block of up\n"
                "to 1024 threads per SM; their register count is unknown here), kernel-timing MAPE, pred/meas:\n");
    print_by_layer(pa, pt);
  }
  {
    // Sensitivity of kernel timing to its per-kernel floor (the norms, activation and add).
    const std::vector<Item> vec = norm_act_add();
    std::printf("\nKernel timing with another per-kernel floor (norms/act/add, MAPE, pred/meas):");
    for (double us : {1.0, 2.0, 4.0}) {
      PrecisionOptions o{Timing::kernel};
      o.device_floor_ms = us * 1e-3;
      auto p = make_neusight_predictor(weights, o);
      std::map<std::string, Acc> pa;
      run(vec, a100, *p, *p, *roofline, pa);
      Acc all;
      for (const auto& [layer, a] : pa)
        if (layer.find("compute-bound") == std::string::npos) all.merge(a);
      std::printf("  %.0f us: %.1f%% (%.2fx)", us, all.dmape(), all.dev_gmean_ratio());
    }
    std::printf("\n");
  }
  std::printf("\nThe 80%% interval (pred_low_ms - pred_high_ms) in the data's timing: measured rows inside it,\n"
              "geo-mean width (high / low); calibrated on FP32 leave-one-GPU-out, never on these rows:\n");
  for (const auto& [k, a] : interval_acc)
    std::printf("%-40s %5zu inside %5.1f%%  width x%.2f\n", k.c_str(), a.with_interval, a.coverage(), a.width());
  std::printf("\nWhat-if: tensor-core operand-port term at weight %.2g on top of the sustained fraction (precision.h;\n"
              "off in the product), kernel timing:\n", port_weight);
  for (const auto& [k, a] : port_acc)
    std::printf("%-40s %5zu FP16 MAPE %5.1f%%  pred/meas %.2fx\n", k.c_str(), a.n, a.dmape(), a.dev_gmean_ratio());
  std::printf("\nWhat-if: single tensor-core GEMMs on the tile cost model's choice alone, not the fastest of the\n"
              "library's tiles (PrecisionOptions::fastest_tile and fewer_sm_tilings off; kernel timing):\n");
  for (const auto& [k, a] : one_tile_acc)
    std::printf("%-40s %5zu FP16 MAPE %5.1f%%  pred/meas %.2fx\n", k.c_str(), a.n, a.dmape(), a.dev_gmean_ratio());
  return 0;
}
