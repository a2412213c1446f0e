// work.cpp - work counts of the kernel shapes (lowering.h), shared with the dataset reader.
#include "neusight/lowering.h"

namespace neusight {

Work work_of_gemm(const GemmShape& s, double a_elems, double b_elems, double elem_bytes) {
  Work w;
  w.flops = 2.0 * double(s.batch) * double(s.m) * double(s.n) * double(s.k);
  w.bytes = (a_elems + b_elems + double(s.batch) * s.m * s.n) * elem_bytes;
  return w;
}

Work work_of_gemm(const GemmShape& s, double elem_bytes) {
  const double b = double(s.batch);
  return work_of_gemm(s, b * double(s.m) * double(s.k), b * double(s.k) * double(s.n), elem_bytes);
}

Work work_of_rowwise(int64_t rows, int64_t cols, double ops_per_elem, double elem_bytes) {
  const double e = double(rows) * double(cols);
  return Work{ops_per_elem * e, 2 * e * elem_bytes};
}

Work work_of_softmax(int64_t rows, int64_t cols, double elem_bytes) {
  return work_of_rowwise(rows, cols, kSoftmaxOpsPerElement, elem_bytes);
}

Work work_of_layernorm(int64_t rows, int64_t cols, double elem_bytes) {
  return work_of_rowwise(rows, cols, kLayerNormOpsPerElement, elem_bytes);
}

Work work_of_elementwise(double elems, int inputs, double ops_per_elem, double elem_bytes) {
  return Work{ops_per_elem * elems, elem_bytes * elems * (inputs + 1)};
}

}  // namespace neusight
