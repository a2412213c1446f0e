// cmd_kernels.cpp - `neusight-onnx kernels`: predict every row of a dataset-format kernel CSV.
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>

#include "args.h"
#include "commands.h"
#include "neusight/dataset.h"
#include "neusight/onnx_frontend.h"
#include "neusight/precision.h"
#include "outputs.h"
#include "pipeline.h"

namespace neusight::cli {

int cmd_kernels(const Argv& argv) {
  Args args(argv, Command::kernels);
  if (!args.positionals().empty()) throw InputError("kernels: unexpected argument '" + args.positionals()[0] + "'");
  for (const char* f : {"--gpu", "--csv", "--out"})
    if (!args.has(f)) throw InputError(std::string("kernels: ") + f + " is required");
  const std::string pred_name = args.get("--predictor");
  if (!is_predictor_name(pred_name))
    throw InputError("--predictor: expected neusight, neusight-paper or roofline, got '" + pred_name + "'");
  const bool from_row = args.get("--gpu") == "from-row";
  // Without --timing each row in its data's convention (default_row_timing): FP32 rows as
  // neusight-data's PyTorch-eager timings of one op each, other dtypes as profiler kernel
  // durations (Vidur, nsys) and back-to-back library calls (DeepBench, XLA) time them.
  std::optional<Timing> timing;
  if (args.has("--timing")) timing = kernels_timing(args.get("--timing"));

  const std::map<std::string, Gpu> devices =
      args.has("--devices") ? load_devices_dir(args.get("--devices")) : std::map<std::string, Gpu>{};
  std::optional<Gpu> fixed;
  if (!from_row) fixed = GpuDatabase::builtin().resolve(args.get("--gpu"));

  const std::string path = args.get("--csv");
  const std::string csv = path == "-" ? "standard input" : path;  // '-': a pipe
  const Dataset d = path == "-" ? read_dataset(std::cin, csv) : read_dataset(path);
  if (from_row && d.column("Device") < 0) throw InputError(csv + ": --gpu from-row needs a Device column");
  const KernelRows k = predict_kernel_rows(
      d, [&](size_t i) { return csv + ": row " + std::to_string(i + 2); }, fixed, devices, pred_name,
      args.get("--weights"), timing);
  OutputSet out;  // a file written whole, or standard output for '-'
  out.add_text(args.get("--out"), format_kernels_csv(d, k));
  out.commit();
  // Rows of other GPUs are skipped (the contract); say so, so that a mismatched --gpu is seen.
  if (fixed && k.kept.size() < d.rows.size())
    std::fprintf(stderr,
                 "neusight-onnx: warning: kernels: %zu of %zu rows ran on another GPU than %s and were skipped "
                 "(--gpu from-row predicts each row on its own Device)\n",
                 d.rows.size() - k.kept.size(), d.rows.size(), fixed->name.c_str());
  return 0;
}

}  // namespace neusight::cli
