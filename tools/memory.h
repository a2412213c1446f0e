// memory.h - process-wide setup of the CLI: huge pages for the heap, no teardown (BLAS on one
// thread: predictor.h single_threaded_blas).
#pragma once

namespace neusight::cli {

// Called first in main(). A large graph makes the analysis allocate tens of MB of small
// objects, and on a virtual machine the first touch of every 4 KiB page costs a page fault
// that was, before this, the largest single cost of the whole run (about half of its CPU
// time on the 175B graph). This grows the heap in large steps and asks the kernel for
// transparent huge pages there (madvise; a no-op where THP is off or unsupported), so that
// one fault maps 2 MiB. Large blocks stay on that heap instead of separate mmaps.
void setup_process_memory();

// Ends the process after a successful command without running destructors of the large
// objects still alive (what clang's -disable-free does): flushes stdio and exits. Under
// AddressSanitizer/LeakSanitizer it returns instead, so leak checking keeps working.
void exit_now(int code);

}  // namespace neusight::cli
