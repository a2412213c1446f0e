// commands.h - the CLI's subcommands; main.cpp maps flags.h's commands to them.
#pragma once

#include <string>
#include <vector>

namespace neusight::cli {

using Argv = std::vector<std::string>;

int cmd_analyze(const Argv& args);  // neusight-onnx MODEL.onnx --gpu GPU ... (the main job)
int cmd_gpus(const Argv& args);     // neusight-onnx gpus
int cmd_export(const Argv& args);   // neusight-onnx export --config CFG -o MODEL.onnx
int cmd_compare(const Argv& args);  // neusight-onnx compare A.onnx B.onnx ... --gpu GPU[,GPU...]
int cmd_kernels(const Argv& args);  // neusight-onnx kernels --gpu GPU --csv IN.csv --out OUT.csv
int cmd_train(const Argv& args);    // neusight-onnx train --data DIR --out WEIGHTS_DIR

}  // namespace neusight::cli
