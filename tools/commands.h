// commands.h - the CLI's subcommands; main.cpp maps names to them in one table.
#pragma once

#include <string>
#include <vector>

namespace neusight::cli {

using Argv = std::vector<std::string>;

int cmd_analyze(const Argv& args);  // neusight-onnx MODEL.onnx --gpu GPU ... (the main job)
int cmd_gpus(const Argv& args);     // neusight-onnx gpus
int cmd_export(const Argv& args);   // neusight-onnx export --config CFG -o MODEL.onnx
int cmd_compare(const Argv& args);  // neusight-onnx compare A.onnx B.onnx ... --gpu GPU[,GPU...]

}  // namespace neusight::cli
