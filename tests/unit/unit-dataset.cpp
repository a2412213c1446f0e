// unit-dataset.cpp - reading the NeuSight kernel CSVs.
#include <sstream>
#include <doctest/doctest.h>

#include "neusight/dataset.h"
#include "test_util.h"

using namespace neusight;

TEST_CASE("dataset: quoted CSV fields") {
  auto f = split_csv_line("a,\"b,c\",\"d\"\"e\",");
  REQUIRE(f.size() == 4);
  CHECK(f[1] == "b,c");
  CHECK(f[2] == "d\"e");
  CHECK(f[3] == "");
}

TEST_CASE("dataset: linear rows map M,N,K to the IR's m,k,n") {
  Dataset d = read_dataset(test::fixture_dir() + "/kernels/test/linear.csv");
  REQUIRE(!d.rows.empty());
  const DatasetRow& r = d.rows.front();
  CHECK(r.op_name == "linear");
  CHECK(r.latency_ms > 0);
  CHECK(r.kernel.cls == KernelClass::gemm);
  // First row: B=1, M=1024, N=2560, K=2560 (output M x K, reduction N).
  CHECK(r.kernel.gemm.m == 1024);
  CHECK(r.kernel.gemm.k == 2560);
  CHECK(r.kernel.gemm.n == 2560);
  CHECK(r.grid[0] * r.grid[1] * r.grid[2] == 320);
}

TEST_CASE("dataset: a spreadsheet's byte order mark and blank lines before the header, sizes that are whole numbers") {
  std::istringstream bom("\xEF\xBB\xBFOPName,B,M,N,K\r\nlinear,1,128,256,512\r\n");
  const Dataset d = read_dataset(bom, "bom.csv");
  REQUIRE(d.rows.size() == 1);
  CHECK(d.rows[0].kernel.gemm.m == 128);
  std::istringstream blank("\n\r\nOPName,B,M,N,K\nlinear,1,16.0,256,512\n");
  CHECK(read_dataset(blank, "blank.csv").rows.at(0).kernel.gemm.m == 16);
  std::istringstream half("OPName,B,M,N,K\nlinear,1,1.5,256,512\n");
  CHECK_THROWS_WITH_AS(read_dataset(half, "half.csv"), "half.csv:2: column 'M' is not a size: '1.5'", InputError);
  // linear: B batches of M rows through one weight, one GEMM of B x M rows; none of 0.
  std::istringstream batches("OPName,B,M,N,K\nlinear,8,128,256,512\nlinear,0,128,256,512\nbmm,0,128,256,512\n");
  const Dataset b = read_dataset(batches, "b.csv");
  CHECK(b.rows[0].kernel.gemm.m == 8 * 128);
  CHECK(b.rows[0].kernel.gemm.batch == 1);
  CHECK(b.rows[1].kernel.bytes == 0);
  CHECK(b.rows[2].kernel.flops == 0);
}

TEST_CASE("dataset: elementwise rows, scalar variants read one tensor") {
  Dataset d = read_dataset(test::fixture_dir() + "/kernels/train/addu/Tesla_T4.csv");
  REQUIRE(!d.rows.empty());
  CHECK(d.rows.front().kernel.cls == KernelClass::elementwise);
  CHECK(d.rows.front().kernel.inputs == 1);
  CHECK(d.rows.front().kernel.bytes == doctest::Approx(8.0 * d.rows.front().kernel.rows * d.rows.front().kernel.cols));
}

TEST_CASE("dataset: rows given as fields read as the same CSV lines do, errors name the row") {
  const Dataset csv = read_dataset(test::fixture_dir() + "/kernels/test/linear.csv");
  REQUIRE(csv.rows.size() > 2);
  const Dataset d = dataset_from_rows(csv.header, {csv.rows[0].fields, csv.rows[1].fields}, "rows");
  REQUIRE(d.rows.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(d.rows[i].device == csv.rows[i].device);
    CHECK(d.rows[i].kernel.gemm.m == csv.rows[i].kernel.gemm.m);
    CHECK(d.rows[i].kernel.flops == csv.rows[i].kernel.flops);
    CHECK(d.rows[i].grid[0] == csv.rows[i].grid[0]);
  }
}

TEST_CASE("dataset: malformed rows given as fields are input errors naming the row") {
  CHECK_THROWS_WITH_AS(dataset_from_rows({"OPName", "B", "H"}, {{"softmax", "1", "8"}, {"softmax"}}, "rows"),
                       "rows[1]: expected 3 fields, got 1", InputError);
  CHECK_THROWS_WITH_AS(dataset_from_rows({"Op"}, {}, "rows"), "rows: no OPName column", InputError);
}

TEST_CASE("dataset: a column the reader knows, written in another case or spacing, is an input error naming both") {
  // Read as written, "DType" would leave every row FP32 and "device" would skip every row.
  CHECK_THROWS_WITH_AS(
      dataset_from_rows({"OPName", "B", "M", "N", "K", "DType"}, {{"linear", "1", "64", "64", "64", "bf16"}}, "rows"),
      "rows: column 'DType' must be named 'dtype' (column names are case-sensitive)", InputError);
  std::istringstream in("OPName,device,B,H\nsoftmax,Tesla T4,1,8\n");
  CHECK_THROWS_WITH_AS(read_dataset(in, "in.csv"),
                       "in.csv: column 'device' must be named 'Device' (column names are case-sensitive)", InputError);
  std::istringstream kn("OPName,Kernel_Name,B,H\nsoftmax,k,1,8\n");
  CHECK_THROWS_AS(read_dataset(kn, "in.csv"), InputError);
  // The dataset's own headers and other columns pass.
  const Dataset ok = dataset_from_rows({"OPName", "Warps per SM", "B", "H", "dtype"}, {{"softmax", "1", "2", "8", "bf16"}}, "rows");
  CHECK(ok.rows.at(0).kernel.dtype == DType::bf16);
}

TEST_CASE("dataset: dtype names of XLA, PyTorch and ONNX as well as the short ones") {
  const std::pair<const char*, DType> names[] = {
      {"f32", DType::f32},           {"fp32", DType::f32},          {"bf16", DType::bf16},
      {"f16", DType::f16},           {"float16", DType::f16},       {"tf32", DType::tf32},
      {"f8e4m3fn", DType::f8e4m3fn}, {"float8_e4m3fn", DType::f8e4m3fn}, {"FLOAT8E4M3FN", DType::f8e4m3fn},
      {"fp8", DType::f8e4m3fn},      {"f8e5m2", DType::f8e5m2},     {"float8_e5m2", DType::f8e5m2},
      {"torch.float16", DType::f16}, {"torch.bfloat16", DType::bf16}, {"e4m3", DType::f8e4m3fn},
      {"fp8_e5m2", DType::f8e5m2},   {"mxfp4", DType::f4e2m1},      {"int8", DType::i8}};
  for (const auto& entry : names) {
    const char* name = entry.first;
    const DType t = entry.second;
    CAPTURE(name);
    REQUIRE(parse_dtype(name).has_value());
    CHECK(*parse_dtype(name) == t);
    const Kernel k = kernel_from_dataset("linear", {{"B", "1"}, {"M", "256"}, {"N", "256"}, {"K", "256"}, {"dtype", name}});
    CHECK(k.dtype == t);
  }
  CHECK_FALSE(parse_dtype("f7").has_value());
  // INT8 is a matrix product's dtype (integer tensor cores), not a softmax's.
  CHECK(kernel_from_dataset("linear", {{"B", "1"}, {"M", "2"}, {"N", "2"}, {"K", "2"}, {"dtype", "s8"}}).dtype == DType::i8);
  CHECK_THROWS_WITH_AS(kernel_from_dataset("softmax", {{"B", "2"}, {"H", "8"}, {"dtype", "int8"}}),
                       "unknown dtype 'int8' for softmax", InputError);
  CHECK_THROWS_WITH_AS(kernel_from_dataset("linear", {{"B", "1"}, {"M", "2"}, {"N", "2"}, {"K", "2"}, {"dtype", "f7"}}),
                       "unknown dtype 'f7'", InputError);
}

TEST_CASE("dataset: a row's sizes are at most 2^62 and so is every tensor of its kernel") {
  const std::string big = "4611686018427387904";  // 2^62
  CHECK_THROWS_WITH_AS(kernel_from_dataset("bmm", {{"B", "-1"}, {"M", "2"}, {"N", "2"}, {"K", "2"}}),
                       "column 'B' is not a size: '-1'", InputError);
  CHECK_THROWS_WITH_AS(kernel_from_dataset("bmm", {{"B", "1e19"}, {"M", "2"}, {"N", "2"}, {"K", "2"}}),
                       "column 'B' is not a size: '1e19'", InputError);
  CHECK_THROWS_WITH_AS(kernel_from_dataset("bmm", {{"B", big}, {"M", big}, {"N", "64"}, {"K", "128"}}),
                       "the row's left operand has more than 2^62 elements", InputError);
  CHECK_THROWS_WITH_AS(kernel_from_dataset("add", {{"B", big}, {"H", "4"}}), "the row's tensor has more than 2^62 elements",
                       InputError);
  CHECK(kernel_from_dataset("add", {{"B", "1"}, {"H", big}}).cols == int64_t(1) << 62);
  CHECK_THROWS_WITH_AS(kernel_from_dataset("conv", {{"B", "1"}, {"Input_Channel", "3"}, {"Output_Channel", "64"},
                                                    {"Kernel_Szie", "3"}, {"Input_Size", big}, {"Stride", "1"}, {"Padding", big}}),
                       "the row's padded input has more than 2^62 elements", InputError);
}

TEST_CASE("dataset: campaign ratio of two sets of GEMM rows at matched shapes") {
  // Rows of one campaign 3x slower than another's at the same shapes, scaled by their FLOPs
  // where the shapes differ by less than 15%; rows without a match do not count.
  const std::vector<std::string> header = {"OPName", "Latency", "Device", "B", "M", "N", "K"};
  const Dataset test = dataset_from_rows(header,
                                         {{"bmm", "1.0", "G", "8", "1024", "1024", "1024"},
                                          {"bmm", "2.0", "G", "8", "2048", "1024", "1024"},
                                          {"bmm", "1.0", "H", "8", "1024", "1024", "1024"},
                                          {"bmm", "9.0", "G", "1", "64", "64", "64"}},
                                         "test");
  // The second train row is 10% larger along M than the test row it matches: FLOPs-scaled.
  const Dataset train = dataset_from_rows(header,
                                          {{"bmm", "3.0", "G", "8", "1024", "1024", "1024"},
                                           {"bmm", "6.6", "G", "8", "2253", "1024", "1024"}},
                                          "train");
  const CampaignRatio g = campaign_ratio(gemm_shape_rows(train, ""), gemm_shape_rows(test, "G"));
  CHECK(g.matched == 2);
  CHECK(g.ratio == doctest::Approx(3.0).epsilon(0.01));
  const CampaignRatio none = campaign_ratio(gemm_shape_rows(train, ""), gemm_shape_rows(test, "X"));
  CHECK(none.matched == 0);
  // Consistent campaigns read 1.
  CHECK(campaign_ratio(gemm_shape_rows(test, "G"), gemm_shape_rows(test, "G")).ratio == doctest::Approx(1.0));
}
