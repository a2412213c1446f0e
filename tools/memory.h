// memory.h - process-wide setup of the CLI: huge pages for the heap, BLAS on one thread, no teardown.
#pragma once

namespace neusight::cli {

// Called first in main(). A large graph makes the analysis allocate tens of MB of small
// objects, and on a virtual machine the first touch of every 4 KiB page costs a page fault
// that was, before this, the largest single cost of the whole run (about half of its CPU
// time on the 175B graph). This grows the heap in large steps and asks the kernel for
// transparent huge pages there (madvise; a no-op where THP is off or unsupported), so that
// one fault maps 2 MiB. Large blocks stay on that heap instead of separate mmaps.
void setup_process_memory();

// OpenBLAS (linked by the predictor) starts one worker thread per core in its constructor,
// and each worker spins in sched_yield for about 0.1 s before it sleeps: CPU time burnt on
// every run (a core's worth per worker), for matrix products far too small to gain from
// threads. This stops them and keeps BLAS on the calling thread, unless the user set
// OPENBLAS_NUM_THREADS (or GOTO_/OMP_NUM_THREADS). No-op without OpenBLAS.
void single_threaded_blas();

// Ends the process after a successful command without running destructors of the large
// objects still alive (what clang's -disable-free does): flushes stdio and exits. Under
// AddressSanitizer/LeakSanitizer it returns instead, so leak checking keeps working.
void exit_now(int code);

}  // namespace neusight::cli
