// fuzz_pipeline.cpp - libFuzzer target: arbitrary bytes through load, shapes, lowering,
// tiling, prediction and the JSON report.
//
// The contract under test: whatever the bytes, the library either succeeds or throws
// neusight::InputError / RuntimeError. Anything else (a crash, a sanitizer report, another
// exception type escaping, a hang, runaway memory) is a bug the fuzzer reports.
//
// Built with clang -fsanitize=fuzzer,address,undefined under -DNEUSIGHT_FUZZ=ON. Without
// libFuzzer (gcc builds) it links with replay_main.cpp, which replays files and directories
// given on the command line, so the seed corpus runs as an ordinary test.
#include <cstddef>
#include <cstdint>
#include <string>

#include "neusight/neusight.h"

namespace {

// Every symbolic input dim gets a small value so that shape inference and lowering run on
// concrete shapes (the first two are what --batch / --seq would bind).
neusight::DimBindings small_bindings(const neusight::Graph& g) {
  neusight::DimBindings b;
  b.batch = 2;
  b.seq = 8;
  int seen = 0;
  for (const auto& in : g.inputs) {
    const neusight::TensorInfo* t = g.find(in);
    if (!t || !t->has_shape) continue;
    for (const auto& d : t->shape)
      if (!d.known() && !d.param.empty() && ++seen > 2) b.named.emplace(d.param, 3);
  }
  return b;
}

void run_pipeline(const std::string& bytes) {
  using namespace neusight;
  LoadedModel loaded = load_model_from_bytes(bytes, "fuzz input");
  static const Gpu gpu = GpuDatabase::builtin().resolve("b200");
  Options opt;
  opt.dims = small_bindings(loaded.model.graph);
  opt.predictor = PredictorKind::roofline;
  // Unbound dims without a name ("?" dims) make bind_dims throw InputError; that is fine.
  const Analysis a = prepare(loaded, opt);
  Report r = predict(a, loaded.model, gpu, opt);
  (void)format_json({r});
  (void)format_table(r, TableOptions{});
  (void)format_html({r});
  // A pipeline-parallel forward pass over tensor-parallel stages (a graph with fewer parts than
  // stages is an input error, and the runs below go on).
  try {
    Options pipe = opt;
    pipe.parallel = parse_parallel("tp=2,pp=2");
    const Report pr = predict(prepare(loaded, pipe), loaded.model, gpu, pipe);
    (void)format_json({pr});
    (void)format_table(pr, TableOptions{});
  } catch (const InputError&) {
  }
  // LoRA adapters served unmerged over tensor-parallel GPUs (a graph without a linear layer is
  // an input error).
  try {
    Options served = opt;
    served.lora.rank = 4;
    served.parallel = parse_parallel("tp=2");
    (void)format_json({predict(prepare(loaded, served), loaded.model, gpu, served)});
  } catch (const InputError&) {
  }
  // Linear layers pruned 2:4 (sparse tensor cores where the GPU has them) over tensor-parallel
  // GPUs, in BF16 (a graph without a linear layer is an input error).
  try {
    Options pruned = opt;
    pruned.sparsity.two_four = true;
    pruned.dtype = DType::bf16;
    pruned.parallel = parse_parallel("tp=2");
    (void)format_json({predict(prepare(loaded, pruned), loaded.model, gpu, pruned)});
  } catch (const InputError&) {
  }
  // Training lowers backward and update kernels too.
  opt.mode = Mode::training;
  opt.fusion = Fusion::none;
  const Analysis t = prepare(loaded, opt);
  (void)predict(t, loaded.model, gpu, opt);
  // LoRA's adapters on the linear layers, on one GPU and (QLoRA) sharded over two (a graph without a
  // linear layer is an input error, and the runs below go on).
  try {
    Options lora = opt;
    lora.lora.rank = 4;
    (void)predict(prepare(loaded, lora), loaded.model, gpu, lora);
    lora.parallel = parse_parallel("dp=2,zero=3");
    lora.lora.nf4_base = true;  // QLoRA's NF4 weights, sharded and gathered
    (void)format_json({predict(prepare(loaded, lora), loaded.model, gpu, lora)});
  } catch (const InputError&) {
  }
  // Activation checkpointing under multi-GPU plans: pipeline stages with the optimizer sharded
  // (its gather under the next forward), ZeRO-3's gathers beside expert parallelism, and
  // selective recomputation beside sequence parallelism and FlashAttention's backward and its
  // context-parallel ring, or Ulysses' all-to-alls.
  opt.recompute = Recompute::full;
  for (const char* spec : {"dp=2,pp=2,zero=1,overlap_gather=1", "dp=2,zero=3,ep=2", "tp=2,sp=1,cp=2", "tp=2,cp=2,cp_comm=a2a"}) {
    if (spec[0] == 't') {
      opt.recompute = Recompute::selective;
      opt.attention = Attention::fused;
      opt.dtype = DType::bf16;
    }
    opt.parallel = parse_parallel(spec);
    const Analysis p = prepare(loaded, opt);
    (void)format_json({predict(p, loaded.model, gpu, opt)});
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    run_pipeline(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const neusight::InputError&) {
  } catch (const neusight::RuntimeError&) {
  }
  return 0;
}
