// kernel_accuracy - prints per-class MAPE on the dataset's test kernels and the prediction speed.
//
// (a) test kernels of the five training GPUs, shipped weights (in-sample: the product learns
//     these rows beside the train rows, predictor/retrain.sh);
// (b) the A100 80GB PCIe test kernels (a GPU never trained on), shipped weights;
// (c) forward in time: weights trained on P4, P100, T4, V100 only, tested on both A100s;
// (d) leave one GPU out: for each training GPU, weights trained on the other four
//     (predictor/weights/logo-<GPU>), tested on every row (train and test) of the GPU left out;
//     per class MAPE, median predicted / measured, and the worst GPU.
// Each beside the plain roofline and the paper's figures (METHOD.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>

#include "neusight/dataset.h"
#include "neusight/model_builder.h"
#include "neusight/neusight.h"
#include "neusight/neusight_model.h"
#include "neusight/precision.h"

using namespace neusight;

namespace {

const char* kClasses[] = {"bmm", "linear", "elementwise", "softmax", "layernorm"};
// Paper (NeuSight, ASPLOS'25), percent error: in distribution / GPUs not in training.
const double kPaperIn[] = {26.0, 20.0, 14.0, 19.3, 20.1};
const double kPaperOut[] = {13.8, 13.9, 19.3, 13.9, 56.7};
const double kTarget[] = {10, 10, 12, 10, 20};

std::string class_of(const DatasetRow& r) {
  if (r.op_name == "bmm" || r.op_name == "linear") return r.op_name;
  if (r.op_name == "softmax") return "softmax";
  if (r.op_name == "ln") return "layernorm";
  return "elementwise";
}

struct Acc {
  double err = 0, roof = 0;
  size_t n = 0, extrapolated = 0;
  std::vector<double> ratio;  // predicted / measured
  double median_ratio() const {
    if (ratio.empty()) return 0;
    std::vector<double> r = ratio;
    std::nth_element(r.begin(), r.begin() + long(r.size() / 2), r.end());
    return r[r.size() / 2];
  }
};

std::map<std::string, Acc> evaluate(const std::vector<DatasetRow>& rows, const Predictor& p) {
  std::map<std::string, Acc> acc;
  std::map<std::string, std::vector<const DatasetRow*>> by_dev;
  for (const auto& r : rows) by_dev[r.device].push_back(&r);
  auto roofline = make_roofline_predictor();
  for (const auto& [dev, rs] : by_dev) {
    const Gpu g = GpuDatabase::builtin().resolve(dev);
    std::vector<Kernel> ks;
    std::vector<Tiling> ts;
    for (const auto* r : rs) {
      ks.push_back(r->kernel);
      ts.push_back(tile_kernel(r->kernel, g));
    }
    const auto pred = p.predict(ks, ts, g);
    const auto rl = roofline->predict(ks, ts, g);
    for (size_t i = 0; i < rs.size(); ++i) {
      Acc& a = acc[class_of(*rs[i])];
      const double y = rs[i]->latency_ms;
      a.err += std::fabs(pred[i].latency_ms - y) / y;
      a.roof += std::fabs(rl[i].latency_ms - y) / y;
      a.extrapolated += pred[i].extrapolated ? 1 : 0;
      a.ratio.push_back(pred[i].latency_ms / y);
      ++a.n;
    }
  }
  return acc;
}

void print(const char* title, const std::map<std::string, Acc>& acc, const double* paper, bool targets) {
  std::printf("\n%s\n", title);
  std::printf("  %-12s %7s %10s %10s %8s %8s %s\n", "class", "rows", "neusight%", "roofline%", "paper%", "target%",
              "extrapolated");
  for (int c = 0; c < 5; ++c) {
    auto it = acc.find(kClasses[c]);
    if (it == acc.end() || it->second.n == 0) continue;
    const Acc& a = it->second;
    const double m = 100 * a.err / a.n;
    std::printf("  %-12s %7zu %10.2f %10.2f %8.1f %8s %zu%s\n", kClasses[c], a.n, m, 100 * a.roof / a.n, paper[c],
                targets ? std::to_string(int(kTarget[c])).c_str() : "-", a.extrapolated,
                targets && m > kTarget[c] ? "   MISSES TARGET" : "");
  }
}

std::string device_tag(std::string dev) {
  for (char& ch : dev)
    if (ch == ' ') ch = '_';
  return dev;
}

// The test rows of `dev`.
std::vector<DatasetRow> device_test_rows(const std::vector<DatasetRow>& test_rows, const std::string& dev) {
  std::vector<DatasetRow> rows;
  for (const auto& r : test_rows)
    if (r.device == dev) rows.push_back(r);
  return rows;
}

// Every row (test first, then train) of one device.
std::vector<DatasetRow> device_rows(const std::string& shared, const std::vector<DatasetRow>& test_rows,
                                    const std::string& dev) {
  std::vector<DatasetRow> rows = device_test_rows(test_rows, dev);
  const std::string root = shared + "/neusight-data/kernels/train/";
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    if (e.path().filename() == "conv") continue;
    const std::string f = e.path().string() + "/" + device_tag(dev) + ".csv";
    if (!std::filesystem::exists(f)) continue;
    Dataset d = read_dataset(f);
    for (auto& r : d.rows)
      if (r.latency_ms > 0) rows.push_back(std::move(r));
  }
  return rows;
}

UtilClass util_class_of_row(const DatasetRow& r) {
  const std::string c = class_of(r);
  if (c == "bmm" || c == "linear") return UtilClass::gemm;
  if (c == "softmax") return UtilClass::softmax;
  if (c == "layernorm") return UtilClass::layernorm;
  return UtilClass::elementwise;
}

// One leave-one-GPU-out residual: |log(measured / predicted)| and the prediction's own
// uncertainty (log units, from its interval before calibration).
struct Residual {
  UtilClass cls;
  std::string device;
  double abs_log_err, own_sd;
  double roofline_ms = 0, waves = 0;
  bool test = false;  // one of the GPU's kernels/test rows
};

std::vector<Residual> logo_residuals(const std::string& shared, const std::vector<DatasetRow>& test_rows) {
  std::vector<Residual> out;
  for (const auto& dev : training_devices()) {
    const std::string w = data_dir() + "/weights/logo-" + device_tag(dev);
    if (!std::filesystem::exists(w + "/weights.json")) continue;
    auto p = make_neusight_predictor(w);  // never calibrated: the networks' own spread only
    const auto rows = device_rows(shared, test_rows, dev);
    const Gpu g = GpuDatabase::builtin().resolve(dev);
    std::vector<Kernel> ks;
    std::vector<Tiling> ts;
    for (const auto& r : rows) {
      ks.push_back(r.kernel);
      ts.push_back(tile_kernel(r.kernel, g));
    }
    const auto pred = p->predict(ks, ts, g);
    // device_rows puts the GPU's test rows first.
    const size_t tests =
        size_t(std::count_if(test_rows.begin(), test_rows.end(), [&](const DatasetRow& r) { return r.device == dev; }));
    for (size_t i = 0; i < rows.size(); ++i) {
      const double own = std::log(pred[i].latency_high_ms / pred[i].latency_ms) / kIntervalZ;
      out.push_back({util_class_of_row(rows[i]), dev, std::fabs(std::log(rows[i].latency_ms / pred[i].latency_ms)), own,
                     pred[i].roofline_ms, double(ts[i].waves), i < tests});
    }
  }
  return out;
}

// Coverage of the 80% interval with the class spread `sd_of(row)`, each GPU weighted equally.
template <typename SpreadOf>
double coverage(const std::vector<const Residual*>& rs, SpreadOf sd_of) {
  std::map<std::string, std::pair<double, double>> by;  // device -> (inside, rows)
  for (const Residual* r : rs) {
    auto& b = by[r->device];
    b.first += r->abs_log_err <= kIntervalZ * std::hypot(sd_of(*r), r->own_sd) ? 1 : 0;
    b.second += 1;
  }
  double sum = 0;
  for (const auto& [d, b] : by) sum += b.first / b.second;
  return by.empty() ? 0 : sum / double(by.size());
}
double coverage(const std::vector<const Residual*>& rs, double sd) {
  return coverage(rs, [sd](const Residual&) { return sd; });
}

// The least x in [0, hi] at which coverage_at(x), rising with x, reaches 80%: 0 when it does
// already, else by bisection.
template <typename CoverageAt>
double least_covering(CoverageAt coverage_at, double hi) {
  if (coverage_at(0.0) >= 0.8) return 0;
  double lo = 0;
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (lo + hi);
    (coverage_at(mid) >= 0.8 ? hi : lo) = mid;
  }
  return hi;
}

// Edges (ms of roofline time) of the bands the interval's spread is calibrated on, and the
// fewest rows a band needs.
constexpr double kIntervalBandEdgesMs[] = {0.01, 0.03, 0.1, 0.3, 1, 3};
constexpr size_t kIntervalBandMinRows = 50;

// --calibrate WEIGHTS_DIR: sets each class's interval_log_sd in WEIGHTS_DIR/weights.json so
// that the 80% interval covers 80% of the leave-one-GPU-out rows (GPUs weighted equally).
int calibrate(const std::string& shared, const std::string& dir, const std::vector<DatasetRow>& test_rows) {
  const auto res = logo_residuals(shared, test_rows);
  if (res.empty()) throw std::runtime_error("no weights/logo-* to calibrate on (predictor/retrain.sh builds them)");
  ModelSet m = load_model_set(dir);
  for (int c = 0; c < kNumUtilClasses; ++c) {
    std::vector<const Residual*> rs;
    for (const auto& r : res)
      if (int(r.cls) == c) rs.push_back(&r);
    if (rs.empty() || m.classes[c].empty()) continue;
    const double hi = least_covering([&](double sd) { return coverage(rs, sd); }, 3);
    m.classes[c].interval_log_sd = hi;
    std::printf("interval_log_sd %-12s %.4f (%zu leave-one-GPU-out rows, coverage %.3f)\n",
                util_class_name(UtilClass(c)), hi, rs.size(), coverage(rs, hi));
    // The same per band of roofline times (kIntervalBandEdgesMs), each band's centre the
    // median roofline time of its rows; bands of fewer than kIntervalBandMinRows rows are left
    // to the interpolation between their neighbours.
    ClassModel& cm = m.classes[c];
    cm.interval_roofline_ms.clear();
    cm.interval_log_sd_by_roofline.clear();
    for (size_t band = 0; band <= std::size(kIntervalBandEdgesMs); ++band) {
      const double lo_ms = band == 0 ? 0 : kIntervalBandEdgesMs[band - 1];
      const double hi_ms = band == std::size(kIntervalBandEdgesMs) ? std::numeric_limits<double>::infinity()
                                                                   : kIntervalBandEdgesMs[band];
      std::vector<const Residual*> b;
      std::vector<double> t;
      for (const Residual* r : rs)
        if (r->roofline_ms >= lo_ms && r->roofline_ms < hi_ms) {
          b.push_back(r);
          t.push_back(r->roofline_ms);
        }
      if (b.size() < kIntervalBandMinRows) continue;
      std::nth_element(t.begin(), t.begin() + long(t.size() / 2), t.end());
      cm.interval_roofline_ms.push_back(t[t.size() / 2]);
      cm.interval_log_sd_by_roofline.push_back(least_covering([&](double sd) { return coverage(b, sd); }, 3));
    }
    // Coverage of the interpolated bands, each GPU weighted equally, at `scale` times the bands'
    // spreads; the bands are then scaled together so that it is 80% (the interpolation between
    // band centres moves some rows' spread away from their band's).
    auto band_coverage = [&](double scale) {
      return coverage(rs, [&](const Residual& r) { return scale * interval_log_sd_at(cm, r.roofline_ms); });
    };
    const double scale = least_covering(band_coverage, 4);
    for (double& v : cm.interval_log_sd_by_roofline) v *= scale;
    const double cov = band_coverage(1);
    std::printf("  by roofline time (ms: spread):");
    for (size_t k = 0; k < cm.interval_roofline_ms.size(); ++k)
      std::printf(" %.3g: %.3f", cm.interval_roofline_ms[k], cm.interval_log_sd_by_roofline[k]);
    std::printf(" (coverage %.3f)\n", cov);
  }
  save_model_set(m, dir);
  return 0;
}

// (d) leave one GPU out: weights/logo-<GPU> trained without that GPU, tested on all of its
// rows (train and test); the worst GPU per class is the figure.
// `root`: the weights folder whose logo-* subfolders are read (the product's, or the published
// formulation's weights/paper); `intervals`: also the shipped weights' interval coverage.
// One leave-one-GPU-out table: each GPU left out, its rows (all of them, or its test rows
// alone) against the weights trained without it.
void logo_table(const std::string& shared, const std::vector<DatasetRow>& test_rows, const std::string& root,
                const std::vector<std::string>& gpus, bool test_only) {
  std::printf("  %-10s", "gpu");
  for (const char* c : kClasses) std::printf(" %22s", c);
  std::printf("\n");
  std::map<std::string, double> worst, worst_ratio;
  for (const auto& dev : gpus) {
    const std::vector<DatasetRow> rows =
        test_only ? device_test_rows(test_rows, dev) : device_rows(shared, test_rows, dev);
    auto p = make_neusight_predictor(root + "/logo-" + device_tag(dev));
    const auto acc = evaluate(rows, *p);
    std::printf("  %-10s", dev.substr(dev.find(' ') + 1, 10).c_str());
    for (const char* c : kClasses) {
      auto it = acc.find(c);
      if (it == acc.end() || it->second.n == 0) {
        std::printf(" %22s", "-");
        continue;
      }
      const double m = 100 * it->second.err / it->second.n, r = it->second.median_ratio();
      std::printf(" %6.1f / %4.2f (%5.1f)", m, r, 100 * it->second.roof / it->second.n);
      worst[c] = std::max(worst[c], m);
      if (std::fabs(std::log(r)) > std::fabs(std::log(worst_ratio.count(c) ? worst_ratio[c] : 1.0))) worst_ratio[c] = r;
    }
    std::printf("\n");
  }
  std::printf("  %-10s", "worst");
  for (const char* c : kClasses)
    std::printf(" %6.1f / %4.2f        ", worst[c], worst_ratio.count(c) ? worst_ratio[c] : 1.0);
  std::printf("\n");
}

void logo_section(const std::string& shared, const std::vector<DatasetRow>& test_rows, const std::string& root,
                  const char* label, bool intervals) {
  std::vector<std::string> gpus;
  for (const auto& dev : training_devices()) {
    if (std::filesystem::exists(root + "/logo-" + device_tag(dev) + "/weights.json")) gpus.push_back(dev);
  }
  if (gpus.empty()) {
    std::printf("\n%s leave one GPU out: no %s/logo-* (predictor/retrain.sh builds them)\n", label, root.c_str());
    return;
  }
  std::printf(
      "\n%s leave one GPU out: trained on the other training GPUs, tested on every row (train + test) of the\n"
      "    GPU left out: MAPE %% / median predicted/measured (roofline MAPE %%)\n",
      label);
  logo_table(shared, test_rows, root, gpus, false);
  // The test rows alone: large kernels of the end-to-end models' shapes, timed in the campaign
  // that the unseen GPUs' kernels (the A100 80GB's) come from; the train rows are mostly small
  // kernels, whose eager time is their host's dispatch, and the larger ones of four of the five
  // GPUs ran 10-30% slower than their test rows of matched shape (bench/e2e_accuracy).
  std::printf(
      "\n%s leave one GPU out, tested on the test rows of the GPU left out (large kernels, the\n"
      "    campaign the unseen GPUs' kernels are measured in): MAPE %% / median predicted/measured (roofline MAPE "
      "%%)\n",
      label);
  logo_table(shared, test_rows, root, gpus, true);
  if (!intervals) return;
  // The shipped weights' 80% interval on the same rows: coverage and median width (high / low).
  const ModelSet shipped = load_model_set(data_dir() + "/weights");
  const auto res = logo_residuals(shared, test_rows);
  for (bool test_only : {false, true}) {
    std::printf(
        "\n    80%% interval (class spread of the shipped weights + each network's own), %s: coverage %% / median "
        "width\n",
        test_only ? "test rows" : "all rows");
    std::printf("  %-10s", "gpu");
    for (int c = 0; c < kNumUtilClasses; ++c) std::printf(" %16s", util_class_name(UtilClass(c)));
    std::printf("\n");
    for (const auto& dev : gpus) {
      std::printf("  %-10s", dev.substr(dev.find(' ') + 1, 10).c_str());
      for (int c = 0; c < kNumUtilClasses; ++c) {
        std::vector<double> width;
        size_t inside = 0;
        for (const auto& r : res) {
          if (r.device != dev || int(r.cls) != c || (test_only && !r.test)) continue;
          const double s = std::hypot(interval_log_sd_at(shipped.classes[c], r.roofline_ms), r.own_sd);
          inside += r.abs_log_err <= kIntervalZ * s ? 1 : 0;
          width.push_back(std::exp(2 * kIntervalZ * s));
        }
        if (width.empty()) {
          std::printf(" %16s", "-");
          continue;
        }
        std::nth_element(width.begin(), width.begin() + long(width.size() / 2), width.end());
        std::printf("      %5.1f / %3.2f", 100.0 * double(inside) / double(width.size()), width[width.size() / 2]);
      }
      std::printf("\n");
    }
  }
  std::fflush(stdout);
}

// --dump FILE: every train and test row with its tiling, features, roofline-wave base time and
// measured latency, one CSV line each (for analysing features; not part of the figures).
int dump(const std::string& shared, const std::string& path, const Predictor& shipped, const Predictor& fit) {
  std::ofstream o(path);
  o << "split,device,op,class,rows,cols,B,M,N,K,tile_m,tile_n,split_k,tiles,bps,waves,base_ms,roofline_ms,latency_ms,"
       "pred_shipped,pred_fit";
  for (int j = 0; j < kMaxFeatures; ++j) o << ",x" << j;
  o << "\n";
  std::vector<std::pair<std::string, std::string>> files;
  const std::string root = shared + "/neusight-data/kernels/";
  for (const char* f : {"bmm.csv", "linear.csv", "elem.csv", "softmax.csv", "ln.csv"})
    files.push_back({"test", root + "test/" + f});
  for (const auto& e : std::filesystem::directory_iterator(root + "train")) {
    if (e.path().filename() == "conv") continue;
    for (const auto& f : std::filesystem::directory_iterator(e.path())) files.push_back({"train", f.path().string()});
  }
  std::sort(files.begin(), files.end());
  for (const auto& [split, f] : files) {
    const Dataset d = read_dataset(f);
    for (const auto& r : d.rows) {
      if (!(r.latency_ms > 0)) continue;
      const Gpu* g = GpuDatabase::builtin().find(r.device);
      UtilClass uc;
      if (!g || !util_class_of(r.kernel, uc)) continue;
      const Tiling t = tile_kernel(r.kernel, *g);
      const TileFeatures tf = tile_features(uc, r.kernel, t, *g);
      const Kernel& k = r.kernel;
      o << split << "," << r.device << "," << r.op_name << "," << class_of(r) << "," << k.rows << "," << k.cols << ","
        << k.gemm.batch << "," << k.gemm.m << "," << k.gemm.k << "," << k.gemm.n << "," << t.config.tb_m << ","
        << t.config.tb_n << "," << t.config.split_k << "," << t.tiles << "," << t.blocks_per_sm << "," << t.waves << ","
        << tf.base_ms << "," << roofline_ms(k, *g) << "," << r.latency_ms << ","
        << shipped.predict({k}, {t}, *g)[0].latency_ms << "," << fit.predict({k}, {t}, *g)[0].latency_ms;
      for (int j = 0; j < kMaxFeatures; ++j) o << "," << tf.x[j];
      o << "\n";
    }
  }
  return 0;
}

int run(int argc, char** argv) {
  if (argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::printf(
        "usage: kernel_accuracy [SHIPPED_WEIGHTS_DIR [FORWARD_IN_TIME_WEIGHTS_DIR]]\n"
        "       kernel_accuracy --calibrate WEIGHTS_DIR   (sets the 80%% interval from leave-one-GPU-out)\n"
        "       kernel_accuracy --dump OUT.csv [SHIPPED_WEIGHTS_DIR [FORWARD_IN_TIME_WEIGHTS_DIR]]\n");
    return 0;
  }
  const std::string shared =
      std::getenv("NEUSIGHT_SHARED_DIR") ? std::getenv("NEUSIGHT_SHARED_DIR") : NEUSIGHT_SHARED_DIR;
  if (argc > 2 && std::string(argv[1]) == "--calibrate") {
    std::vector<DatasetRow> rows;
    for (const char* f : {"bmm.csv", "linear.csv", "elem.csv", "softmax.csv", "ln.csv"}) {
      Dataset d = read_dataset(shared + "/neusight-data/kernels/test/" + f);
      for (auto& r : d.rows)
        if (r.latency_ms > 0) rows.push_back(std::move(r));
    }
    return calibrate(shared, argv[2], rows);
  }
  if (argc > 2 && std::string(argv[1]) == "--dump")
    return dump(shared, argv[2], *make_neusight_predictor(argc > 3 ? argv[3] : data_dir() + "/weights"),
                *make_neusight_predictor(argc > 4 ? argv[4] : data_dir() + "/weights/forward-in-time"));
  const std::string main_w = argc > 1 ? argv[1] : data_dir() + "/weights";
  const std::string fit_w = argc > 2 ? argv[2] : data_dir() + "/weights/forward-in-time";
  const std::string test = shared + "/neusight-data/kernels/test/";
  std::vector<DatasetRow> rows;
  for (const char* f : {"bmm.csv", "linear.csv", "elem.csv", "softmax.csv", "ln.csv"}) {
    Dataset d = read_dataset(test + f);
    for (auto& r : d.rows)
      if (r.latency_ms > 0) rows.push_back(std::move(r));
  }
  const auto& train = training_devices();
  std::vector<DatasetRow> a, b, c;
  for (const auto& r : rows) {
    if (std::find(train.begin(), train.end(), r.device) != train.end()) a.push_back(r);
    if (r.device == "NVIDIA A100 80GB PCIe") b.push_back(r);
    if (r.device == "NVIDIA A100 80GB PCIe" || r.device == "NVIDIA A100-PCIE-40GB") c.push_back(r);
  }
  auto shipped = make_neusight_predictor(main_w);
  auto fit = make_neusight_predictor(fit_w);
  std::printf("kernel_accuracy: MAPE in percent on %s (weights: %s, %s)\n", test.c_str(), main_w.c_str(),
              fit_w.c_str());
  print("(a) test kernels of the five training GPUs (shipped weights; in the training data)", evaluate(a, *shipped),
        kPaperIn, false);
  print("(b) A100 80GB PCIe test kernels, never trained on (shipped weights)", evaluate(b, *shipped), kPaperOut, true);
  print("(c) forward in time: trained on P4, P100, T4, V100; tested on A100 40GB + 80GB", evaluate(c, *fit), kPaperOut,
        true);
  std::fflush(stdout);  // the figures survive a failure in the speed part below

  logo_section(shared, rows, data_dir() + "/weights", "(d)", true);

  // (e) The published formulation (`--predictor neusight-paper`, neusight_model.h), trained on
  // the same rows, in the same tables.
  const std::string paper = data_dir() + "/weights/paper";
  if (std::filesystem::exists(paper + "/weights.json")) {
    auto pm = make_neusight_predictor(paper);
    print("(e) published formulation (--predictor neusight-paper): A100 80GB PCIe test kernels", evaluate(b, *pm),
          kPaperOut, true);
    if (std::filesystem::exists(paper + "/forward-in-time/weights.json")) {
      auto pf = make_neusight_predictor(paper + "/forward-in-time");
      print("(e) published formulation, forward in time (A100 40GB + 80GB)", evaluate(c, *pf), kPaperOut, true);
    }
    logo_section(shared, rows, paper, "(e) published formulation,", false);
  } else {
    std::printf("\n(e) published formulation: no %s (predictor/retrain.sh builds it)\n", paper.c_str());
  }
  std::fflush(stdout);

  // Speed: the kernels of a GPT-3 175B training step (96 layers, 12288 hidden, seq 2048).
  const std::string cfg = (std::filesystem::temp_directory_path() / "kernel_accuracy_gpt3.json").string();
  {
    std::ofstream o(cfg);
    o << R"({"architectures":["GPT2LMHeadModel"],"model_type":"gpt2","n_embd":12288,"n_head":96,"n_layer":96,)"
      << R"("n_positions":2048,"n_ctx":2048,"vocab_size":50257,"activation_function":"gelu_new"})";
  }
  LoadedModel m = build_model(read_hf_config(cfg));
  std::filesystem::remove(cfg);
  Options opt;
  opt.dims.batch = 1;
  opt.dims.seq = 2048;
  opt.mode = Mode::training;
  const Analysis an = prepare(m, opt);
  const Gpu h100 = GpuDatabase::builtin().resolve("h100");
  // As the CLI and the Python module predict: OpenBLAS on the calling thread (predictor.h).
  single_threaded_blas();
  // CPU time (std::clock) as well as wall time: a loaded machine inflates the wall figure.
  double best_tile = 1e9, best_pred = 1e9, best_pred_cpu = 1e9;
  std::vector<Tiling> ts;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    ts.clear();
    for (const auto& k : an.kernels.kernels) ts.push_back(tile_kernel(k, h100));
    const auto t1 = std::chrono::steady_clock::now();
    const std::clock_t c1 = std::clock();
    const auto p = shipped->predict(an.kernels.kernels, ts, h100);
    const std::clock_t c2 = std::clock();
    const auto t2 = std::chrono::steady_clock::now();
    best_tile = std::min(best_tile, std::chrono::duration<double, std::milli>(t1 - t0).count());
    best_pred = std::min(best_pred, std::chrono::duration<double, std::milli>(t2 - t1).count());
    best_pred_cpu = std::min(best_pred_cpu, 1000.0 * double(c2 - c1) / CLOCKS_PER_SEC);
  }
  std::printf(
      "\nspeed: %zu kernels of a GPT-3 175B training step (batch 1, seq 2048) on H100, best of 5:\n"
      "  predict %.2f ms wall (%.2f ms CPU), tiling %.2f ms wall\n",
      an.kernels.kernels.size(), best_pred, best_pred_cpu, best_tile);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernel_accuracy: error: %s\n", e.what());
    return 1;
  }
}
