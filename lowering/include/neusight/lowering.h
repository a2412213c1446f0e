// lowering.h - ONNX nodes to the kernels a GPU framework launches (the kernel IR).
//
// Takes: a shape-inferred Graph.
// Gives: one KernelList: for every node the kernels it runs (forward; with training also
// backward and weight-update kernels), with exact work counts (FLOPs, bytes).
//
// Kernel grouping (LoweringOptions::fusion):
//   none  - one kernel per ONNX node that does work on the GPU.
//   eager - the PyTorch-eager view the measured data comes from: decomposed LayerNorm,
//           exact-erf GELU and SiLU chains as one kernel each, MatMul+bias as one GEMM with a
//           bias epilogue (addmm), a Transpose read only by GEMMs as a strided operand (no
//           kernel), Expand read only by broadcasting ops as a view. The tanh-GELU chain of
//           HF gelu_new stays eight kernels, exactly as the traced GPT-2 opgraph shows.
//   full  - also fuses chains of pointwise ops and a pointwise prologue into the following
//           softmax/layernorm/reduction, like torch.compile (inductor); in inference values
//           fixed by the bound input shapes fold too (a static-shape engine).
// In every mode, nodes that only compute shape tensors (every output a compile-time
// value, or tiny integer tensors computed from tiny integer tensors) run on the host and
// cost nothing, views (Reshape, Squeeze, Unsqueeze, Flatten, Identity, Shape, ...) are free,
// and nodes computed from constants only are folded (in training, not what a trainable
// float initializer feeds).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "neusight/graph.h"

namespace neusight {

enum class KernelClass { gemm, elementwise, softmax, layernorm, reduce, memory, collective, unknown };
enum class Phase { forward, backward, update };
enum class Fusion { none, eager, full };
// How attention runs (--attention): automatic = one FlashAttention kernel under --fusion eager
// and full (the kernel PyTorch's scaled_dot_product_attention runs at 16 bits, Hugging Face's
// default attention, in inference and training), MatMul + Softmax + MatMul kernels under
// --fusion none; fused = FlashAttention whatever the fusion; unfused = never (Hugging Face's
// "eager" attention). FlashAttention runs 16-bit (and 8-bit) attention only.
enum class Attention { automatic, unfused, fused };
enum class Mode { inference, training };
// The optimizer a training step updates its parameters with (--optimizer): plain SGD (the
// NeuSight method's update, one add per parameter), SGD with momentum (one FP32 buffer per
// parameter), or Adam / AdamW (two FP32 moments). One fused elementwise update per parameter
// tensor; optimizer_state_bytes() is the state it keeps per parameter.
enum class Optimizer { sgd, momentum, adam };

const char* kernel_class_name(KernelClass c);
const char* phase_name(Phase p);
const char* fusion_name(Fusion f);
// The optimizer whose update kernel runs `update_op` (Kernel::op of a Phase::update kernel):
// "sgd", "momentum" or "adam"; "" for another op.
const char* optimizer_of_update(const std::string& update_op);
// The state that optimizer keeps per parameter, in bytes (its FP32 buffers; an FP32 master
// copy of 16-bit parameters is not included): 0 for SGD, 4 for momentum, 8 for Adam.
double optimizer_state_bytes(const std::string& update_op);

// GEMM problem in CUTLASS words: C[m x n] = A[m x k] * B[k x n], `batch` independent
// products. (The NeuSight dataset names these differently: its M = m, its N = k (the
// reduction), its K = n. Conversions happen only where the dataset is read or written.)
struct GemmShape {
  int64_t batch = 1;
  int64_t m = 0, n = 0, k = 0;
  bool batched = false;  // runs as a batched GEMM (torch.bmm, cuBLAS strided batched): gemm_runs_batched
};
// Whether a GEMM the framework calls as `op` ("bmm", "linear") over `batch` products runs as a
// strided batched GEMM: a bmm of more than one. A batched GEMM of one runs as a single GEMM
// (cuBLAS's strided batched call with batch count 1 picks its single-GEMM kernels: the A100's
// batch-1 BMM rows of neusight-data ran ampere_sgemm_32x32_sliced / 128x32 / 32x128, as its
// linear rows, never the 128x128 of its batched rows).
inline bool gemm_runs_batched(const std::string& op, int64_t batch) { return op == "bmm" && batch > 1; }

// DRAM traffic that depends on the GPU's L2 (tiling.h, on_gpu). `bytes` reads each element
// of an operand once; an operand element used again later - broadcast over an output dim,
// or sharing its 32-byte sector with elements that a permuted-view read reaches later
// (eager `scores += bias.permute(...)`) - comes from L2 only while the L2 holds the
// operand's data touched between the two uses (`footprint` bytes). Per entry: the operand
// (input index), that footprint, and the extra DRAM bytes when it does not fit; per
// operand the largest extra of its entries whose footprint exceeds the L2 applies.
struct L2Reuse {
  int operand = 0;
  double footprint = 0;
  double miss_bytes = 0;
};

// How a streaming kernel's threads reach memory, when its code is known to be latency
// limited (predictor/include/neusight/precision.h, memory_parallelism_ms). Left at zero
// (the default, and every kernel the lowering emits for PyTorch's and onnxruntime's
// vectorized kernels) the kernel is predicted by the NeuSight law as before.
struct ThreadAccess {
  int bytes_per_load = 0;   // bytes one thread loads per access (2: scalar half-precision loads)
  int loads_in_flight = 1;  // independent loads a thread issues before it waits on them
  int block_threads = 0;    // threads per block; one block per row of `cols` elements
  // Dependent steps after the first pass over the row (rms_norm; precision.h):
  int block_reductions = 0;   // block-wide sums (warp shuffles, shared memory, barrier) per row
  int cached_pass_level = 0;  // a second pass re-reading the row from cache: 1 (L1) or 2 (L2); 0: none
  bool cached_pass_weight = false;  // ... that also reads a per-column operand (rms_norm's weight)
  // Registers per thread of the compiled kernel when known (0: not limiting): blocks per SM
  // are also bounded by the SM's registers (a 1024-thread block above 32 registers per
  // thread leaves room for one block on a 64K-register SM).
  int regs_per_thread = 0;
  // Row-length tensors the first pass reads per row (0: the kernel's `inputs`). A per-column
  // operand (rms_norm's weight, read in the second pass) is not one.
  int row_tensors = 0;
  // Dependent loads before the first pass: an index the row's addresses need (the token's
  // position in rotary_embedding, its cache slot in reshape_and_cache).
  int index_loads = 0;
};

// vLLM's rms_norm over rows of `cols` 16-bit elements: one block of min(cols, 1024) threads
// per row, each loading one 2-byte element per iteration of a loop over the row; a pass for
// the sum of squares, a block reduction, then a second pass re-reading the row from L1 with
// the weight. The serving kernels' RMSNorm (LoweringOptions::serving_kernels) and the
// half-precision bench's description of Vidur's timings.
ThreadAccess vllm_rms_norm_access(int64_t cols);
// vLLM's fused_add_rms_norm over `rows` rows of `cols` 16-bit elements (residual += x, then
// x = rms_norm(residual)): one block per row of min(cols, 1024) threads below 256 rows and 256
// from there; 16-byte loads of x and the residual (both in flight) when cols is a multiple of 8
// (else 2-byte loads), the sum stored, a block reduction, then a second pass re-reading the
// stored sum (from L2: the first pass wrote it) with the weight.
ThreadAccess vllm_fused_add_rms_norm_access(int64_t rows, int64_t cols);
// vLLM's rotary_embedding over each token's query and key heads in place (rows: tokens; cols:
// (heads + kv_heads) x head_dim), given the query heads' width q_width = heads x head_dim: one
// block per token of min(q_width / 2, 512) threads, each loading the two 2-byte elements of a
// rotated pair per iteration (cos and sin at the token's position, loaded first), the query
// heads' pairs, then the key heads'.
ThreadAccess vllm_rotary_access(int64_t q_width);
// vLLM's silu_and_mul over rows of `cols` outputs (gate and up halves of 2 x cols): one block per
// token of min(cols, 1024) threads, each loading one 2-byte element of each half per iteration.
ThreadAccess vllm_act_and_mul_access(int64_t cols);

// The experts `rows` tokens reach on average when each picks `top_k` of `experts` uniformly
// and independently: experts x (1 - (1 - top_k / experts)^rows), at least top_k (and at most
// experts). A mixture-of-experts layer reads only their weights (MoE / QMoE lowering).
double moe_experts_reached(double rows, int64_t experts, int64_t top_k);
// Where an onnxruntime MoE / QMoE node takes its experts' weights: fc1, fc2 and the gated
// layer's fc3 (optional); QMoE's scales follow each weight (its index + 1), MoE's biases too.
struct MoeWeightInputs {
  size_t fc1 = 2, fc2 = 4, fc3 = 6;
  bool scales = false;  // QMoE
};
MoeWeightInputs moe_weight_inputs(const std::string& op_type);

struct Kernel {
  KernelClass cls = KernelClass::unknown;
  Phase phase = Phase::forward;
  std::string op;      // what runs: "linear", "bmm", "conv", "add", "gelu", "softmax", "ln", ...
  DType dtype = DType::f32;  // precision the kernel computes in (quantized GEMMs: the weights')
  int node = -1;       // index of the ONNX node in Graph::nodes (-1: not tied to one node)

  GemmShape gemm;      // cls == gemm
  // Vector kernels (elementwise, softmax, layernorm, reduce, memory): `rows` x `cols`
  // elements; softmax/layernorm normalise each row of length `cols`; elementwise uses
  // rows*cols; reduce reduces each row of `cols` elements to one.
  int64_t rows = 0, cols = 0;
  int inputs = 1;      // tensor operands read (elementwise; a 1-element operand is a scalar)
  // Norm kernels (layernorm class): also add a residual and write the sum (onnxruntime's
  // SkipLayerNormalization, a residual add fused into the norm under --fusion full).
  bool residual_add = false;
  // A LoRA adapter's kernel beside the frozen linear layer of `node` (--lora): its GEMMs
  // (op lora_a, lora_b) and its scale and add; not QLoRA's dequantize of the frozen weight.
  bool lora_adapter = false;
  // A linear layer's GEMM whose weight is pruned 2:4 (--sparsity 2:4; SparsityOptions): two of
  // every four consecutive weights along the reduction are zero. `flops` and `bytes` stay the
  // dense GEMM's; where the GPU has sparse matrix units for the dtype the predictor runs it
  // there (precision.h sparse_2_4_kernel), else it runs dense.
  bool sparse_2_4 = false;

  double flops = 0;    // useful floating-point operations
  double bytes = 0;    // bytes read + written from/to memory at minimum
  std::string note;    // free text for reports (e.g. "bias epilogue", unknown op type)
  // Update-phase kernels: the parameter (initializer) they update; LoRA's NF4 dequantize
  // kernels (kNf4DequantizeOp): the frozen weight they expand.
  std::string weight;
  // A mixture of experts' kernels (MoE / QMoE): the experts' up projections (fc1, fc3), their
  // down projection (fc2), their activation; none for the routing, the weighted sum and the
  // rest. Tensor parallelism splits each expert along its intermediate dim by these.
  enum class ExpertPart { none, up, down, activation };
  ExpertPart expert_part = ExpertPart::none;
  // Routing of those kernels (uniform over the experts): `experts` of which each of `tokens`
  // picks `top_k`; `weight_bytes` is the part of `bytes` that the reached experts' weights (and
  // their scales) take, the rest scaling with the routed tokens. Expert parallelism
  // (parallel.h) places the experts on GPUs by these.
  struct MoeRouting {
    int64_t experts = 0, top_k = 0;
    double tokens = 0, weight_bytes = 0;
  };
  MoeRouting moe;

  // --- details (added by the lowering stage; readers may ignore them) -------------------
  bool trans_a = false, trans_b = false;  // GEMM operand read transposed (strided view)
  // A weight-only quantized GEMM (MatMulNBits, QMoE): `dtype` is its weights' (uint4, uint8),
  // its math runs in the activations' half precision after they are dequantized in the kernel.
  bool weight_only = false;
  std::string epilogue;                   // GEMM epilogue fused in: "", "bias", ...
  std::vector<int64_t> operand_elems;     // elements of each tensor operand (broadcast sizes)
  std::vector<int> fused_nodes;           // other nodes whose work this kernel also does
  // Node inputs that are the GEMM's A and B operands (-1: an internal tensor of the node,
  // e.g. the Q/K/V of a fused attention op). Training uses them to skip gradients that no
  // parameter needs.
  int a_input = -1, b_input = -1;
  int64_t steps = 1;                      // recurrent kernels: which step (1-based) this is
  // FlashAttention kernels (is_attention_kernel): the attention's query and KV heads, one GPU's
  // under tensor parallelism (0: not known).
  int64_t heads = 0, kv_heads = 0;
  // Kernels of a control-flow body (If branch, Loop / Scan body): the body node that runs
  // it, named "<node>/<body node>" (nested bodies add a level each); `node` is the node of
  // the analysed graph that holds the body.
  std::string body_node;
  // A forward kernel run again in the backward pass under activation checkpointing (phase
  // backward; parallel.h with_recompute): it differentiates nothing.
  bool recomputed = false;
  // --- extensions, apart from the core above: each written by one stage for one reader ----
  std::vector<L2Reuse> l2_reuse;  // lowering -> tiling (on_gpu): L2-dependent DRAM traffic
  ThreadAccess access;            // lowering (serving kernels) or benches -> predictor (memory_parallelism_ms)
};

// FlashAttention's own GEMM-class kernels (forward and training backward), which load their
// own head_dim-wide rows: not a library GEMM (no tile alternatives, weight stream or alignment).
inline bool is_flash_gemm(const Kernel& k) { return k.op == "flash_attention" || k.op == "flash_attention_bwd"; }
// A fused attention kernel: those, the backward's row pass "flash_bwd_dot" and the decode form
// over a KV cache "flash_decode" (class reduce), which reports total apart from their class.
inline bool is_attention_kernel(const Kernel& k) { return is_flash_gemm(k) || k.op == "flash_decode" || k.op == "flash_bwd_dot"; }

// Work counts (useful FLOPs, compulsory bytes) of the kernel shapes, one set for the lowering
// and the dataset reader (predictor/dataset.h): the networks are trained on the counts the
// product computes.
struct Work {
  double flops = 0;
  double bytes = 0;
};
inline constexpr double kSoftmaxOpsPerElement = 5;    // max, subtract, exp, sum, divide
inline constexpr double kLayerNormOpsPerElement = 6;  // mean, subtract, square, sum, scale, shift
inline constexpr double kRmsNormOpsPerElement = 4;    // square, sum, scale, weight
// A GEMM reading `a_elems` and `b_elems` operand elements (broadcast operands once) and
// writing its batch x m x n output, `elem_bytes` each: 2 m n k FLOPs per product.
Work work_of_gemm(const GemmShape& s, double a_elems, double b_elems, double elem_bytes);
// The same with operands of batch x m x k and batch x k x n elements.
Work work_of_gemm(const GemmShape& s, double elem_bytes);
// A row-wise kernel (softmax, norms) over rows x cols: reads its input, writes its output.
Work work_of_rowwise(int64_t rows, int64_t cols, double ops_per_elem, double elem_bytes);
Work work_of_softmax(int64_t rows, int64_t cols, double elem_bytes);
Work work_of_layernorm(int64_t rows, int64_t cols, double elem_bytes);
// An elementwise kernel over `elems` outputs reading `inputs` operands of as many elements.
Work work_of_elementwise(double elems, int inputs, double ops_per_elem, double elem_bytes);

// A forced narrow compute dtype narrows the GEMMs of weights only, as serving and training
// engines run them; every other tensor (attention, norms, activations, the KV cache unless
// --kv-dtype says otherwise) stays 16-bit:
// --dtype fp8: FP8 E4M3 W8A8 (vLLM's and TensorRT-LLM's fp8, Transformer Engine's recipe):
// the GEMMs of weights (and the experts of a mixture) read FP8 weights and FP8 activations
// (quantized per token or per tensor by the kernel before, fused there) on the FP8 matrix
// units, and write BF16; the rest is BF16. Training: the backward GEMMs take FP8 operands too
// (gradients as E5M2), the optimizer BF16.
// --dtype fp4: NVFP4 as TensorRT-LLM runs it on Blackwell: the same GEMMs read both operands
// as FP4 E2M1 values with one E4M3 scale per 16 (4.5 bits); the rest is BF16.
// --dtype int8: W8A8 as SmoothQuant-style serving runs it (vLLM's int8 w8a8, TensorRT-LLM):
// INT8 weights and per-token quantized INT8 activations on the integer matrix units, FP16
// outputs; the rest is FP16.
// The scales (one per channel, token or block of 16) are vectors or counted in the 4.5 bits.
constexpr double kNvfp4BytesPerElement = 0.5 + 1.0 / 16;
// Whether a forced compute dtype narrows only the weights' GEMMs (fp8, fp4, int8).
inline bool narrow_weight_gemms(DType compute) {
  return compute == DType::f4e2m1 || compute == DType::i8 || is_fp8(compute);
}
// Bytes per element of those GEMMs' operands.
inline double narrow_operand_bytes(DType compute) {
  return compute == DType::f4e2m1 ? kNvfp4BytesPerElement : element_bytes(compute);
}
// The dtype the tensors other than those GEMM operands are held in under a forced compute
// dtype (BF16 under fp8 and fp4, FP16 under int8; the dtype itself otherwise).
inline DType activation_dtype(DType compute) {
  if (compute == DType::f4e2m1 || is_fp8(compute)) return DType::bf16;
  return compute == DType::i8 ? DType::f16 : compute;
}
// Bytes such a GEMM moves: its operands narrow, its output in the activations' dtype.
inline double narrow_gemm_bytes(double operand_elems, double output_elems, DType compute) {
  return operand_elems * narrow_operand_bytes(compute) + output_elems * element_bytes(activation_dtype(compute));
}

// Low-rank adaptation (LoRA, Hu et al. 2021) as Hugging Face PEFT trains it: every parameter
// of the graph frozen (no gradient, no optimizer state), and beside each targeted linear layer
// (a GEMM of a 2-D float weight) a pair A [in x rank], B [rank x out] in the compute dtype:
// y = x W + s (x A) B, two GEMMs, a scale and an add forward; backward the scale, dB, the
// gradient of x A, dA and, where x needs a gradient, its share of dx and the add; the
// optimizer updates A and B alone. In inference the same pairs run forward beside the frozen
// model, unmerged (PEFT before merge_and_unload; vLLM's --enable-lora). `targets`: "all"
// (PEFT's all-linear: every linear layer
// but the output head, the last GEMM on its path) or a regular expression (ECMAScript) that
// a targeted weight's initializer name contains a match of ("q_proj|v_proj").
//
// QLoRA (Dettmers et al. 2023; `base=nf4`, bitsandbytes' load_in_4bit with double
// quantization): every linear layer's weight but the head's held as 4-bit NormalFloat with
// its block scales, kNf4BitsPerParameter a parameter, and expanded to the compute dtype by a
// dequantize kernel (kNf4DequantizeOp) before each GEMM that reads it: the forward and the
// input's gradient.
struct LoraOptions {
  int64_t rank = 0;
  std::string targets = "all";
  bool nf4_base = false;
  // Inference: the adapters served at once (vLLM's --max-loras), each sequence using one drawn
  // uniformly; `sequences` the sequences a kernel's tokens belong to (the bound batch; 0: one
  // per token). The adapters a GEMM's tokens reach run as a grouped GEMM (vLLM's SGMV / punica
  // kernels), each reading its own A or B.
  int64_t adapters = 1;
  int64_t sequences = 0;
};
// Of `adapters` drawn uniformly by `sequences` sequences, the distinct ones expected:
// adapters x (1 - (1 - 1 / adapters)^sequences), at least 1 and at most either.
double lora_adapters_reached(int64_t adapters, int64_t sequences);
// 4 bits, and the absmax of each 64-value block quantized to 8 bits with an FP32 scale per 256
// blocks (QLoRA's double quantization: 8/64 + 32/(64 x 256) = 0.127 bits).
inline constexpr double kNf4BitsPerParameter = 4.0 + 8.0 / 64.0 + 32.0 / (64.0 * 256.0);
inline constexpr const char* kNf4DequantizeOp = "dequantize_nf4";
// The weights a kernel list holds in NF4: those its forward dequantize kernels expand.
std::set<std::string> nf4_weights(const std::vector<Kernel>& kernels);

// 2:4 structured sparsity (NVIDIA's sparse tensor cores since Ampere, cuSPARSELt; PyTorch's
// to_sparse_semi_structured; TensorRT's --sparsity): of every four consecutive weights along a
// linear layer's reduction two are zero, held compressed as the two kept values and a 2-bit
// index of each (the PTX ISA's sparse mma metadata), and the matrix units skip the zeros:
// twice the dense peak for the same useful work. `targets`: "all" (every linear layer but the
// output head, the layers SparseGPT and Wanda prune) or a regular expression (ECMAScript) that a
// pruned weight's initializer name contains a match of. A GEMM over concatenated weights
// (serving kernels) is pruned when all its members are.
struct SparsityOptions {
  bool two_four = false;
  std::string targets = "all";
  // --sparsity auto: the weights whose values carry the pattern are pruned (the head's too),
  // `targets` unused. The caller that reads the model's values sets `two_four` and
  // `pruned_values(name, axis)`: whether the weight `name` has two zeros in every four along
  // `axis` (0: down its columns, MatMul's B [K, N]; 1: along its rows, Gemm's B under transB
  // [N, K] and a convolution's [Cout, Cin, ...] input channels), nullopt where its values are
  // not in hand (external data, values computed in the graph). The lowering asks it of every
  // weight it could run sparse and warns when none is pruned.
  bool from_weights = false;
  std::function<std::optional<bool>(const std::string& name, int axis)> pruned_values;
  // `zero_values(name)`: whether every value of initializer `name` is zero, nullopt where they
  // are not in hand. Asked of a quantized weight's zero point whose values the graph does not
  // keep (the IR keeps small integer tensors alone: a per-channel zero point of more than
  // 4,096 output channels), since a stored 0 is a zero weight only where the zero point is 0.
  std::function<std::optional<bool>(const std::string& name)> zero_values;
};
// Bytes per element of a weight held 2:4-compressed whose dense elements take `dense_bytes`:
// half the values and a 2-bit index per kept value.
inline double sparse_2_4_bytes_per_element(double dense_bytes) { return 0.5 * dense_bytes + 0.5 * 0.25; }

struct LoweringOptions {
  Mode mode = Mode::inference;
  Fusion fusion = Fusion::eager;
  Attention attention = Attention::automatic;
  // Precision the kernels run in when forced (--dtype); undefined = take the model's.
  DType compute_dtype = DType::undefined;
  // The KV cache's element type (--kv-dtype: serving engines' FP8 cache beside 16-bit
  // compute): what FlashAttention reads from a decode step's cache and appends to it;
  // undefined = the attention's own dtype.
  DType kv_cache_dtype = DType::undefined;
  // ai.onnx opset of the model (Softmax axis semantics changed at 13); 0 = latest.
  int64_t opset = 0;
  // Opsets of the other domains the model imports ("com.microsoft" -> 1, ...): each node is
  // lowered by the rule registered for its (domain, op type, opset). A domain missing here
  // gets its latest rules (ai.onnx: `opset`).
  std::map<std::string, int64_t> opsets;
  // Serving engines' kernels (inference, --fusion full; --generate sets it): MatMuls that read
  // the same activation through constant weights of the same reduction dim and dtype (Q, K
  // and V; gate and up; a bias Add in the epilogue) run as one GEMM over the concatenated weights (vLLM's
  // QKVParallelLinear and MergedColumnParallelLinear), reported under the first of them; a
  // mixture's fc1 and fc3 experts as one grouped GEMM over the stacked weights (fused_moe); a
  // 16-bit RMSNorm runs as vLLM's rms_norm kernel (Kernel::access: one block of up to 1024
  // threads per row, 2-byte loads, a block reduction, a second pass from L1 with the weight).
  bool serving_kernels = false;
  // Training: the optimizer whose update kernels end the step.
  Optimizer optimizer = Optimizer::sgd;
  // Low-rank adapters (--lora): LoraOptions above, trained or (inference) served unmerged;
  // rank 0: none (training: every parameter trains).
  LoraOptions lora;
  // --sparsity 2:4: the linear layers whose weights are pruned 2:4 (inference).
  SparsityOptions sparsity;
};

// Why a node launches no kernel (none: it does, or it was fused into another node's kernel).
enum class FreeReason {
  none,
  view,                      // Reshape, Squeeze, Identity, Shape, sequence references, ...
  host,                      // shape computation on tiny integer tensors
  identity_in_inference,     // Dropout outside training
  dequantize_into_gemm,      // a DequantizeLinear run inside the GEMM that reads its output
  constant_folded,           // computed from constants only, before the model runs
  strided_view_read_by_gemm, // a Transpose / Split read by GEMMs through its strides
  broadcast_view,            // an Expand read only by broadcasting elementwise ops
  // A Transpose read through its strides by elementwise ops (PyTorch eager
  // `a += b.permute(...)`): no copy; the readers pay for the strided access.
  strided_view_read_by_elementwise,
};
// The words the reports give a reason in ("" for none): "view", "host (shape computation)",
// "constant folded", ...
const char* free_reason_text(FreeReason r);

struct KernelList {
  std::vector<Kernel> kernels;              // execution order: forward, backward, update
  std::vector<std::string> unknown_ops;     // op types lowered to class "unknown"
  // What the prediction had to assume: an If whose condition is not known before the run,
  // a Loop / Scan whose trip count is not (one line each, naming the node and the input).
  std::vector<std::string> warnings;
  // Per node of the graph: the node whose kernel does its work when it was fused into
  // another node's kernel, else -1.
  std::vector<int> fused_into;
  // Per node: why it launches no kernel (FreeReason::none when it does or when it was fused).
  std::vector<FreeReason> free_reason;
  // --sparsity 2:4: the weights (initializer names) of the pruned linear layers.
  std::vector<std::string> sparse_weights;
};

KernelList lower(const Graph& graph, const LoweringOptions& options);
// An If node's condition where it is known before the run (a compile-time value): 1 (the
// then branch runs), 0 (the else branch), -1 when not known.
int known_if_condition(const Graph& graph, const Node& if_node);
// A control-flow body as its own graph: the enclosing graph's tensors it reads (outer-scope
// names: weights, inputs), those of the bodies nested in it and of its outputs, copied in.
Graph with_outer_scope(const Graph& body, const Graph& outer);

// The (domain, op type) pairs with a lowering rule ("" = ai.onnx), sorted. If, Loop, Scan
// and SequenceMap are lowered through their bodies and are not listed.
std::vector<std::pair<std::string, std::string>> lowering_rule_ops();

}  // namespace neusight
