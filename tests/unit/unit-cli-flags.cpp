// unit-cli-flags.cpp - the CLI's flag table (tools/flags.h): each command's usage text lists
// every flag it takes, README.md's "Using it" section names every flag, and the parser takes
// exactly the table's flags.
#include <doctest/doctest.h>

#include <cctype>
#include <fstream>
#include <iterator>

#include "args.h"
#include "flags.h"
#include "neusight/neusight_model.h"
#include "neusight/training.h"
#include "test_util.h"

using namespace neusight;
using namespace neusight::cli;

namespace {

const Command kAll[] = {Command::analyze, Command::compare, Command::kernels,
                        Command::export_model, Command::gpus, Command::train};

// `flag` as a whole word of `text`: not part of a longer flag ("-o" is not in "--out").
bool names_flag(const std::string& text, const std::string& flag) {
  auto part = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-'; };
  for (size_t at = text.find(flag); at != std::string::npos; at = text.find(flag, at + 1)) {
    const bool left = at == 0 || !part(text[at - 1]);
    const bool right = at + flag.size() == text.size() || !part(text[at + flag.size()]);
    if (left && right) return true;
  }
  return false;
}

// README.md from "## Using it" to the next "## " heading.
std::string readme_usage_section() {
  std::ifstream in(test::source_dir() + "/README.md");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t begin = text.find("\n## Using it\n");
  REQUIRE(begin != std::string::npos);
  const size_t end = text.find("\n## ", begin + 1);
  return text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

}  // namespace

TEST_CASE("cli flags: every command's usage text lists every flag it takes") {
  for (Command c : kAll) {
    const std::string usage = usage_text(c);
    for (const Flag* f : flags_of(c)) {
      INFO(command_name(c), " ", f->name);
      CHECK(names_flag(usage, f->name));
      if (f->takes_value) CHECK(usage.find(f->metavar) != std::string::npos);
    }
  }
  const std::string main_usage = usage_text(Command::analyze);
  for (Command c : subcommands()) CHECK(names_flag(main_usage, command_name(c)));
}

TEST_CASE("cli flags: README.md's usage section names every flag of the table") {
  const std::string section = readme_usage_section();
  for (const Flag& f : flag_table()) {
    INFO(f.name);
    CHECK(names_flag(section, f.name));
  }
}

TEST_CASE("cli flags: one row per flag and command, values and switches parse as the table says") {
  for (Command c : kAll) {
    const auto flags = flags_of(c);
    for (size_t i = 0; i < flags.size(); ++i)
      for (size_t j = i + 1; j < flags.size(); ++j) CHECK(std::string(flags[i]->name) != flags[j]->name);
    for (const Flag* f : flags) {
      INFO(command_name(c), " ", f->name);
      const Args a(f->takes_value ? std::vector<std::string>{f->name, "x"} : std::vector<std::string>{f->name}, c);
      CHECK(a.has(f->name));
      CHECK(a.positionals().empty());
    }
  }
  CHECK_THROWS_AS(Args({"--latency-slo", "5"}, Command::compare), InputError);
  CHECK_THROWS_AS(Args({"--quiet=1"}, Command::analyze), InputError);
  CHECK_THROWS_AS(Args({"--gpu"}, Command::analyze), InputError);
  // kernels: no default timing; each row's dtype chooses (eager for FP32, kernel for others).
  const Args defaults({}, Command::kernels);
  CHECK(defaults.get("--timing").empty());
  CHECK(Args({}, Command::analyze).get("--timing") == "device");
  CHECK(Args({"--timing=kernel"}, Command::analyze).get("--timing") == "kernel");
  // Numbers: positive, or non-negative where a flag allows 0 (--device-prior 0: no prior).
  const Args prior({"--device-prior", "0"}, Command::train);
  CHECK(prior.get_double("--device-prior", 1, true) == 0);
  CHECK_THROWS_AS(prior.get_double("--device-prior", 1), InputError);
  CHECK_THROWS_AS(Args({"--device-prior", "-1"}, Command::train).get_double("--device-prior", 1, true), InputError);
  CHECK_THROWS_AS(Args({"--device-prior", "inf"}, Command::train).get_double("--device-prior", 1, true), InputError);
}

TEST_CASE("cli flags: the training defaults --help shows are TrainOptions' own") {
  const TrainOptions o;
  const Args t({}, Command::train);
  CHECK(t.get("--seed") == std::to_string(o.seed));
  CHECK(t.get("--epochs") == std::to_string(o.epochs));
  CHECK(t.get("--hidden") == std::to_string(o.hidden));
  CHECK(t.get("--layers") == std::to_string(o.hidden_layers));
  CHECK(t.get("--batch") == std::to_string(o.batch));
  CHECK(t.get("--ensemble") == std::to_string(o.ensemble));
  CHECK(std::stod(t.get("--lr")) == o.lr);
  CHECK(t.get("--formulation") == formulation_name(o.formulation));
}

TEST_CASE("cli flags: standard output takes one text output, and a binary output needs a path") {
  using neusight::cli::Args;
  using neusight::cli::Command;
  CHECK_NOTHROW(Args({"m.onnx", "--json", "-", "--csv", "r.csv"}, Command::analyze));
  CHECK_NOTHROW(Args({"--csv", "-", "--gpu", "from-row", "--out", "-"}, Command::kernels));  // stdin in, stdout out
  CHECK_THROWS_WITH_AS(Args({"m.onnx", "--json", "-", "--html", "-"}, Command::analyze),
                       doctest::Contains("only one output"), neusight::InputError);
  CHECK_THROWS_WITH_AS(Args({"a.onnx", "b.onnx", "--html", "-", "--json", "-"}, Command::compare),
                       doctest::Contains("only one output"), neusight::InputError);
  for (const auto& [args, command] :
       {std::pair<std::vector<std::string>, Command>{{"m.onnx", "--out", "-"}, Command::analyze},
        {{"--config", "c.json", "-o", "-"}, Command::export_model},
        {{"--config", "c.json", "--out", "-"}, Command::export_model},
        {{"--out", "-"}, Command::train}})
    CHECK_THROWS_WITH_AS(Args(args, command), doctest::Contains("needs a file path"), neusight::InputError);
}
