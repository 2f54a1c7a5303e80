// features.engine over SpecForge's offline captures (format: specforge):
// rows_<g>-<g+G>/data_<i>.ckpt (or .ckpt.gz), one torch.save dict a sample,
// written here by tools/write_engine_features.py --format specforge with the
// venv's torch.save (and gzip.open) as SpecForge's prepare_hidden_states.py
// saves them, the states from Hugging Face's forward over the capture's
// padded batches. They train as target_forward does, the DSpark captures'
// target_last_hidden_states is a kl run's teacher, files still being written
// are waited for, and layers, groups or tokens that do not fit are refused.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "config/errors.hpp"
#include "engine_files.hpp"
#include "nodes/trainer.hpp"
#include "train/specforge_container.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::from_engine;
using testing::small_run_config;
using testing::step_records;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kLayers12{"run.max_steps=3", "eval.every_steps=0", "model.drafter.target_layer_ids=[1, 2]",
                                         "model.drafter.num_target_features=2"};

fs::path specforge_files(const std::string& name, const std::string& arguments) {
  const auto dir = fresh_dir(name);
  const auto written = testing::write_engine_files_with_python(dir, "--format specforge " + arguments);
  INFO(written.output);
  REQUIRE(written.exit_code == 0);
  return dir;
}

std::string error_of(const config::Config& config) {
  try {
    nodes::run_training(config, {});
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

config::Config with_kl(config::Config config) {
  for (auto& n : config.pipeline.nodes)
    if (n.name == "drafter") n.params.reset(YAML::Load("{loss: kl}"));
  return config;
}

void check_within(const std::vector<nlohmann::json>& got, const std::vector<nlohmann::json>& want, double relative) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i]["sample_ids"] == want[i]["sample_ids"]);
    CHECK(std::abs(got[i]["loss"].get<double>() - want[i]["loss"].get<double>()) <=
          relative * std::abs(want[i]["loss"].get<double>()));
  }
}

// The online run's records (target_forward) over dflow layers 1 and 2, and
// float32 captures of SpecForge ids 1 and 2 in batches of 4, plain and gzipped.
struct Reference {
  std::vector<nlohmann::json> online;
  fs::path plain = specforge_files("specforge-plain", "--layer-ids 1 2 --dtype float32 --batch-size 4");
  fs::path gzipped = specforge_files("specforge-gz", "--layer-ids 1 2 --dtype float32 --batch-size 4 --compress");
  Reference() {
    const auto dir = fresh_dir("specforge-online");
    nodes::run_training(small_run_config(dir, kLayers12), {});
    online = step_records(dir);
  }
};
const Reference& reference() {
  static const Reference r;
  return r;
}

const std::string kParams12 = "format: specforge, engine_layer_ids: [1, 2], dtype: float32";

}  // namespace

TEST_CASE("EngineFeatures.SpecForge.captures_plain_or_gzipped_train_as_target_forward_within_float32_rounding") {
  const auto plain = fresh_dir("specforge-plain-run"), gzipped = fresh_dir("specforge-gz-run");
  nodes::run_training(from_engine(small_run_config(plain, kLayers12), reference().plain, kParams12), {});
  const auto got = step_records(plain);
  REQUIRE(got.size() == 3);
  // Hugging Face's forward over padded batches against dflow's: the last bits.
  check_within(got, reference().online, 1e-4);
  nodes::run_training(from_engine(small_run_config(gzipped, kLayers12), reference().gzipped, kParams12), {});
  CHECK(step_records(gzipped) == got);  // the same states, whatever the container
}

TEST_CASE("EngineFeatures.SpecForge.a_dspark_capture_s_last_hidden_state_is_the_kl_teacher_and_a_dflash_one_is_refused") {
  const auto online = fresh_dir("specforge-kl-online");
  nodes::run_training(with_kl(small_run_config(online, kLayers12)), {});
  const auto dspark = specforge_files("specforge-dspark", "--layer-ids 1 2 --dtype float32 --strategy dspark");
  const auto run = fresh_dir("specforge-kl-run");
  nodes::run_training(with_kl(from_engine(small_run_config(run, kLayers12), dspark, kParams12)), {});
  check_within(step_records(run), step_records(online), 1e-4);

  const auto refused = error_of(with_kl(from_engine(small_run_config(fresh_dir("specforge-kl-refused"), kLayers12),
                                                    reference().plain, kParams12)));
  CHECK_MESSAGE(refused.find("no target_last_hidden_states") != std::string::npos, refused);
  CHECK_MESSAGE(refused.find("trains with loss: kl") != std::string::npos, refused);
  CHECK_MESSAGE(refused.find("--strategy dspark") != std::string::npos, refused);
  CHECK_MESSAGE(refused.find((reference().plain / "rows_0-2000").string()) != std::string::npos, refused);
}

TEST_CASE("EngineFeatures.SpecForge.layers_the_target_cannot_have_and_another_file_group_size_are_refused") {
  // The demo target has 4 layers: SpecForge's ids 0 .. 3 of it.
  const auto beyond = error_of(from_engine(small_run_config(fresh_dir("specforge-layer4"), kLayers12),
                                           reference().plain, "format: specforge, engine_layer_ids: [1, 4]"));
  CHECK_MESSAGE(beyond.find("params.engine_layer_ids") != std::string::npos, beyond);
  CHECK_MESSAGE(beyond.find("SpecForge layer id 4 outside [0, 3] for a 4-layer target") != std::string::npos, beyond);
  const auto other_group = error_of(from_engine(small_run_config(fresh_dir("specforge-group"), kLayers12),
                                                reference().plain, kParams12 + ", file_group_size: 100"));
  CHECK_MESSAGE(other_group.find("params.file_group_size") != std::string::npos, other_group);
  CHECK_MESSAGE(other_group.find("holds rows_0-2000, a folder of 2000 samples") != std::string::npos, other_group);
  CHECK_MESSAGE(other_group.find("--file-group-size (2000)") != std::string::npos, other_group);
  const auto taps = error_of(from_engine(small_run_config(fresh_dir("specforge-taps"), {"run.max_steps=1",
                                                                                         "model.drafter.target_layer_ids=[1]",
                                                                                         "model.drafter.num_target_features=1"}),
                                         reference().plain, "format: specforge, engine_layer_ids: [1], dtype: float32"));
  CHECK_MESSAGE(taps.find("hidden_states holds 2 taps of hidden size") != std::string::npos, taps);
  CHECK_MESSAGE(taps.find("dflash_config.target_layer_ids") != std::string::npos, taps);
  // Params that belong to the other layout.
  const auto fp8 = error_of(from_engine(small_run_config(fresh_dir("specforge-fp8"), kLayers12), reference().plain,
                                        "format: specforge, engine_layer_ids: [1, 2], dtype: float8_e4m3fn"));
  CHECK_MESSAGE(fp8.find("params.dtype") != std::string::npos, fp8);
  CHECK_MESSAGE(fp8.find("SpecForge's captures hold the target's dtype") != std::string::npos, fp8);
  const auto group = error_of(from_engine(small_run_config(fresh_dir("specforge-vllm-group"), kLayers12),
                                          reference().plain, "engine_layer_ids: [2, 3, 4], file_group_size: 2000"));
  CHECK_MESSAGE(group.find("params.file_group_size") != std::string::npos, group);
  CHECK_MESSAGE(group.find("set format: specforge, or leave file_group_size out") != std::string::npos, group);
}

TEST_CASE("EngineFeatures.SpecForge.a_capture_of_other_tokens_is_refused_naming_the_sample_and_the_file") {
  const auto wrong = specforge_files("specforge-wrong", "--layer-ids 1 2 --dtype float32 --wrong-tokens " +
                                                            std::to_string(reference().online.at(0)["sample_ids"][0].get<int64_t>()));
  const int64_t sample = reference().online.at(0)["sample_ids"][0].get<int64_t>();
  const auto e = error_of(from_engine(small_run_config(fresh_dir("specforge-wrong-run"), kLayers12), wrong, kParams12));
  CHECK_MESSAGE(e.find("sample " + std::to_string(sample) + ": engine features file " +
                       train::specforge_file_paths(wrong, sample, 2000).plain.string() +
                       " holds other tokens than the dataset's sample (position 0:") != std::string::npos,
                e);
  CHECK_MESSAGE(e.find("on_mismatch: skip") != std::string::npos, e);
}

TEST_CASE("EngineFeatures.SpecForge.a_capture_still_writing_is_read_file_by_file_as_each_becomes_whole") {
  // The capture's files appear in dataset order, each written in place in
  // three pieces (neither locked nor renamed, as SpecForge writes them), half
  // of them gzipped; training from the directory meanwhile is the run from
  // the finished capture.
  const auto stream = fresh_dir("specforge-stream");
  std::thread writer([&] {
    for (int64_t i = 0;; ++i) {
      const auto from = train::specforge_file_paths(i % 2 ? reference().gzipped : reference().plain, i, 2000);
      const auto source = i % 2 ? from.gzipped : from.plain;
      if (!fs::exists(source)) break;
      const auto paths = train::specforge_file_paths(stream, i, 2000);
      const auto into = i % 2 ? paths.gzipped : paths.plain;
      fs::create_directories(into.parent_path());
      std::ifstream in(source, std::ios::binary);
      const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
      std::ofstream out(into, std::ios::binary);
      for (size_t piece = 0, step = bytes.size() / 3 + 1; piece < bytes.size(); piece += step) {
        out.write(bytes.data() + piece, static_cast<std::streamsize>(std::min(step, bytes.size() - piece)));
        out.flush();
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
  });
  const auto run = fresh_dir("specforge-stream-run"), finished = fresh_dir("specforge-finished-run");
  const auto e = error_of(from_engine(small_run_config(run, kLayers12), stream, kParams12));
  writer.join();
  REQUIRE(e == "");
  nodes::run_training(from_engine(small_run_config(finished, kLayers12), reference().plain, kParams12), {});
  CHECK(step_records(run) == step_records(finished));

  // A file that stays cut short is waited for, then named.
  const int64_t first = reference().online.at(0)["sample_ids"][0].get<int64_t>();
  const auto cut = fresh_dir("specforge-cut");
  fs::copy(reference().plain, cut, fs::copy_options::recursive);
  const auto path = train::specforge_file_paths(cut, first, 2000).plain;
  fs::resize_file(path, fs::file_size(path) / 2);
  const auto waited = error_of(from_engine(small_run_config(fresh_dir("specforge-cut-run"), kLayers12), cut,
                                           kParams12 + ", timeout_s: 0.3"));
  CHECK_MESSAGE(waited.find("sample " + std::to_string(first) + ": engine features file " + path.string()) !=
                    std::string::npos,
                waited);
  CHECK_MESSAGE(waited.find("was not completely written (its zip archive or gzip stream has not ended) within 0.") !=
                    std::string::npos,
                waited);
}

// The target's last layer (SpecForge's id N - 1; its qwen3.5-4b-domino.json
// lists 31 of 32). SpecForge's Hugging Face target backend stored
// hidden_states[k + 1] for each id k, so its N - 1 is hidden_states[N], the
// last layer after the final norm: dflow's layer N - 1, read as it is, and
// the teacher of a kl run where the file has no target_last_hidden_states.
TEST_CASE("EngineFeatures.SpecForge.a_capture_of_the_last_layer_after_the_norm_trains_as_target_forward_and_is_the_teacher") {
  const std::vector<std::string> layers13{"run.max_steps=3", "eval.every_steps=0", "model.drafter.target_layer_ids=[1, 3]",
                                          "model.drafter.num_target_features=2"};
  const std::string params13 = "format: specforge, engine_layer_ids: [1, 3], dtype: float32";
  const auto hf = specforge_files("specforge-hf-last", "--layer-ids 1 3 --dtype float32 --batch-size 4 --capture hf");
  const auto online = fresh_dir("specforge-last-online"), run = fresh_dir("specforge-last-run");
  nodes::run_training(small_run_config(online, layers13), {});
  nodes::run_training(from_engine(small_run_config(run, layers13), hf, params13), {});
  REQUIRE(step_records(run).size() == 3);
  check_within(step_records(run), step_records(online), 1e-4);

  const auto kl_online = fresh_dir("specforge-last-kl-online"), kl_run = fresh_dir("specforge-last-kl-run");
  nodes::run_training(with_kl(small_run_config(kl_online, layers13)), {});
  nodes::run_training(with_kl(from_engine(small_run_config(kl_run, layers13), hf, params13)), {});
  check_within(step_records(kl_run), step_records(kl_online), 1e-4);
}

// SGLang (prepare_hidden_states.py) captures id k before layer k + 1, and
// there is no layer N: its files leave the last layer out, and are refused
// saying so. One taken before the final norm (an SGLang patched to capture
// at its end layer) differs from a DSpark capture's
// target_last_hidden_states and is refused rather than read as the normed
// layer.
TEST_CASE("EngineFeatures.SpecForge.a_capture_without_the_last_layer_or_with_it_before_the_norm_is_refused_saying_so") {
  const std::vector<std::string> layers13{"run.max_steps=1", "eval.every_steps=0", "model.drafter.target_layer_ids=[1, 3]",
                                          "model.drafter.num_target_features=2"};
  const std::string params13 = "format: specforge, engine_layer_ids: [1, 3], dtype: float32";
  const auto sglang = specforge_files("specforge-sglang-last", "--layer-ids 1 3 --dtype float32 --capture sglang");
  const auto left_out = error_of(from_engine(small_run_config(fresh_dir("specforge-sglang-last-run"), layers13), sglang,
                                             params13));
  CHECK_MESSAGE(left_out.find("hidden_states holds 1 taps, params.engine_layer_ids lists 2 [1, 3], the last of them the "
                              "target's last layer 3") != std::string::npos,
                left_out);
  CHECK_MESSAGE(left_out.find("leave layer 3 out and hold [1]") != std::string::npos, left_out);
  CHECK_MESSAGE(left_out.find((sglang / "rows_0-2000").string()) != std::string::npos, left_out);

  const auto before_norm =
      specforge_files("specforge-prenorm-last", "--layer-ids 1 3 --dtype float32 --capture sglang-end-layer --strategy dspark");
  const auto prenorm = error_of(from_engine(small_run_config(fresh_dir("specforge-prenorm-last-run"), layers13),
                                            before_norm, params13));
  CHECK_MESSAGE(prenorm.find("the tap of the last layer 3 differs from target_last_hidden_states") != std::string::npos,
                prenorm);
  CHECK_MESSAGE(prenorm.find("before the norm") != std::string::npos, prenorm);
}
