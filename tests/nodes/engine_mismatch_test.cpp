// features.engine with on_mismatch: skip: files that mostly hold other
// tokens (another dataset or tokenization) stop the run instead of training
// on what is left, or on nothing.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "engine_files.hpp"
#include "nodes/trainer.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::from_engine;
using testing::small_run_config;
using testing::step_records;
namespace fs = std::filesystem;

namespace {

// Engine files of the test data's samples (dflow's own features), written once.
const fs::path& engine_files() {
  static const fs::path dir = [] {
    const auto d = fresh_dir("engine-mismatch-files");
    testing::write_dflow_features_as_engine_files(small_run_config(fresh_dir("engine-mismatch-writer")), d);
    return d;
  }();
  return dir;
}

fs::path copy_of_files(const std::string& name) {
  const auto dir = fresh_dir(name);
  fs::copy(engine_files(), dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  return dir;
}

// The file of `path` with its first token changed: a sample of other tokens.
void rewrite_with_other_tokens(const fs::path& path) {
  model::SafetensorsFile file(path);
  auto tokens = file.tensor("token_ids").clone();
  tokens[0] = (tokens[0].item<int64_t>() + 1) % 512;
  auto hidden = file.tensor("hidden_states").clone();
  model::write_safetensors(path, {{"token_ids", tokens}, {"hidden_states", hidden}});
}

std::string error_of(const config::Config& config) {
  try {
    nodes::run_training(config, {});
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

const std::string kSkip = "engine_layer_ids: [2, 4], dtype: float32, on_mismatch: skip";

}  // namespace

TEST_CASE("EngineFeatures.Mismatch.files_that_all_hold_other_tokens_stop_the_run_naming_how_many_and_the_first_file") {
  const auto files = copy_of_files("engine-mismatch-all");
  for (const auto& entry : fs::directory_iterator(files)) rewrite_with_other_tokens(entry.path());
  const auto dir = fresh_dir("engine-mismatch-all-run");
  const auto message = error_of(from_engine(small_run_config(dir, {"run.max_steps=4"}), files, kSkip));
  CHECK_MESSAGE(message.find("samples hold other tokens than the dataset's, more than max_skipped_fraction 0.01 of "
                             "its ") != std::string::npos,
                message);
  CHECK_MESSAGE(message.find("the first: sample ") != std::string::npos, message);
  CHECK_MESSAGE(message.find("engine features file " + files.string() + "/hs_") != std::string::npos, message);
  CHECK(step_records(dir).empty());  // nothing trained on, and no drafter saved as if it had been

  // A bound that lets them all through trains on nothing, as asked.
  const auto lenient = fresh_dir("engine-mismatch-all-lenient");
  CHECK(error_of(from_engine(small_run_config(lenient, {"run.max_steps=1"}), files, kSkip + ", max_skipped_fraction: 1")) ==
        "");

  // The bound without skipping is refused, naming the key.
  const auto refused = error_of(from_engine(small_run_config(fresh_dir("engine-mismatch-bound-alone")), files,
                                            "engine_layer_ids: [2, 4], dtype: float32, max_skipped_fraction: 0.5"));
  CHECK_MESSAGE(refused.find("params.max_skipped_fraction") != std::string::npos, refused);
  CHECK_MESSAGE(refused.find("on_mismatch is fail") != std::string::npos, refused);
}
