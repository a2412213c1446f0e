// html.cpp - the self-contained HTML report: inline SVG charts written here, a sortable
// table, no network (a Content-Security-Policy forbids any fetch).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "neusight/compare.h"
#include "neusight/report.h"
#include "util.h"

namespace neusight {
using detail::finite;
using detail::fixed;
using detail::html_escape;

namespace {

const char* class_color(const std::string& cls) {
  static const std::map<std::string, const char*> colors = {
      {"gemm", "#4e79a7"},   {"elementwise", "#f28e2b"}, {"softmax", "#e15759"},    {"layernorm", "#76b7b2"},
      {"reduce", "#59a14f"}, {"memory", "#edc948"},      {"collective", "#b07aa1"}, {"unknown", "#9c755f"}};
  auto it = colors.find(cls);
  return it == colors.end() ? "#bab0ac" : it->second;
}

const char* kPageHead = R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>)";

const char* kStyle = R"(</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#555;margin:0 0 12px}.cards{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}
.card{background:#f5f7fa;border:1px solid #e1e5ea;border-radius:6px;padding:8px 14px;min-width:120px}
.card b{display:block;font-size:20px}.card span{color:#666;font-size:12px}
svg{display:block;max-width:100%;height:auto}svg text{font-size:11px;fill:#333}
.legend span{display:inline-block;margin-right:14px;font-size:12px}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}
table{border-collapse:collapse;font-size:12px;width:100%}th,td{padding:3px 6px;border-bottom:1px solid #eee;text-align:left;white-space:nowrap}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f0f2f5;position:sticky;top:0}
table.sortable th{cursor:pointer;user-select:none}table.sortable th:after{content:" \2195";color:#aaa}
.wrap{max-height:560px;overflow:auto;border:1px solid #e1e5ea}.note{color:#666;font-size:12px}
pre{white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px}
input.filter{margin:4px 0 8px;padding:4px 8px;width:280px}.pos{color:#b3261e}.neg{color:#1b7f3b}
</style></head><body>
)";

const char* kScript = R"(<script>
(function(){
  function key(cell){var v=cell.getAttribute('data-v');if(v===null)v=cell.textContent;var f=parseFloat(v);return isNaN(f)||!/^[-+0-9.eE]+$/.test(v.trim())?v.toLowerCase():f;}
  document.querySelectorAll('table.sortable').forEach(function(t){
    Array.prototype.forEach.call(t.tHead.rows[0].cells,function(th,i){
      th.addEventListener('click',function(){
        var asc=th.getAttribute('data-dir')!=='asc';th.setAttribute('data-dir',asc?'asc':'desc');
        var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows);
        rows.sort(function(a,b){var x=key(a.cells[i]),y=key(b.cells[i]);
          if(typeof x!==typeof y){x=String(x);y=String(y);}return (x<y?-1:x>y?1:0)*(asc?1:-1);});
        rows.forEach(function(r){body.appendChild(r);});
      });
    });
  });
  document.querySelectorAll('input.filter').forEach(function(inp){
    var t=document.getElementById(inp.getAttribute('data-table'));
    inp.addEventListener('input',function(){var q=inp.value.toLowerCase();
      Array.prototype.forEach.call(t.tBodies[0].rows,function(r){r.style.display=r.textContent.toLowerCase().indexOf(q)>=0?'':'none';});});
  });
})();
</script>
)";

std::string num(double v, int d = 2) { return fixed(v, d); }

// A horizontal bar chart; each bar a stack of class-coloured segments.
struct Segment {
  std::string cls;
  double value;
};
struct Bar {
  std::string label;
  std::vector<Segment> segments;
  std::string right;  // text after the bar
  std::string title;  // hover text
};

std::string hbar_chart(const std::vector<Bar>& bars, const std::string& unit, int row_h = 18) {
  // The text right of the bars as wide as its longest line needs (about 7 px a character of
  // the page's 12 px font), so that a total with its interval is never cut at the edge.
  size_t right_chars = 0;
  for (const auto& b : bars) right_chars = std::max(right_chars, b.right.size());
  const double label_w = 250, bar_w = 620, right_w = std::max(110.0, 7.0 * double(right_chars) + 12),
               width = label_w + bar_w + right_w;
  double max_total = 0;
  for (const auto& b : bars) {
    double t = 0;
    for (const auto& s : b.segments) t += std::max(0.0, finite(s.value));
    max_total = std::max(max_total, t);
  }
  if (max_total <= 0) max_total = 1;
  const double height = bars.size() * row_h + 24;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << width << " " << height << "\" width=\"" << width
     << "\" height=\"" << height << "\" role=\"img\">\n";
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const double y = i * row_h + 2;
    std::string label = b.label.size() > 40 ? "…" + b.label.substr(b.label.size() - 39) : b.label;
    os << "<text x=\"" << label_w - 6 << "\" y=\"" << y + row_h * 0.65 << "\" text-anchor=\"end\">" << html_escape(label)
       << "</text>";
    double x = label_w;
    for (const auto& s : b.segments) {
      const double w = std::max(0.0, finite(s.value)) / max_total * bar_w;
      if (w <= 0) continue;
      os << "<rect x=\"" << num(x) << "\" y=\"" << y << "\" width=\"" << num(std::max(w, 0.5)) << "\" height=\""
         << row_h - 4 << "\" fill=\"" << class_color(s.cls) << "\"><title>" << html_escape(b.label) << " — "
         << html_escape(s.cls) << ": " << format_ms(s.value) << " " << unit << "</title></rect>";
      x += w;
    }
    os << "<text x=\"" << num(x + 6) << "\" y=\"" << y + row_h * 0.65 << "\">" << html_escape(b.right) << "</text>\n";
  }
  // Axis: 0 and max.
  const double ay = bars.size() * row_h + 4;
  os << "<line x1=\"" << label_w << "\" y1=\"" << ay << "\" x2=\"" << label_w + bar_w << "\" y2=\"" << ay
     << "\" stroke=\"#999\"/>";
  for (int t = 0; t <= 4; ++t) {
    const double x = label_w + bar_w * t / 4.0;
    os << "<line x1=\"" << x << "\" y1=\"" << ay << "\" x2=\"" << x << "\" y2=\"" << ay + 4 << "\" stroke=\"#999\"/>"
       << "<text x=\"" << x << "\" y=\"" << ay + 16 << "\" text-anchor=\"middle\">" << format_ms(max_total * t / 4.0)
       << (t == 4 ? " " + unit : "") << "</text>";
  }
  os << "</svg>\n";
  return os.str();
}

std::string legend(const std::vector<std::string>& classes) {
  std::ostringstream os;
  os << "<div class=\"legend\">";
  for (const auto& c : classes)
    os << "<span><i style=\"background:" << class_color(c) << "\"></i>" << html_escape(c) << "</span>";
  os << "</div>\n";
  return os.str();
}

std::vector<std::string> classes_of(const std::vector<Report>& reports) {
  std::vector<std::string> out;
  for (const auto& r : reports)
    for (const auto& [c, ms] : r.totals_by_class)
      if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  return out;
}

std::string card(const std::string& value, const std::string& what) {
  return "<div class=\"card\"><b>" + html_escape(value) + "</b><span>" + html_escape(what) + "</span></div>";
}

// Kernels in execution order as one strip: x is time.
std::string timeline(const Report& r) {
  std::vector<std::pair<const KernelReport*, std::string>> items;
  for (const auto& n : r.nodes)
    for (const auto& k : n.kernels) items.push_back({&k, n.name});
  for (const auto& k : r.extra_kernels) items.push_back({&k, std::string()});
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    return static_cast<int>(a.first->kernel.phase) < static_cast<int>(b.first->kernel.phase);
  });
  const double width = 980, height = 46, total = r.share_base_ms() > 0 ? r.share_base_ms() : 1;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << width << " " << height << "\" width=\"" << width
     << "\" height=\"" << height << "\" role=\"img\">\n";
  double t = 0;
  for (const auto& [k, name] : items) {
    const double ms = finite(k->prediction.latency_ms);
    const double x = t / total * width, w = ms / total * width;
    t += ms;
    if (w < 0.05) continue;
    os << "<rect x=\"" << num(x, 3) << "\" y=\"4\" width=\"" << num(w, 3) << "\" height=\"24\" fill=\""
       << class_color(kernel_class_name(k->kernel.cls)) << "\"><title>" << html_escape(name) << " "
       << phase_name(k->kernel.phase) << " " << kernel_class_name(k->kernel.cls) << " " << html_escape(k->kernel.op)
       << ": " << format_ms(ms) << " ms</title></rect>";
  }
  os << "\n<text x=\"0\" y=\"42\">0 ms</text><text x=\"" << width << "\" y=\"42\" text-anchor=\"end\">"
     << format_ms(r.e2e_latency_ms) << " ms</text></svg>\n";
  return os.str();
}

// Kernels on the GPU's roofline: arithmetic intensity (FLOP/byte) against achieved FLOP/s.
std::string roofline(const Report& r) {
  struct Pt {
    double ai, gflops;
    std::string cls, title;
    bool extrapolated;
  };
  std::vector<Pt> pts;
  size_t skipped = 0;
  auto add = [&](const std::string& node, const KernelReport& k) {
    const double ms = finite(k.prediction.latency_ms), fl = finite(k.kernel.flops), by = finite(k.kernel.bytes);
    if (ms <= 0 || fl <= 0 || by <= 0) {
      ++skipped;
      return;
    }
    const double g = fl / (ms * 1e-3) / 1e9;
    pts.push_back({fl / by, g, kernel_class_name(k.kernel.cls),
                   node + " " + phase_name(k.kernel.phase) + " " + k.kernel.op + ": AI " + num(fl / by) + " FLOP/B, " +
                       num(g, 1) + " GFLOP/s, " + format_ms(ms) + " ms",
                   k.prediction.extrapolated});
  };
  for (const auto& n : r.nodes)
    for (const auto& k : n.kernels) add(n.name, k);
  for (const auto& k : r.extra_kernels) add("", k);
  const double bw = r.gpu.mem_bw_gbps;  // GB/s -> GFLOP/s per FLOP/B
  const double peak_fp32 = r.gpu.fp32_gflops;
  const double peak_dt = r.gpu.peak_gflops(r.dtype);
  const double peak = std::max(peak_fp32, peak_dt);
  double x0 = 1e-2, x1 = 1e4, y1 = peak > 0 ? peak * 2 : 1e6, y0 = y1 / 1e6;
  for (const auto& p : pts) {
    x0 = std::min(x0, p.ai), x1 = std::max(x1, p.ai);
    y0 = std::min(y0, p.gflops), y1 = std::max(y1, p.gflops);
  }
  double lx0 = std::floor(std::log10(x0)), lx1 = std::ceil(std::log10(x1));
  double ly0 = std::floor(std::log10(y0)), ly1 = std::ceil(std::log10(y1));
  if (ly1 - ly0 > 9) ly0 = ly1 - 9;
  const double W = 900, H = 440, L = 70, T = 14, R = 20, B = 40, pw = W - L - R, ph = H - T - B;
  auto sx = [&](double v) { return L + (std::log10(v) - lx0) / (lx1 - lx0) * pw; };
  auto sy = [&](double v) {
    const double y = T + (ly1 - std::log10(v)) / (ly1 - ly0) * ph;
    return std::min(std::max(y, T), T + ph);
  };
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << W << " " << H << "\" width=\"" << W
     << "\" height=\"" << H << "\" role=\"img\">\n<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << pw
     << "\" height=\"" << ph << "\" fill=\"#fbfcfd\" stroke=\"#ccc\"/>\n";
  for (double e = lx0; e <= lx1; ++e)
    os << "<line x1=\"" << num(sx(std::pow(10, e))) << "\" y1=\"" << T << "\" x2=\"" << num(sx(std::pow(10, e)))
       << "\" y2=\"" << T + ph << "\" stroke=\"#eee\"/><text x=\"" << num(sx(std::pow(10, e))) << "\" y=\""
       << T + ph + 16 << "\" text-anchor=\"middle\">1e" << static_cast<int>(e) << "</text>";
  for (double e = ly0; e <= ly1; ++e)
    os << "<line x1=\"" << L << "\" y1=\"" << num(sy(std::pow(10, e))) << "\" x2=\"" << L + pw << "\" y2=\""
       << num(sy(std::pow(10, e))) << "\" stroke=\"#eee\"/><text x=\"" << L - 6 << "\" y=\"" << num(sy(std::pow(10, e)) + 4)
       << "\" text-anchor=\"end\">1e" << static_cast<int>(e) << "</text>";
  os << "\n<text x=\"" << L + pw / 2 << "\" y=\"" << H - 6
     << "\" text-anchor=\"middle\">arithmetic intensity (FLOP/byte)</text><text transform=\"translate(16," << T + ph / 2
     << ") rotate(-90)\" text-anchor=\"middle\">achieved GFLOP/s</text>\n";
  // Roofs: memory slope up to each compute ceiling.
  auto roof = [&](double p, const char* color, const std::string& label) {
    if (p <= 0 || bw <= 0) return;
    const double knee = p / bw;
    const double xa = std::pow(10, lx0), xb = std::pow(10, lx1);
    os << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"" << num(sx(xa)) << ","
       << num(sy(xa * bw)) << " " << num(sx(std::max(xa, std::min(knee, xb)))) << "," << num(sy(std::min(knee, xb) * bw))
       << " " << num(sx(xb)) << "," << num(sy(p)) << "\"/><text x=\"" << num(L + pw - 4) << "\" y=\"" << num(sy(p) - 4)
       << "\" text-anchor=\"end\" style=\"fill:" << color << "\">" << html_escape(label) << "</text>\n";
  };
  roof(peak_fp32, "#888", "FP32 peak " + num(peak_fp32 / 1000, 1) + " TFLOP/s, " + num(bw, 0) + " GB/s");
  if (peak_dt > peak_fp32 * 1.01)
    roof(peak_dt, "#333", std::string(dtype_name(r.dtype)) + " peak " + num(peak_dt / 1000, 1) + " TFLOP/s");
  for (const auto& p : pts)
    os << "<circle cx=\"" << num(sx(p.ai)) << "\" cy=\"" << num(sy(p.gflops)) << "\" r=\"3.5\" fill=\""
       << class_color(p.cls) << "\" fill-opacity=\"0.75\" stroke=\"" << (p.extrapolated ? "#000" : "none")
       << "\"><title>" << html_escape(p.title) << (p.extrapolated ? " (extrapolated)" : "") << "</title></circle>";
  os << "\n</svg>\n";
  if (skipped)
    os << "<p class=\"note\">" << skipped << " kernels without FLOPs (memory moves, unknown ops) are not on this chart.</p>\n";
  return os.str();
}

std::string node_table(const Report& r) {
  std::ostringstream os;
  os << "<input class=\"filter\" data-table=\"nodes\" placeholder=\"filter nodes (name, op, class ...)\">\n"
        "<div class=\"wrap\"><table id=\"nodes\" class=\"sortable\"><thead><tr><th class=\"n\">#</th><th>node</th>"
        "<th>layer</th><th>op</th><th>class</th><th>math</th><th>output shape</th><th>tile</th><th class=\"n\">waves</th>"
        "<th>bound</th><th class=\"n\">util %</th><th class=\"n\">GFLOP</th><th class=\"n\">MB</th>"
        "<th class=\"n\">ms</th><th class=\"n\">share %</th></tr></thead><tbody>\n";
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    const NodeReport& n = r.nodes[i];
    const KernelReport* m = detail::main_kernel(n);
    double fl = 0, by = 0;
    for (const auto& k : n.kernels) fl += finite(k.kernel.flops), by += finite(k.kernel.bytes);
    const bool ex = detail::any_extrapolated(n);
    os << "<tr><td class=\"n\">" << i << "</td><td>" << html_escape(n.name) << "</td><td>" << html_escape(layer_of(n.name))
       << "</td><td>" << html_escape(n.op_type) << "</td><td>" << (m ? kernel_class_name(m->kernel.cls) : "-")
       << "</td><td>" << (m ? html_escape(detail::math_name(*m, r.gpu)) : "-")
       << "</td><td>" << html_escape(n.outputs.empty() ? "" : detail::shape_str(n.outputs.front())) << "</td><td>"
       << html_escape(m ? m->tiling.tile : "") << "</td><td class=\"n\">" << (m ? m->tiling.waves : 0) << "</td><td>"
       << (m ? detail::bound_name(*m) : "-") << "</td><td class=\"n\">"
       << (m ? num(100 * finite(m->prediction.utilization), 1) : "-") << "</td><td class=\"n\" data-v=\"" << fl << "\">"
       << num(fl / 1e9, 3) << "</td><td class=\"n\" data-v=\"" << by << "\">" << num(by / 1e6, 2)
       << "</td><td class=\"n\" data-v=\"" << finite(n.latency_ms) << "\">" << format_ms(n.latency_ms) << (ex ? "*" : "")
       << "</td><td class=\"n\">" << num(r.share_base_ms() > 0 ? 100 * n.latency_ms / r.share_base_ms() : 0, 2)
       << "</td></tr>\n";
  }
  os << "</tbody></table></div>\n<p class=\"note\">Click a column to sort. * = outside the predictor's training range "
        "(extrapolated). Nodes without kernels (shape arithmetic) show 0 ms.</p>\n";
  return os.str();
}

std::string page_end() { return std::string(kScript) + "</body></html>\n"; }

// The time by kernel class and (training) by phase, each total with its 80% interval (kernels
// err partly together, as for the end-to-end one).
std::string totals_charts(const Report& r) {
  std::ostringstream os;
  os << "<h2>Time by kernel class</h2>\n";
  std::vector<std::pair<std::string, double>> cls(r.totals_by_class.begin(), r.totals_by_class.end());
  std::stable_sort(cls.begin(), cls.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  // "80% interval low - high ms", or "" without one.
  auto interval = [](const std::string& range) { return range.empty() ? range : "80% interval " + range + " ms"; };
  std::map<std::string, std::string> class_ranges = interval_ranges_by(r, false);
  std::vector<Bar> bars;
  for (const auto& [c, ms] : cls) {
    const std::string iv = interval(class_ranges[c]);
    bars.push_back({c, {{c, ms}},
                    format_ms(ms) + " ms (" + num(r.share_base_ms() > 0 ? 100 * ms / r.share_base_ms() : 0, 1) + "%" +
                        (iv.empty() ? "" : "; " + iv) + ")",
                    ""});
  }
  os << hbar_chart(bars, "ms");
  if (r.mode == Mode::training) {
    std::map<std::string, std::string> phase_ranges = interval_ranges_by(r, true);
    auto phase = [&](const char* name, const char* colour, double ms) {
      const std::string iv = interval(phase_ranges[name]);
      return Bar{name, {{colour, ms}}, format_ms(ms) + " ms" + (iv.empty() ? "" : " (" + iv + ")"), ""};
    };
    std::vector<Bar> phases = {phase("forward", "gemm", r.forward_ms), phase("backward", "elementwise", r.backward_ms),
                               phase("update", "reduce", r.update_ms)};
    os << "<h2>Training step by phase</h2>\n" << hbar_chart(phases, "ms");
  }
  return os.str();
}

// The GPUs of a --gpu list side by side: each one's latency by kernel class, and its speed-up
// against the first.
std::string gpu_comparison(const std::vector<Report>& reports, const std::vector<std::string>& classes) {
  std::ostringstream os;
  const Report& r = reports.front();
  os << "<h2>GPU comparison</h2>\n" << legend(classes);
  std::vector<Bar> gb;
  for (const auto& g : reports) {
    // The latency and the speed-up, each with its 80% interval (the speed-up's takes the two
    // GPUs' errors as independent, predictor.h gpu_speedup_interval).
    const SpeedupInterval s = speedup_over(r, g);
    std::string label = format_ms(g.e2e_latency_ms) + " ms";
    if (const std::string range = range_text(g.e2e_low(), g.e2e_high()); !range.empty()) label += " (" + range + ")";
    label += ", " + num(s.speedup) + "x";
    if (&g != &r && s.high > s.low) label += " (" + num(s.low) + " - " + num(s.high) + ")";
    Bar b{g.gpu.name, {}, label, ""};
    for (const auto& c : classes) {
      auto it = g.totals_by_class.find(c);
      if (it != g.totals_by_class.end()) b.segments.push_back({c, it->second});
    }
    gb.push_back(b);
  }
  os << hbar_chart(gb, "ms", 22)
     << "<p class=\"note\">Each GPU's latency and its speed-up against the first, with their 80% intervals in "
        "brackets.</p>\n";
  return os.str();
}

}  // namespace

std::string format_html(const std::vector<Report>& reports) {
  if (reports.empty()) throw RuntimeError("no report to write as HTML");
  const Report& r = reports.front();
  std::ostringstream os;
  const std::string model = r.model_name.empty() ? "model" : r.model_name;
  os << kPageHead << "neusight-onnx: " << html_escape(model) << " on " << html_escape(r.gpu.name) << kStyle;
  os << "<h1>" << html_escape(model) << " on " << html_escape(r.gpu.name) << "</h1>\n<p class=\"sub\">"
     << detail::mode_name(r.mode) << ", " << html_escape(dtype_label(r)) << ", predictor " << html_escape(r.predictor)
     << (r.timing.empty() ? std::string() : ", " + html_escape(r.timing) + " timing") << ", neusight-onnx</p>\n<div class=\"cards\">" << card(format_ms(r.e2e_latency_ms) + " ms", r.generation ? "prefill (time to first token)" : "end-to-end latency");
  if (r.e2e_high_ms > r.e2e_low_ms)
    os << card(format_ms(r.e2e_low_ms) + " - " + format_ms(r.e2e_high_ms) + " ms", "80% interval");
  if (r.mode == Mode::training)
    os << card(format_ms(r.forward_ms) + " ms", "forward") << card(format_ms(r.backward_ms) + " ms", "backward")
       << card(format_ms(r.update_ms) + " ms", "update");
  size_t kernels = r.extra_kernels.size();
  for (const auto& n : r.nodes) kernels += n.kernels.size();
  if (r.throughput && r.throughput->tokens > 0)
    os << card(detail::fixed(r.throughput->tokens_per_s, 0), "tokens/s");
  else if (r.throughput && r.throughput->samples > 0)
    os << card(detail::fixed(r.throughput->samples_per_s, r.throughput->samples_per_s >= 100 ? 0 : 2), "samples/s");
  if (r.throughput && r.throughput->usd_per_m_tokens > 0)
    os << card(format_usd(r.throughput->usd_per_m_tokens), "per 1M tokens at " + format_usd(r.throughput->usd_per_gpu_hour) + " a GPU-hour");
  if (r.throughput && r.throughput->peak_tflops > 0)
    os << card(detail::fixed(100 * r.throughput->utilization(), 1) + "%",
               r.mode == Mode::training ? "MFU (" + r.throughput->peak_math + " peak)" : "of the " + r.throughput->peak_math + " peak");
  if (r.memory) {
    const MemoryFootprint& m = *r.memory;
    char total[64];
    std::snprintf(total, sizeof total, "%.1f GiB", m.total_gib());
    os << card(total, m.capacity_gib > 0 ? (m.fits() ? "memory, of " : "memory: does not fit ") +
                                                std::to_string(static_cast<int>(std::lround(m.capacity_gib))) + " GiB"
                                          : std::string("memory"));
  }
  os << card(std::to_string(r.nodes.size()), "nodes") << card(std::to_string(kernels), "kernels") << "</div>\n";
  if (r.throughput) os << "<p class=\"note\">Throughput: " << html_escape(throughput_text(*r.throughput, r.mode)) << ".</p>\n";
  if (r.memory) os << "<p class=\"note\">Memory: " << html_escape(memory_text(*r.memory)) << ".</p>\n";
  if (!r.unknown_ops.empty()) {
    os << "<p class=\"note\">Not predicted (unknown ops, counted as 0 ms):";
    for (const auto& u : r.unknown_ops) os << " " << html_escape(u);
    os << "</p>\n";
  }
  const auto classes = classes_of(reports);
  if (r.generation) os << detail::generation_html(reports);

  os << totals_charts(r);

  if (r.parallel)
    os << "<h2>Multi-GPU " << (r.parallel->inference ? "inference" : "training") << "</h2>\n<pre>"
       << html_escape(format_parallel(*r.parallel)) << "</pre>\n";

  if (reports.size() > 1) os << gpu_comparison(reports, classes);

  // Timeline and per-layer bars.
  os << "<h2>Timeline</h2>\n" << legend(classes) << timeline(r)
     << "<p class=\"note\">Kernels in execution order" << (r.mode == Mode::training ? " (forward, backward, update)" : "")
     << "; hover for details.</p>\n";
  auto layers = group_by_layer(r);
  const size_t max_layers = 150;
  std::vector<Bar> lb;
  for (const auto& l : layers) {
    if (lb.size() >= max_layers) break;
    Bar b{l.name, {}, format_ms(l.latency_ms) + " ms", ""};
    for (const auto& c : classes) {
      auto it = l.by_class.find(c);
      if (it != l.by_class.end()) b.segments.push_back({c, it->second});
    }
    lb.push_back(b);
  }
  os << "<h2>Time per layer</h2>\n" << legend(classes) << hbar_chart(lb, "ms", 16);
  if (layers.size() > max_layers)
    os << "<p class=\"note\">First " << max_layers << " of " << layers.size() << " layers.</p>\n";

  os << "<h2>Roofline on " << html_escape(r.gpu.name) << "</h2>\n" << legend(classes) << roofline(r)
     << "<p class=\"note\">Each dot is one kernel: its arithmetic intensity against the FLOP/s it achieves at the "
        "predicted latency; dots far below the roof run at low utilization. Black outline = extrapolated.</p>\n";

  os << "<h2>Nodes</h2>\n" << node_table(r);
  // Every GPU's warnings, those the GPUs share said once.
  if (const std::vector<std::string> warnings = warnings_once(reports); !warnings.empty()) {
    os << "<h2>Warnings</h2><ul>";
    for (const auto& w : warnings) os << "<li>" << html_escape(w) << "</li>";
    os << "</ul>\n";
  }
  os << page_end();
  return os.str();
}

std::string format_compare_html(const Comparison& c) {
  std::ostringstream os;
  const size_t gpus = c.reports.front().size();
  os << kPageHead << "neusight-onnx compare" << kStyle << "<h1>Model comparison</h1>\n<p class=\"sub\">"
     << c.models.size() << " models on " << gpus << " GPU" << (gpus > 1 ? "s" : "") << ", "
     << detail::mode_name(c.reports[0][0].mode) << "; speed-up against " << html_escape(c.models[0]) << "</p>\n";
  // Model x GPU table.
  os << "<h2>End-to-end latency</h2>\n<table class=\"sortable\"><thead><tr><th>model</th>";
  for (size_t g = 0; g < gpus; ++g)
    os << "<th class=\"n\">" << html_escape(c.reports[0][g].gpu.alias()) << " ms</th><th class=\"n\">speed-up</th>";
  os << "</tr></thead><tbody>\n";
  // Each figure with its 80% interval below it (the first model's speed-up has none).
  for (size_t m = 0; m < c.models.size(); ++m) {
    os << "<tr><td>" << html_escape(c.models[m]) << "</td>";
    for (size_t g = 0; g < gpus; ++g) {
      const auto& d = c.at(m, g);
      const Report& r = c.reports[m][g];
      os << "<td class=\"n\" data-v=\"" << d.e2e_ms << "\">"
         << detail::html_with_interval(format_ms(d.e2e_ms), format_ms(r.e2e_low()), format_ms(r.e2e_high()),
                                       r.e2e_high() > r.e2e_low())
         << "</td><td class=\"n\" data-v=\"" << d.speedup << "\">"
         << detail::html_with_interval(num(d.speedup) + "x", num(d.speedup_low), num(d.speedup_high), m > 0)
         << "</td>";
    }
    os << "</tr>\n";
  }
  os << "</tbody></table>\n<p class=\"note\">under each figure: its 80% interval</p>\n";
  std::vector<Report> all;
  for (const auto& per : c.reports) all.insert(all.end(), per.begin(), per.end());
  const auto classes = classes_of(all);
  os << legend(classes);
  std::vector<Bar> bars;
  for (size_t g = 0; g < gpus; ++g)
    for (size_t m = 0; m < c.models.size(); ++m) {
      const Report& r = c.reports[m][g];
      Bar b{c.models[m] + " @ " + r.gpu.alias(), {}, format_ms(r.e2e_latency_ms) + " ms", ""};
      for (const auto& cl : classes) {
        auto it = r.totals_by_class.find(cl);
        if (it != r.totals_by_class.end()) b.segments.push_back({cl, it->second});
      }
      bars.push_back(b);
    }
  os << hbar_chart(bars, "ms", 22);
  for (size_t m = 1; m < c.models.size(); ++m)
    for (size_t g = 0; g < gpus; ++g) {
      const auto& d = c.at(m, g);
      os << "<h2>" << html_escape(c.models[m]) << " vs " << html_escape(c.models[0]) << " on "
         << html_escape(c.reports[0][g].gpu.name) << "</h2>\n<p class=\"sub\">" << format_ms(d.e2e_ms) << " ms against "
         << format_ms(d.base_ms) << " ms: " << num(d.speedup) << "x (80% interval " << num(d.speedup_low) << " - "
         << num(d.speedup_high) << "x). Nodes matched by name " << d.matched_by_name
         << (d.matched_by_quantized > 0 ? ", as quantized " + std::to_string(d.matched_by_quantized) : std::string())
         << ", by position " << d.matched_by_position << ", added " << d.added << ", removed " << d.removed << ".</p>\n";
      os << "<table><thead><tr><th>class</th><th class=\"n\">delta ms</th></tr></thead><tbody>";
      for (const auto& [cl, delta] : d.class_delta_ms)
        os << "<tr><td><span style=\"color:" << class_color(cl) << "\">&#9632;</span> " << html_escape(cl)
           << "</td><td class=\"n " << (delta > 0 ? "pos" : delta < 0 ? "neg" : "") << "\">" << (delta > 0 ? "+" : "")
           << format_ms(delta) << "</td></tr>";
      os << "</tbody></table>\n<h3>Nodes that changed most</h3>\n<table class=\"sortable\"><thead><tr><th>node</th>"
            "<th>op</th><th>matched by</th><th class=\"n\">base ms</th><th class=\"n\">ms</th><th class=\"n\">delta ms</th>"
            "</tr></thead><tbody>\n";
      for (const auto& n : d.top_nodes)
        os << "<tr><td>" << html_escape(n.name.empty() ? n.base_name : n.name) << "</td><td>" << html_escape(n.op_type)
           << "</td><td>" << n.matched_by << "</td><td class=\"n\" data-v=\"" << n.base_ms << "\">" << format_ms(n.base_ms)
           << "</td><td class=\"n\" data-v=\"" << n.ms << "\">" << format_ms(n.ms) << "</td><td class=\"n "
           << (n.delta_ms() > 0 ? "pos" : n.delta_ms() < 0 ? "neg" : "") << "\" data-v=\"" << n.delta_ms() << "\">"
           << (n.delta_ms() > 0 ? "+" : "") << format_ms(n.delta_ms()) << "</td></tr>\n";
      os << "</tbody></table>\n";
    }
  os << page_end();
  return os.str();
}

}  // namespace neusight
