// test_util.h - shared helpers for the unit tests: paths to fixtures and shared data.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace neusight::test {

// The dataset folder beside the repository: $NEUSIGHT_SHARED_DIR when set, else the path the
// build configured (../shared next to the source tree by default).
inline std::string shared_dir() {
  const char* env = std::getenv("NEUSIGHT_SHARED_DIR");
  return env && *env ? env : NEUSIGHT_SHARED_DIR;
}
inline std::string source_dir() { return NEUSIGHT_SOURCE_DIR; }
inline std::string example_model() { return NEUSIGHT_EXAMPLE_MODEL; }

// The name of the running test case (set by the listener in main.cpp).
inline std::string& current_test() {
  static std::string name;
  return name;
}

// True when shared_dir()/`what` exists. Otherwise prints one line saying what the test needs
// and returns false; the test case returns early, skipping only the checks that read the
// dataset (ctest reports such a case as skipped):
//   if (!test::have_shared("neusight-data")) return;
inline bool have_shared(const char* what) {
  if (std::filesystem::exists(shared_dir() + "/" + what)) return true;
  std::printf("SKIPPED: needs ../shared/%s (the dataset folder beside the repository): %s\n", what,
              current_test().c_str());
  std::fflush(stdout);
  return false;
}

}  // namespace neusight::test
