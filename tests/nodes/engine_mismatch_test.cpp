// features.engine with on_mismatch: skip: in packed rows a skipped sample's
// loss figures never land on its neighbours, and files that mostly hold
// other tokens (another dataset or tokenization) stop the run instead of
// training on what is left, or on nothing.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "engine_files.hpp"
#include "error_of.hpp"
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
  dflow::formats::SafetensorsFile file(path);
  auto tokens = file.tensor("token_ids").clone();
  tokens[0] = (tokens[0].item<int64_t>() + 1) % 512;
  auto hidden = file.tensor("hidden_states").clone();
  dflow::formats::write_safetensors(path, {{"token_ids", tokens}, {"hidden_states", hidden}});
}

std::string error_of(const config::Config& config) {
  return testing::error_of([&] { nodes::run_training(config, {}); });
}

const std::string kSkip = "engine_layer_ids: [2, 4], dtype: float32, on_mismatch: skip";

}  // namespace

TEST_CASE("EngineFeatures.Mismatch.a_sample_skipped_in_a_packed_row_leaves_every_other_samples_loss_in_its_bucket") {
  const std::vector<std::string> packed{"run.max_steps=2", "data.max_length=512", "data.buckets=[64, 128, 512]"};
  auto config = [&](const fs::path& dir, const fs::path& files) {
    return testing::with_pad(from_engine(small_run_config(dir, packed), files, kSkip), "pad_bucket.pack");
  };
  const auto clean = fresh_dir("engine-mismatch-pack-clean");
  nodes::run_training(config(clean, engine_files()), {});
  const auto first_step = step_records(clean).at(0)["sample_ids"].get<std::vector<int64_t>>();
  REQUIRE(first_step.size() >= 3);
  // The first sample of the first row: every sample after it in the batch
  // would take its left neighbour's figures if they were paired by the plan.
  const auto files = copy_of_files("engine-mismatch-pack");
  rewrite_with_other_tokens(train::engine_file_path(files, first_step.front()));
  const auto dir = fresh_dir("engine-mismatch-pack-run");
  nodes::run_training(config(dir, files), {});
  const auto records = step_records(dir);
  REQUIRE(records.size() == 2);
  CHECK(records[0]["excluded_samples"] == 1);
  for (const auto& r : records) {
    double loss_sum = 0, weight = 0;
    int64_t real_tokens = 0;
    for (const auto& [length, b] : r["buckets"].items()) {
      loss_sum += b["loss_sum"].get<double>();
      weight += b["loss_weight"].get<double>();
      real_tokens += b["real_tokens"].get<int64_t>();
    }
    // The buckets add up to the step: each trained sample's loss counted
    // once, in its own length's bucket, and the skipped one's nowhere.
    CHECK(weight == doctest::Approx(r["loss_weight"].get<double>()));
    REQUIRE(weight > 0);
    CHECK(loss_sum / weight == doctest::Approx(r["loss"].get<double>()));
    CHECK(real_tokens == r["real_tokens"].get<int64_t>());
  }
}

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
