// safetensors: bit-exact round trips, the canonical header, refusal of
// corrupt files with a message that says what is wrong, sharded checkpoints.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/safetensors.hpp"
#include "target/model_fixtures.hpp"

using namespace dflow::formats;
using dflow::target::testing::ScratchDir;

namespace {

bool same_bytes(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const auto ca = a.contiguous(), cb = b.contiguous();
  if (ca.numel() == 0) return true;  // no bytes (and data_ptr() may be null, which memcmp must not get)
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<size_t>(ca.numel()) * ca.element_size()) == 0;
}

// A file with a hand-written header, for corruption cases.
void write_raw(const std::filesystem::path& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t header_size = header.size();
  out.write(reinterpret_cast<const char*>(&header_size), 8);
  out << header;
  out << std::string(data_bytes, '\0');
}

std::string open_error(const std::filesystem::path& path) {
  try {
    SafetensorsFile file(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Model.Safetensors.RoundTripIsBitExactForEveryDtype") {
  torch::manual_seed(3);
  ScratchDir dir("st-roundtrip");
  std::vector<std::pair<std::string, torch::Tensor>> tensors = {
      {"f64", torch::randn({3, 5}, torch::kFloat64)},
      {"f32", torch::randn({2, 3, 4})},
      {"f16", torch::randn({7}).to(torch::kFloat16)},
      {"bf16", torch::randn({4, 4}).to(torch::kBFloat16)},
      {"i64", torch::randint(-1000000, 1000000, {6}, torch::kInt64)},
      {"i32", torch::randint(-100000, 100000, {2, 2}, torch::kInt32)},
      {"i16", torch::randint(-30000, 30000, {5}, torch::kInt16)},
      {"i8", torch::randint(-128, 127, {9}, torch::kInt8)},
      {"u8", torch::randint(0, 255, {3, 3}, torch::kUInt8)},
      {"bool", torch::randint(0, 2, {11}, torch::kInt64).to(torch::kBool)},
      {"scalar", torch::tensor(2.5)},
      {"empty", torch::zeros({0, 4})},
      {"strided", torch::arange(12, torch::kFloat32).view({3, 4}).t()},  // written contiguous
  };
  tensors[1].second[0][0][0] = std::numeric_limits<float>::quiet_NaN();  // NaN bits survive too
  write_safetensors(dir.path() / "x.safetensors", tensors, {{"format", "pt"}, {"note", "hello"}});

  SafetensorsFile file(dir.path() / "x.safetensors");
  CHECK(file.names().size() == tensors.size());
  CHECK(file.metadata().at("note") == "hello");
  for (const auto& [name, original] : tensors) {
    CAPTURE(name);
    CHECK(same_bytes(file.tensor(name), original.contiguous()));
  }
  CHECK(file.entry("bf16").dtype_name == "BF16");
  CHECK(file.entry("bool").dtype_name == "BOOL");
}

TEST_CASE("Model.Safetensors.DtypeNamesAsConfigsWriteThemMapToTheHeaders") {
  // One table for the header's names, torch's dtypes and PyTorch's names
  // (a node's params.dtype is checked against a file's header with it).
  for (const auto& [config_name, header_name] : std::vector<std::pair<std::string, std::string>>{
           {"float32", "F32"}, {"float16", "F16"}, {"bfloat16", "BF16"}, {"int64", "I64"}, {"bool", "BOOL"}}) {
    CAPTURE(config_name);
    CHECK(safetensors_dtype_named(config_name) == header_name);
    CHECK(torch_dtype_to_safetensors(safetensors_dtype_to_torch(header_name)) == header_name);
  }
  CHECK_THROWS_WITH_AS(safetensors_dtype_named("float8_e4m3"), doctest::Contains("dtype 'float8_e4m3'"),
                       std::runtime_error);
}

TEST_CASE("Model.Safetensors.HeaderIsSortedAndAligned") {
  ScratchDir dir("st-header");
  const auto path = dir.path() / "x.safetensors";
  write_safetensors(path, {{"zeta", torch::ones({3})}, {"alpha", torch::ones({1}, torch::kUInt8)}});
  std::ifstream in(path, std::ios::binary);
  uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), 8);
  std::string header(header_size, ' ');
  in.read(header.data(), static_cast<std::streamsize>(header_size));
  CHECK((8 + header_size) % 8 == 0);
  CHECK(header.find("\"alpha\"") < header.find("\"zeta\""));
  const auto json = nlohmann::json::parse(header);
  CHECK(json["alpha"]["data_offsets"] == nlohmann::json::array({0, 1}));
  CHECK(json["zeta"]["data_offsets"] == nlohmann::json::array({1, 13}));  // contiguous, no holes
}

TEST_CASE("Model.Safetensors.TensorsOutliveTheFileObjectAndWritesStayPrivate") {
  ScratchDir dir("st-mapping");
  const auto path = dir.path() / "x.safetensors";
  write_safetensors(path, {{"w", torch::full({4}, 3.0)}});
  torch::Tensor loaded = SafetensorsFile(path).tensor("w");
  loaded.add_(1.0);  // copy-on-write page: the file must not change
  CHECK(loaded.sum().item<double>() == doctest::Approx(16.0));
  CHECK(SafetensorsFile(path).tensor("w").sum().item<double>() == doctest::Approx(12.0));
}

TEST_CASE("Model.Safetensors.CorruptFilesAreRefusedWithTheReason") {
  ScratchDir dir("st-corrupt");
  const auto good = dir.path() / "good.safetensors";
  write_safetensors(good, {{"w", torch::ones({4, 4})}});
  const auto good_size = std::filesystem::file_size(good);

  SUBCASE("shorter than the length prefix") {
    const auto path = dir.path() / "tiny.safetensors";
    std::filesystem::copy_file(good, path);
    std::filesystem::resize_file(path, 5);
    const std::string error = open_error(path);
    CHECK(error.find("tiny.safetensors") != std::string::npos);
    CHECK(error.find("truncated") != std::string::npos);
    CHECK(error.find("shorter than the 8-byte header length") != std::string::npos);
  }
  SUBCASE("cut inside the header") {
    const auto path = dir.path() / "cut-header.safetensors";
    std::filesystem::copy_file(good, path);
    std::filesystem::resize_file(path, 20);
    const std::string error = open_error(path);
    CHECK(error.find("truncated: header length") != std::string::npos);
  }
  SUBCASE("cut inside the data: offsets fall outside the file") {
    const auto path = dir.path() / "cut-data.safetensors";
    std::filesystem::copy_file(good, path);
    std::filesystem::resize_file(path, good_size - 4);
    const std::string error = open_error(path);
    CHECK(error.find("tensor 'w'") != std::string::npos);
    CHECK(error.find("fall outside the file's data section") != std::string::npos);
  }
  SUBCASE("header is not JSON") {
    const auto path = dir.path() / "bad-json.safetensors";
    write_raw(path, "{\"w\": {\"dtype\": \"F32\", ", 16);
    CHECK(open_error(path).find("header is not valid JSON") != std::string::npos);
  }
  SUBCASE("offsets disagree with shape and dtype") {
    const auto path = dir.path() / "bad-span.safetensors";
    write_raw(path, R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})", 16);
    const std::string error = open_error(path);
    CHECK(error.find("span 12 bytes") != std::string::npos);
    CHECK(error.find("needs 16 bytes") != std::string::npos);
  }
  SUBCASE("offsets beyond the data section") {
    const auto path = dir.path() / "bad-offsets.safetensors";
    write_raw(path, R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", 16);
    CHECK(open_error(path).find("fall outside") != std::string::npos);
  }
  SUBCASE("a dtype dflow does not read, with offsets outside the data section") {
    const auto path = dir.path() / "bad-fp8.safetensors";
    write_raw(path, R"({"w": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 8]}})", 4);
    const std::string error = open_error(path);
    CHECK(error.find("tensor 'w'") != std::string::npos);
    CHECK(error.find("fall outside the file's data section") != std::string::npos);
  }
}

// Large targets ship their layers in FP8 or packed INT4: such entries are
// listed, their offsets checked, and only reading one is refused, naming the
// tensor, its dtype and the file; the file's other tensors read as usual.
TEST_CASE("Model.Safetensors.entries_in_dtypes_dflow_does_not_read_are_listed_and_refused_only_when_read") {
  ScratchDir dir("st-unread-dtype");
  const auto path = dir.path() / "fp8.safetensors";
  write_raw(path,
            R"({"a.weight": {"dtype": "F8_E4M3", "shape": [2, 3], "data_offsets": [0, 6]},)"
            R"( "a.weight_scale_inv": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]},)"
            R"( "b": {"dtype": "F4", "shape": [4], "data_offsets": [12, 14]}})",
            14);
  REQUIRE(open_error(path).empty());
  const SafetensorsFile file(path);
  CHECK(file.names() == std::vector<std::string>{"a.weight", "a.weight_scale_inv", "b"});
  CHECK(file.entry("a.weight").dtype_name == "F8_E4M3");
  CHECK(file.entry("a.weight").shape == std::vector<int64_t>{2, 3});
  CHECK(file.tensor("a.weight_scale_inv").item<float>() == 0.0f);
  const std::string refusal =
      "safetensors file '" + path.string() + "': tensor 'a.weight' is stored as F8_E4M3, a dtype dflow does not read";
  CHECK_THROWS_WITH_AS(file.tensor("a.weight"), doctest::Contains(refusal.c_str()), std::runtime_error);
  CHECK_THROWS_WITH_AS(file.all_tensors(), doctest::Contains("tensor 'a.weight' is stored as F8_E4M3"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(file.tensor("b"), doctest::Contains("tensor 'b' is stored as F4"), std::runtime_error);
  // Read by name from a checkpoint directory, the F32 tensor alone is read; asking for the FP8 one is refused.
  std::filesystem::copy_file(path, dir.path() / "model.safetensors");
  CHECK(read_checkpoint_tensors(dir.path(), {"a.weight_scale_inv"}).at("a.weight_scale_inv").item<float>() == 0.0f);
  CHECK_THROWS_WITH_AS(read_checkpoint_tensors(dir.path(), {"a.weight"}),
                       doctest::Contains("tensor 'a.weight' is stored as F8_E4M3"), std::runtime_error);
}

TEST_CASE("Model.Safetensors.WriterRefusesDuplicateNames") {
  ScratchDir dir("st-dup");
  CHECK_THROWS_WITH_AS(write_safetensors(dir.path() / "x.safetensors", {{"a", torch::ones({1})}, {"a", torch::ones({1})}}),
                       doctest::Contains("appears twice"), std::runtime_error);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "x.safetensors"));
}

TEST_CASE("Model.Safetensors.CheckpointDirectoriesSingleAndSharded") {
  ScratchDir dir("st-sharded");
  const torch::Tensor a = torch::randn({3, 2}), b = torch::randn({5}), c = torch::arange(4);

  SUBCASE("single file") {
    write_safetensors(dir.path() / "model.safetensors", {{"a", a}, {"b", b}});
    const TensorMap loaded = load_checkpoint_dir(dir.path());
    CHECK(loaded.size() == 2);
    CHECK(torch::equal(loaded.at("a"), a));
  }
  SUBCASE("sharded through the index") {
    write_safetensors(dir.path() / "model-00001-of-00002.safetensors", {{"a", a}, {"b", b}});
    write_safetensors(dir.path() / "model-00002-of-00002.safetensors", {{"c", c}});
    const nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                                  {"weight_map",
                                   {{"a", "model-00001-of-00002.safetensors"},
                                    {"b", "model-00001-of-00002.safetensors"},
                                    {"c", "model-00002-of-00002.safetensors"}}}};
    std::ofstream(dir.path() / "model.safetensors.index.json") << index.dump();
    const TensorMap loaded = load_checkpoint_dir(dir.path());
    CHECK(loaded.size() == 3);
    CHECK(torch::equal(loaded.at("b"), b));
    CHECK(torch::equal(loaded.at("c"), c));
  }
  SUBCASE("index naming a missing shard") {
    std::ofstream(dir.path() / "model.safetensors.index.json")
        << R"({"weight_map": {"a": "model-00009-of-00009.safetensors"}})";
    CHECK_THROWS_WITH_AS(load_checkpoint_dir(dir.path()), doctest::Contains("does not exist"), std::runtime_error);
  }
  SUBCASE("index naming a tensor its shard lacks") {
    write_safetensors(dir.path() / "shard.safetensors", {{"a", a}});
    std::ofstream(dir.path() / "model.safetensors.index.json") << R"({"weight_map": {"zz": "shard.safetensors"}})";
    CHECK_THROWS_WITH_AS(load_checkpoint_dir(dir.path()), doctest::Contains("does not hold it"), std::runtime_error);
  }
  SUBCASE("no safetensors at all") {
    CHECK_THROWS_WITH_AS(load_checkpoint_dir(dir.path()), doctest::Contains("holds no *.safetensors"),
                         std::runtime_error);
  }
}
