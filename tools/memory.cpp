// memory.cpp - process-wide memory setup of the CLI (see memory.h).
#include "memory.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || __has_feature(leak_sanitizer)
#define NEUSIGHT_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define NEUSIGHT_SANITIZED 1
#endif

namespace neusight::cli {

void setup_process_memory() {
#if defined(__GLIBC__) && !defined(NEUSIGHT_SANITIZED)
  constexpr size_t kHuge = size_t{2} << 20;  // x86-64 / arm64 (4 KiB base pages) THP size
  constexpr size_t kStep = size_t{128} << 20;  // heap growth step: virtual, touched on use
  mallopt(M_MMAP_THRESHOLD, 256 << 20);       // model bytes, report text: on the heap too
  mallopt(M_TOP_PAD, static_cast<int>(kStep));
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  // Grow the heap once now (a block larger than its free top; top_pad adds kStep) and mark
  // the new part for huge pages. Only when the block really came from the brk heap.
  void* probe = std::malloc(kHuge);
  const auto begin = reinterpret_cast<uintptr_t>(probe);
  const auto end = reinterpret_cast<uintptr_t>(sbrk(0));
  const uintptr_t lo = (begin + kHuge - 1) & ~(kHuge - 1), hi = end & ~(kHuge - 1);
  if (probe && end != static_cast<uintptr_t>(-1) && end > begin && end - begin <= kStep + 2 * kHuge && hi > lo)
    madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
  std::free(probe);
#endif
}

void exit_now(int code) {
  std::cout.flush();
  std::cerr.flush();
#ifndef NEUSIGHT_SANITIZED
  std::fflush(nullptr);
  std::_Exit(code);
#endif
}

}  // namespace neusight::cli
