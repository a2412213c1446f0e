// neusight_predictor.cpp - the trained tile-utilization MLP predictor (issue #6 fills it in).
#include <filesystem>

#include "neusight/predictor.h"

namespace neusight {

std::unique_ptr<Predictor> make_neusight_predictor(const std::string& weights_dir) {
  const std::string dir = weights_dir.empty() ? data_dir() + "/weights" : weights_dir;
  throw RuntimeError(dir + ": no trained NeuSight weights yet; use --predictor roofline");
}

}  // namespace neusight
