// main.cpp - the neusight-onnx command line: one table of subcommands, errors to exit codes.
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>

#include "commands.h"
#include "memory.h"
#include "neusight/neusight.h"

namespace {

struct Command {
  const char* name;
  int (*run)(const neusight::cli::Argv&);
  const char* help;
};

const Command kCommands[] = {
    {"gpus", neusight::cli::cmd_gpus, "list the GPU database with aliases"},
    {"export", neusight::cli::cmd_export, "write the graph built from a Hugging Face config"},
    {"compare", neusight::cli::cmd_compare, "compare model variants across GPUs (speed-up, class deltas)"},
    {"kernels", neusight::cli::cmd_kernels, "predict each row of a dataset-format kernel CSV"},
    {"train", neusight::cli::cmd_train, "train the NeuSight utilization MLPs on the dataset"},
};

const char* kUsage =
    "usage: neusight-onnx MODEL.onnx --gpu GPU[,GPU...] [--batch N] [--seq N] [--dim NAME=VALUE]...\n"
    "                     [--shape INPUT=1x3x224x224]... [--value INPUT=V]...\n"
    "                     [--mode inference|training] [--dtype auto|fp32|tf32|fp16|bf16|fp8]\n"
    "                     [--fusion none|eager|full] [--predictor neusight|roofline]\n"
    "                     [--timing device|kernel|eager]\n"
    "                     [--json FILE] [--csv FILE] [--csv-kernels] [--out ANNOTATED.onnx]\n"
    "                     [--html FILE] [--top N] [--group node|layer] [--quiet]\n"
    "       neusight-onnx --config HF_CONFIG.json --batch N --seq N --gpu GPU [same options]\n"
    "       neusight-onnx <command> [options]\n"
    "commands:\n";

void usage(FILE* out) {
  std::fputs(kUsage, out);
  for (const auto& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.help);
  std::fputs("  --version  print the version\n", out);
}

}  // namespace

int main(int argc, char** argv) {
  neusight::cli::setup_process_memory();
  neusight::cli::single_threaded_blas();
  std::ios::sync_with_stdio(false);
  neusight::cli::Argv args(argv + 1, argv + argc);
  try {
    if (args.empty() || args[0] == "--help" || args[0] == "-h") {
      usage(args.empty() ? stderr : stdout);
      return args.empty() ? 2 : 0;
    }
    if (args[0] == "--version") {
      std::printf("neusight-onnx %s\n", neusight::version());
      return 0;
    }
    for (const auto& c : kCommands)
      if (args[0] == c.name) return c.run(neusight::cli::Argv(args.begin() + 1, args.end()));
    return neusight::cli::cmd_analyze(args);
  } catch (const neusight::InputError& e) {
    std::fprintf(stderr, "neusight-onnx: error: %s\n", e.what());
    return 2;
  } catch (const neusight::RuntimeError& e) {
    std::fprintf(stderr, "neusight-onnx: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "neusight-onnx: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "neusight-onnx: internal error: %s\n", e.what());
    return 1;
  }
}
