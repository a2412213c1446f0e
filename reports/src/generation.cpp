// generation.cpp - the LLM generation summary (--generate): terminal text, the JSON
// "generation" object and the HTML chart of per-step latency.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "neusight/report.h"
#include "util.h"

namespace neusight {
using detail::finite;
using detail::html_escape;
using detail::pad;
using detail::interval_text;
using nlohmann::json;

namespace {

// Binary units, as the GPU's memory is counted when the sequences that fit are (its listed GB
// as GiB) and as the memory warning says it.
std::string bytes_text(double b) {
  char buf[48];
  if (b >= 1073741824.0) std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1073741824.0);
  else if (b >= 1048576.0) std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

std::string num(double v, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, finite(v));
  return buf;
}

// How the cache bytes come about: "32 layers x 8 KV heads x 128 x 640 tokens x 1", a latent
// cache's one tensor, sliding-window layers' window.
std::string kv_cache_formula(const GenerationReport& g) {
  if (g.layers == 0 && g.state_layers > 0)  // a state-space model: no keys and values
    return std::to_string(g.state_layers) + " recurrent layers' convolution and scan states x " + std::to_string(g.batch);
  std::string s = std::to_string(g.layers) + " layers x ";
  s += g.kv_tensors == 1 ? "a latent of " + std::to_string(g.head_dim)
                         : std::to_string(g.kv_heads) + " KV heads x " + std::to_string(g.head_dim);
  if (g.encoder_decoder())
    s += " x (" + std::to_string(g.decoder_tokens) + " decoder + " + std::to_string(g.encoder_tokens) + " encoder tokens) x " +
         std::to_string(g.batch);
  else
    s += " x " + std::to_string(g.prompt + g.new_tokens) + " tokens x " + std::to_string(g.batch);
  if (!g.kv_dtype.empty()) s += " in " + g.kv_dtype;
  if (g.sliding_layers > 0 && g.window > 0)
    s += "; " + std::to_string(g.sliding_layers) + " sliding-window layers keep " + std::to_string(g.window);
  if (g.state_layers > 0)
    s += "; and " + std::to_string(g.state_layers) + " recurrent layers' states, " + num(g.state_bytes / 1e6, 1) + " MB";
  return s;
}

// interval_text of a time in ms.
std::string ms_interval(double low, double high) { return interval_text(high > low, format_ms(low), format_ms(high), " ms"); }

// Pipeline parallelism: the stages, microbatches, link, and one microbatch's stage times.
json pipeline_json(const GenerationReport& g) {
  auto finite_all = [](std::vector<double> v) {
    for (double& x : v) x = finite(x);
    return v;
  };
  return {{"stages", g.pp},
          {"microbatches", g.microbatches},
          {"micro_batch", g.micro_batch},
          {"link", g.pp_link},
          {"prefill_stage_ms", finite_all(g.prefill_stage_ms)},
          {"step_stage_ms", finite_all(g.step_stage_ms)},
          {"prefill_send_ms", finite(g.prefill_hop_ms)},
          {"step_send_ms", finite(g.step_hop_ms)}};
}

// "prompt P tokens", with the cached prefix (--prefix-cached) where there is one.
std::string prompt_text(const GenerationReport& g) {
  return "prompt " + std::to_string(g.prompt) + " tokens" +
         (g.cached_prefix > 0 ? " (the first " + std::to_string(g.cached_prefix) + " cached, held once)" : "");
}

}  // namespace

namespace detail {

// "whose time per output token is at most 50.000 ms (--tpot-slo) and whose time to first token
// is at most 2000.0 ms (--ttft-slo)": the targets a generation's batch was chosen for.
std::string targets_text(const GenerationReport::TpotSlo& t) {
  std::string s;
  if (t.tpot_ms > 0) s = "whose time per output token is at most " + format_ms(t.tpot_ms) + " ms (--tpot-slo)";
  if (t.ttft_ms > 0)
    s += std::string(s.empty() ? "" : " and ") + "whose time to first token is at most " + format_ms(t.ttft_ms) + " ms (--ttft-slo)";
  return s;
}

json generation_json(const GenerationReport& g) {
  json steps = json::array();
  for (const auto& s : g.samples)
    steps.push_back({{"kv_len", s.kv_len},
                     {"latency_ms", finite(s.latency_ms)},
                     {"latency_low_ms", finite(s.low_ms)},
                     {"latency_high_ms", finite(s.high_ms)},
                     {"by_class_ms", s.by_class}});
  json out = {{"batch", g.batch},
          {"prompt_tokens", g.prompt},
          {"new_tokens", g.new_tokens},
          {"cached_prefix", g.cached_prefix},
          {"ttft_ms", finite(g.ttft_ms)},
          {"tpot_ms", finite(g.tpot_ms)},
          {"tpot_last_ms", finite(g.tpot_last_ms)},
          {"total_ms", finite(g.total_ms)},
          {"tokens_per_s", finite(g.tokens_per_s)},
          {"requests_per_s", finite(g.requests_per_s())},
          {"ttft_low_ms", finite(g.ttft_low_ms)},
          {"ttft_high_ms", finite(g.ttft_high_ms)},
          {"tpot_low_ms", finite(g.tpot_low_ms)},
          {"tpot_high_ms", finite(g.tpot_high_ms)},
          {"total_low_ms", finite(g.total_low_ms)},
          {"total_high_ms", finite(g.total_high_ms)},
          {"tokens_per_s_low", finite(g.tokens_per_s_low)},
          {"tokens_per_s_high", finite(g.tokens_per_s_high)},
          {"kv_cache_bytes", finite(g.kv_cache_bytes)},
          {"weight_bytes", finite(g.weight_bytes)},
          {"lora", {{"rank", g.lora_rank}, {"adapters", g.lora_adapters}, {"bytes", finite(g.lora_bytes)}}},
          {"embedding_bytes", finite(g.embedding_bytes)},
          {"activation_bytes", finite(g.activation_bytes)},
          {"memory_bytes", finite(g.memory_bytes)},
          {"tensor_parallel", g.tp},
          {"expert_parallel", g.ep},
          {"pipeline_parallel", g.pp},
          {"gpus", g.gpus()},
          {"memory_per_gpu_bytes", finite(g.memory_per_gpu_bytes)},
          {"max_batch", g.max_batch},
          {"max_tokens", g.max_tokens},
          {"max_tokens_positions", g.max_tokens_positions},
          {"weight_read_ms", finite(g.weight_read_ms)},
          {"prefill_tflops", finite(g.prefill_tflops)},
          {"prefill_peak_math", g.prefill_peak_math},
          {"prefill_peak_tflops", finite(g.prefill_peak_tflops)},
          {"prefill_mfu", finite(g.prefill_mfu())},
          {"decode_bytes_per_token", finite(g.decode_bytes_per_token)},
          {"decode_gbps", finite(g.decode_gbps)},
          {"decode_mbu", finite(g.decode_mbu)},
          {"usd_per_gpu_hour", finite(g.usd_per_gpu_hour)},
          {"usd_per_m_tokens", finite(g.usd_per_m_tokens)},
          {"usd_per_m_tokens_low", finite(g.usd_per_m_tokens_low)},
          {"usd_per_m_tokens_high", finite(g.usd_per_m_tokens_high)},
          {"kv_cache", {{"layers", g.layers}, {"kv_heads", g.kv_heads}, {"head_dim", g.head_dim}, {"tensors", g.kv_tensors},
                        {"sliding_layers", g.sliding_layers}, {"window", g.window}, {"dtype", g.kv_dtype},
                        {"state_layers", g.state_layers}, {"state_bytes", finite(g.state_bytes)},
                        {"encoder_decoder", g.encoder_decoder()}, {"decoder_tokens", g.decoder_tokens},
                        {"encoder_tokens", g.encoder_tokens}}},
          {"execution", g.execution},
          {"prefill_by_class_ms", g.prefill_by_class},
          {"decode_by_class_ms", g.decode_by_class},
          {"prefill_attention_ms", finite(g.prefill_attention_ms)},
          {"decode_attention_ms", finite(g.decode_attention_ms)},
          {"decode_samples", std::move(steps)}};
  // The last predicted decode step's nodes that run kernels: where a step's time goes.
  json step_nodes = json::array();
  for (const auto& n : g.step_nodes)
    if (!n.kernels.empty())
      step_nodes.push_back({{"name", n.name},
                            {"op_type", n.op_type},
                            {"class", kernel_class_name(detail::main_kernel(n)->kernel.cls)},
                            {"latency_ms", finite(n.latency_ms)}});
  out["decode_step"] = {{"kv_len", g.step_kv_len}, {"latency_ms", finite(g.step_node_ms)}, {"nodes", std::move(step_nodes)}};
  const auto& slo = g.tpot_slo;
  if (slo.active())
    out["tpot_slo"] = {{"tpot_ms", finite(slo.tpot_ms)},
                       {"ttft_ms", finite(slo.ttft_ms)},
                       {"met", slo.met},
                       {"batch", g.batch},
                       {"next_batch", slo.next_batch},
                       {"next_tpot_ms", finite(slo.next_tpot_ms)},
                       {"next_ttft_ms", finite(slo.next_ttft_ms)},
                       {"limit", slo.limit()}};
  if (g.pp > 1) out["pipeline"] = pipeline_json(g);
  const auto& sp = g.speculative;
  if (sp.proposed > 0)
    out["speculative"] = {{"proposed", sp.proposed},
                          {"acceptance", finite(sp.acceptance)},
                          {"tokens_per_step", finite(sp.tokens_per_step)},
                          {"verify_ms", finite(sp.verify_ms)},
                          {"draft_step_ms", finite(sp.draft_step_ms)},
                          {"draft_ttft_ms", finite(sp.draft_ttft_ms)},
                          {"draft", sp.draft},
                          {"draft_weight_bytes", finite(sp.draft_weight_bytes)},
                          {"draft_kv_cache_bytes", finite(sp.draft_kv_cache_bytes)}};
  return out;
}

// The slowest nodes of the last decode step predicted (the first GPU's), with their share of
// the step: where a token's time goes.
std::string decode_step_html(const Report& r) {
  const GenerationReport& g = *r.generation;
  const size_t all = detail::kernel_nodes(g.step_nodes).size();
  if (all == 0 || !(g.step_node_ms > 0)) return "";
  const std::vector<const NodeReport*> rows = detail::kernel_nodes(g.step_nodes, 15);
  const size_t shown = rows.size();
  std::ostringstream os;
  os << "<h2>Slowest nodes of a decode step</h2>\n<p class=\"sub\">" << html_escape(r.gpu.name) << ", the last step predicted ("
     << g.step_kv_len << " tokens cached): " << format_ms(g.step_node_ms) << " ms; the " << shown << " slowest of "
     << all << " nodes that run kernels</p>\n"
     << "<table><thead><tr><th>node</th><th>op</th><th>class</th><th class=\"n\">ms</th><th class=\"n\">% of the step</th>"
        "</tr></thead><tbody>\n";
  for (size_t i = 0; i < shown; ++i) {
    const NodeReport& n = *rows[i];
    os << "<tr><td>" << html_escape(n.name) << "</td><td>" << html_escape(n.op_type) << "</td><td>"
       << kernel_class_name(detail::main_kernel(n)->kernel.cls) << "</td><td class=\"n\">" << format_ms(n.latency_ms)
       << "</td><td class=\"n\">" << num(100 * n.latency_ms / g.step_node_ms, 1) << "</td></tr>\n";
  }
  os << "</tbody></table>\n";
  return os.str();
}

std::string generation_html(const std::vector<Report>& reports) {
  std::vector<const Report*> rs;
  for (const auto& r : reports)
    if (r.generation && !r.generation->step_ms.empty()) rs.push_back(&r);
  if (rs.empty()) return "";
  const GenerationReport& g0 = *rs.front()->generation;
  std::ostringstream os;
  const bool slo = g0.tpot_slo.active();  // the batch was chosen per GPU
  os << "<h2>Generation</h2>\n<p class=\"sub\">" << (slo ? std::string() : "batch " + std::to_string(g0.batch) + ", ")
     << prompt_text(g0) << ", " << g0.new_tokens << " new tokens; " << html_escape(g0.execution) << "</p>\n";
  if (slo)
    os << "<p class=\"sub\">batch per GPU: the largest " << html_escape(targets_text(g0.tpot_slo)) << "</p>\n";
  os << "<table><thead><tr><th>gpu</th>" << (slo ? "<th class=\"n\">batch</th>" : "")
     << "<th class=\"n\">TTFT ms</th><th class=\"n\">TPOT ms</th>"
        "<th class=\"n\">last TPOT ms</th><th class=\"n\">total ms</th><th class=\"n\">tokens/s</th>"
        "<th class=\"n\">KV cache</th><th class=\"n\">memory</th><th class=\"n\">sequences that fit</th></tr></thead>"
        "<tbody>\n";
  for (const Report* r : rs) {
    const GenerationReport& g = *r->generation;
    os << "<tr><td>" << html_escape(r->gpu.name) << "</td><td class=\"n\">"
       << (slo ? std::to_string(g.batch) + (g.tpot_slo.met ? "" : " (misses)") + "</td><td class=\"n\">" : "")
       << html_with_interval(format_ms(g.ttft_ms), format_ms(g.ttft_low_ms), format_ms(g.ttft_high_ms),
                             g.ttft_high_ms > g.ttft_low_ms)
       << "</td><td class=\"n\">"
       << html_with_interval(format_ms(g.tpot_ms), format_ms(g.tpot_low_ms), format_ms(g.tpot_high_ms),
                             g.tpot_high_ms > g.tpot_low_ms)
       << "</td><td class=\"n\">" << format_ms(g.tpot_last_ms) << "</td><td class=\"n\">"
       << html_with_interval(format_ms(g.total_ms), format_ms(g.total_low_ms), format_ms(g.total_high_ms),
                             g.total_high_ms > g.total_low_ms)
       << "</td><td class=\"n\">"
       << html_with_interval(num(g.tokens_per_s, 1), num(g.tokens_per_s_low, 1), num(g.tokens_per_s_high, 1),
                             g.tokens_per_s_high > g.tokens_per_s_low)
       << "</td><td class=\"n\">" << bytes_text(g.kv_cache_bytes) << "</td><td class=\"n\">"
       << bytes_text(g.memory_bytes) << "</td><td class=\"n\">" << g.max_batch << "</td></tr>\n";
  }
  os << "</tbody></table>\n";
  if (g0.ttft_high_ms > g0.ttft_low_ms)
    os << "<p class=\"sub\">under each time and rate: its 80% interval (the prefill's and every decode step's, "
          "added up)</p>\n";
  // Per-step latency: one polyline per GPU over the decode steps (x: output token).
  const double W = 980, H = 300, left = 70, right = 150, top = 10, bottom = 40;
  double ymax = 0;
  size_t steps = 0;
  for (const Report* r : rs) {
    for (double v : r->generation->step_ms) ymax = std::max(ymax, finite(v));
    steps = std::max(steps, r->generation->step_ms.size());
  }
  if (ymax <= 0) ymax = 1;
  const double pw = W - left - right, ph = H - top - bottom;
  static const char* colors[] = {"#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2", "#edc948", "#9c755f"};
  os << "<h2>Decode step latency along the generation</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << W
     << " " << H << "\" width=\"" << W << "\" height=\"" << H << "\" role=\"img\">\n";
  os << "<line x1=\"" << left << "\" y1=\"" << top + ph << "\" x2=\"" << left + pw << "\" y2=\"" << top + ph
     << "\" stroke=\"#999\"/><line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << top + ph
     << "\" stroke=\"#999\"/>\n";
  for (int t = 0; t <= 4; ++t) {
    const double y = top + ph - ph * t / 4.0;
    os << "<text x=\"" << left - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << format_ms(ymax * t / 4.0)
       << "</text>";
    const double x = left + pw * t / 4.0;
    const double token = steps > 1 ? double(steps - 1) * t / 4.0 : 0;
    os << "<text x=\"" << x << "\" y=\"" << top + ph + 16 << "\" text-anchor=\"middle\">"
       << static_cast<int64_t>(std::llround(token)) + g0.prompt << "</text>";
  }
  os << "<text x=\"" << left + pw / 2 << "\" y=\"" << H - 6 << "\" text-anchor=\"middle\">KV-cache length (tokens)</text>"
     << "<text x=\"12\" y=\"" << top + ph / 2 << "\" transform=\"rotate(-90 12 " << top + ph / 2
     << ")\" text-anchor=\"middle\">ms per step</text>\n";
  for (size_t i = 0; i < rs.size(); ++i) {
    const GenerationReport& g = *rs[i]->generation;
    const char* col = colors[i % (sizeof colors / sizeof colors[0])];
    // At most ~1000 points: a long generation is drawn at a stride (the line is piecewise linear).
    const size_t n = g.step_ms.size(), stride = std::max<size_t>(1, n / 1000);
    os << "<polyline fill=\"none\" stroke=\"" << col << "\" stroke-width=\"2\" points=\"";
    for (size_t s = 0; s < n; s += stride) {
      const double x = left + (steps > 1 ? pw * double(s) / double(steps - 1) : pw / 2);
      os << num(x, 1) << "," << num(top + ph - ph * finite(g.step_ms[s]) / ymax, 1) << " ";
    }
    if ((n - 1) % stride != 0) {
      const double x = left + (steps > 1 ? pw * double(n - 1) / double(steps - 1) : pw / 2);
      os << num(x, 1) << "," << num(top + ph - ph * finite(g.step_ms.back()) / ymax, 1);
    }
    os << "\"><title>" << html_escape(rs[i]->gpu.name) << "</title></polyline>\n";
    for (const auto& smp : g.samples) {
      const double x = left + (steps > 1 ? pw * double(smp.kv_len - g.prompt) / double(steps - 1) : pw / 2);
      os << "<circle cx=\"" << num(x, 1) << "\" cy=\"" << num(top + ph - ph * finite(smp.latency_ms) / ymax, 1)
         << "\" r=\"3\" fill=\"" << col << "\"><title>" << html_escape(rs[i]->gpu.name) << ", KV " << smp.kv_len << ": "
         << format_ms(smp.latency_ms) << " ms (predicted)</title></circle>";
    }
    // The legend: a swatch of the line and the GPU's alias (the page's CSS sets svg text's fill).
    const double ly = top + 10 + 16 * i;
    os << "<line x1=\"" << left + pw + 8 << "\" y1=\"" << ly << "\" x2=\"" << left + pw + 24 << "\" y2=\"" << ly
       << "\" stroke=\"" << col << "\" stroke-width=\"3\"/><text x=\"" << left + pw + 30 << "\" y=\"" << ly + 4
       << "\">" << html_escape(rs[i]->gpu.alias()) << "</text>\n";
  }
  os << "</svg>\n<p class=\"note\">Dots: decode steps predicted; the line between them is interpolated.</p>\n";
  os << decode_step_html(*rs.front());
  os << "<p class=\"note\">The sections below are the prefill (one forward pass over the prompt).</p>\n";
  return os.str();
}

}  // namespace detail

namespace {

// "  TPOT target   50.000 ms (batch 12 meets it, batch 13 takes 52.100 ms)\n" and its TTFT twin,
// for each target the batch was chosen for.
std::string target_lines(const GenerationReport& g) {
  const auto& slo = g.tpot_slo;
  std::ostringstream os;
  auto line = [&](const char* name, double target, double value, double next, const char* unit, const char* key) {
    if (!(target > 0)) return;
    os << "  " << name << " target          " << pad(format_ms(target), 11, true) << " ms (";
    const std::string limit = slo.limit();
    if (!slo.met)
      os << "not met: batch 1 takes " << format_ms(value) << " ms" << unit
         << (value <= target ? (slo.tpot_ms > 0 && slo.ttft_ms > 0 ? " but misses the other target or does not fit" : " but does not fit")
                             : "")
         << ")\n";
    else if (limit == key)
      os << "batch " << g.batch << " meets it, batch " << slo.next_batch << " takes " << format_ms(next) << " ms)\n";
    else if (limit == "memory")
      os << "met by batch " << g.batch << ", the most sequences that fit beside their activations)\n";
    else
      os << "batch " << g.batch << " meets it with " << format_ms(value) << " ms" << unit << "; the other target stops batch "
         << slo.next_batch << ")\n";
  };
  line("TPOT", slo.tpot_ms, g.tpot_ms, slo.next_tpot_ms, " a token", "tpot");
  line("TTFT", slo.ttft_ms, g.ttft_ms, slo.next_ttft_ms, " to the first token", "ttft");
  return os.str();
}

// "  utilization  prefill 45.2% of the bf16-tensor dense peak (MFU), decode 3021 GB/s a GPU, 63.0% of its DRAM
// bandwidth (MBU)\n"; empty when neither is known.
std::string utilization_line(const GenerationReport& g) {
  std::string parts;
  if (g.prefill_peak_tflops > 0)
    parts = "prefill " + num(100 * g.prefill_mfu(), 1) + "% of the " + g.prefill_peak_math + " dense peak (MFU)";
  if (g.decode_mbu > 0)
    parts += (parts.empty() ? "" : ", ") + std::string("decode ") + num(g.decode_gbps, 0) + " GB/s" +
             (g.gpus() > 1 ? " a GPU" : "") + ", " + num(100 * g.decode_mbu, 1) + "% of the DRAM bandwidth (MBU)";
  return parts.empty() ? std::string() : "  utilization          " + parts + "\n";
}

// "  fits ..." and "  longest sequence ...": the sequences a GPU's memory holds, and the longest
// one at this batch (empty for a GPU of unknown memory).
std::string capacity_lines(const Report& r) {
  const GenerationReport& g = *r.generation;
  if (!(r.gpu.mem_gb > 0)) return "";
  std::ostringstream os;
  os << "  fits                 " << pad(std::to_string(g.max_batch) + " seqs", 11, true) << " (of "
     << (g.encoder_decoder() ? std::to_string(g.decoder_tokens) + " decoder + " + std::to_string(g.encoder_tokens) + " encoder"
                             : std::to_string(g.prompt + g.new_tokens))
     << " tokens: their KV caches beside the weights and activations in " << num(100 * GenerationReport::kServingMemoryFraction, 0)
     << "% of " << (g.gpus() > 1 ? "each GPU's" : "the GPU's") << " memory)\n";
  if (g.max_tokens > 0)
    os << "  longest sequence     " << pad(std::to_string(g.max_tokens) + " tokens", 11, true) << " (prompt and new "
       << "tokens whose KV cache fits at batch " << g.batch << " beside the same weights and activations"
       << (g.max_tokens_positions ? "; the model's learned positions bound it" : "") << ")\n";
  return os.str();
}

}  // namespace

std::string format_generation(const Report& r, bool color) {
  if (!r.generation) return "";
  const GenerationReport& g = *r.generation;
  auto bold = [&](const std::string& s) { return color ? "\033[1m" + s + "\033[0m" : s; };
  std::ostringstream os;
  os << bold("generation on " + r.gpu.name) << ": batch " << g.batch << ", " << prompt_text(g) << ", "
     << g.new_tokens << " new tokens, " << dtype_label(r) << " (" << g.execution << ")\n";
  os << "  time to first token  " << pad(format_ms(g.ttft_ms), 11, true) << " ms" << ms_interval(g.ttft_low_ms, g.ttft_high_ms)
     << "\n"
     << "  time per token       " << pad(format_ms(g.tpot_ms), 11, true) << " ms ("
     << (g.tpot_high_ms > g.tpot_low_ms
             ? "80% interval " + format_ms(g.tpot_low_ms) + " - " + format_ms(g.tpot_high_ms) + " ms; "
             : std::string())
     << "last step " << format_ms(g.tpot_last_ms) << " ms; weights / DRAM bandwidth " << format_ms(g.weight_read_ms)
     // Speculative decoding: the bound is a verifying step's, which yields several tokens.
     << (g.speculative.proposed > 0 ? " ms a step of " + num(g.speculative.tokens_per_step, 2) + " tokens)\n" : " ms)\n")
     << "  total                " << pad(format_ms(g.total_ms), 11, true) << " ms" << ms_interval(g.total_low_ms, g.total_high_ms)
     << "\n"
     << "  output tokens/s      " << pad(num(g.tokens_per_s, 1), 11, true)
     << interval_text(g.tokens_per_s_high > g.tokens_per_s_low, num(g.tokens_per_s_low, 1), num(g.tokens_per_s_high, 1),
                      "")
     << "; " << num(g.requests_per_s(), 2) << " requests/s (the batch's sequences over the total)\n"
     << (g.usd_per_m_tokens > 0
             ? "  cost                 " + pad(format_usd(g.usd_per_m_tokens), 11, true) + " per 1M output tokens" +
                   interval_text(g.usd_per_m_tokens_high > g.usd_per_m_tokens_low, format_usd(g.usd_per_m_tokens_low),
                                 format_usd(g.usd_per_m_tokens_high), "") +
                   " at " + format_usd(g.usd_per_gpu_hour) + " a GPU-hour" + (g.gpus() > 1 ? " x " + std::to_string(g.gpus()) + " GPUs" : "") + "\n"
             : std::string())
     << utilization_line(g)
     << "  KV cache             " << pad(bytes_text(g.kv_cache_bytes), 11, true) << " (" << kv_cache_formula(g) << ")\n"
     << "  memory               " << pad(bytes_text(g.memory_bytes), 11, true) << " (weights "
     << bytes_text(g.weight_bytes)
     << (g.lora_rank > 0 ? " with " + (g.lora_adapters > 1 ? std::to_string(g.lora_adapters) : std::string("a")) +
                               " rank-" + std::to_string(g.lora_rank) + " LoRA adapter" +
                               (g.lora_adapters > 1 ? "s" : "") + " of " + bytes_text(g.lora_bytes)
                         : std::string())
     << " + KV cache + activations " << bytes_text(g.activation_bytes)
     << (g.speculative.draft.empty()
             ? std::string()
             : " + the draft's weights and cache " +
                   bytes_text(g.speculative.draft_weight_bytes + g.speculative.draft_kv_cache_bytes))
     << "; GPU " << num(r.gpu.mem_gb, 0) << " GiB)\n";
  os << capacity_lines(r);
  os << target_lines(g);
  if (g.tp > 1)
    os << "  tensor parallel      " << pad(std::to_string(g.tp) + " GPUs", 11, true) << " (" << g.link
       << (g.pp > 1 ? ")\n" : "; " + bytes_text(g.memory_per_gpu_bytes) + " per GPU; times and the bound are one GPU's)\n");
  if (g.pp > 1) {
    // Each stage's time, or past eight stages their range.
    auto stages = [](const std::vector<double>& ms) {
      if (ms.size() > 8) {
        const auto [lo, hi] = std::minmax_element(ms.begin(), ms.end());
        return format_ms(*lo) + " to " + format_ms(*hi);
      }
      std::string t;
      for (double v : ms) t += (t.empty() ? "" : " / ") + format_ms(v);
      return t;
    };
    os << "  pipeline parallel    " << pad(std::to_string(g.pp) + " stages", 11, true) << " (" << g.pp_link << "; "
       << g.microbatches << (g.microbatches > 1 ? " microbatches" : " microbatch") << " of up to " << g.micro_batch
       << (g.micro_batch > 1 ? " sequences" : " sequence") << "; " << bytes_text(g.memory_per_gpu_bytes)
       << " per GPU, the fullest stage's)\n"
       << "  stages               " << pad("", 11) << " (one microbatch: prefill " << stages(g.prefill_stage_ms)
       << " ms, decode step " << stages(g.step_stage_ms) << " ms; the classes below are one GPU's, 'pipeline' its idle "
       << "time and sends)\n";
  }
  if (g.speculative.proposed > 0) {
    const auto& sp = g.speculative;
    os << "  speculative          " << pad(num(sp.tokens_per_step, 2) + " tokens", 11, true) << " a step (" << sp.proposed
       << " proposed, each accepted with p " << num(sp.acceptance, 2) << "; first step: verify " << format_ms(sp.verify_ms)
       << " ms";
    if (!sp.draft.empty())
      os << " + " << sp.proposed << " x draft " << format_ms(sp.draft_step_ms) << " ms; the draft's prefill "
         << format_ms(sp.draft_ttft_ms) << " ms is in TTFT";
    os << ")\n";
  }
  if (g.ep > 1)
    os << "  expert parallel      " << pad(std::to_string(g.ep) + " GPUs", 11, true)
       << " (whole experts per GPU; times are the busiest GPU's under uniform routing)\n";
  std::set<std::string> classes;
  for (const auto& [c, ms] : g.prefill_by_class) classes.insert(c);
  for (const auto& [c, ms] : g.decode_by_class) classes.insert(c);
  double decode = 0;
  for (const auto& [c, ms] : g.decode_by_class) decode += ms;
  os << "  " << pad("by class", 12) << " " << pad("prefill ms", 12, true) << " " << pad("decode ms", 12, true) << " "
     << pad("decode %", 9, true) << "\n";
  for (const auto& c : classes) {
    const auto p = g.prefill_by_class.find(c);
    const auto d = g.decode_by_class.find(c);
    const double dm = d == g.decode_by_class.end() ? 0 : d->second;
    os << "  " << pad(c, 12) << " " << pad(format_ms(p == g.prefill_by_class.end() ? 0 : p->second), 12, true) << " "
       << pad(format_ms(dm), 12, true) << " " << pad(num(decode > 0 ? 100 * dm / decode : 0, 1), 9, true) << "\n";
  }
  if (g.prefill_attention_ms > 0 || g.decode_attention_ms > 0)
    os << "  " << pad("attention", 12) << " " << pad(format_ms(g.prefill_attention_ms), 12, true) << " "
       << pad(format_ms(g.decode_attention_ms), 12, true) << " "
       << pad(num(decode > 0 ? 100 * g.decode_attention_ms / decode : 0, 1), 9, true)
       << "  (FlashAttention kernels, counted in gemm and reduce above)\n";
  return os.str();
}

std::string format_generation_gpu_table(const std::vector<Report>& reports) {
  std::ostringstream os;
  size_t w = 3;
  for (const auto& r : reports) w = std::max(w, r.gpu.name.size());
  const bool slo = !reports.empty() && reports.front().generation && reports.front().generation->tpot_slo.active();
  // The tokens/s interval where the predictor gives one (not the roofline).
  const bool interval = std::any_of(reports.begin(), reports.end(), [](const Report& r) {
    return r.generation && r.generation->tokens_per_s_high > r.generation->tokens_per_s_low;
  });
  // The batch column fits a missed target's mark.
  const bool missed = slo && std::any_of(reports.begin(), reports.end(),
                                         [](const Report& r) { return r.generation && !r.generation->tpot_slo.met; });
  const size_t bw = missed ? 14 : 7;
  // The cost of a million output tokens where --gpu-cost prices the GPUs.
  const bool cost = std::any_of(reports.begin(), reports.end(),
                                [](const Report& r) { return r.generation && r.generation->usd_per_m_tokens > 0; });
  os << pad("gpu", w) << " " << (slo ? pad("batch", bw, true) + " " : "") << pad("TTFT ms", 11, true) << " "
     << pad("TPOT ms", 10, true) << " "
     << pad("total ms", 11, true) << " " << pad("tokens/s", 10, true) << " "
     << (interval ? pad("80% interval", 17, true) + " " : "") << pad("vs first", 9, true) << " "
     << (cost ? pad("$/1M tok", 9, true) + " " : "") << pad("fits seqs", 10, true) << "\n";
  const double base = reports.empty() || !reports.front().generation ? 0 : reports.front().generation->tokens_per_s;
  for (const auto& r : reports) {
    if (!r.generation) continue;
    const GenerationReport& g = *r.generation;
    // A batch that misses the target (not even batch 1 meets it) is marked, as the HTML marks it.
    const std::string batch = std::to_string(g.batch) + (g.tpot_slo.met ? "" : " (misses)");
    os << pad(r.gpu.name, w) << " " << (slo ? pad(batch, bw, true) + " " : "")
       << pad(format_ms(g.ttft_ms), 11, true) << " " << pad(format_ms(g.tpot_ms), 10, true)
       << " " << pad(format_ms(g.total_ms), 11, true) << " " << pad(num(g.tokens_per_s, 1), 10, true) << " "
       << (interval ? pad(num(g.tokens_per_s_low, 1) + " - " + num(g.tokens_per_s_high, 1), 17, true) + " " : "")
       << pad(num(base > 0 ? g.tokens_per_s / base : 0, 2) + "x", 9, true) << " "
       << (cost ? pad(g.usd_per_m_tokens > 0 ? format_usd(g.usd_per_m_tokens) : "-", 9, true) + " " : "")
       << pad(std::to_string(g.max_batch), 10, true) << "\n";
  }
  if (missed) {
    // "the TPOT target of 5.000 ms is", or with both "the targets (TPOT 5.000 ms, TTFT 10.000 ms) are".
    const auto& t = reports.front().generation->tpot_slo;
    const bool both = t.tpot_ms > 0 && t.ttft_ms > 0;
    auto target = [&](const char* name, double ms) {
      return ms > 0 ? std::string(name) + (both ? " " : " target of ") + format_ms(ms) + " ms" : std::string();
    };
    const std::string tpot = target("TPOT", t.tpot_ms), ttft = target("TTFT", t.ttft_ms);
    os << "(misses): " << (both ? "the targets (" + tpot + ", " + ttft + ") are" : "the " + tpot + ttft + " is")
       << " not met, not even at batch 1\n";
  }
  return os.str();
}

}  // namespace neusight
