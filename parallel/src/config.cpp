// config.cpp - the --parallel spec and the interconnect model.
#include <algorithm>
#include <sstream>

#include "neusight/parallel.h"
#include "shard.h"

namespace neusight {

namespace {

int parse_degree(const std::string& key, const std::string& value, const std::string& spec) {
  size_t used = 0;
  long v = 0;
  try {
    v = std::stol(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || value.empty() || v < 1 || v > 1000000)
    throw InputError("--parallel: " + key + " must be a positive integer, got '" + value + "' in '" + spec + "'");
  return static_cast<int>(v);
}

}  // namespace

const char* schedule_name(PipelineSchedule s) { return s == PipelineSchedule::gpipe ? "gpipe" : "1f1b"; }
const char* cp_comm_name(CpComm c) { return c == CpComm::a2a ? "a2a" : "p2p"; }

ParallelConfig parse_parallel(const std::string& spec) {
  ParallelConfig c;
  c.active = true;
  if (spec.empty()) throw InputError("--parallel: empty spec (expected dp=N,tp=N,pp=N[,cp=C[,cp_comm=p2p|a2a]][,ep=E][,microbatches=M][,pp_split=even|balanced][,schedule=gpipe|1f1b][,vp=V][,zero=0-3][,overlap_gather=0|1][,sp=0|1])");
  std::stringstream ss(spec);
  std::string part;
  while (std::getline(ss, part, ',')) {
    const auto eq = part.find('=');
    if (eq == std::string::npos || eq == 0)
      throw InputError("--parallel: expected KEY=VALUE, got '" + part + "' in '" + spec + "'");
    const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
    if (key == "dp") c.dp = parse_degree(key, value, spec);
    else if (key == "tp") c.tp = parse_degree(key, value, spec);
    else if (key == "pp") c.pp = parse_degree(key, value, spec);
    else if (key == "ep") c.ep = parse_degree(key, value, spec);
    else if (key == "cp") c.cp = parse_degree(key, value, spec);
    else if (key == "cp_comm") {
      if (value == "p2p" || value == "ring") c.cp_comm = CpComm::p2p;
      else if (value == "a2a" || value == "ulysses") c.cp_comm = CpComm::a2a;
      else throw InputError("--parallel: cp_comm must be p2p (ring attention) or a2a (Ulysses all-to-all), got '" + value + "' in '" + spec + "'");
    }
    else if (key == "pp_split") {
      if (value != "even" && value != "balanced")
        throw InputError("--parallel: pp_split must be even or balanced, got '" + value + "'");
      c.even_layers = value == "even";
    } else if (key == "microbatches" || key == "mb") {
      c.microbatches = parse_degree(key, value, spec);
      c.microbatches_given = true;
    }
    else if (key == "vp") c.virtual_stages = parse_degree(key, value, spec);
    else if (key == "sp") {
      if (value != "0" && value != "1")
        throw InputError("--parallel: sp must be 0 or 1 (sequence parallelism beside tp), got '" + value + "' in '" + spec + "'");
      c.sequence_parallel = value == "1";
    } else if (key == "overlap_gather") {
      if (value != "0" && value != "1")
        throw InputError("--parallel: overlap_gather must be 0 or 1 (ZeRO-1/2's parameter all-gather under the next forward), "
                         "got '" + value + "' in '" + spec + "'");
      c.overlap_gather = value == "1";
    } else if (key == "zero") {
      if (value.size() != 1 || value[0] < '0' || value[0] > '3')
        throw InputError("--parallel: zero must be a ZeRO stage 0, 1, 2 or 3, got '" + value + "' in '" + spec + "'");
      c.zero = value[0] - '0';
    }
    else if (key == "schedule") {
      if (value == "gpipe") c.schedule = PipelineSchedule::gpipe;
      else if (value == "1f1b") c.schedule = PipelineSchedule::one_f_one_b;
      else throw InputError("--parallel: schedule must be gpipe or 1f1b, got '" + value + "'");
    } else {
      throw InputError("--parallel: unknown key '" + key + "' (expected dp, tp, pp, cp, cp_comm, ep, microbatches, pp_split, schedule, vp, zero, overlap_gather, sp)");
    }
  }
  return c;
}

int64_t parallel_micro_batch(const ParallelConfig& c, Mode mode, int64_t global_batch) {
  if (mode != Mode::training) throw InputError("--parallel predicts training: add --mode training");
  if (c.even_layers)
    throw InputError("--parallel: pp_split=even splits an inference's or a generation's layers as vLLM does; training's "
                     "stages are balanced by their predicted time");
  if (c.ep < 1 || c.dp % c.ep != 0)
    throw InputError("--parallel: ep=" + std::to_string(c.ep) + " must divide dp=" + std::to_string(c.dp) +
                     " in training (a mixture's experts spread over ep of the data-parallel GPUs, as Megatron-LM's "
                     "--expert-model-parallel-size)");
  if (c.zero >= 2 && c.pp > 1)
    throw InputError("--parallel: zero=" + std::to_string(c.zero) + " with pp=" + std::to_string(c.pp) +
                     ": ZeRO stages 2 and 3 run without pipeline parallelism, as in DeepSpeed (their gradients are "
                     "reduce-scattered every microbatch); use zero=1 with pp, or pp=1");
  if (c.overlap_gather && (c.zero < 1 || c.zero > 2))
    throw InputError("--parallel: overlap_gather=1 runs ZeRO stage 1 or 2's parameter all-gather under the next forward; "
                     "give zero=1 or zero=2 (stage 3 gathers before each use already)");
  if (c.virtual_stages > 1) {
    const std::string vp = "--parallel: vp=" + std::to_string(c.virtual_stages);
    if (c.pp <= 1) throw InputError(vp + " interleaves model chunks over pipeline GPUs: give pp=N > 1");
    if (c.schedule == PipelineSchedule::gpipe) throw InputError(vp + " runs Megatron-LM's interleaved 1F1B schedule, not GPipe");
    if (c.microbatches % c.pp != 0)
      throw InputError(vp + ": the interleaved schedule runs microbatches in groups of pp=" + std::to_string(c.pp) +
                       "; microbatches=" + std::to_string(c.microbatches) + " is not a multiple of it");
  }
  if (c.cp_comm != CpComm::p2p && c.cp <= 1)
    throw InputError("--parallel: cp_comm=" + std::string(cp_comm_name(c.cp_comm)) +
                     " chooses how a context-parallel group exchanges the sequence: give cp=C > 1");
  if (global_batch <= 0) throw InputError("--parallel needs --batch N (the global batch)");
  const int64_t replicas = int64_t(c.dp) * c.microbatches;
  if (global_batch % replicas != 0)
    throw InputError("--parallel: global batch " + std::to_string(global_batch) + " does not divide into dp=" +
                     std::to_string(c.dp) + " x microbatches=" + std::to_string(c.microbatches));
  return global_batch / replicas;
}

void check_inference_parallel(const ParallelConfig& c, bool generation) {
  if (c.dp != 1 || c.cp != 1 || c.zero != 0 || c.sequence_parallel || c.virtual_stages != 1)
    throw InputError("--parallel for inference takes tp=N and pp=N (with microbatches=M) alone: dp, cp, zero, sp and vp "
                     "split training batches, sequences, optimizer state, the sequence's data path and stages "
                     "(--mode training)");
  if (c.tp < 1) throw InputError("--parallel: tp must be at least 1");
  if (c.pp < 1) throw InputError("--parallel: pp must be at least 1");
  if (c.microbatches_given && generation)
    throw InputError("--parallel: microbatches with --generate: a pipeline-parallel generation runs min(pp, batch) "
                     "microbatches, as vLLM's virtual engines");
  if (c.even_layers && c.pp == 1)
    throw InputError("--parallel: pp_split=even splits the layers over pipeline stages: give pp=N > 1");
  if (c.microbatches_given && c.pp == 1)
    throw InputError("--parallel: microbatches=" + std::to_string(c.microbatches) +
                     " split a batch over pipeline stages: give pp=N > 1");
  if (c.ep < 1 || c.tp % c.ep != 0)
    throw InputError("--parallel: ep=" + std::to_string(c.ep) + " must divide tp=" + std::to_string(c.tp) +
                     " (the experts spread over ep of the tensor-parallel GPUs; ep=tp as vLLM's --enable-expert-parallel)");
}

int inference_microbatches(const ParallelConfig& c, int64_t batch) {
  if (c.pp <= 1 || batch < 1) return 1;
  if (c.microbatches_given && batch % c.microbatches != 0)
    throw InputError("--parallel: batch " + std::to_string(batch) + " does not divide into microbatches=" +
                     std::to_string(c.microbatches));
  const int64_t m = c.microbatches_given ? c.microbatches : std::min<int64_t>(c.pp, batch);
  // Microbatches of ceil(batch / m) samples: as many as that size needs.
  const int64_t size = (batch + m - 1) / m;
  return static_cast<int>((batch + size - 1) / size);
}

void time_tensor_parallel_collectives(const std::vector<Kernel>& kernels, std::vector<Prediction>& preds, int tp,
                                      const Link& link) {
  for (size_t i = 0; i < kernels.size() && i < preds.size(); ++i)
    if (kernels[i].cls == KernelClass::collective)
      preds[i] = parallel_detail::link_prediction(link, [&](const Link& l) { return allreduce_ms(kernels[i].bytes, tp, l); });
}

Link link_for(const Gpu& gpu, double override_gbps, int gpus) {
  Link l;
  const bool in_domain = gpu.nvlink_domain <= 0 || gpus <= gpu.nvlink_domain;
  if (override_gbps > 0) {
    l.kind = "override";
    l.spec_gbps = override_gbps;
  } else if (gpu.nvlink_gbps > 0 && in_domain) {
    l.kind = gpu.nvlink.empty() ? "nvlink" : gpu.nvlink;
    l.spec_gbps = gpu.nvlink_gbps;
  } else if (gpu.pcie_gbps > 0) {
    l.kind = "pcie";
    l.spec_gbps = gpu.pcie_gbps;
  } else {
    throw InputError(gpu.name + ": no interconnect bandwidth in the GPU database; give --link-bw GBps");
  }
  return l;
}

double ring_allreduce_ms(double bytes, int n, const Link& link) {
  return 2 * ring_reduce_scatter_ms(bytes, n, link);  // a reduce-scatter, then an all-gather
}

double allreduce_ms(double bytes, int n, const Link& link) {
  const double ring = ring_allreduce_ms(bytes, n, link);
  if (n <= 1 || bytes <= 0 || link.kind == "pcie") return ring;
  const double ms_per_byte = 1e3 / (link.gbps() * 1e9), step_ms = link.step_latency_us * 1e-3;
  const double two_shot = 2.0 * (n - 1) / n * bytes * ms_per_byte + 2 * step_ms;
  const double one_shot = double(n - 1) * bytes * ms_per_byte + step_ms;
  return std::min({ring, two_shot, one_shot});
}

double ring_allgather_ms(double bytes, int n, const Link& link) {
  if (n <= 1 || bytes <= 0) return 0;
  const double steps = n - 1.0;
  return steps / n * bytes / (link.gbps() * 1e9) * 1e3 + steps * link.step_latency_us * 1e-3;
}

double ring_reduce_scatter_ms(double bytes, int n, const Link& link) { return ring_allgather_ms(bytes, n, link); }

double hierarchical_reduce_scatter_ms(double bytes, int n, int g, const Link& intra, const Link& inter) {
  if (n <= g) return ring_reduce_scatter_ms(bytes, n, intra);  // the group within one domain
  if (g <= 1) return ring_reduce_scatter_ms(bytes, n, inter);
  return ring_reduce_scatter_ms(bytes, g, intra) + ring_reduce_scatter_ms(bytes / g, n / g, inter);
}

double hierarchical_allreduce_ms(double bytes, int n, int g, const Link& intra, const Link& inter) {
  return 2 * hierarchical_reduce_scatter_ms(bytes, n, g, intra, inter);  // the all-gather mirrors it
}

double p2p_ms(double bytes, const Link& link) {
  if (bytes <= 0) return 0;
  return bytes / (link.gbps() * 1e9) * 1e3 + link.step_latency_us * 1e-3;
}

}  // namespace neusight
