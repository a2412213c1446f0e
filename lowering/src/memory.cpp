// memory.cpp - data-movement ops (bytes moved, no math), free views, collectives.
#include <algorithm>

#include "internal.h"

namespace neusight::lowering_detail {
namespace {

double outputs_bytes(const LowerCtx& c) {
  double b = 0;
  for (size_t i = 0; i < c.n.outputs.size(); ++i) b += tensor_bytes(c, c.outp(i));
  return b;
}

double inputs_bytes(const LowerCtx& c, size_t from = 0, size_t to = SIZE_MAX) {
  double b = 0;
  for (size_t i = from; i < std::min(to, c.n.inputs.size()); ++i) b += tensor_bytes(c, c.in(i));
  return b;
}

// How much a memory op reads.
enum class Reads {
  inputs,       // every input once (transpose, concat, cast, pad, where, copy ...)
  first_input,  // the data input only (expand, tile, resize: the rest are shapes/scales)
  output,       // as much as it writes (slice, gather: the selected elements) + indices
  nothing,      // writes only (constant fills, range, random)
};

void emit_memory(LowerCtx& c, const std::string& op, Reads reads) {
  const TensorInfo* y = c.outp(0);
  if (!y || !y->fully_known()) {
    c.unknown("shapes not inferred");
    return;
  }
  Kernel k = c.base(KernelClass::memory, op);
  rows_cols(y, k.rows, k.cols);
  const double out = outputs_bytes(c);
  double in = 0;
  switch (reads) {
    case Reads::inputs: in = inputs_bytes(c); break;
    case Reads::first_input: in = tensor_bytes(c, c.in(0)); break;
    case Reads::output: in = out + inputs_bytes(c, 1); break;  // selected data + indices/starts
    case Reads::nothing: in = 0; break;
  }
  for (size_t i = 0; i < c.n.inputs.size(); ++i) k.operand_elems.push_back(numel(c.in(i)));
  k.bytes = in + out;
  // Where and Expand read broadcast operands (the data inputs; Expand's shape is not one).
  if (op == "where" || op == "expand") {
    const double streams = stream_bytes_per_output(c, y);
    for (size_t i = 0; i < (op == "expand" ? size_t(1) : c.n.inputs.size()); ++i)
      add_broadcast_reuse(k, int(i), c.in(i), y, element_bytes(c.dtype(c.in(i))), streams);
  }
  c.out.push_back(k);
}

void lower_gather(LowerCtx& c) {
  const TensorInfo* data = c.in(0);
  const bool embedding = data && c.held(0) && c.n.op_type == "Gather";
  emit_memory(c, embedding ? "embedding" : "gather", Reads::output);
}

void lower_cast(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* y = c.outp(0);
  // A cast to the dtype the tensor already has (or, with a forced compute dtype, between
  // two float types that both become that dtype) moves nothing.
  if (x && y && (x->dtype == y->dtype || (is_float(x->dtype) && is_float(y->dtype) && c.dtype(x) == c.dtype(y))))
    return;
  emit_memory(c, "cast", Reads::inputs);
}

void lower_collective(LowerCtx& c, const std::string& op) {
  const TensorInfo* x = c.in(0);
  Kernel k = c.base(KernelClass::collective, op);
  rows_cols(x, k.rows, k.cols);
  k.bytes = tensor_bytes(c, x);
  k.note = "group size from --parallel";
  c.out.push_back(k);
}

// Bytes of a value: a tensor, or a sequence whose elements are all known.
double value_bytes(const LowerCtx& c, const TensorInfo* t, bool& known) {
  if (!t) return 0;
  if (t->kind == ValueKind::tensor) {
    known = known && t->fully_known();
    return tensor_bytes(c, t);
  }
  if (!t->elements_known) {
    known = false;
    return 0;
  }
  double b = 0;
  for (const auto& e : t->elements) {
    known = known && e.fully_known();
    b += double(std::max<int64_t>(e.num_elements(), 0)) * element_bytes(c.dtype(&e));
  }
  return b;
}

// SplitToSequence: a Split whose pieces form a sequence - reads the input, writes it once.
// ConcatFromSequence: a Concat (or stack, new_axis) of the elements - reads them, writes the
// output.
void lower_sequence_copy(LowerCtx& c, bool split) {
  const TensorInfo* x = c.in(0);
  bool known = true;
  const double b = split ? value_bytes(c, x, known) : value_bytes(c, c.outp(0), known);
  if (!known) {
    c.unknown("shapes not inferred");
    return;
  }
  Kernel k = c.base(KernelClass::memory, split ? "split" : "concat");
  if (split) rows_cols(x, k.rows, k.cols);
  else rows_cols(c.outp(0), k.rows, k.cols);
  k.bytes = 2 * b;
  c.out.push_back(k);
}

// Interpolation taps per output element for a spatial rank: nearest 1, (bi/tri)linear 2^r,
// (bi)cubic 4^r.
int64_t interp_taps(const std::string& mode, size_t spatial) {
  int64_t per = mode == "nearest" ? 1 : (mode == "bicubic" || mode == "cubic") ? 4 : 2;
  int64_t t = 1;
  for (size_t i = 0; i < spatial; ++i) t *= per;
  return t;
}

// A gather that blends `taps` interpolated reads per output element of Y (a multiply-add per
// tap), plus `other_bytes` (grid, boxes, indices) read once.
void emit_tap_gather(const LowerCtx& c, const std::string& op, const TensorInfo* y, double taps, double other_bytes,
                     const std::string& note) {
  Kernel k = c.base(KernelClass::memory, op);
  rows_cols(y, k.rows, k.cols);
  const double e = double(numel(y)), eb = element_bytes(k.dtype);
  k.flops = 2.0 * taps * e;
  k.bytes = taps * e * eb + other_bytes + e * eb;
  k.note = note;
  c.out.push_back(k);
}

// GridSample(X [N,C,D..], grid [N,D_out..,r]) -> Y [N,C,D_out..]: each output gathers its
// interpolation taps (bilinear 4, bicubic 16, nearest 1; 3-D: 8/64/1) and blends them
// (a multiply-add per tap). Memory-bound: bytes = taps per output x outputs read + the grid
// + the output written.
void lower_grid_sample(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* grid = c.in(1);
  const TensorInfo* y = c.outp(0);
  if (!c.all_known({x, grid, y}) || x->shape.size() < 3) {
    c.unknown("shapes not inferred");
    return;
  }
  const std::string mode = c.n.attr_s("mode", "linear");
  const int64_t taps = interp_taps(mode, x->shape.size() - 2);
  emit_tap_gather(c, "grid_sample", y, double(taps), tensor_bytes(c, grid),
                  std::to_string(taps) + " taps per output (" + mode + ")");
  c.out.back().operand_elems = {numel(x), numel(grid)};
}

// RoiAlign(X [N,C,H,W], rois [R,4], batch_indices [R]) -> Y [R,C,oh,ow]: every output
// averages sampling_ratio^2 bilinear samples of 4 taps each. sampling_ratio 0 (adaptive,
// ceil(roi size / output size): data-dependent) is taken as 2 and noted.
void lower_roi_align(LowerCtx& c) {
  const TensorInfo* y = c.outp(0);
  if (!c.all_known({c.in(0), c.in(1), y})) {
    c.unknown("shapes not inferred");
    return;
  }
  int64_t sr = c.n.attr_i("sampling_ratio", 0);
  const bool adaptive = sr <= 0;
  if (adaptive) sr = 2;
  emit_tap_gather(c, "roi_align", y, double(sr * sr) * 4, inputs_bytes(c, 1),
                  std::to_string(sr * sr) + " samples x 4 taps per output" +
                      (adaptive ? std::string(" (sampling_ratio 0: 2 assumed)") : std::string()));
}

// MaxUnpool(X, I, output_shape) -> Y: a fill of Y with zeros, then a scatter of X to the
// positions in I (reads X and I, writes |X| elements).
void lower_max_unpool(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  const TensorInfo* ind = c.in(1);
  const TensorInfo* y = c.outp(0);
  if (!c.all_known({x, ind, y})) {
    c.unknown("shapes not inferred");
    return;
  }
  Kernel f = c.base(KernelClass::memory, "fill");
  rows_cols(y, f.rows, f.cols);
  f.bytes = tensor_bytes(c, y);
  c.out.push_back(f);
  Kernel s = c.base(KernelClass::memory, "scatter");
  rows_cols(x, s.rows, s.cols);
  s.bytes = 2 * tensor_bytes(c, x) + tensor_bytes(c, ind);
  s.operand_elems = {numel(x), numel(ind)};
  c.out.push_back(s);
}

// NonZero(X) -> [rank, count] int64: a count of X's nonzero elements (a reduction over X, the
// prefix sum a stream compaction runs), then the select that writes their coordinates. The
// count depends on the data: the bound of every element nonzero is priced, and noted.
void lower_nonzero(LowerCtx& c) {
  const TensorInfo* x = c.in(0);
  if (!c.all_known({x})) {
    c.unknown("shapes not inferred");
    return;
  }
  const int64_t n = numel(x), rank = std::max<int64_t>(1, static_cast<int64_t>(x->shape.size()));
  Kernel count = c.base(KernelClass::reduce, "nonzero_count");
  count.rows = 1;
  count.cols = n;
  count.flops = double(n);
  count.bytes = tensor_bytes(c, x) + 8;
  count.operand_elems = {n};
  c.out.push_back(count);
  Kernel select = c.base(KernelClass::memory, "nonzero");
  select.rows = rank;
  select.cols = n;
  select.bytes = tensor_bytes(c, x) + double(rank) * double(n) * 8;
  select.operand_elems = {n};
  select.note = "bound: every element nonzero (the count depends on the data)";
  c.out.push_back(select);
}

void lower_view(LowerCtx&) {}

}  // namespace

void emit_cast_copy(const LowerCtx& c, const TensorInfo* x, DType to) {
  if (!x || !x->fully_known() || !c.plan) return;
  // The dtype x is stored in: its writer's (Plan::tensor_dtype), else the graph's as --dtype
  // sets it (the node's own reads of x go through the copy, so not c.dtype(x)).
  const auto own = c.plan->tensor_dtype.find(x->name);
  const DType from = own != c.plan->tensor_dtype.end()                               ? own->second
                     : c.opt.compute_dtype != DType::undefined && is_float(x->dtype) ? activation_dtype(c.opt)
                                                                                     : x->dtype;
  Kernel k = c.base(KernelClass::memory, "cast");
  k.dtype = to;
  rows_cols(x, k.rows, k.cols);
  k.bytes = double(numel(x)) * (element_bytes(from) + element_bytes(to));
  k.operand_elems = {numel(x)};
  k.note = std::string("cast to ") + dtype_name(to) + " that the graph does not spell (Hugging Face's RMSNorm runs in FP32)";
  c.out.push_back(k);
}

void add_memory_rules(RuleTable& r) {
  auto mem = [](const char* name, Reads reads) {
    const std::string nm = name;
    return [nm, reads](LowerCtx& c) { emit_memory(c, nm, reads); };
  };
  r["Transpose"] = mem("transpose", Reads::inputs);
  r["Concat"] = mem("concat", Reads::inputs);
  r["Split"] = mem("split", Reads::inputs);
  r["Pad"] = mem("pad", Reads::first_input);
  r["Where"] = mem("where", Reads::inputs);
  r["Expand"] = mem("expand", Reads::first_input);
  r["Tile"] = mem("tile", Reads::first_input);
  r["Slice"] = mem("slice", Reads::output);
  r["Gather"] = lower_gather;
  r["GatherElements"] = mem("gather", Reads::output);
  r["GatherND"] = mem("gather", Reads::output);
  r["Compress"] = mem("gather", Reads::inputs);
  r["ScatterND"] = mem("scatter", Reads::inputs);
  r["ScatterElements"] = mem("scatter", Reads::inputs);
  r["Scatter"] = mem("scatter", Reads::inputs);
  r["Cast"] = lower_cast;
  r["CastLike"] = lower_cast;
  r["Resize"] = mem("resize", Reads::first_input);
  r["Upsample"] = mem("resize", Reads::first_input);
  r["DepthToSpace"] = mem("transpose", Reads::inputs);
  r["SpaceToDepth"] = mem("transpose", Reads::inputs);
  r["Trilu"] = mem("trilu", Reads::first_input);
  r["ReverseSequence"] = mem("copy", Reads::first_input);
  r["OneHot"] = mem("onehot", Reads::nothing);
  r["NonZero"] = lower_nonzero;
  r["Unique"] = mem("unique", Reads::inputs);
  r["ConstantOfShape"] = mem("fill", Reads::nothing);
  r["EyeLike"] = mem("fill", Reads::nothing);
  r["Range"] = mem("range", Reads::nothing);
  // Window functions and the mel filterbank compute their output from scalars: fills.
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix"})
    r[op] = mem("fill", Reads::nothing);
  // Col2Im sums the column blocks into the image: reads the columns, writes the image.
  r["Col2Im"] = mem("col2im", Reads::inputs);
  // MaxRoiPool: the regions depend on the ROI values; every input read once (a bound).
  r["MaxRoiPool"] = mem("roi_pool", Reads::inputs);
  // TensorScatter (opset 24, a KV cache update): the update is written into the cache in
  // place; it moves the update's bytes, not the cache's.
  r["TensorScatter"] = [](LowerCtx& c) {
    const TensorInfo* upd = c.in(1);
    if (!c.all_known({upd, c.outp(0)})) {
      c.unknown("shapes not inferred");
      return;
    }
    Kernel k = c.base(KernelClass::memory, "scatter");
    rows_cols(upd, k.rows, k.cols);
    k.bytes = 2 * tensor_bytes(c, upd) + tensor_bytes(c, c.in(2));
    k.operand_elems = {numel(upd)};
    k.note = "in-place cache update";
    c.out.push_back(k);
  };
  r["GridSample"] = lower_grid_sample;
  r["RoiAlign"] = lower_roi_align;
  r["MaxUnpool"] = lower_max_unpool;
  r["SplitToSequence"] = [](LowerCtx& c) { lower_sequence_copy(c, true); };
  r["ConcatFromSequence"] = [](LowerCtx& c) { lower_sequence_copy(c, false); };
  for (const char* op : {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial"})
    r[op] = mem("random", Reads::nothing);
  for (const char* op : {"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Shape", "Size", "Constant",
                         "Optional", "OptionalGetElement", "OptionalHasElement", "SequenceConstruct", "SequenceAt",
                         "SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceLength", "StopGradient"})
    r[op] = lower_view;
  // Collectives (com.microsoft contrib ops and the names exporters use).
  for (const char* op : {"AllReduce", "NcclAllReduce", "AllGather", "NcclAllGather", "ReduceScatter",
                         "NcclReduceScatter", "AllToAll", "Send", "Recv"}) {
    std::string nm = op;
    if (nm.rfind("Nccl", 0) == 0) nm = nm.substr(4);
    std::transform(nm.begin(), nm.end(), nm.begin(), ::tolower);
    r[op] = [nm](LowerCtx& c) { lower_collective(c, nm); };
  }
}

}  // namespace neusight::lowering_detail
