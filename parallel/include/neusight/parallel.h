// parallel.h - one iteration of multi-GPU training: data, tensor and pipeline parallel.
//
// Takes: the shape-inferred Graph, its training KernelList (lowering.h) at the per-GPU
// micro-batch, the per-kernel predictions (predictor.h), the Gpu and a ParallelConfig.
// Gives: the per-GPU kernel list under tensor parallelism (Megatron column/row splits plus
// their all-reduces; the sequence split beside it), and the iteration time: pipeline schedule
// (GPipe, 1F1B or interleaved 1F1B) over the stages, gradient all-reduce buckets overlapped
// with the backward pass, the bubble, communication (total and exposed) and per-GPU memory;
// the optimizer state, gradients and parameters optionally sharded over the data-parallel GPUs
// (ZeRO stages 1-3, FSDP); activation checkpoints and the kernels they recompute.
//
// Interconnect: each axis's GPUs on the GPU's own link (NVLink / NVSwitch domain) when they fit
// one domain, else PCIe (each GPU's way out of its node), at `kLinkEfficiency` of the
// spec-sheet per-direction bandwidth, plus `kLinkStepLatencyUs` per ring step or
// point-to-point transfer; a data-parallel group across domains reduces hierarchically.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "neusight/gpu.h"
#include "neusight/graph.h"
#include "neusight/lowering.h"
#include "neusight/predictor.h"

namespace neusight {

enum class PipelineSchedule { gpipe, one_f_one_b };

// Context parallelism's exchange (ParallelConfig::cp_comm).
enum class CpComm { p2p, a2a };
const char* cp_comm_name(CpComm c);  // "p2p" | "a2a"

struct ParallelConfig {
  int dp = 1, tp = 1, pp = 1;
  // Inference and --generate: a mixture's experts spread over `ep` of the tp GPUs (whole
  // experts, E/ep per GPU; each split along its intermediate dim over the tp/ep GPUs that
  // share it), as vLLM's --enable-expert-parallel (ep = tp) and SGLang's --ep-size run them:
  // every GPU runs its own experts on the tokens routed to them, one all-reduce sums the
  // outputs as under tensor parallelism. 1: every expert split over the tp GPUs.
  // Training: the experts spread over `ep` of the dp GPUs (Megatron-LM's
  // --expert-model-parallel-size; ep divides dp): each holds E/ep whole experts and runs them
  // on the tokens the ep GPUs' routers send it, an all-to-all dispatching the tokens before
  // the experts and one combining them after (and two in the backward); the experts'
  // gradients are reduced over the dp/ep GPUs holding the same experts.
  int ep = 1;
  int microbatches = 1;           // per iteration and data-parallel replica (1: no micro-batching)
  bool microbatches_given = false;  // microbatches=M was in the spec (inference: else min(pp, batch))
  // Inference and --generate: the layers split evenly over the pipeline stages (pp_split=even,
  // vLLM's default: layers / pp each, the remainder to the stages before the last, the
  // embedding on the first and the LM head on the last) instead of stages balanced by their
  // predicted time (pp_split=balanced, what VLLM_PP_LAYER_PARTITION sets by hand).
  bool even_layers = false;
  // Model chunks per pipeline GPU (Megatron-LM's interleaved 1F1B schedule, vp > 1): the model
  // cut into pp x vp stages, GPU d holding stages d, d + pp, d + 2 pp, ...; the bubble shrinks
  // by vp for vp times the sends. 1: one stage per GPU.
  int virtual_stages = 1;
  // Training: what each data-parallel GPU holds 1/dp of, as DeepSpeed's ZeRO stages (and
  // PyTorch FSDP, Megatron-LM's distributed optimizer) shard it. 0: nothing (DDP: every GPU
  // holds everything, gradients all-reduced once an iteration). 1: the optimizer's state and
  // FP32 master weights (each GPU updates its share; gradients reduce-scattered, the updated
  // parameters all-gathered after the step). 2: also the gradients (reduce-scattered after
  // every microbatch's backward). 3: also the parameters (FSDP FULL_SHARD: each bucket of
  // parameters all-gathered before its forward and again before its backward, one bucket
  // prefetched). Stages 2 and 3 take no pipeline parallelism, as in DeepSpeed.
  int zero = 0;
  // ZeRO stages 1 and 2: the updated parameters' all-gather run under the next iteration's
  // first forward pass, bucket by bucket ahead of the kernels that read them (Megatron-LM's
  // --overlap-param-gather), instead of after the step, exposed (DeepSpeed's).
  bool overlap_gather = false;
  // Training: Megatron-LM's sequence parallelism (--sequence-parallel) beside tensor
  // parallelism: the data path between the tensor-parallel regions (norms, residual adds,
  // dropout, the embedding's output) split along the sequence over the tp GPUs, each
  // all-reduce a reduce-scatter and an all-gather (the same bytes on the link).
  bool sequence_parallel = false;
  // Training: context parallelism (Megatron-LM's --context-parallel-size, Transformer Engine's
  // ring attention): every sequence split over `cp` GPUs, each holding 1/cp of its tokens (two
  // chunks, one from each end, so that the causal mask leaves each the same work) through
  // every layer. FlashAttention runs the local queries against every key: the K/V chunks go
  // round the ring in cp - 1 point-to-point steps, each hidden behind one block of the
  // attention; the backward sends the K/V chunks and their gradients. Weights are replicated
  // over cp, their gradients reduced over the dp x cp GPUs (and ZeRO shards over those).
  int cp = 1;
  // How the context-parallel group exchanges the sequence (Transformer Engine's cp_comm_type):
  // p2p, the ring above; a2a, DeepSpeed-Ulysses: an all-to-all before each attention turns the
  // local tokens' Q, K and V of every head into every token's of 1/cp of the heads, the
  // attention runs on those, and an all-to-all turns its output back (the backward mirrors
  // them); the transfers are on the critical path.
  CpComm cp_comm = CpComm::p2p;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  double link_gbps = 0;           // per-GPU per-direction link bandwidth; 0 = the GPU database's
  double bucket_mb = 25;          // gradient bucket (PyTorch DDP default), MB = 2^20 bytes
  bool active = false;            // set when --parallel was given (even dp=tp=pp=1)
  int64_t gpus() const { return int64_t(dp) * tp * pp * cp; }
};

// Parses "dp=N,tp=N,pp=N[,cp=C][,ep=E][,microbatches=M][,schedule=gpipe|1f1b][,vp=V][,zero=0-3][,overlap_gather=0|1][,sp=0|1]"
// (any subset, any order;
// missing degrees are 1). Throws InputError naming the bad part.
ParallelConfig parse_parallel(const std::string& spec);
const char* schedule_name(PipelineSchedule s);

// The batch one GPU runs per microbatch: global / (dp * microbatches). Throws InputError
// unless `mode` is training, the global batch is given (> 0) and divides evenly, for an ep
// that does not divide dp, for ZeRO
// stage 2 or 3 with pipeline parallelism, and for vp > 1 without pp > 1, with GPipe, or with
// microbatches that are not a multiple of pp (Megatron-LM's interleaved schedule needs them).
int64_t parallel_micro_batch(const ParallelConfig& config, Mode mode, int64_t global_batch);

// Inference takes tensor and pipeline parallelism: one copy of the model over tp x pp GPUs, pp
// stages of tp GPUs each (vLLM's --pipeline-parallel-size), its experts optionally spread over
// ep of a stage's tp GPUs; a forward pass splits its batch into microbatches (microbatches=M,
// else inference_microbatches' default), a generation (`generation` true) into vLLM's
// min(pp, batch). Throws InputError for dp, cp, zero, sp or vp, which split training batches,
// sequences, optimizer state and stages, for microbatches without pp or in a generation, and
// for an ep that does not divide tp (training spreads the experts over dp instead).
void check_inference_parallel(const ParallelConfig& config, bool generation = false);
// The microbatches a pipeline-parallel forward pass of `batch` samples runs: microbatches=M as
// given (M dividing the batch), else min(pp, batch) of ceil(batch / min(pp, batch)) samples
// (as few as that size needs; the last may hold fewer, priced as full), every stage then busy
// once the pipeline fills, as vLLM's virtual engines; 1 without pp. Throws InputError for an
// M that does not divide the batch.
int inference_microbatches(const ParallelConfig& config, int64_t batch);

// --- interconnect ------------------------------------------------------------------------
// Achievable fraction of the link's spec bandwidth for large NCCL transfers (nccl-tests bus
// bandwidth is about 0.75-0.85 of the NVLink per-direction peak on DGX A100 / H100 systems).
// The same for every GPU and link type.
inline constexpr double kLinkEfficiency = 0.8;
// The ends of that range, the bounds of a collective's 80% interval (its time at the highest
// and the lowest efficiency): the bandwidth alone, not contention with the kernels beside it.
inline constexpr double kLinkEfficiencyLow = 0.75, kLinkEfficiencyHigh = 0.85;
// Latency of one ring step / one point-to-point transfer (NCCL launch + synchronisation).
inline constexpr double kLinkStepLatencyUs = 5.0;

struct Link {
  std::string kind;        // "nvlink4", "pcie", "override", ...
  double spec_gbps = 0;    // per GPU, per direction
  double efficiency = kLinkEfficiency;
  double step_latency_us = kLinkStepLatencyUs;
  double gbps() const { return spec_gbps * efficiency; }
};

// The link among `gpus` GPUs: NVLink (or Infinity Fabric) when the GPU has it and its domain
// (Gpu::nvlink_domain) joins them all, else PCIe: a collective over more GPUs than one
// NVLink domain runs at the slowest link of its ring. `override_gbps` > 0 replaces the spec
// bandwidth (the efficiency still applies). Throws InputError when the GPU has no link
// bandwidth at all and no override is given.
Link link_for(const Gpu& gpu, double override_gbps = 0, int gpus = 1);

// Ring all-reduce among n GPUs: 2(n-1)/n * bytes / bandwidth + 2(n-1) step latencies.
double ring_allreduce_ms(double bytes, int n, const Link& link);
// All-reduce among n GPUs as the libraries pick it for the size (NCCL's tuner; the custom
// all-reduce kernels of vLLM and TensorRT-LLM for small messages): the fastest of the ring,
// a two-shot (reduce-scatter then all-gather, each GPU reading its peers' slices directly:
// 2 steps, 2(n-1)/n x bytes) and a one-shot (each GPU reads every peer's whole buffer:
// 1 step, (n-1) x bytes). The direct forms need every GPU to reach every peer at the link's
// bandwidth (an NVLink switch, an Infinity Fabric full mesh); over PCIe the ring alone.
double allreduce_ms(double bytes, int n, const Link& link);
// Ring all-gather among n GPUs of a tensor of `bytes` in all (each GPU contributes bytes / n):
// (n-1)/n * bytes / bandwidth + (n-1) step latencies. A reduce-scatter of `bytes` moves the
// same and takes as long: half a ring all-reduce.
double ring_allgather_ms(double bytes, int n, const Link& link);
double ring_reduce_scatter_ms(double bytes, int n, const Link& link);
// A collective among n GPUs spanning n / g NVLink domains, g of them in each, as NCCL runs it
// across nodes: a reduce-scatter within each domain on `intra`, each GPU's 1/g share reduced
// across the domains over its own way out (`inter`: one NIC a GPU, as HGX and DGX boards carry
// them, at the link's bandwidth), an all-gather within the domain. The reduce-scatter (and the
// all-gather) is the first half: intra reduce-scatter of `bytes`, inter reduce-scatter of
// bytes / g; the all-reduce both halves. g <= 1: the flat ring on `inter`.
double hierarchical_reduce_scatter_ms(double bytes, int n, int g, const Link& intra, const Link& inter);
double hierarchical_allreduce_ms(double bytes, int n, int g, const Link& intra, const Link& inter);
// One point-to-point send/receive.
double p2p_ms(double bytes, const Link& link);

// Gives each collective kernel (the tensor-parallel all-reduces, a graph's own collectives) its
// all-reduce time (allreduce_ms) among `tp` GPUs on `link`, its 80% interval at the link's
// efficiency scaled to kLinkEfficiencyHigh and kLinkEfficiencyLow; other predictions are left
// as they are. Context parallelism's rings and expert parallelism's all-to-alls are timed
// again by their own functions after it (plan_iteration).
void time_tensor_parallel_collectives(const std::vector<Kernel>& kernels, std::vector<Prediction>& preds, int tp,
                                      const Link& link);

// --- pipeline parallelism in inference (--generate with pp) ----------------------------------
// The stages of an inference graph over pp GPUs, placed as training places them: contiguous
// node ranges balanced by the nodes' predicted times `node_ms` (one per graph node), cut where
// the least activation data of `kernels`' compute type crosses (a layer's boundary, the
// residual stream alone). Throws InputError when the graph has fewer parts with work than
// stages.
struct InferenceStages {
  std::vector<int> cuts;         // pp + 1 node positions: stage s holds nodes [cuts[s], cuts[s + 1])
  std::vector<double> stage_ms;  // per stage: its nodes' time
  double send_bytes = 0;         // the most activation bytes a cut carries
};
InferenceStages inference_stages(const Graph& g, const std::vector<Kernel>& kernels, const std::vector<double>& node_ms,
                                 int pp, const Link& link, bool even_layers = false);
// With `even_layers`: the stages hold vLLM's even split of the decoder layers (a node's layer
// read from its name: "layers.N.", "h.N.", "layer.N.", "blocks.N."); InputError when the graph
// names fewer layers than stages.
// The layer index of each node by its name (-1 for a node of no layer).
std::vector<int> node_layers(const Graph& g);

// vLLM's pipeline-parallel serving: a batch over m microbatches (its virtual engines, one per
// stage; m = min(pp, batch)), each with its own sequences, the stages working on different
// microbatches at once. `hop_ms`: one send between stages.
// The prefill: the m microbatches through the stages one after another (a forward-only
// pipeline's fill), the last one's first token after the stages' sum, pp - 1 hops and
// m - 1 times the slowest stage.
double pipelined_prefill_ms(const std::vector<double>& stage_ms, double hop_ms, int microbatches);
// A decode round, in which every microbatch gains a token: one microbatch's token crosses
// every stage and its sampled token returns to the first (pp hops) before its next step, and
// each stage serves all m microbatches a round: the longer of the two.
double pipelined_step_ms(const std::vector<double>& stage_ms, double hop_ms, int microbatches);

// --- schedule arithmetic (pure, unit-tested) -----------------------------------------------
// Idle fraction of a pipeline with equal stages and no communication: (pp-1)/(m+pp-1).
double bubble_fraction(int pp, int microbatches);

struct PipelineTiming {
  double span_ms = 0;                 // first forward start to last backward end
  std::vector<double> stage_busy_ms;  // compute per stage (all microbatches)
  std::vector<double> stage_end_ms;   // when each stage finishes its last backward
  double bubble_ms = 0;               // span minus the busiest stage's compute
};
// Simulates the schedule: per stage one forward and one backward time per microbatch,
// `p2p_ms` per activation (forward) or gradient (backward) hop between stages.
PipelineTiming simulate_pipeline(const std::vector<double>& stage_fwd_ms, const std::vector<double>& stage_bwd_ms,
                                 int microbatches, PipelineSchedule schedule, double p2p_ms);

// Megatron-LM's interleaved 1F1B schedule: `fwd` and `bwd` hold pp x vp virtual stages, stage
// c pp + d on GPU d. Each GPU runs its microbatch-chunks in Megatron's order: forward k of
// chunk (k mod pp vp) / pp, microbatch (k / (pp vp)) pp + k mod pp; (pp - d - 1) x 2 +
// (vp - 1) x pp warm-up forwards, then one forward and one backward (chunks in reverse), then
// the rest of the backwards. A virtual stage's forward waits for the one before it, its
// backward for its forward and the one after it, each hop `p2p_ms` away. The timing is per GPU.
PipelineTiming simulate_interleaved(const std::vector<double>& stage_fwd_ms, const std::vector<double>& stage_bwd_ms, int pp,
                                    int microbatches, double p2p_ms);
// Microbatch-chunks GPU `gpu` holds at once under that schedule: its warm-up forwards and the
// one in flight, at most microbatches x vp.
int interleaved_in_flight(int gpu, int pp, int vp, int microbatches);

struct OverlapTiming {
  double comm_ms = 0;     // sum of the collectives' times (gradient reductions and gathers)
  double end_ms = 0;      // when the last one ends (the pass starts at 0)
  double exposed_ms = 0;  // max(0, end - the pass's compute), stalls for gathers included
  int buckets = 0;        // gradient buckets reduced
  double gather_ms = 0;   // of comm_ms, parameter all-gathers (overlap_sharded)
  double live_gather_bytes = 0;  // the most gathered parameter bytes held at once (a bucket and the one prefetched)
};
// The data-parallel collectives beside one pass of `step_ms` (forward or backward): step i
// needs need_bytes[i] of parameters all-gathered before it starts (ZeRO stage 3, FSDP; empty
// otherwise) and readies grad_bytes[i] of gradients when it ends (empty in a forward pass).
// Gradients fill buckets of `grad_bucket_bytes` in step order; a full bucket (and the last,
// partial one at the end) is issued when its last gradient is ready and reduced with
// reduce_ms(bytes) (DDP's all-reduce, ZeRO's reduce-scatter). The needs are gathered in
// buckets, in step order, each closed once it holds at least `gather_bucket_bytes`; the first
// is issued at 0, each next one when the steps of the one before start (one bucket
// prefetched), and a step waits for its bucket. Every transfer takes the one link in the
// order it is issued.
OverlapTiming overlap_sharded(const std::vector<double>& step_ms, const std::vector<double>& need_bytes,
                              const std::vector<double>& grad_bytes, double gather_bucket_bytes,
                              double grad_bucket_bytes, const std::function<double(double)>& gather_ms,
                              const std::function<double(double)>& reduce_ms);

// DeepSpeed's stage3_prefetch_bucket_size default: ZeRO-3 gathers parameters in buckets of at
// least this many elements (a single larger weight is one bucket of its own).
inline constexpr double kZeroGatherBucketParams = 5e7;

// --- per-GPU work under tensor parallelism --------------------------------------------------
enum class TpRole { replicated, column, row, sharded, vocab_embedding };
const char* tp_role_name(TpRole r);

// Megatron-style roles of the graph's nodes for `tp` GPUs (documented heuristic for any
// ONNX graph): a MatMul/Gemm with a 2-D weight whose input is not split is column-parallel
// (output columns split), one whose input is split is row-parallel (reduction split, its
// output all-reduced); ops reading split activations are sharded (attention heads, the MLP
// activation); a Gather from a 2-D weight whose rows equal some weight GEMM's output width
// (the vocabulary) is a vocabulary-parallel embedding (output all-reduced). A split
// dimension that tp does not divide is padded up (Megatron pads the vocabulary the same
// way). tp = 1: everything replicated.
std::vector<TpRole> tensor_parallel_roles(const Graph& graph, int tp);
// What one GPU holds 1/tp of under these roles: the initializers a split node (any role but
// replicated) reads, and the output of a node whose role splits it (column-parallel GEMMs,
// sharded ops; a row-parallel GEMM's output is all-reduced whole).
std::set<std::string> tensor_parallel_split_weights(const Graph& graph, const std::vector<TpRole>& roles);
bool splits_output(TpRole r);

// Sequence parallelism: the nodes whose kernels and outputs are split along the sequence over
// the tp GPUs, per node: a node of the data path (data_path_tensors) that tensor parallelism
// leaves replicated.
std::vector<char> sequence_parallel_nodes(const Graph& graph, const std::vector<TpRole>& roles);

// ZeRO stages 1-3: each data-parallel GPU updates 1/dp of every parameter, so the
// optimizer's update kernels (phase update) shrink by dp; the rest is left as it is.
KernelList shard_optimizer_updates(const KernelList& kernels, int dp);

// The kernel list one GPU runs: kernels of split nodes shrunk by tp, TP all-reduces
// (class collective, op "allreduce") inserted after the row-parallel / vocab-parallel
// forward kernels and after the column-parallel backward kernels, update kernels of split
// weights shrunk. A mixture's expert kernels under ep > 1 (inference: ep divides tp) are those
// of the busiest GPU (expert_parallel_load). Identity when tp = 1.
KernelList shard_tensor_parallel(const Graph& graph, const KernelList& kernels, int tp, int ep = 1,
                                 bool sequence_parallel = false);

// --- per-GPU work under context parallelism --------------------------------------------------
// The kernel list one GPU of a context-parallel group runs: every kernel of the tokens on 1/cp
// of them (a GEMM's token rows, or its reduction where a weight's gradient sums over them;
// FlashAttention's queries, against every key: its K/V read whole; tensor-parallel
// all-reduces of those tokens), and after each FlashAttention kernel its ring (class
// collective, op "cp_ring"): cp - 1 point-to-point steps of the local K/V chunk (backward:
// K/V and their gradients). Optimizer updates, a weight's own computations and the embedding
// table's gradient are left whole. Identity when cp = 1.
// CpComm::a2a (Ulysses): FlashAttention runs every query of 1/cp of the heads (its products,
// Q, K, V and O all 1/cp), an all-to-all (op "cp_alltoall") before it (Q, K and V; backward:
// the output's gradient) and one after it (the output; backward: the gradients of Q, K and
// V), each sending (cp - 1) / cp of the local tokens' tensors.
KernelList shard_context_parallel(const Graph& graph, const KernelList& kernels, int cp, CpComm comm = CpComm::p2p);
// The ring's time on the critical path (cp_ring_exposed_ms): its steps each overlap one
// block (1/cp) of the attention kernel before it, so only what a step's transfer takes beyond
// that block shows: (cp - 1) x max(0, step transfer - attention / cp).
double cp_ring_exposed_ms(double ring_bytes, double attention_ms, int cp, const Link& link);
// Gives each "cp_ring" kernel its exposed time beside the kernel before it, its 80% interval
// at the link's efficiency scaled to kLinkEfficiencyHigh and kLinkEfficiencyLow, and each
// "cp_alltoall" its transfer (exposed whole); returns the transfer times (hidden or not) per
// kernel, 0 for the others.
std::vector<double> time_context_parallel_rings(const std::vector<Kernel>& kernels, std::vector<Prediction>& preds,
                                                int cp, const Link& link);

// --- per-GPU work under expert parallelism in training -----------------------------------------
// The kernel list one GPU of an expert-parallel group of `ep` runs: a mixture's expert kernels
// (forward and backward) as the busiest GPU runs its E/ep experts on the group's tokens
// (expert_parallel_load over ep times its own), an all-to-all (class collective, op
// "ep_alltoall": each token's top-k hidden rows, all but 1/ep of them sent) before and after the
// experts in each pass, and the experts' weight updates on 1/ep (`shrink_updates`; ZeRO's
// sharding over the dp GPUs, shard_optimizer_updates, already gives each GPU its share of
// them: E/ep experts over the dp/ep GPUs holding them). Identity when ep = 1.
KernelList shard_expert_parallel(const Graph& graph, const KernelList& kernels, int ep, bool shrink_updates = true);
// Gives each "ep_alltoall" kernel its time: the bytes a GPU sends, point to point at the link's
// bandwidth (the ep - 1 transfers run at once over a switch), one step's latency.
void time_expert_all_to_alls(const std::vector<Kernel>& kernels, std::vector<Prediction>& preds, const Link& link);

// --- expert placement (pure, unit-tested) ---------------------------------------------------
// Routing is uniform and independent per token (the lowering's assumption), so a GPU's load is
// random and the step waits for the busiest GPU. With `experts` over `gpus` GPUs (E/gpus each)
// and `tokens` tokens picking `top_k` distinct experts each:
//   reached: each expert is reached with p = 1 - (1 - k/E)^tokens, independently (the
//     lowering's expected count E p); a GPU reaches Binomial(E/gpus, p) of its experts; the
//     expected maximum over the GPUs is exact for independent binomials.
//   routed: a token sends Hypergeometric(k draws of E, E/gpus local) of its k copies to a
//     GPU: mean k/gpus, variance k (1/g)(1 - 1/g)(E - k)/(E - 1); over the tokens a GPU gets
//     mean tokens k/gpus and the maximum over GPUs is taken as mean + sigma x the expected
//     maximum of `gpus` standard normals (tokens x k at most, the reached experts at least).
// gpus = 1: the lowering's whole mixture.
struct ExpertLoad {
  double reached = 0;  // experts of the busiest GPU that get at least one token
  double routed = 0;   // token-expert pairs the busiest GPU computes
};
ExpertLoad expert_parallel_load(double tokens, int64_t experts, int64_t top_k, int gpus);
// Expected maximum of n independent standard normal variables (0 for n = 1; 0.5642 for 2).
double expected_max_standard_normal(int n);
// Expected maximum of `n` independent Binomial(trials, p) variables.
double expected_max_binomial(int64_t trials, double p, int n);

// --- the iteration ---------------------------------------------------------------------------
struct StageReport {
  int gpu = 0;                         // the pipeline GPU holding it (stage mod pp; vp > 1: several a GPU)
  int first_node = 0, last_node = 0;   // graph node range [first, last]
  std::string first_name, last_name;
  double forward_ms = 0, backward_ms = 0, update_ms = 0;  // per microbatch (update: once)
  double send_bytes = 0;               // activation bytes sent to the next stage per microbatch
  double params = 0;                   // parameters held by one GPU of this stage
  double weights_gb = 0, gradients_gb = 0, optimizer_gb = 0, activations_gb = 0, total_gb = 0;
};

struct ParallelReport {
  ParallelConfig config;
  // A pipeline-parallel forward pass (inference): no backward, gradients or optimizer; the
  // stages' forward_ms and the memory of their weights and one microbatch's activations.
  bool inference = false;
  int64_t global_batch = 0, micro_batch = 0;
  // The links each axis's traffic crosses, ranks placed as Megatron-LM places them (the
  // tensor-parallel group's ranks adjacent, then data-parallel, then the pipeline stages) on
  // nodes of one NVLink domain (Gpu::nvlink_domain) each: tensor-parallel all-reduces among
  // the tp GPUs of a group (tp_link), gradient all-reduces over the tp x dp GPUs a
  // data-parallel group spans (dp_link), pipeline sends between stages tp x dp GPUs apart
  // (link: among all the run's GPUs, the slowest). Tensor parallelism within a node thus keeps
  // NVLink when the run spans several nodes.
  Link tp_link, dp_link, link;
  // Context parallelism: the ring among the cp GPUs of a group (tp apart: Megatron-LM's order
  // tp, cp, dp, pp), and per iteration on the critical GPU its transfers and the part of
  // them the attention does not hide.
  Link cp_link;
  double cp_comm_ms = 0, cp_exposed_ms = 0;
  // Expert parallelism in training: the all-to-alls among the ep GPUs (tp apart within the
  // data-parallel group), per iteration on the critical GPU (on the critical path).
  Link ep_link;
  double ep_comm_ms = 0;
  // A data-parallel group spanning several NVLink domains with dp_domain_gpus > 1 of its GPUs in
  // each (dp x tp over the domain, without --link-bw) reduces hierarchically: on dp_intra_link
  // within a domain, on dp_link across (hierarchical_allreduce_ms). 1: the flat ring on dp_link.
  int dp_domain_gpus = 1;
  Link dp_intra_link;
  double iteration_ms = 0;
  double compute_ms = 0;         // busiest stage: kernels of all microbatches (TP all-reduces included)
  double tp_comm_ms = 0;         // TP all-reduces per GPU per iteration (on the critical path)
  double dp_comm_ms = 0;         // data-parallel collectives: gradient all-reduce (ZeRO: reduce-scatters and gathers)
  double dp_gather_ms = 0;       // of dp_comm_ms, ZeRO's parameter all-gathers
  double dp_exposed_ms = 0;      // the part not hidden behind the compute (ZeRO: with the gathers after the step)
  int dp_buckets = 0;
  double pp_comm_ms = 0;         // send/recv per iteration on the critical path
  double comm_ms = 0;            // tp + dp + pp + cp + ep
  double exposed_comm_ms = 0;    // tp + pp + dp exposed + cp exposed + ep
  double bubble_ms = 0, bubble_fraction = 0;  // idle time of the busiest stage, and per span
  double update_ms = 0;          // optimizer step (slowest stage)
  double memory_capacity_gb = 0;
  double peak_memory_gb = 0;     // the fullest GPU (its stages together when vp > 1)
  std::vector<StageReport> stages;
  std::vector<std::string> warnings;
};

// An activation a training step keeps for its backward pass, as the caller counts them (the
// api by PyTorch's derivative rules): the graph node that keeps it, the node that wrote it (-1:
// a graph input), its bytes on one GPU without tensor parallelism and the tensor ("" for one
// that is no graph tensor, a dropout's mask). `segment` >= 0: recomputed in that segment's
// backward under activation checkpointing (apply_checkpoints), alive only then.
struct SavedActivation {
  int keeper = -1, writer = -1;
  double bytes = 0;
  std::string tensor;
  int segment = -1;
};

// --- activation checkpointing (--recompute full) ---------------------------------------------
// A float tensor of the model's data path (the float graph inputs, what a node computes from a
// weight or from such a tensor; a mask, position ids or a rotary table are not) alive across
// node boundaries: written by node `producer` (-1: a graph input), last read by `last_use`.
// Its bytes in `compute` (DType::undefined: its own type).
struct PathTensor {
  std::string name;
  int producer = -1, last_use = -1;
  double bytes = 0;
};
std::vector<PathTensor> data_path_tensors(const Graph& graph, DType compute);

// The checkpoints of a training step's forward pass, as Hugging Face's gradient checkpointing
// and Megatron-LM's full recomputation place them: where the data path carries least (a
// block's boundary, the residual stream alone). The forward between two consecutive
// checkpoints is a segment: its activations are dropped, and its forward runs again in the
// backward pass just before that segment's backward; the tensors crossing the checkpoints are
// kept. The nodes before the first checkpoint and from the last on (embeddings, the head, the
// loss) keep their activations and run once.
struct CheckpointPlan {
  std::vector<int> segment_of;  // per node: its segment, -1: none
  int segments = 0;
  std::vector<int> positions;   // the checkpoints (between node c-1 and c), ascending
  std::vector<PathTensor> kept;  // the data-path tensors crossing them
};
// Chooses the checkpoints from `saved` (the activations the step keeps without them): for
// each bound on the bytes a checkpoint carries (the distinct crossing sizes, ascending, at
// most 256 spread over them), every position within it is a checkpoint; the bound whose
// step keeps least at its peak (the kept tensors, the activations outside segments, the
// largest segment's) wins. No segment (segments == 0) when none keeps less than the step
// without checkpoints.
CheckpointPlan plan_checkpoints(const Graph& graph, DType compute, const std::vector<SavedActivation>& saved);
// Megatron-LM's selective recomputation (--recompute-granularity selective): the segments are
// the attention cores alone, each the nodes from the product of two activations (Q K^T)
// through its scale, mask, Softmax and dropout to the product of the probabilities with an
// activation (P V), whose score-sized activations are dropped and recomputed; nothing else.
// A core with a node marked in `flash` (FlashAttention's, which keeps no scores and recomputes
// them itself) is left out. No checkpoints (`positions`).
CheckpointPlan plan_attention_recompute(const Graph& graph, const std::vector<char>& flash);
// `saved` under the plan: an activation kept and written in one segment is recomputed there
// (its segment set); the checkpoints' tensors are added as kept activations (keeper: the node
// after the checkpoint), each tensor kept once.
std::vector<SavedActivation> apply_checkpoints(const std::vector<SavedActivation>& saved, const CheckpointPlan& plan);
// The most activation bytes alive at once: the kept ones and the largest segment's.
double peak_saved_bytes(const std::vector<SavedActivation>& saved);
// The kernel list with each segment's forward kernels run again in the backward pass (phase
// backward, noted), before the first backward kernel of the segment's nodes: after tensor
// parallelism's sharding, so that a recomputed row-parallel GEMM all-reduces again.
KernelList with_recompute(const KernelList& kernels, const CheckpointPlan& plan);

// Memory per GPU: parameters of its stage (1/tp of the split ones) in the compute dtype,
// as many gradients, the optimizer's fp32 state (lowering.h optimizer_state_bytes: Adam's two
// moments, a momentum buffer, none for SGD; + an fp32 master copy when training in 16 bits),
// and the activations of the microbatches in flight (GPipe: all m; 1F1B: pp - stage): those
// of `saved` its stage's nodes keep, 1/tp of those a split node wrote (a recomputed segment's
// once, the stage's largest). ZeRO divides the
// optimizer's state (stage 1+), the gradients (2+, plus one gradient bucket) and the
// parameters (3, plus the parameter buckets gathered at once) by dp.
//
// Predicts one iteration. `kernels` is the per-GPU list (after shard_tensor_parallel) at the
// micro-batch; `preds` its predictions, collectives are filled in here. Throws InputError
// for a configuration the graph cannot take (more stages than nodes, ...).
ParallelReport plan_iteration(const Graph& graph, const std::vector<Kernel>& kernels, std::vector<Prediction>& preds,
                              const Gpu& gpu, const ParallelConfig& config, int64_t global_batch,
                              int64_t micro_batch, const std::vector<SavedActivation>& saved);

}  // namespace neusight
