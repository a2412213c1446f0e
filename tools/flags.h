// flags.h - every flag of the CLI in one table: the parser (args.h), the usage text of
// `--help` and the README check (tests/unit/unit-cli-flags.cpp) all read it.
#pragma once

#include <string>
#include <vector>

namespace neusight::cli {

// The CLI's subcommands; `analyze` is the main job (neusight-onnx MODEL.onnx --gpu GPU ...).
enum class Command { analyze, compare, kernels, export_model, gpus, train };

struct Flag {
  const char* name;      // "--gpu" (or "-o")
  bool takes_value;      // false: a switch ("--quiet")
  const char* metavar;   // what the value looks like ("GPU[,GPU...]"); empty for switches
  const char* help;      // one line
  unsigned commands;     // the commands that accept it (bits of command_bit)
  const char* fallback;  // the default the parser returns for an absent flag ("" when none)
};

constexpr unsigned command_bit(Command c) { return 1u << static_cast<unsigned>(c); }

// Every flag; one name may have several rows when it means different things to different
// commands (`--out` is the annotated model of the main job but the CSV of `kernels`).
const std::vector<Flag>& flag_table();
// The rows `c` accepts, in table order.
std::vector<const Flag*> flags_of(Command c);
// The row of `name` for `c`, or nullptr.
const Flag* find_flag(Command c, const std::string& name);

// "compare", "export", ... ("" for the main job).
const char* command_name(Command c);
// Every subcommand (not the main job), in the order `--help` lists them.
const std::vector<Command>& subcommands();
// A subcommand's one-line summary, for the command list of `--help`.
const char* command_summary(Command c);
// The usage text of `c`: its synopsis and one line per flag (`neusight-onnx [CMD] --help`);
// the main job's also lists the subcommands.
std::string usage_text(Command c);

}  // namespace neusight::cli
