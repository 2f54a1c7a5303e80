// SpecForge's offline capture files, read by dflow without Python: records
// written by the venv's torch.save (and gzip.open, as prepare_hidden_states.py
// --compress does) read back with their tensors and their batch padding; a
// file cut short at any length is "not whole yet", never read; and damaged
// bytes, anywhere, are refused naming the file or read, never a crash (the
// bounded-input stand-in for a fuzzer: LibTorch's unpickler cannot be built
// into the torch-free fuzz targets; fuzz_specforge_container fuzzes the
// container part).
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data/data_error.hpp"
#include "test_paths.hpp"
#include "tools/run_command.hpp"
#include "train/specforge_container.hpp"
#include "train/specforge_files.hpp"

namespace fs = std::filesystem;
using namespace dflow;

namespace {

fs::path fresh(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("dflow-specforge-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// `record` (a Python expression over torch) saved as SpecForge saves it, into data_0.ckpt(.gz) of `dir`.
train::SpecForgeFilePaths torch_saved(const fs::path& dir, const std::string& record, bool compress) {
  if (testing::python().empty()) FAIL("no Python beside the venv's torch: run tools/setup.sh");
  const auto paths = train::specforge_file_paths(dir, 0, 2000);
  fs::create_directories(paths.plain.parent_path());
  const std::string save = compress ? "f = gzip.open(p, 'wb', compresslevel=6); torch.save(r, f); f.close()"
                                    : "torch.save(r, p)";
  const auto o = testing::run_command(testing::python() + " -c \"import gzip, torch; p = '" +
                                          (compress ? paths.gzipped : paths.plain).string() + "'; r = " + record +
                                          "; " + save + "\"",
                                      120);
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  return paths;
}

// Sample 0 of a 6-token batch row: 4 tokens, then the batch's padding.
const std::string kRecord =
    "{'input_ids': torch.tensor([5, 6, 7, 8, 0, 0]), 'loss_mask': torch.tensor([0, 1, 1, 1, 0, 0]), "
    "'hidden_states': (torch.arange(48, dtype=torch.float32).reshape(1, 6, 8) / 4).to(torch.bfloat16), "
    "'target_last_hidden_states': torch.ones(1, 6, 4, dtype=torch.bfloat16)}";

std::vector<char> bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const fs::path& path, const std::vector<char>& bytes, size_t count) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(count));
}

std::string refusal(const train::SpecForgeFilePaths& paths) {
  try {
    train::read_specforge_sample(train::read_specforge_container(paths));
  } catch (const data::DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("SpecForgeFiles.a_record_as_torch_save_writes_it_is_read_with_its_tensors_and_its_padding") {
  for (const bool compress : {false, true}) {
    CAPTURE(compress);
    const auto paths = torch_saved(fresh(compress ? "gz" : "plain"), kRecord, compress);
    const auto container = train::read_specforge_container(paths);
    REQUIRE(container.state == train::EngineFileState::ready);
    CHECK(container.path == (compress ? paths.gzipped : paths.plain));
    const auto sample = train::read_specforge_sample(container);
    CHECK(sample.token_ids == std::vector<int64_t>{5, 6, 7, 8, 0, 0});
    CHECK(sample.padding_from == 4);
    REQUIRE(sample.hidden_states.sizes().vec() == std::vector<int64_t>{6, 8});
    CHECK((sample.hidden_states.scalar_type() == torch::kBFloat16));
    CHECK(torch::equal(sample.hidden_states.to(torch::kFloat32),
                       torch::arange(48, torch::kFloat32).reshape({6, 8}) / 4));
    REQUIRE(sample.last_hidden.defined());
    CHECK(sample.last_hidden.sizes().vec() == std::vector<int64_t>{6, 4});
  }
}

TEST_CASE("SpecForgeFiles.a_file_cut_short_at_any_length_is_not_whole_yet_and_never_read") {
  for (const bool compress : {false, true}) {
    CAPTURE(compress);
    const auto paths = torch_saved(fresh(compress ? "cut-gz" : "cut"), kRecord, compress);
    const auto path = compress ? paths.gzipped : paths.plain;
    const auto whole = bytes_of(path);
    for (size_t length = 0; length < whole.size(); ++length) {
      CAPTURE(length);
      write_bytes(path, whole, length);
      CHECK(train::read_specforge_container(paths).state == train::EngineFileState::incomplete);
    }
    fs::remove(path);
    CHECK(train::read_specforge_container(paths).state == train::EngineFileState::missing);
  }
}

TEST_CASE("SpecForgeFiles.damaged_bytes_anywhere_are_refused_naming_the_file_or_read_never_a_crash") {
  for (const bool compress : {false, true}) {
    CAPTURE(compress);
    const auto paths = torch_saved(fresh(compress ? "damaged-gz" : "damaged"), kRecord, compress);
    const auto path = compress ? paths.gzipped : paths.plain;
    const auto whole = bytes_of(path);
    int refused = 0;
    // Every byte of the headers and trailers (a zip's local header, central
    // directory and end record; gzip's header and trailer) and every 7th
    // byte of the payload between them: the pickle's opcodes and the
    // tensors' bytes alike, in seconds (the fuzzers cover the container's
    // bytes exhaustively).
    for (size_t at = 0; at < whole.size(); at += (at < 128 || at + 256 >= whole.size()) ? 1 : 7) {
      for (const unsigned char flip : {0x01, 0xff}) {
        CAPTURE(at);
        auto damaged = whole;
        damaged[at] = static_cast<char>(damaged[at] ^ flip);
        write_bytes(path, damaged, damaged.size());
        try {
          const auto container = train::read_specforge_container(paths);
          if (container.state == train::EngineFileState::ready) train::read_specforge_sample(container);
        } catch (const data::DataError& e) {
          CHECK(std::string(e.what()).find(path.string()) != std::string::npos);
          ++refused;
        }
      }
    }
    CHECK(refused > 0);
  }
}

TEST_CASE("SpecForgeFiles.records_of_another_layout_are_refused_naming_the_file_the_tensor_and_what_to_do") {
  const auto dir = fresh("layouts");
  const auto eagle3 = torch_saved(dir, "{'input_ids': torch.tensor([1, 2]), 'loss_mask': torch.tensor([1, 1]), "
                                       "'hidden_state': torch.zeros(1, 2, 4), 'aux_hidden_state': torch.zeros(1, 2, 12)}",
                                  false);
  auto e = refusal(eagle3);
  CHECK_MESSAGE(e.find("SpecForge capture file " + eagle3.plain.string()) != std::string::npos, e);
  CHECK_MESSAGE(e.find("an EAGLE3 capture holds hidden_state and aux_hidden_state") != std::string::npos, e);
  e = refusal(torch_saved(dir, "[torch.zeros(2)]", false));
  CHECK_MESSAGE(e.find("not the dict of tensors") != std::string::npos, e);
  e = refusal(torch_saved(dir, "{'input_ids': 3, 'loss_mask': torch.tensor([1]), 'hidden_states': torch.zeros(1, 1, 4)}",
                          false));
  CHECK_MESSAGE(e.find("'input_ids' is a Int, not a tensor") != std::string::npos, e);
  e = refusal(torch_saved(dir, "{'input_ids': torch.tensor([1, 2]), 'loss_mask': torch.tensor([1, 1]), "
                               "'hidden_states': torch.zeros(1, 3, 4)}",
                          false));
  CHECK_MESSAGE(e.find("hidden_states must be bfloat16, float16 or float32 [1, 2, width]") != std::string::npos, e);
  CHECK_MESSAGE(e.find("got Float [1, 3, 4]") != std::string::npos, e);
  e = refusal(torch_saved(dir, "{'input_ids': torch.tensor([1.0, 2.0]), 'loss_mask': torch.tensor([1, 1]), "
                               "'hidden_states': torch.zeros(1, 2, 4)}",
                          false));
  CHECK_MESSAGE(e.find("input_ids must be int64 or int32 [L] or [1, L], got Float [2]") != std::string::npos, e);
  // Not a torch.save archive at all, though a whole zip: LibTorch's reason, named.
  const auto paths = train::specforge_file_paths(dir, 0, 2000);
  const auto o = testing::run_command(testing::python() + " -c \"import zipfile; z = zipfile.ZipFile('" +
                                          paths.plain.string() + "', 'w'); z.writestr('a/b', 'x'); z.close()\"",
                                      60);
  REQUIRE(o.exit_code == 0);
  e = refusal(paths);
  CHECK_MESSAGE(e.find("LibTorch cannot read it as a torch.save archive") != std::string::npos, e);
}
