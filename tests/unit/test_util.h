// test_util.h - shared helpers for the unit tests: paths to fixtures and to the dataset.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace neusight::test {

// The whole NeuSight dataset (the neusight-data folder): $NEUSIGHT_DATASET, else
// $NEUSIGHT_SHARED_DIR/neusight-data; empty when neither is set, so that the suite never
// depends on what happens to lie beside the source tree.
inline std::string dataset_dir() {
  const char* env = std::getenv("NEUSIGHT_DATASET");
  if (env && *env) return env;
  const char* shared = std::getenv("NEUSIGHT_SHARED_DIR");
  return shared && *shared ? std::string(shared) + "/neusight-data" : std::string();
}
inline std::string source_dir() { return NEUSIGHT_SOURCE_DIR; }
inline std::string example_model() { return NEUSIGHT_EXAMPLE_MODEL; }
// The fixtures, laid out as the dataset (build/tests/neusight-data, assembled by
// tests/CMakeLists.txt): tests/data/neusight-data (derived from the dataset by
// scripts/make_test_fixtures.py: a few hundred kernel rows, the model-config fields the tool
// reads, ...) plus device_configs/ written from hardware/data/gpus.json. What the tests read
// unless they need the whole dataset.
inline std::string fixture_dir() { return NEUSIGHT_FIXTURE_DIR; }

// The name of the running test case (set by the listener in main.cpp).
inline std::string& current_test() {
  static std::string name;
  return name;
}

// True when dataset_dir()/`what` exists ("kernels", "e2e"). Otherwise prints one line saying
// what the test needs and returns false; the test case returns early (ctest reports it as
// skipped). Such tests belong to doctest's test suite "shared-data", which gives them that
// ctest label:
//   if (!test::have_dataset("kernels")) return;
inline bool have_dataset(const char* what) {
  const std::string dir = dataset_dir();
  if (!dir.empty() && std::filesystem::exists(dir + "/" + what)) return true;
  std::printf("SKIPPED: needs the whole dataset (neusight-data/%s; set NEUSIGHT_DATASET to its folder): %s\n",
              what, current_test().c_str());
  std::fflush(stdout);
  return false;
}

}  // namespace neusight::test
