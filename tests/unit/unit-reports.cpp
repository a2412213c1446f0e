// unit-reports.cpp - report writers on hand-built reports: layers, table, CSV, HTML, compare.
#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>

#include "neusight/compare.h"
#include "neusight/report.h"

using namespace neusight;

namespace {

KernelReport kernel(KernelClass cls, double ms, Phase phase = Phase::forward, double flops = 1e9, double bytes = 1e6) {
  KernelReport k;
  k.kernel.cls = cls;
  k.kernel.phase = phase;
  k.kernel.op = kernel_class_name(cls);
  k.kernel.flops = flops;
  k.kernel.bytes = bytes;
  k.tiling.tile = "128x128";
  k.tiling.tiles = 10;
  k.tiling.waves = 2;
  k.prediction.latency_ms = ms;
  k.prediction.roofline_ms = ms / 2;
  k.prediction.utilization = 0.5;
  k.prediction.compute_bound = cls == KernelClass::gemm;
  return k;
}

NodeReport node(const std::string& name, const std::string& op, std::vector<KernelReport> ks) {
  NodeReport n;
  n.name = name;
  n.op_type = op;
  TensorInfo out;
  out.name = name + "_out";
  out.dtype = DType::f32;
  out.has_shape = true;
  out.shape = {Dim::of(1), Dim::sym("sequence"), Dim::of(768)};
  n.outputs.push_back(out);
  n.kernels = std::move(ks);
  return n;
}

// A two-layer model: per layer a MatMul (gemm) and an Add (elementwise), plus a head.
Report model(int layers, double gemm_ms, const std::string& gpu = "NVIDIA B200") {
  Report r;
  r.gpu.name = gpu;
  r.gpu.aliases = {gpu == "NVIDIA B200" ? "b200" : "h100"};
  r.gpu.mem_bw_gbps = 8000;
  r.gpu.fp32_gflops = 80000;
  r.model_name = "m" + std::to_string(layers);
  r.predictor = "roofline";
  for (int l = 0; l < layers; ++l) {
    const std::string p = "transformer.h." + std::to_string(l);
    r.nodes.push_back(node(p + ".mlp/MatMul", "MatMul", {kernel(KernelClass::gemm, gemm_ms)}));
    r.nodes.push_back(node(p + ".mlp/Add", "Add", {kernel(KernelClass::elementwise, 0.1, Phase::forward, 1e6, 1e7)}));
  }
  r.nodes.push_back(node("lm_head/MatMul", "MatMul", {kernel(KernelClass::gemm, 2.0)}));
  r.nodes.push_back(node("shape_only", "Shape", {}));
  summarize(r);
  return r;
}

int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_CASE("reports: layer_of takes the prefix through the first number") {
  CHECK(layer_of("transformer.h.11.mlp.c_fc/MatMul") == "transformer.h.11");
  CHECK(layer_of("/model/layers.0/self_attn/q_proj/MatMul") == "/model/layers.0");
  CHECK(layer_of("lm_head/MatMul") == "lm_head");
  CHECK(layer_of("encoder/block/3/ff/Relu") == "encoder/block/3");
  CHECK(layer_of("conv1") == "conv1");
  CHECK(layer_of("") == "");
}

TEST_CASE("reports: group_by_layer sums nodes per layer in graph order") {
  const Report r = model(2, 1.0);
  const auto layers = group_by_layer(r);
  REQUIRE(layers.size() == 3);
  CHECK(layers[0].name == "transformer.h.0");
  CHECK(layers[0].nodes == 2);
  CHECK(layers[0].latency_ms == doctest::Approx(1.1));
  CHECK(layers[0].by_class.at("gemm") == doctest::Approx(1.0));
  CHECK(layers[2].name == "lm_head");
  double sum = 0;
  for (const auto& l : layers) sum += l.latency_ms;
  CHECK(sum == doctest::Approx(r.e2e_latency_ms));
}

TEST_CASE("reports: the table shows the top N, class totals and no colour unless asked") {
  Report r = model(3, 1.0);
  r.nodes[0].kernels[0].prediction.extrapolated = true;
  TableOptions o;
  o.top = 2;
  const std::string plain = format_table(r, o);
  CHECK(plain.find('\033') == std::string::npos);
  CHECK(plain.find("lm_head/MatMul") != std::string::npos);
  CHECK(plain.find("(the 2 slowest of 8 nodes)") != std::string::npos);
  CHECK(plain.find("transformer.h.0.mlp/Add") == std::string::npos);
  CHECK(plain.find("by kernel class") != std::string::npos);
  CHECK(plain.find("end-to-end latency: 5.300 ms") != std::string::npos);
  // lm_head first (2 ms), then the extrapolated MatMul of layer 0 (first of the 1 ms ties).
  CHECK(plain.find("lm_head/MatMul") < plain.find("transformer.h.0.mlp/MatMul"));
  CHECK(plain.find("1.000*") != std::string::npos);
  CHECK(plain.find("extrapolated") != std::string::npos);
  o.color = true;
  CHECK(format_table(r, o).find("\033[") != std::string::npos);
  o.color = false;
  o.top = 0;
  o.group_layers = true;
  const std::string layers = format_table(r, o);
  CHECK(layers.find("transformer.h.2 ") != std::string::npos);
  CHECK(layers.find("mlp/MatMul") == std::string::npos);
}

TEST_CASE("reports: training tables split forward, backward and update") {
  Report r = model(1, 1.0);
  r.mode = Mode::training;
  r.nodes[0].kernels.push_back(kernel(KernelClass::gemm, 2.0, Phase::backward));
  r.nodes[0].kernels.push_back(kernel(KernelClass::elementwise, 0.5, Phase::update));
  summarize(r);
  CHECK(r.backward_ms == doctest::Approx(2.0));
  const std::string t = format_table(r, TableOptions{});
  CHECK(t.find("by phase") != std::string::npos);
  CHECK(t.find("backward") != std::string::npos);
  TableOptions g;
  g.group_layers = true;
  CHECK(format_table(r, g).find("bwd ms") != std::string::npos);
}

TEST_CASE("reports: GPU table gives speed-up against the first GPU") {
  const std::vector<Report> rs = {model(2, 1.0), model(2, 2.0, "NVIDIA H100")};
  const std::string t = format_gpu_table(rs);
  CHECK(count_lines(t) == 3);
  CHECK(t.find("1.00x") != std::string::npos);
  // 4.2 ms against 6.2 ms: the second GPU runs at 0.68x the speed of the first.
  CHECK(t.find("0.68x") != std::string::npos);
  CHECK(t.find("80% interval") == std::string::npos);  // none without the predictor's interval
  std::vector<Report> with = rs;
  with[1].e2e_low_ms = 5.0;
  with[1].e2e_high_ms = 7.75;
  const std::string ti = format_gpu_table(with);
  CHECK(ti.find("80% interval") != std::string::npos);
  CHECK(ti.find("5.000 - 7.750") != std::string::npos);
  // The speed-up 4.2 / 6.2 = 0.68 from the first (no interval) to the second: down by
  // ln(7.75 / 6.2), up by ln(6.2 / 5.0), 0.54 - 0.84.
  const SpeedupInterval s = gpu_speedup_interval(4.2, 4.2, 4.2, 6.2, 5.0, 7.75);
  CHECK(s.low == doctest::Approx(4.2 / 7.75));
  CHECK(s.high == doctest::Approx(4.2 / 5.0));
  CHECK(ti.find("0.54 - 0.84") != std::string::npos);
}

TEST_CASE("reports: CSV has one row per node or per kernel, names quoted") {
  Report r = model(2, 1.0);
  r.nodes[0].name = "a,\"b\"";
  const std::string per_node = format_csv(r, false);
  CHECK(count_lines(per_node) == 1 + static_cast<int>(r.nodes.size()));
  CHECK(per_node.find("\"a,\"\"b\"\"\"") != std::string::npos);
  size_t kernels = 0;
  for (const auto& n : r.nodes) kernels += n.kernels.size();
  CHECK(count_lines(format_csv(r, true)) == 1 + static_cast<int>(kernels));
}

TEST_CASE("reports: every format says the precision each kernel's math ran in") {
  Report r = model(1, 1.0);
  r.gpu.fp16_gflops = 2250000;  // FP16 tensor cores
  for (auto& n : r.nodes)
    for (auto& k : n.kernels) k.kernel.dtype = DType::f16;
  // JSON: "math" per kernel beside the storage dtype.
  const std::string j = format_json({r});
  CHECK(j.find("\"math\": \"fp16-tensor\"") != std::string::npos);
  CHECK(j.find("\"math\": \"fp32-simt\"") != std::string::npos);  // the half-precision add computes in FP32
  // CSV: a math column per kernel and per node.
  const std::string per_kernel = format_csv(r, true), per_node = format_csv(r, false);
  CHECK(per_kernel.substr(0, per_kernel.find('\n')).find(",dtype,math,") != std::string::npos);
  CHECK(per_kernel.find(",fp16,fp16-tensor,") != std::string::npos);
  CHECK(per_node.substr(0, per_node.find('\n')).find(",class,math,") != std::string::npos);
  CHECK(per_node.find(",gemm,fp16-tensor,") != std::string::npos);
  // Terminal table and HTML: a math column.
  const std::string t = format_table(r, TableOptions{});
  CHECK(t.find(" math ") != std::string::npos);
  CHECK(t.find("fp16-tensor") != std::string::npos);
  const std::string h = format_html({r});
  CHECK(h.find("<th>math</th>") != std::string::npos);
  CHECK(h.find("<td>fp16-tensor</td>") != std::string::npos);
  // Without tensor cores for the dtype the GEMM's math runs in FP32 on CUDA cores.
  r.gpu.fp16_gflops = 0;
  CHECK(format_csv(r, false).find(",gemm,fp32-simt,") != std::string::npos);
}

TEST_CASE("reports: a streamed GEMM of one row is a GEMV on CUDA cores, of more rows on tensor cores") {
  // A GEMM priced as the stream of its operands (Prediction::streamed): one token through a
  // weight runs the libraries' GEMV on CUDA cores; 32 tokens, or a wide activation through 64
  // output columns, their split-K or narrow-tile kernels on the matrix units.
  Report r = model(1, 1.0);
  r.gpu.fp16_gflops = 2250000;
  KernelReport& k = r.nodes.front().kernels.front();
  k.kernel.dtype = DType::f16;
  k.prediction.streamed = true;
  auto math = [&](int64_t m, int64_t n) {
    k.kernel.gemm = {1, m, n, 4096};
    const std::string csv = format_csv(r, true);
    const size_t at = csv.find(",fp16,") + 6;
    return csv.substr(at, csv.find(',', at) - at);
  };
  CHECK(math(1, 4096) == "fp16-simt");
  CHECK(math(4096, 1) == "fp16-simt");
  CHECK(math(32, 4096) == "fp16-tensor");
  CHECK(math(401408, 64) == "fp16-tensor");
  k.kernel.dtype = DType::bf16;
  r.gpu.bf16_gflops = 2250000;
  CHECK(format_csv(r, true).find(",bf16,bf16-tensor,") != std::string::npos);
  k.kernel.gemm = {1, 1, 4096, 4096};
  CHECK(format_csv(r, true).find(",bf16,bf16-simt,") != std::string::npos);
  // The table's math column is as wide as its longest name (a quantized ConvInteger's).
  k.prediction.streamed = false;
  k.kernel.dtype = DType::u8;
  r.gpu.int8_gops = 4500000;
  CHECK(format_table(r, TableOptions{}).find(" uint8-tensor ") != std::string::npos);
}

TEST_CASE("reports: HTML is self-contained and escapes names") {
  Report r = model(2, 1.0);
  r.nodes[1].name = "<script>alert(1)</script>";
  const std::string h = format_html({r, model(2, 2.0, "NVIDIA H100")});
  CHECK(h.find("<script>alert(1)") == std::string::npos);
  CHECK(h.find("&lt;script&gt;alert(1)") != std::string::npos);
  CHECK(h.find("Content-Security-Policy") != std::string::npos);
  CHECK(h.find("GPU comparison") != std::string::npos);
  CHECK(h.find("Roofline on NVIDIA B200") != std::string::npos);
  // Only the SVG namespace may name a URL; nothing is fetched.
  size_t pos = 0, urls = 0, ns = 0;
  while ((pos = h.find("://", pos)) != std::string::npos) {
    ++urls;
    if (pos >= 4 && h.compare(pos - 4, 26, "http://www.w3.org/2000/svg") == 0) ++ns;
    ++pos;
  }
  CHECK(urls > 0);
  CHECK(urls == ns);
  CHECK(h.find("src=") == std::string::npos);
  CHECK(h.find("<circle") != std::string::npos);  // roofline points
}

TEST_CASE("compare: nodes match by name, then by position within an op type") {
  Report a = model(2, 1.0), b = model(1, 1.0);
  b.nodes[0].name = "renamed/MatMul";  // matched by position (first unmatched MatMul)
  summarize(b);
  const auto m = match_nodes(a, b);
  auto find = [&](const std::string& how) {
    return static_cast<int>(std::count_if(m.begin(), m.end(), [&](const NodeDelta& d) { return d.matched_by == how; }));
  };
  CHECK(find("name") == 3);      // h.0 Add, lm_head, shape_only
  CHECK(find("position") == 1);  // renamed -> transformer.h.0.mlp/MatMul
  CHECK(find("removed") == 2);   // layer 1
  CHECK(find("added") == 0);
  for (const auto& d : m)
    if (d.matched_by == "position") CHECK(d.base_name == "transformer.h.0.mlp/MatMul");
}

TEST_CASE("compare: a deeper variant's extra layer is added, not paired with an unrelated node of the base") {
  // The base's layer 1 runs its GEMM under another name (a mixture in place of the MLP); the
  // variant has three MLP layers. Its layer 1 and 2 MLP GEMMs have a name form the base knows
  // (layer 0's), so they are added; the base's odd GEMM is removed. Renumbered names
  // ("MatMul_7" against "MatMul_9") still pair by position.
  Report base = model(2, 1.0), deeper = model(3, 1.0);
  base.nodes[2].name = "transformer.h.1.moe/MatMul";
  summarize(base);
  const auto m = match_nodes(base, deeper);
  for (const auto& d : m) {
    if (d.name == "transformer.h.1.mlp/MatMul" || d.name == "transformer.h.2.mlp/MatMul") CHECK(d.matched_by == "added");
    if (d.base_name == "transformer.h.1.moe/MatMul") CHECK(d.matched_by == "removed");
  }
  Report a = model(1, 1.0), b = model(1, 1.0);
  a.nodes[0].name = "MatMul_7";
  b.nodes[0].name = "MatMul_9";
  summarize(a);
  summarize(b);
  const auto r = match_nodes(a, b);
  CHECK(std::count_if(r.begin(), r.end(), [](const NodeDelta& d) { return d.matched_by == "position"; }) == 1);
}

TEST_CASE("compare: a node onnxruntime's quantizer replaced matches the float node, either way round") {
  // quantize_dynamic writes Conv "X" as ConvInteger "X_quant" (QOperator: QLinearConv), MatMul
  // "Y" as MatMulInteger "Y_quant"; its scale Mul is a node of its own, added.
  Report fp = model(0, 1.0), q = model(0, 1.0);
  fp.nodes = {node("enc/Conv", "Conv", {kernel(KernelClass::gemm, 1.0)}),
              node("enc/MatMul", "MatMul", {kernel(KernelClass::gemm, 2.0)}),
              node("head/Conv", "Conv", {kernel(KernelClass::gemm, 1.0)})};
  q.nodes = {node("enc/Conv_quant", "ConvInteger", {kernel(KernelClass::gemm, 0.5)}),
             node("enc/Conv_quant_scales_mul", "Mul", {kernel(KernelClass::elementwise, 0.1)}),
             node("enc/MatMul_quant", "MatMulInteger", {kernel(KernelClass::gemm, 1.0)}),
             node("other/Conv_quant", "ConvInteger", {kernel(KernelClass::gemm, 0.5)})};
  summarize(fp);
  summarize(q);
  for (bool quantized_variant : {true, false}) {
    CAPTURE(quantized_variant);
    const auto m = quantized_variant ? match_nodes(fp, q) : match_nodes(q, fp);
    std::map<std::string, std::string> how;  // the quantized node's name -> its match
    for (const auto& d : m) how[quantized_variant ? (d.name.empty() ? d.base_name : d.name)
                                                  : (d.base_name.empty() ? d.name : d.base_name)] = d.matched_by;
    CHECK(how["enc/Conv_quant"] == "quantized");
    CHECK(how["enc/MatMul_quant"] == "quantized");
    // No float node "other/Conv": on its own (position pairs nodes of one op type only).
    CHECK(how["other/Conv_quant"] == (quantized_variant ? "added" : "removed"));
    CHECK(how["enc/Conv_quant_scales_mul"] == (quantized_variant ? "added" : "removed"));
  }
  const Comparison c = compare_reports({"fp32.onnx", "int8.onnx"}, {{fp}, {q}}, 10);
  CHECK(c.at(1, 0).matched_by_quantized == 2);
  CHECK(format_compare_table(c).find("as quantized 2") != std::string::npos);
  CHECK(format_compare_json(c).find("\"quantized\": 2") != std::string::npos);
}

TEST_CASE("compare: fewer layers are faster, deltas per class and changed nodes") {
  const Comparison c = compare_reports({"big.onnx", "small.onnx"}, {{model(4, 1.0)}, {model(2, 1.0)}}, 3);
  const auto& d = c.at(1, 0);
  CHECK(d.base_ms == doctest::Approx(6.4));
  CHECK(d.e2e_ms == doctest::Approx(4.2));
  CHECK(d.speedup == doctest::Approx(6.4 / 4.2));
  CHECK(d.class_delta_ms.at("gemm") == doctest::Approx(-2.0));
  CHECK(d.class_delta_ms.at("elementwise") == doctest::Approx(-0.2));
  REQUIRE(d.top_nodes.size() == 3);
  CHECK(d.top_nodes[0].matched_by == "removed");
  CHECK(d.top_nodes[0].delta_ms() == doctest::Approx(-1.0));
  CHECK(c.at(0, 0).speedup == doctest::Approx(1.0));
  const std::string t = format_compare_table(c);
  CHECK(t.find("1.52x") != std::string::npos);
  CHECK(format_compare_json(c).find("\"speedup\"") != std::string::npos);
  CHECK(format_compare_html(c).find("Nodes that changed most") != std::string::npos);
  CHECK_THROWS_AS(compare_reports({"a", "b"}, {{model(1, 1.0)}, {model(1, 1.0, "NVIDIA H100")}}), InputError);
}
