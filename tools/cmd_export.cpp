// cmd_export.cpp - `neusight-onnx export --config CFG.json [--kv-cache] -o MODEL.onnx`.
#include <cstdio>
#include <filesystem>

#include "args.h"
#include "commands.h"
#include "outputs.h"
#include "neusight/model_builder.h"

namespace neusight::cli {

int cmd_export(const Argv& argv) {
  Args args(argv, Command::export_model);
  if (!args.has("--config")) throw InputError("export: --config CFG.json is required");
  const std::string out = args.has("-o") ? args.get("-o") : args.get("--out");
  if (out.empty()) throw InputError("export: -o MODEL.onnx is required");
  if (!args.positionals().empty()) throw InputError("export: unexpected argument '" + args.positionals()[0] + "'");
  args.get_int("--batch", 1);  // accepted (dims stay symbolic) but validated
  args.get_int("--seq", 1);
  // --kv-cache: one decoder step with past_key_values inputs (what --generate predicts).
  Options image;
  parse_image_options(args, image);
  const LoadedModel m =
      build_model(with_image_options(read_hf_config(args.get("--config")), image), BuildOptions{args.has("--kv-cache")});
  // Weights are external-data stubs: every initializer points into "<model>.weights", written
  // as an empty placeholder so ONNX tooling finds the file; its bytes are never materialised.
  const std::filesystem::path out_path(out);
  const std::string stub = out_path.stem().string() + ".weights";
  OutputSet outputs;  // the model and its stub, or neither
  outputs.add(out, [&](const std::string& tmp) { write_model(m, tmp, stub); });
  const std::filesystem::path stub_path = out_path.parent_path() / stub;
  std::error_code ec;
  if (!std::filesystem::exists(stub_path, ec)) outputs.add_text(stub_path.string(), "");
  outputs.commit();
  std::printf("wrote %s (%zu nodes)\n", out.c_str(), m.model.graph.nodes.size());
  return 0;
}

}  // namespace neusight::cli
