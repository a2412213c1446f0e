// main.cpp - consumer of the installed neusight package: analyse a model, print e2e latency.
#include <neusight/neusight.h>
#include <neusight/onnx_proto.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  neusight::LoadedModel m = neusight::load_model(argv[1]);
  neusight::Options o;
  o.dims.batch = 1;
  o.dims.seq = 128;
  o.predictor = neusight::PredictorKind::roofline;
  neusight::Report r = neusight::analyze(m.proto->model, neusight::GpuDatabase::builtin().resolve(argv[2]), o);
  std::printf("%s %.6f %s\n", r.gpu.name.c_str(), r.e2e_latency_ms, neusight::data_dir().c_str());
  return r.e2e_latency_ms > 0 ? 0 : 1;
}
