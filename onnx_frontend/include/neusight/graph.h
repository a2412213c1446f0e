// graph.h - the project's own graph IR: what the ONNX frontend gives every later stage.
//
// Protobuf stops at the frontend. Later stages (shape inference, lowering, tiling,
// prediction, reports) see only these plain types. Weights are never copied: an
// initializer keeps its dtype and shape, and small integer tensors (the ones shape
// subgraphs compute with) keep their values so shape values can be propagated.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace neusight {

// ---------------------------------------------------------------------------------------
// Errors. Library code throws these; the CLI turns them into one line and an exit code.
// InputError -> exit 2 (bad model, bad flag, unknown GPU, unbound dim ...)
// RuntimeError -> exit 1 (cannot write output, internal failure ...)
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------------------------------
// Element types, numbered like onnx::TensorProto_DataType so conversion is a cast.
enum class DType : int {
  undefined = 0,
  f32 = 1,
  u8 = 2,
  i8 = 3,
  u16 = 4,
  i16 = 5,
  i32 = 6,
  i64 = 7,
  string = 8,
  boolean = 9,
  f16 = 10,
  f64 = 11,
  u32 = 12,
  u64 = 13,
  c64 = 14,
  c128 = 15,
  bf16 = 16,
  f8e4m3fn = 17,
  f8e4m3fnuz = 18,
  f8e5m2 = 19,
  f8e5m2fnuz = 20,
  u4 = 21,
  i4 = 22,
  f4e2m1 = 23,  // FP4 E2M1 (NVFP4 / MXFP4 values; their block scales are separate)
  // Not an ONNX element type: TensorFloat-32, a compute precision chosen by --dtype tf32.
  tf32 = 1000,
};

// Size of one element in bits (4 for int4, 8 for fp8, ...); 0 for undefined/string.
int dtype_bits(DType t);
// Bytes of one element as stored and moved (fractional below a byte: 0.5 for int4). TF32
// is stored as FP32; undefined (or a string) counts as FP32, the default compute precision.
double element_bytes(DType t);
// Short lower-case name: "fp32", "fp16", "bf16", "fp8", "int8", "int64", "bool", ...
const char* dtype_name(DType t);
// Parses the names dtype_name() gives (and a few aliases); nullopt when unknown.
std::optional<DType> parse_dtype(const std::string& s);
bool is_float(DType t);
bool is_fp8(DType t);  // any of the four FP8 element types
bool is_fp4(DType t);  // FP4 E2M1

// ---------------------------------------------------------------------------------------
// A dimension: a known value, a symbolic name, or unknown (value < 0 and empty name).
struct Dim {
  int64_t value = -1;
  std::string param;
  bool known() const { return value >= 0; }
  static Dim of(int64_t v) { return Dim{v, {}}; }
  static Dim sym(std::string p) { return Dim{-1, std::move(p)}; }
};
using Shape = std::vector<Dim>;

// What a named value holds. Almost every value is a tensor; ONNX sequence and optional
// values describe what they hold in TensorInfo::elements.
enum class ValueKind : uint8_t { tensor, sequence, optional };

// Everything known about one tensor (value) in the graph.
struct TensorInfo {
  std::string name;
  DType dtype = DType::undefined;
  bool has_shape = false;  // false: rank unknown
  Shape shape;
  // Compile-time value for small integer tensors (initializers, Constant nodes, and values
  // computed by shape-value propagation). Only set when every element is known.
  std::optional<std::vector<int64_t>> int_value;
  bool is_initializer = false;
  bool is_graph_input = false;
  bool external_data = false;  // initializer whose bytes live in an external file (never read)
  // Values of small float and string tensors (same size limit as int_value), for ops whose
  // output size depends on data (NonMaxSuppression, Unique, StringNormalizer ...).
  std::optional<std::vector<double>> float_value;
  std::optional<std::vector<std::string>> string_value;
  // Sequence / optional values (kind != tensor; dtype is then the innermost element dtype,
  // has_shape false). Sequence: with elements_known, one entry per element; otherwise at
  // most one entry that every element matches. Optional: with elements_known, no entry is
  // None and one entry the contained value; otherwise at most one entry (its type).
  ValueKind kind = ValueKind::tensor;
  bool elements_known = false;
  std::vector<TensorInfo> elements;

  bool fully_known() const;    // has_shape and every dim known
  int64_t num_elements() const;  // -1 when not fully known
};

struct Graph;

// One node attribute. Only what later stages need is kept; tensors and subgraphs are
// converted to the IR too.
struct Attribute {
  enum class Kind { undefined, f, i, s, t, g, floats, ints, strings, graphs };
  Kind kind = Kind::undefined;
  double f = 0;
  int64_t i = 0;
  std::string s;
  std::vector<double> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::shared_ptr<TensorInfo> t;               // kind t (value kept for small int tensors)
  std::vector<std::shared_ptr<Graph>> graphs;  // kind g or graphs (If/Loop/Scan bodies)
  // Set by shape inference on a Loop / SequenceMap body it ran iteration by iteration: one
  // entry per iteration, in order (entries with the same shapes share one graph). graphs[0]
  // then holds shapes valid for every iteration (dims that differ between them unknown).
  std::vector<std::shared_ptr<const Graph>> trips;
};

struct Node {
  std::string name;  // never empty after loading (generated "<op>_<index>" when missing)
  std::string op_type;
  std::string domain;  // "" for the default ONNX domain, "com.microsoft", ...
  std::vector<std::string> inputs;  // "" for an omitted optional input
  std::vector<std::string> outputs;
  std::map<std::string, Attribute> attributes;
  std::string doc_string;
  // For a node of an inlined model-local function body: the name of the graph's own node that
  // called the function (the outermost call when calls nest). Its name is then
  // "<call>/<body node>". Empty for the graph's own nodes.
  std::string inlined_from;

  const Attribute* attr(const std::string& key) const;
  int64_t attr_i(const std::string& key, int64_t fallback) const;
  double attr_f(const std::string& key, double fallback) const;
  std::string attr_s(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const std::string& key) const;
};

struct Graph {
  std::string name;
  std::vector<Node> nodes;             // topologically sorted after loading
  std::vector<std::string> inputs;     // graph inputs that are not initializers
  std::vector<std::string> outputs;
  std::vector<std::string> initializers;
  // Every named value: inputs, weights, outputs. Hashed (not ordered): the analysis looks
  // names up tens of thousands of times, and layer names share long prefixes that make
  // ordered comparisons slow. Do not rely on its iteration order.
  std::unordered_map<std::string, TensorInfo> tensors;

  TensorInfo& tensor(const std::string& name);  // creates an empty entry when missing
  const TensorInfo* find(const std::string& name) const;
};

// The loaded model: IR plus model-level facts.
struct Model {
  Graph graph;
  int64_t ir_version = 0;
  std::map<std::string, int64_t> opsets;  // domain -> version ("" is ai.onnx)
  std::string producer_name;
  std::map<std::string, std::string> metadata;  // the model's metadata_props
  std::string path;  // where it was loaded from ("" for in-memory models)

  int64_t opset(const std::string& domain = "") const;
};

}  // namespace neusight
