// Inputs that broke the safetensors header reader (formats/safetensors_header.cpp,
// fuzzed by fuzz/fuzz_safetensors_header.cpp), kept as tests of the fix.
// fuzz/RESULTS.md lists each finding.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "formats/safetensors.hpp"
#include "target/model_fixtures.hpp"

using namespace dflow::formats;
using dflow::target::testing::ScratchDir;

namespace {

void write_raw(const std::filesystem::path& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t header_size = header.size();
  out.write(reinterpret_cast<const char*>(&header_size), 8);
  out << header << std::string(data_bytes, '\0');
}

// The message of the std::runtime_error opening `path` throws; any other
// exception escapes and fails the test.
std::string open_error(const std::filesystem::path& path) {
  try {
    SafetensorsFile file(path);
    (void)file.all_tensors();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  FAIL("expected a std::runtime_error for " << path.string());
  return {};
}

}  // namespace

TEST_CASE("Model.SafetensorsFuzz.NumberTooLargeForADoubleIsInvalidJson") {
  // fuzz_safetensors_header: nlohmann's out_of_range 406 escaped the header
  // parser, which caught parse_error only.
  ScratchDir dir("st-fuzz-406");
  const auto path = dir.path() / "big-number.safetensors";
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [1E400], "data_offsets": [0, 4]}})", 4);
  const auto message = open_error(path);
  CHECK_MESSAGE(message.find("big-number.safetensors': header is not valid JSON") != std::string::npos, message);
  CHECK(message.find("number overflow") != std::string::npos);
}

TEST_CASE("Model.SafetensorsFuzz.ShapeWhoseSizeWrapsAroundIsRefused") {
  // [2^62, 4] F32 wrapped to 0 elements and 0 bytes, so empty offsets passed
  // and tensor() asked torch for 2^64 floats.
  ScratchDir dir("st-fuzz-numel");
  const auto path = dir.path() / "wrap.safetensors";
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}})", 0);
  auto message = open_error(path);
  CHECK_MESSAGE(message.find("tensor 'w': shape [4611686018427387904,4] is too large: the product of its "
                             "dimensions exceeds 2^63 - 1") != std::string::npos,
                message);
  // Elements fit, bytes do not: 2^62 F32 values are 2^64 bytes.
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]}})", 0);
  message = open_error(path);
  CHECK_MESSAGE(message.find("of dtype F32 needs more than 2^64 bytes") != std::string::npos, message);
  // torch's bound: strides (products of the dimensions, a 0 counted as 1)
  // must fit in int64, even when a dimension is 0 and there are no elements.
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [0, 4611686018427387904, 4611686018427387904], )"
                  R"("data_offsets": [0, 0]}})", 0);
  CHECK(open_error(path).find("is too large") != std::string::npos);
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [0, 2147483648, 2147483648], "data_offsets": [0, 0]}})", 0);
  SafetensorsFile file(path);
  CHECK(file.tensor("w").numel() == 0);
}
