// main.cpp - consumer of the installed neusight package: a tool that holds its own ModelProto
// (it links ONNX's protobuf itself) analyses it and prints the e2e latency.
#include <neusight/neusight.h>
#include <onnx/onnx_pb.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  std::ifstream f(argv[1], std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  onnx::ModelProto proto;
  if (!proto.ParseFromString(bytes)) return 2;
  neusight::Options o;
  o.dims.batch = 1;
  o.dims.seq = 128;
  o.predictor = neusight::PredictorKind::roofline;
  neusight::Report r = neusight::analyze(proto, neusight::GpuDatabase::builtin().resolve(argv[2]), o);
  std::printf("%s %.6f %s\n", r.gpu.name.c_str(), r.e2e_latency_ms, neusight::data_dir().c_str());
  return r.e2e_latency_ms > 0 ? 0 : 1;
}
