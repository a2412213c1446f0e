// flags.cpp - the CLI's flag table and the usage text made from it (see flags.h).
#include "flags.h"

#include <cstdio>
#include <string>

#include "neusight/precision.h"
#include "neusight/training.h"

namespace neusight::cli {
namespace {

constexpr unsigned A = command_bit(Command::analyze), C = command_bit(Command::compare),
                   K = command_bit(Command::kernels), E = command_bit(Command::export_model),
                   G = command_bit(Command::gpus), T = command_bit(Command::train);

// --host-dispatch-us's help, with the default the predictor uses (precision.h).
std::string host_dispatch_help() {
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "with --timing device: the host's dispatch of one op in microseconds (default %.2f, the measured hosts' median)",
                kHostDispatchMs * 1e3);
  return buf;
}
const std::string kHostDispatchHelp = host_dispatch_help();

// --test-rows's help, with the factor the trainer leaves a contradicting sweep out at (training.h).
std::string test_rows_help() {
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "also learn the training GPUs' kernels/test rows (the end-to-end models' shapes); a GEMM sweep "
                "more than %gx off its GPU's test rows is then left out",
                kCampaignConflictRatio);
  return buf;
}
const std::string kTestRowsHelp = test_rows_help();

// name, takes a value, metavar, help, commands, default.
const std::vector<Flag> kFlags = {
    // The model, its dims and the analysis options (parse_analysis_options, pipeline.h).
    {"--gpu", true, "GPU[,GPU...]", "GPUs by name or alias (`neusight-onnx gpus`), JSON paths (a device JSON, or one `gpus --json` entry), or all: every GPU of the database", A | C, ""},
    {"--gpu", true, "GPU|from-row", "predict the rows of this GPU (others are skipped), or from-row: each row on its Device", K, ""},
    {"--config", true, "HF_CONFIG.json", "build the model from a Hugging Face config.json (or the model folder holding it)", A | E, ""},
    {"--batch", true, "N", "batch size (binds the first symbolic dim)", A | C | E, ""},
    {"--seq", true, "N", "sequence length (binds the second symbolic dim)", A | C | E, ""},
    {"--dim", true, "NAME=VALUE", "bind a named symbolic dim (repeatable)", A | C, ""},
    {"--images", true, "N", "images in each sequence of a --config vision-language model, each through its tower (default 1)", A | C | E, ""},
    {"--image-size", true, "N|HxW", "the image a --config Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Mistral 3, Llama 4 or LLaVA-NeXT model reads, in pixels, prepared as its processor does (default: 448; LLaVA-NeXT a square)", A | C | E, ""},
    {"--shape", true, "INPUT=1x3x224x224", "set an input's whole shape (repeatable, comma lists)", A | C, ""},
    {"--value", true, "INPUT=V", "set a scalar input's value (repeatable, comma lists)", A | C, ""},
    {"--mode", true, "inference|training", "forward pass, or forward + backward + optimizer", A | C, "inference"},
    {"--latency-slo", true, "MS", "the largest batch whose end-to-end latency is at most MS and that fits each GPU's memory", A, ""},
    {"--gpu-cost", true, "USD|GPU=USD,...", "what one GPU costs an hour in US dollars (one price for every GPU, or per GPU name or alias): the reports add the cost of a million tokens, of a training run (--train-tokens) and of a generation's output", A, ""},
    {"--train-tokens", true, "N", "training: the tokens to train on (1e12, 300B, 15T): the time to train and the GPU-hours at the step's tokens/s", A, ""},
    {"--optimizer", true, "sgd|momentum|adam", "training: the optimizer the step updates with and whose state the memory holds", A | C, "sgd"},
    {"--lora", true, "R[,base=nf4][,adapters=N][,targets=all|REGEX]", "low-rank adapters of rank R (Hugging Face PEFT's LoRA) on every linear layer but the output head, or on those whose weight name matches REGEX (q_proj|v_proj): trained with --mode training, the model's own parameters frozen; otherwise served unmerged beside it (vLLM's --enable-lora under --generate; adapters=N: N of them at once, each sequence using one); base=nf4: QLoRA, the linear layers' weights held in 4-bit NormalFloat (bitsandbytes)", A | C, ""},
    {"--sparsity", true, "2:4[,targets=all|REGEX]|auto", "the weights of the linear layers and convolutions pruned 2:4 (two of every four zero along the reduction; SparseGPT, Wanda, NVIDIA's ASP, PyTorch's to_sparse_semi_structured), every one but the output head, those whose weight name matches REGEX, or (auto) those whose inline values show the pattern (float weights, and INT8 or FP8 weights through DequantizeLinear with a zero point of 0), as TensorRT's --sparsity=enable finds them: each such GEMM runs on sparse tensor cores (NVIDIA from Ampere, AMD from CDNA 3; TF32 or narrower) at twice the dense peak with its weight read compressed, where that is faster (TensorRT's --sparsity), its weight held compressed; inference", A | C, ""},
    {"--recompute", true, "none|full|selective", "training: activation checkpointing, full: each segment's forward run again in the backward pass, its activations not kept (Hugging Face gradient checkpointing); selective: the attention cores' alone (Megatron-LM)", A | C, "none"},
    {"--dtype", true, "auto|fp32|fp64|tf32|fp16|bf16|fp8|fp4|int8", "compute precision (fp8, fp4, int8: the weights' GEMMs in it, the rest BF16 (int8: FP16)); auto: the model's own", A | C, "auto"},
    {"--kv-dtype", true, "fp8|fp16|bf16|fp32", "the KV cache's element type (FlashAttention's cache reads, --generate's cache); default: the activations'", A | C, ""},
    {"--fusion", true, "none|eager|full", "kernel fusion: none, PyTorch eager, or compiled", A | C, "eager"},
    {"--attention", true, "auto|fused|unfused", "attention as one FlashAttention kernel (16-bit; PyTorch's scaled_dot_product_attention, Hugging Face's default; training adds FlashAttention-2's backward) or MatMul + Softmax kernels; auto: fused under --fusion eager (transformers' default, inference and training) and full", A | C, "auto"},
    {"--predictor", true, "neusight|neusight-paper|roofline", "the latency predictor", A | C | K, "neusight"},
    {"--weights", true, "DIR", "NeuSight weights folder (default: the bundled ones)", A | C | K, ""},
    {"--timing", true, "device|kernel|eager", "eager run of a framework (host-bound small kernels), GPU time alone, or each op timed alone", A | C, "device"},
    {"--host-dispatch-us", true, "US", kHostDispatchHelp.c_str(), A | C, ""},
    {"--timing", true, "eager|device|kernel", "what the rows' measured times include (default: eager for fp32 rows, kernel for other dtypes)", K, ""},
    {"--generate", true, "PROMPT:NEW", "LLM generation: a prefill of PROMPT tokens, NEW decode steps", A | C, ""},
    {"--encoder", true, "ENCODER.onnx", "with --generate and an encoder-decoder's ONNX decoder (decoder_model_merged.onnx): its encoder, run in the prefill", A, ""},
    {"--encoder", true, "ENC.onnx[,ENC.onnx...]", "with --generate: the encoder of the ONNX encoder-decoders' decoders, one for every ONNX model or one per model in order (empty for a --config model)", C, ""},
    {"--prefix-cached", true, "C", "with --generate: the first C tokens of every prompt are cached already (vLLM's prefix caching of a shared system prompt), held once; the prefill computes the rest", A | C, ""},
    {"--tpot-slo", true, "MS", "with --generate: the largest batch (that fits) whose time per output token is at most MS", A, ""},
    {"--ttft-slo", true, "MS", "with --generate: the largest batch (that fits) whose time to first token is at most MS (with --tpot-slo: both)", A, ""},
    {"--speculative", true, "K,accept=P[,draft=M]", "with --generate: K drafted tokens a step, each accepted with P; draft model M (config, ONNX, or mtp)", A, ""},
    {"--parallel", true, "dp=N,tp=N,pp=N[,...]", "training on dp x tp x pp (x cp) GPUs (keys: dp, tp, pp, cp, cp_comm=p2p|a2a, ep, microbatches, schedule=gpipe|1f1b, vp, zero=0-3, overlap_gather, sp), experts over ep of the dp GPUs; inference and --generate: tp=N[,ep=N][,pp=N[,pp_split=even|balanced]] (pipeline stages; inference also microbatches=M)", A | C, ""},
    {"--link-bw", true, "GBPS", "inter-GPU link bandwidth in GB/s (with --parallel)", A | C, ""},
    // Outputs of the main job and compare.
    {"--json", true, "FILE", "write the report as JSON ('-': standard output)", A | C, ""},
    {"--html", true, "FILE", "write a self-contained HTML report ('-': standard output)", A | C, ""},
    {"--csv", true, "FILE", "write one CSV row per node ('-': standard output)", A, ""},
    {"--csv-kernels", false, "", "--csv writes one row per kernel", A, ""},
    {"--out", true, "ANNOTATED.onnx", "write the model with each node's latency in its doc_string", A, ""},
    {"--top", true, "N", "show the N slowest nodes; 0 shows all", A, "0"},
    {"--top", true, "N", "list the N nodes whose latency changed most", C, "10"},
    {"--group", true, "node|layer", "one table row per node, or per layer", A, "node"},
    {"--quiet", false, "", "print nothing on stdout", A | C | T, ""},
    {"--no-color", false, "", "no colors on a terminal", A | C, ""},
    // kernels
    {"--csv", true, "IN.csv", "the dataset-format kernel CSV to predict ('-': standard input)", K, ""},
    {"--out", true, "OUT.csv", "the CSV written: the rows with the predictions appended ('-': standard output)", K, ""},
    {"--devices", true, "DIR", "device JSONs for the rows' Device names", K, ""},
    // export
    {"-o", true, "MODEL.onnx", "the ONNX file written (weights as external-data stubs)", E, ""},
    {"--out", true, "MODEL.onnx", "the same as -o", E, ""},
    {"--kv-cache", false, "", "one decode step with past_key_values inputs", E, ""},
    // gpus
    {"--db", true, "GPUS.json", "read this GPU database instead of the built-in one", G, ""},
    {"--json", false, "", "print every entry as JSON", G, ""},
    // train
    {"--data", true, "DIR", "the neusight-data folder (kernels/train)", T, ""},
    {"--out", true, "DIR", "the folder written: weights.json and MANIFEST", T, ""},
    {"--devices", true, "GPU[,GPU...]", "training GPUs (default: the five of the dataset)", T, ""},
    {"--seed", true, "N", "random seed (training is deterministic for it)", T, "1"},
    {"--epochs", true, "N", "training epochs", T, "60"},
    {"--hidden", true, "N[,CLASS=N...]", "hidden units per layer, per class if named", T, "64"},
    {"--layers", true, "N", "hidden layers", T, "3"},
    {"--batch", true, "N", "mini-batch size", T, "256"},
    {"--lr", true, "RATE", "Adam learning rate, in (0, 1)", T, "0.002"},
    {"--device-prior", true, "W", "weight (>= 0; 0: none) of the prior on a kernel's device time hidden by the dispatch", T, "1"},
    {"--ensemble", true, "N[,CLASS=N...]", "networks per class ensemble, per class if named", T, "1"},
    {"--max-rows", true, "N", "at most N evenly strided rows per CSV; 0 reads all", T, "0"},
    {"--ops", true, "OP[,OP...]", "the dataset's op folders read",
     T, "linear,bmm,add,addu,sub,mul,mulu,div,divu,pow,powu,relu,gelu,tanh,softmax,ln"},
    {"--classes", true, "CLASS[,CLASS...]", "the utilization classes trained", T, "gemm,elementwise,softmax,layernorm"},
    {"--test-rows", false, "", kTestRowsHelp.c_str(), T, ""},
    {"--formulation", true, "neusight|neusight-paper", "the product's model or the published one", T, "neusight"},
};

struct CommandInfo {
  Command command;
  const char* name;
  const char* synopsis;  // after "neusight-onnx "
  const char* summary;
};

const CommandInfo kCommandInfo[] = {
    {Command::analyze, "",
     "MODEL.onnx --gpu GPU[,GPU...] [options]\n"
     "       neusight-onnx --config HF_CONFIG.json (--batch N --seq N | --generate PROMPT:NEW) --gpu GPU [options]\n"
     "       neusight-onnx <command> [options]   (neusight-onnx <command> --help lists its options)",
     "predict a model's latency on one or more GPUs"},
    {Command::gpus, "gpus", "gpus [GPU...] [--json] [--db GPUS.json]", "list the GPU database (or the GPUs named) with aliases"},
    {Command::export_model, "export", "export --config HF_CONFIG.json [--kv-cache] -o MODEL.onnx",
     "write the graph built from a Hugging Face config"},
    {Command::compare, "compare", "compare A.onnx B.onnx [...] --gpu GPU[,GPU...] [options]",
     "compare model variants across GPUs (speed-up, class deltas)"},
    {Command::kernels, "kernels", "kernels --gpu GPU|from-row --csv IN.csv --out OUT.csv [options]",
     "predict each row of a dataset-format kernel CSV"},
    {Command::train, "train", "train --data DIR --out WEIGHTS_DIR [options]",
     "train the NeuSight utilization MLPs on the dataset"},
};

constexpr size_t kFlagColumn = 32;  // width of "--flag METAVAR" in the usage text

const CommandInfo& info(Command c) {
  for (const auto& i : kCommandInfo)
    if (i.command == c) return i;
  return kCommandInfo[0];
}

}  // namespace

const std::vector<Flag>& flag_table() { return kFlags; }

std::vector<const Flag*> flags_of(Command c) {
  std::vector<const Flag*> out;
  for (const Flag& f : kFlags)
    if (f.commands & command_bit(c)) out.push_back(&f);
  return out;
}

const Flag* find_flag(Command c, const std::string& name) {
  for (const Flag& f : kFlags)
    if ((f.commands & command_bit(c)) && name == f.name) return &f;
  return nullptr;
}

const char* command_name(Command c) { return info(c).name; }

const std::vector<Command>& subcommands() {
  static const std::vector<Command> out = [] {
    std::vector<Command> v;
    for (const auto& i : kCommandInfo)
      if (i.command != Command::analyze) v.push_back(i.command);
    return v;
  }();
  return out;
}

const char* command_summary(Command c) { return info(c).summary; }

std::string usage_text(Command c) {
  std::string out = std::string("usage: neusight-onnx ") + info(c).synopsis + "\noptions:\n";
  for (const Flag* f : flags_of(c)) {
    const std::string lhs = std::string(f->name) + (f->takes_value ? std::string(" ") + f->metavar : "");
    // A long flag and metavar puts the help on the next line, aligned with the others.
    out += "  " + lhs + (lhs.size() > kFlagColumn ? "\n" + std::string(kFlagColumn + 3, ' ')
                                                  : std::string(kFlagColumn + 1 - lhs.size(), ' '));
    out += f->help;
    if (*f->fallback) out += std::string(" (default ") + f->fallback + ")";
    out += "\n";
  }
  if (c != Command::analyze) return out;
  out += "commands:\n";
  for (Command s : subcommands()) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-10s %s\n", command_name(s), command_summary(s));
    out += line;
  }
  return out + "  --version  print the version\n";
}

}  // namespace neusight::cli
