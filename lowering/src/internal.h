// internal.h - what the lowering files share: the per-node context, byte/shape helpers,
// the op-type rule table and the fusion plan. Not installed; lowering/src only.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "neusight/lowering.h"
#include "neusight/op_registry.h"

namespace neusight::lowering_detail {

int64_t numel(const TensorInfo* t);
// rows x cols view of a tensor: cols = last dim (a scalar is 1 x 1; unknown is 0 x 0).
void rows_cols(const TensorInfo* t, int64_t& rows, int64_t& cols);
bool is_integer_like(DType t);  // integer or bool
bool is_quantized_storage(DType t);  // int8/uint8, int4/uint4 and the FP8 types


// Which nodes read each tensor (graph outputs are read by "-1").
using Consumers = std::unordered_map<std::string, std::vector<int>>;
Consumers consumers_of(const Graph& g);

// The fusion plan: which nodes launch no kernel, and which nodes run together as one kernel.
// What a group runs: a GEMM with its bias epilogue, a decomposed norm or activation
// recognised as the framework's one kernel, a torch.compile-style fused chain, attention as
// one FlashAttention kernel, the rotary embedding as one elementwise kernel.
enum class GroupKind { bias_gemm, layernorm, rmsnorm, gelu, gelu_tanh, quick_gelu, silu, fused, flash_attention, rotary, parallel_gemm };
// The group's name, also the op of the elementwise kernel of an activation or rotary group.
const char* group_kind_name(GroupKind k);

struct Group {
  GroupKind kind = GroupKind::fused;
  std::vector<int> nodes;  // in topological order
  int anchor = -1;         // node the kernel is reported under
  int emit_at = -1;        // node at whose position the kernel runs (the last member)
  // A norm group that full fusion joined with pointwise units (the residual add before it,
  // casts after it): one kernel of the norm's class over the norm's rows.
  bool extended = false;
  // Rotary of a layer's queries and keys in one kernel (serving kernels: vLLM's
  // rotary_embedding): the tokens and the query and key heads' widths (heads x head_dim); 0
  // otherwise.
  int64_t rotary_tokens = 0, rotary_q_width = 0, rotary_kv_width = 0;
};

struct Plan {
  std::vector<FreeReason> free_reason;   // per node: none = launches a kernel
  std::vector<int> group_of;             // per node: index into groups or -1
  std::vector<Group> groups;
  std::unordered_map<std::string, int> producer;  // tensor -> node that writes it
  // Inference below --fusion full: DequantizeLinear nodes that feed GEMM operands yet run as
  // written (a fusing engine would run them inside the GEMMs).
  int64_t unfused_dequantize = 0;
  // Eager 16-bit inference: the decomposed RMSNorms that Hugging Face's modules compute in
  // FP32 (mark_fp32_norms). `tensor_dtype`: the dtype their kernels write, by tensor;
  // `read_dtype`: a node's read of a tensor through a cast copy (the FP32 copy of the 16-bit
  // input, the 16-bit copy of the FP32 result), by node and tensor; `casts_before`: the casts
  // run before a node, the tensor and the dtype it is cast to. LowerCtx::dtype reads them.
  std::unordered_map<std::string, DType> tensor_dtype;
  std::map<std::pair<int, std::string>, DType> read_dtype;
  std::multimap<int, std::pair<std::string, DType>> casts_before;
};

Plan make_plan(const Graph& g, const LoweringOptions& opt, const Consumers& cons);

struct LowerCtx {
  const Graph& g;
  const LoweringOptions& opt;
  const Node& n;
  int index;
  std::vector<Kernel>& out;
  const Plan* plan = nullptr;

  const TensorInfo* in(size_t i) const;
  const TensorInfo* outp(size_t i) const;
  // Input i is a value the graph holds (parameters.h held_values): an initializer or a Constant
  // node's output, as exporters hold weights.
  bool held(size_t i) const;
  DType dtype(const TensorInfo* t) const;  // compute dtype of a tensor (forced by --dtype)
  Kernel base(KernelClass cls, const std::string& op) const;
  void unknown(const std::string& why) const;  // an "unknown" kernel (op kept, zero work)
  bool all_known(std::initializer_list<const TensorInfo*> ts) const;
  // True when input i is read as a strided transposed view (free Transpose before a GEMM).
  bool transposed_view(size_t i) const;
  // How this elementwise op reads input i through a free permuted view
  // (FreeReason::strided_view_read_by_elementwise): `elem_bytes`, what one element costs -
  // the memory transaction (a 32-byte sector) it arrives in, or the element's own size when
  // the view keeps the innermost dimension contiguous; 0 when input i is not such a view.
  // `reuse_elems`: when a sector holds several elements, the output elements walked between
  // two of them (the product of the output dims inside the view dim along which the stored
  // input is contiguous); 0 otherwise.
  struct StridedRead {
    double elem_bytes = 0;
    double reuse_elems = 0;
  };
  StridedRead strided_read(size_t i) const;
  // True when torch.matmul must copy input i before its bmm: a free permuted view (chain of
  // strided-view Transposes) of rank 4 or more whose batch dims cannot be folded into one
  // without a copy (their strides do not nest), taking the view's source as contiguous.
  bool batch_fold_copies(size_t i) const;
  // The stored dtype of input i when a DequantizeLinear feeding it runs inside this node's
  // GEMM (--fusion full on a quantize-dequantize model); DType::undefined otherwise.
  DType quantized_operand(size_t i) const;
};

// A cast a framework runs that the graph does not spell (Plan::casts_before): `x`, stored
// in its writer's dtype, read and written again as `to`, a memory kernel of c's node.
void emit_cast_copy(const LowerCtx& c, const TensorInfo* x, DType to);

// Bytes of a whole tensor in its compute dtype (0 for an absent optional input).
double tensor_bytes(const LowerCtx& c, const TensorInfo* t);
// Kernel::l2_reuse entries of operand `operand` (elements of `own` bytes) broadcast to the
// output `y` (numpy rules: its size 1 or absent where y's is larger): per broadcast dim d,
// each element is used again one step of d later. In between the L2 has taken the operand's
// data inside d (its elements in the dims after d) and the kernel's other streams for the
// output elements inside d (`stream_bytes_per_out` per output element: the output and the
// full-size operands, which pass through the L2 as well); a miss at d misses at every
// broadcast dim whose footprint is as large (the outer ones), multiplying the reads by their
// sizes. Nothing for a scalar, a same-size operand or unknown shapes.
void add_broadcast_reuse(Kernel& k, int operand, const TensorInfo* t, const TensorInfo* y, double own,
                         double stream_bytes_per_out);
// The bytes per output element of a kernel's streams that pass through the L2 between two
// uses of a broadcast element: the output's and every input's of the output's size.
double stream_bytes_per_output(const LowerCtx& c, const TensorInfo* y);

using Rule = std::function<void(LowerCtx&)>;
// Keyed by (domain, op, opset) like onnxruntime's kernel registry (op_registry.h):
// `r["Op"]` is ai.onnx from opset 1, `r["com.microsoft:Op"]` a contrib op, and
// `r.add(domain, op, rule, since)` a rule for the opsets from `since` on.
using RuleTable = OpRegistry<Rule>;

// One registration function per op family file; lower.cpp builds the table once.
void add_gemm_rules(RuleTable& t);     // gemm.cpp: MatMul, Gemm, Conv, Einsum, quantized
void add_attention_rules(RuleTable& t);  // attention.cpp: fused attention, LSTM/GRU/RNN
void add_vector_rules(RuleTable& t);   // vector.cpp: elementwise, softmax, norms, reduce, pool
void add_memory_rules(RuleTable& t);   // memory.cpp: data movement, views, collectives
void add_contrib_rules(RuleTable& t);  // contrib.cpp: RotaryEmbedding, GatherBlockQuantized, MoE, ...
void add_signal_rules(RuleTable& t);   // signal.cpp: DFT/STFT, Det, NMS, host-only ops (noted)
void add_optimizer_rules(RuleTable& t);  // training.cpp: ai.onnx.preview.training optimizer nodes
const RuleTable& rules();
// The rule for node `n` at the model's opset of its domain; nullptr when none.
const Rule* find_rule(const Node& n, const LoweringOptions& opt);

// Shared emitters.
inline DType activation_dtype(const LoweringOptions& o) { return activation_dtype(o.compute_dtype); }
void emit_gemm(const LowerCtx& c, const std::string& op, GemmShape s, double a_elems, double b_elems,
               int a_input, int b_input, const std::string& note = "");
void emit_elementwise(const LowerCtx& c, const std::string& op, double ops_per_elem = 1);
void emit_matmul(LowerCtx& c);  // MatMul rules (used by the bias-GEMM group too)
// Re-prices a GEMM kernel whose operands come quantized (see quantized_operand): operand
// bytes at the stored width; computes in the stored precision when both operands are
// 8-bit quantized of one kind (int8 x int8, fp8 x fp8) and `matrix_math` (a GEMM, not a
// SIMT stencil such as a depthwise conv).
void apply_quantized_operands(const LowerCtx& c, Kernel& k, bool matrix_math = true);

// One FlashAttention kernel (flash_attention.cpp): `batch` x `heads` query heads of `queries`
// rows attending to `keys` keys held by `kv_heads` KV heads; prompts a GEMM-class kernel
// over the visible (query, key) pairs, one query row a memory-bound KV-cache read.
struct FlashProblem {
  DType dtype = DType::f16;
  int64_t batch = 0, heads = 0, kv_heads = 0, queries = 0, keys = 0, head_dim = 0, head_dim_v = 0;
  bool causal = false;
  // Sliding-window attention: each query sees at most this many keys, the most recent (its
  // own position included); 0: every key the mask leaves it.
  int64_t window = 0;
  // The values are columns of the keys' rows (multi-head latent attention): one cache read.
  bool shared_kv = false;
  double appended_bytes = 0;  // new KV entries written into the cache by the kernel
  std::string what;           // note prefix, e.g. "GroupQueryAttention: "
  DType kv_dtype = DType::undefined;  // the cache's element type (undefined: `dtype`)
  DType cache_dtype() const { return kv_dtype == DType::undefined ? dtype : kv_dtype; }
  // An additive bias of the scores with its own values per head and query row (T5's relative
  // position bias, an SDPA float attn_mask): its bytes, which the kernel reads as it streams the
  // scores (PyTorch's memory-efficient kernel, the one SDPA runs with such a mask).
  double bias_bytes = 0;
};
// Attention runs as FlashAttention: attention_fused, 16-bit (or 8-bit) floats.
bool flash_attention_applies(const LoweringOptions& opt, DType dt);
// Whether attention runs as one fused kernel in this configuration (--attention; automatic:
// under --fusion eager and full), before the dtype check of flash_attention_applies.
bool attention_fused(const LoweringOptions& opt);
void emit_flash_kernel(const LowerCtx& c, const FlashProblem& f, std::vector<Kernel>& out);
// Query-key pairs an attention computes: `queries` rows at the last positions of `keys`,
// causal or not, each seeing at most `window` keys (0: no window).
double attention_pairs(int64_t queries, int64_t keys, bool causal, int64_t window);
// Decomposed attention from the QK^T MatMul `qk` (flash_attention.cpp): the group of one
// fused attention kernel (--fusion full, inference), and its kernel.
bool match_flash_attention(const Graph& g, const LoweringOptions& opt, const Consumers& cons, const Plan& plan, int qk,
                           Group& grp);
void emit_flash_attention(const Graph& g, const LoweringOptions& opt, const Plan& plan, const Group& grp,
                          const Consumers& cons, std::vector<Kernel>& out);
// HF's rotate_half rotary embedding ending at the Add `add` (flash_attention.cpp): one
// elementwise kernel (--fusion full, inference).
bool match_rotary(const Graph& g, const Consumers& cons, const Plan& plan, int add, Group& grp);
// Serving kernels: the query's and the key's rotary groups that one FlashAttention group reads
// become one group (vLLM's rotary_embedding does both in one kernel); emptied groups stay.
void pair_rotary_groups(const Graph& g, Plan& plan);
// The one node that reads `t`, or -1 (none, several, or a graph output) (flash_attention.cpp).
int single_consumer(const Consumers& cons, const std::string& t);
// All readers of `t` are in `set` (and it is not a graph output; true when nothing reads it).
bool consumed_only_by(const Consumers& cons, const std::string& t, const std::set<int>& set);
// A Slice of unit steps (absent or all 1): a view a reader can walk, which a strided one is not.
bool unit_step_slice(const Graph& g, const Node& n);
// The Slice `t` is a view of (through free reshapes) that only `readers` read (flash_attention.cpp).
int slice_read_only_by(const Graph& g, const Consumers& cons, const Plan& plan, std::string t, const std::vector<int>& readers);

// Kernels of one fusion group (fusion.cpp).
void emit_group(const Graph& g, const LoweringOptions& opt, const Plan& plan, const Group& grp,
                const Consumers& cons, std::vector<Kernel>& out);

// Linear layers (lora.cpp), which LoRA adapts and 2:4 sparsity prunes:
// A forward GEMM of the analysed graph's node that reads its second operand from an input of
// that node (a linear layer's GEMM, whatever the operand holds).
bool layer_gemm(const Kernel& k);
// A forward GEMM of a 2-D float initializer (a linear layer's weight): that weight's name, else "".
std::string linear_weight(const Graph& g, const Kernel& k);
// A member of a GEMM over concatenated weights (a node of its fused_nodes): the 2-D float
// initializer it multiplies by and its output columns, or "" for a node that is no such GEMM.
std::string member_weight(const Graph& g, int node, int64_t& columns);
// Per node: some GEMM runs at or after it on the data path (its outputs reach a GEMM node):
// false for an output head.
std::vector<char> feeds_a_gemm(const Graph& g, const std::vector<Kernel>& fwd);

// 2:4 sparsity (sparsity.cpp, lowering.h SparsityOptions): marks the pruned linear layers' and
// convolutions' forward GEMMs (Kernel::sparse_2_4) and returns their weights' names (a weight
// an initializer or computed from constants: the nodes `free_reason` says were folded). Throws
// InputError for a targets pattern that is no regular expression or that matches no such weight;
// --sparsity auto (SparsityOptions::pruned_values) finding no pruned weight adds a line to `warnings`.
std::vector<std::string> mark_sparse_2_4(const Graph& g, std::vector<Kernel>& kernels, const SparsityOptions& s,
                                         const std::vector<FreeReason>& free_reason, std::vector<std::string>& warnings);

// LoRA (lora.cpp, lowering.h LoraOptions): the adapted linear layers, node -> its weight.
struct LoraTargets {
  int64_t rank = 0;
  std::map<int, std::string> weight_of_node;
  // A serving engine's GEMM over concatenated weights (Q, K, V; gate, up), under its first
  // node: the adapted members and their output columns together (vLLM's sliced adapters, one
  // shrink over every slice's A, one expand into every slice). Absent: the GEMM's own.
  struct Slices {
    int64_t count = 1, columns = 0;
  };
  std::map<int, Slices> slices_of_node;
  // QLoRA: the linear layers whose weights are held in NF4 (every one but the head), node -> weight.
  std::map<int, std::string> nf4_of_node;
  bool adapts(const Kernel& forward_gemm) const;
  // `f` is a forward GEMM of an NF4 weight.
  bool dequantizes(const Kernel& f) const;
};
// QLoRA's dequantize kernel of the NF4 weight of the forward GEMM `f`, in `phase`.
Kernel nf4_dequantize(const Kernel& f, const std::string& weight, Phase phase);
// Throws InputError for a targets pattern that is no regular expression or that matches no
// linear layer's weight. Rank 0: no targets.
LoraTargets lora_targets(const Graph& g, const std::vector<Kernel>& fwd, const LoraOptions& lora);
// The forward kernels with each adapted GEMM's adapter kernels after it.
std::vector<Kernel> with_lora_forward(const std::vector<Kernel>& fwd, const LoraTargets& t, const LoweringOptions& opt);
// The adapter's backward kernels of the adapted forward GEMM `f` (its x's share of the input
// gradient where `input_needs_grad`).
void lora_backward(const Kernel& f, bool input_needs_grad, const LoweringOptions& opt, int64_t rank,
                   std::vector<Kernel>& out);
// The adapters' parameters in forward order: name (the weight's + ".lora_A" / ".lora_B"),
// elements, and the adapted layer's node and dtype.
struct AdapterParameter {
  std::string name;
  int64_t elems = 0;
  int node = -1;
  DType dtype = DType::undefined;
};
std::vector<AdapterParameter> lora_parameters(const std::vector<Kernel>& fwd, const LoraTargets& t);

// Training (training.cpp): backward kernels in reverse order and the optimizer updates; a
// line in `warnings` when the graph has no trainable parameter (the step is its forward pass).
// With LoRA targets every graph parameter is frozen and the adapters train.
void add_training_kernels(const Graph& g, const std::vector<Kernel>& fwd, const LoweringOptions& opt,
                          const LoraTargets& lora, std::vector<Kernel>& out, std::vector<std::string>& warnings);

}  // namespace neusight::lowering_detail
