// test_util.h - shared helpers for the unit tests: paths to fixtures and shared data.
#pragma once

#include <string>

namespace neusight::test {

inline std::string shared_dir() { return NEUSIGHT_SHARED_DIR; }
inline std::string source_dir() { return NEUSIGHT_SOURCE_DIR; }
inline std::string example_model() { return NEUSIGHT_EXAMPLE_MODEL; }

}  // namespace neusight::test
