// blas_threads.cpp - OpenBLAS on the calling thread (predictor.h, single_threaded_blas).
#include <cstdlib>

#include "neusight/predictor.h"

// OpenBLAS, when the process has it. Weak: the predictor does not require it.
extern "C" __attribute__((weak)) void openblas_set_num_threads(int);
extern "C" __attribute__((weak)) int blas_thread_shutdown_(void);

namespace neusight {

void single_threaded_blas() {
  if (std::getenv("OPENBLAS_NUM_THREADS") || std::getenv("GOTO_NUM_THREADS") || std::getenv("OMP_NUM_THREADS")) return;
  if (!openblas_set_num_threads || !blas_thread_shutdown_) return;
  openblas_set_num_threads(1);  // later calls run on the calling thread
  blas_thread_shutdown_();      // stop the workers its constructor started
}

}  // namespace neusight
