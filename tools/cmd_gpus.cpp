// cmd_gpus.cpp - `neusight-onnx gpus [--json]`: the GPU database, one GPU a line with its aliases
// (or every entry as JSON).
#include <algorithm>
#include <cstdio>

#include "args.h"
#include "commands.h"
#include "neusight/gpu.h"

namespace neusight::cli {

int cmd_gpus(const Argv& argv) {
  Args args(argv, Command::gpus);
  const GpuDatabase db = args.has("--db") ? GpuDatabase::load(args.get("--db")) : GpuDatabase::builtin();
  // `gpus NAME...`: those GPUs alone (names, aliases or device JSONs; an unknown name is an
  // error with the closest ones), as the other commands resolve them.
  std::vector<Gpu> gpus = db.all();
  if (!args.positionals().empty()) {
    gpus.clear();
    for (const auto& name : args.positionals()) {
      const std::vector<Gpu> some = db.resolve_list(name, "gpus");
      gpus.insert(gpus.end(), some.begin(), some.end());
    }
  }
  if (args.has("--json")) {
    std::fputs(format_gpus_json(gpus).c_str(), stdout);
    return 0;
  }
  int width = 26;  // the longest name
  for (const auto& g : gpus) width = std::max(width, static_cast<int>(g.name.size()));
  std::printf("%-*s %-8s %4s %9s %9s %8s %6s  %s\n", width, "name", "arch", "SMs", "FP32 TF", "FP16 TF", "mem GB/s",
              "L2 MB", "aliases");
  for (const auto& g : gpus) {
    std::string aliases;
    for (const auto& a : g.aliases) aliases += (aliases.empty() ? "" : ", ") + a;
    std::printf("%-*s %-8s %4d %9.1f %9.1f %8.0f %6.1f  %s\n", width, g.name.c_str(), g.arch.c_str(), g.num_sm,
                g.fp32_gflops / 1000, g.peak_gflops(DType::f16) / 1000, g.mem_bw_gbps, g.l2_mb, aliases.c_str());
  }
  return 0;
}

}  // namespace neusight::cli
