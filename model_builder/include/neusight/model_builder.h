// model_builder.h - build ONNX graphs of transformer models from Hugging Face configs.
//
// Takes: a Hugging Face style config.json (GPT-2 / GPT-3-in-GPT-2-form, BERT, OPT, Switch
// Transformer, Llama-style decoders).
// Gives: a LoadedModel whose graph mirrors what PyTorch runs for that model, with symbolic
// `batch` and `sequence` input dims and weights as external-data stubs that are never
// materialised (a 175B model builds instantly).
#pragma once

#include <string>

#include "neusight/onnx_frontend.h"

namespace neusight {

struct ModelConfig {
  std::string model_type;  // "gpt2", "bert", "opt", "switch_transformers", "llama", ...
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;      // grouped-query attention (0: = heads)
  int64_t ffn = 0;           // intermediate size
  int64_t vocab = 0;
  int64_t max_positions = 0;
  std::string activation;    // "gelu_new", "gelu", "relu", "silu"
  double layer_norm_eps = 1e-5;
  // Mixture of experts (Switch): experts per MoE layer, every `sparse_step` layers.
  int64_t experts = 0;
  int64_t sparse_step = 0;
  double capacity_factor = 1.0;
  std::string source;        // the config file
};

// Reads a config.json. Throws InputError naming the file and the missing field.
ModelConfig read_hf_config(const std::string& path);

// Builds the model graph. Throws InputError for unsupported model types.
LoadedModel build_model(const ModelConfig& config);

}  // namespace neusight
