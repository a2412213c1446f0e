// main.cpp - the neusight-onnx command line: subcommands to their entry points, --help from the
// flag table (flags.h), errors to exit codes.
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>

#include "commands.h"
#include "flags.h"
#include "memory.h"
#include "neusight/neusight.h"
#include "neusight/predictor.h"

namespace {

// Each subcommand's entry point; names, summaries and flags are in flags.h's table.
struct CommandRun {
  neusight::cli::Command command;
  int (*run)(const neusight::cli::Argv&);
};

const CommandRun kCommands[] = {
    {neusight::cli::Command::gpus, neusight::cli::cmd_gpus},
    {neusight::cli::Command::export_model, neusight::cli::cmd_export},
    {neusight::cli::Command::compare, neusight::cli::cmd_compare},
    {neusight::cli::Command::kernels, neusight::cli::cmd_kernels},
    {neusight::cli::Command::train, neusight::cli::cmd_train},
};

void usage(neusight::cli::Command c, FILE* out) { std::fputs(neusight::cli::usage_text(c).c_str(), out); }

// --help or -h anywhere among a command's arguments asks for its usage.
bool wants_help(const neusight::cli::Argv& args) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  neusight::cli::setup_process_memory();
  neusight::single_threaded_blas();
  std::ios::sync_with_stdio(false);
  neusight::cli::Argv args(argv + 1, argv + argc);
  try {
    if (args.empty()) {
      usage(neusight::cli::Command::analyze, stderr);
      return 2;
    }
    if (args[0] == "--version") {
      std::printf("neusight-onnx %s\n", neusight::version());
      return 0;
    }
    for (const auto& c : kCommands)
      if (args[0] == neusight::cli::command_name(c.command)) {
        const neusight::cli::Argv rest(args.begin() + 1, args.end());
        if (wants_help(rest)) return usage(c.command, stdout), 0;
        return c.run(rest);
      }
    if (wants_help(args)) return usage(neusight::cli::Command::analyze, stdout), 0;
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
