// fuzz_inputs.cpp - libFuzzer target: arbitrary bytes through the readers of the tool's other
// inputs, each on to the stages that consume what it gives.
//
// The first byte selects the reader, the rest is its text:
//   0  a Hugging Face config (--config): parse_hf_config, build_model, shapes, lowering and
//      the roofline prediction of a short prompt; a decoder's KV-cache step too
//   1  a device JSON (--gpu FILE): parse_gpu_json, then the tiling and the trained networks
//      on a fixed set of kernels of every class and dtype
//   2  a kernels CSV (kernels --csv): its rows to kernels, tiled and predicted on the H100
// The contract under test is fuzz_pipeline.cpp's: succeed or throw neusight::InputError /
// RuntimeError; a crash, a sanitizer report, another exception, a hang or runaway memory is
// a bug. A config is built only when it is small (the build of a 10,000-layer model is slow,
// not wrong), so that the fuzzer's time goes to the readers.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "neusight/dataset.h"
#include "neusight/neusight.h"

namespace {

using namespace neusight;

const Gpu& h100() {
  static const Gpu g = GpuDatabase::builtin().resolve("h100");
  return g;
}

void run_config(const std::string& text) {
  const ModelConfig c = parse_hf_config(text, "fuzz config");
  if (c.layers + c.decoder_layers > 4 || c.experts > 64 || c.hidden > 4096 || c.vocab > 1 << 16) return;
  Options opt;
  opt.dims.batch = 1;
  opt.dims.seq = 8;
  opt.predictor = PredictorKind::roofline;
  const LoadedModel m = build_model(c);
  (void)predict(prepare(m, opt), m.model, h100(), opt);
  if (!supports_kv_cache(c)) return;
  const Decoder d = config_decoder(c);
  opt.dims.named["past_sequence"] = 8;
  (void)predict(prepare(d.step, opt), d.step.model, h100(), opt);
}

// Kernels of every class, matrix products in every dtype the dataset format names.
std::vector<Kernel> probe_kernels() {
  std::vector<Kernel> ks;
  for (const char* dt : {"fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4"}) {
    ks.push_back(kernel_from_dataset("bmm", {{"B", "8"}, {"M", "512"}, {"N", "64"}, {"K", "512"}, {"dtype", dt}}));
    ks.push_back(kernel_from_dataset("linear", {{"B", "1"}, {"M", "4096"}, {"N", "4096"}, {"K", "4096"}, {"dtype", dt}}));
    ks.push_back(kernel_from_dataset("linear", {{"B", "1"}, {"M", "1"}, {"N", "4096"}, {"K", "11008"}, {"dtype", dt}}));
  }
  for (const char* op : {"add", "gelu", "softmax", "ln"})
    for (const char* h : {"1", "1024", "16384"}) ks.push_back(kernel_from_dataset(op, {{"B", "4096"}, {"H", h}}));
  return ks;
}

void predict_all(const std::vector<Kernel>& ks, const Gpu& g) {
  static const std::unique_ptr<Predictor> p = make_predictor("neusight", "", PrecisionOptions{});
  std::vector<Tiling> tilings;
  for (const Kernel& k : ks) tilings.push_back(tile_kernel(k, g));
  (void)p->predict(ks, tilings, g);
}

void run_device(const std::string& text) {
  static const std::vector<Kernel> ks = probe_kernels();
  predict_all(ks, parse_gpu_json(text, "fuzz device"));
}

void run_kernels_csv(const std::string& text) {
  std::istringstream in(text);
  const Dataset d = read_dataset(in, "fuzz csv");  // the reader `kernels --csv` runs
  std::vector<Kernel> ks;
  for (const DatasetRow& r : d.rows) ks.push_back(r.kernel);
  predict_all(ks, h100());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 3) {
      case 0: run_config(text); break;
      case 1: run_device(text); break;
      default: run_kernels_csv(text); break;
    }
  } catch (const neusight::InputError&) {
  } catch (const neusight::RuntimeError&) {
  }
  return 0;
}
