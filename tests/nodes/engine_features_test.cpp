// features.engine end to end: training from a serving engine's hidden-state
// files (vLLM's hs_<i>.safetensors) in the target's place trains as
// target_forward does when the files hold the same features, refuses files
// of other samples (or skips and counts them), waits for files an extraction
// is still writing, fails naming the sample when one never comes, and keeps
// its layer mapping and its directory and dtype across a resume.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <thread>

#include "config/errors.hpp"
#include "engine_files.hpp"
#include "nodes/features_engine.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/registry.hpp"
#include "nodes/run_context.hpp"
#include "nodes/trainer.hpp"
#include "report/analysis.hpp"
#include "report/run_data.hpp"
#include "train/demo.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::from_engine;
using testing::small_run_config;
using testing::step_records;
namespace fs = std::filesystem;

namespace {

std::string error_of(const config::Config& config, const nodes::RunOptions& options = {}) {
  try {
    nodes::run_training(config, options);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The online run's first steps and engine files holding its features, made once.
struct Reference {
  fs::path files = fresh_dir("engine-files32");
  fs::path online = fresh_dir("engine-online");
  std::vector<nlohmann::json> records;
  Reference() {
    const auto config = small_run_config(online, {"run.max_steps=4"});
    testing::write_dflow_features_as_engine_files(config, files);
    nodes::run_training(config, {});
    records = step_records(online);
  }
};
const Reference& reference() {
  static const Reference r;
  return r;
}

std::vector<int64_t> first_step_samples() {
  return reference().records.at(0)["sample_ids"].get<std::vector<int64_t>>();
}

// A copy of the reference files to damage.
fs::path copy_of_files(const std::string& name) {
  const auto dir = fresh_dir(name);
  fs::copy(reference().files, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  return dir;
}

void rewrite_with_other_tokens(const fs::path& dir, int64_t sample_id) {
  const auto path = train::engine_file_path(dir, sample_id);
  dflow::formats::SafetensorsFile file(path);
  auto tokens = file.tensor("token_ids").clone();
  tokens[0] = (tokens[0].item<int64_t>() + 1) % 512;
  auto hidden = file.tensor("hidden_states").clone();
  dflow::formats::write_safetensors(path, {{"token_ids", tokens}, {"hidden_states", hidden}});
}

std::vector<char> bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST_CASE("EngineFeatures.float32_files_of_the_targets_features_train_bit_for_bit_as_target_forward") {
  const auto dir = fresh_dir("engine-run32");
  nodes::run_training(from_engine(small_run_config(dir, {"run.max_steps=4"}), reference().files), {});
  const auto records = step_records(dir);
  REQUIRE(records.size() == 4);
  CHECK(records == reference().records);  // loss, grad norm, accuracy: every field of every step
}

TEST_CASE("EngineFeatures.files_an_engine_would_write_train_as_target_forward_within_tolerance") {
  // Written by Hugging Face's forward (tools/write_engine_features.py), as
  // the engine would: the last slot is the last layer before the final norm.
  // The drafter's layers come from engine_layer_ids (target_layer_ids empty:
  // engine ids 2, 3 are dflow layers 1, 2).
  const auto online = fresh_dir("engine-online12");
  nodes::run_training(small_run_config(online, {"run.max_steps=3", "model.drafter.target_layer_ids=[1, 2]", "model.drafter.num_target_features=2"}), {});
  const auto want = step_records(online);
  REQUIRE(want.size() == 3);
  for (const std::string dtype : {"float32", "bfloat16"}) {
    CAPTURE(dtype);
    const auto files = fresh_dir("engine-hf-" + dtype), run = fresh_dir("engine-hf-run-" + dtype);
    const auto written = testing::write_engine_files_with_python(files, "--layer-ids 2 3 --dtype " + dtype);
    INFO(written.output);
    REQUIRE(written.exit_code == 0);
    nodes::run_training(from_engine(small_run_config(run, {"run.max_steps=3", "model.drafter.target_layer_ids=[]",
                                                           "model.drafter.num_target_features=0"}),
                                    files, "engine_layer_ids: [2, 3, 4], dtype: " + dtype),
                        {});
    const auto got = step_records(run);
    REQUIRE(got.size() == want.size());
    // Stated tolerances (bench/RESULTS.md): float32 files differ from dflow's
    // forward in the last bits only; bfloat16 rounds each feature to 8 bits.
    const double tolerance = dtype == "float32" ? 1e-4 : 2e-2;
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i]["sample_ids"] == want[i]["sample_ids"]);
      CHECK(std::abs(got[i]["loss"].get<double>() - want[i]["loss"].get<double>()) <=
            tolerance * std::abs(want[i]["loss"].get<double>()));
    }
  }
}

TEST_CASE("EngineFeatures.a_file_of_other_tokens_is_refused_naming_the_sample_and_the_file") {
  const auto files = copy_of_files("engine-wrong");
  const int64_t wrong = first_step_samples().at(1);
  rewrite_with_other_tokens(files, wrong);
  const auto message = error_of(from_engine(small_run_config(fresh_dir("engine-wrong-run"), {"run.max_steps=2"}), files));
  CHECK(message.find("sample " + std::to_string(wrong) + ":") != std::string::npos);
  CHECK(message.find(train::engine_file_path(files, wrong).string()) != std::string::npos);
  CHECK(message.find("other tokens") != std::string::npos);
  CHECK(message.find("on_mismatch: skip") != std::string::npos);
}

TEST_CASE("EngineFeatures.with_on_mismatch_skip_such_samples_are_counted_as_excluded_and_not_trained_on") {
  const auto files = copy_of_files("engine-skip");
  const auto step1 = first_step_samples();
  REQUIRE(step1.size() >= 3);
  rewrite_with_other_tokens(files, step1[0]);
  rewrite_with_other_tokens(files, step1[2]);
  const auto dir = fresh_dir("engine-skip-run");
  nodes::run_training(from_engine(small_run_config(dir, {"run.max_steps=2"}), files,
                                  "engine_layer_ids: [2, 4], dtype: float32, on_mismatch: skip"),
                      {});
  const auto records = step_records(dir);
  REQUIRE(records.size() == 2);
  CHECK(records[0]["excluded_samples"] == 2);
  const auto trained = records[0]["sample_ids"].get<std::vector<int64_t>>();
  CHECK(trained.size() == step1.size() - 2);
  CHECK(std::find(trained.begin(), trained.end(), step1[0]) == trained.end());
  CHECK(std::find(trained.begin(), trained.end(), step1[2]) == trained.end());
  CHECK(records[1]["excluded_samples"] == 0);
}

TEST_CASE("EngineFeatures.a_file_that_never_comes_fails_the_run_naming_the_sample_the_file_and_the_wait") {
  const auto files = copy_of_files("engine-missing");
  const int64_t missing = first_step_samples().at(0);
  fs::remove(train::engine_file_path(files, missing));
  const auto message = error_of(from_engine(small_run_config(fresh_dir("engine-missing-run"), {"run.max_steps=2"}),
                                            files, "engine_layer_ids: [2, 4], dtype: float32, timeout_s: 0.3"));
  CHECK(message.find("sample " + std::to_string(missing) + ":") != std::string::npos);
  CHECK(message.find(train::engine_file_path(files, missing).string()) != std::string::npos);
  CHECK(message.find("did not appear within 0.") != std::string::npos);
  CHECK(message.find("timeout_s") != std::string::npos);
  // A directory that is not there (a typo, say) is refused at once: only files are waited for.
  const auto absent = fresh_dir("engine-absent") / "hidden_states";
  const auto refused = error_of(from_engine(small_run_config(fresh_dir("engine-absent-run"), {"run.max_steps=2"}), absent));
  CHECK_MESSAGE(refused.find("pipeline.nodes[3].params.dir") != std::string::npos, refused);
  CHECK_MESSAGE(refused.find("dir '" + absent.string() + "' is not a directory") != std::string::npos, refused);
}

TEST_CASE("EngineFeatures.a_file_still_being_written_is_not_read_until_it_is_whole") {
  const auto files = copy_of_files("engine-partial");
  const int64_t late = first_step_samples().at(0);
  const auto path = train::engine_file_path(files, late);
  const auto whole = bytes_of(path);
  // Its header and half of its data, as a copy onto shared storage leaves it.
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(whole.data(), static_cast<std::streamsize>(whole.size() / 2));
  CHECK(train::probe_engine_file(path) == train::EngineFileState::incomplete);
  // The connector's lock: an flock on <file>.lock while it writes, released
  // without deleting the lock file.
  const int lock = ::open((path.string() + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(lock >= 0);
  REQUIRE(::flock(lock, LOCK_EX | LOCK_NB) == 0);
  bool lock_kept_it_incomplete = false;
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::ofstream(path, std::ios::binary | std::ios::app)
        .write(whole.data() + whole.size() / 2, static_cast<std::streamsize>(whole.size() - whole.size() / 2));
    lock_kept_it_incomplete = train::probe_engine_file(path) == train::EngineFileState::incomplete;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::flock(lock, LOCK_UN);
    ::close(lock);
  });
  const auto dir = fresh_dir("engine-partial-run");
  const auto message = error_of(from_engine(small_run_config(dir, {"run.max_steps=4"}), files));
  writer.join();
  CHECK(lock_kept_it_incomplete);
  REQUIRE(message == "");
  CHECK(step_records(dir) == reference().records);  // read whole, once it was
  // The wait is in the telemetry, and the report says who bounds the run.
  const auto steps = testing::records_of_kind(dir, "step");
  REQUIRE(!steps.empty());
  const auto last = steps.back()["telemetry"];
  bool reported = false;
  for (const auto& node : last["nodes"])
    if (node["name"] == "target") reported = node.contains("ready_ahead") && node["outside_wait_s"].get<double>() > 0;
  CHECK(reported);
  const auto summary = report::analyze(report::load_run(dir)).summary;
  CHECK(std::any_of(summary.begin(), summary.end(), [](const std::string& line) {
    return line.find("bounds this run") != std::string::npos && line.find("`target` (features.engine)") != std::string::npos;
  }));
}

TEST_CASE("EngineFeatures.a_resume_that_changes_the_source_its_dir_or_its_dtype_is_refused") {
  const auto dir = fresh_dir("engine-resume");
  const std::vector<std::string> every2{"checkpoint.every_steps=2", "run.max_steps=4"};
  nodes::run_training(testing::stopped_after(from_engine(small_run_config(dir, every2), reference().files), 2), {});
  nodes::RunOptions resume;
  resume.resume = "latest";
  const auto other = copy_of_files("engine-resume-other");
  const auto moved = error_of(from_engine(small_run_config(dir, every2), other), resume);
  CHECK(moved.find("pipeline.nodes.target") != std::string::npos);
  CHECK(moved.find(other.string()) != std::string::npos);
  const auto retyped =
      error_of(from_engine(small_run_config(dir, every2), reference().files, "engine_layer_ids: [2, 4], dtype: bfloat16"), resume);
  // bfloat16 is dtype's default, left out of the signature: the message names the key.
  CHECK_MESSAGE(retyped.find("(params.dtype: float32 -> its default)") != std::string::npos, retyped);
  const auto online = error_of(small_run_config(dir, every2), resume);
  CHECK(online.find("pipeline.nodes.target: features.engine") != std::string::npos);
  // The same source resumes, exactly, its defaults spelled out or not: the
  // checkpoint's config has no format or file_order (as one from before they
  // existed), and they are at their defaults.
  CHECK(error_of(from_engine(small_run_config(dir, every2), reference().files,
                             "engine_layer_ids: [2, 4], dtype: float32, format: vllm, file_order: ''"),
                 resume) == "");
  CHECK(step_records(dir) == reference().records);
}

TEST_CASE("EngineFeatures.layers_the_files_do_not_hold_are_refused_naming_the_node_the_key_and_the_value") {
  const auto dir = fresh_dir("engine-layers");
  const auto message = error_of(from_engine(small_run_config(dir, {"model.drafter.target_layer_ids=[0, 1, 1]"}),
                                            reference().files));
  CHECK(message.find("pipeline.nodes[3].params.engine_layer_ids") != std::string::npos);
  CHECK(message.find("node 'target' (features.engine)") != std::string::npos);
  CHECK(message.find("[2, 4]") != std::string::npos);
  CHECK(message.find("no slot holds dflow layer 0 (engine id 1)") != std::string::npos);
  // dflow numbering and the engine's, side by side.
  CHECK(nodes::engine_slots_for({2, 14, 25, 28}, {1, 13, 24}, 28) == std::vector<int64_t>{0, 1, 2});
  CHECK(nodes::engine_feature_layers({2, 14, 25, 28}, 28) == std::vector<int64_t>{1, 13, 24});
  CHECK_THROWS_WITH_AS(nodes::engine_slots_for({2, 28}, {27}, 28), doctest::Contains("after the final norm"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(nodes::engine_slots_for({2, 29}, {1}, 28), doctest::Contains("engine layer id 29 outside [0, 28]"),
                       std::invalid_argument);
}

TEST_CASE("EngineFeatures.engine_layer_ids_out_of_order_or_repeated_are_refused_as_no_engine_writes_them") {
  // vLLM stores the layers it is asked for sorted and each once: started with
  // --target-layer-ids 3 1, its slots are [1, 3] (then N); [3, 1, 4] would
  // train on swapped layers.
  for (const auto& [ids, why] : std::vector<std::pair<std::string, std::string>>{
           {"[4, 2]", "[4, 2] must increase, each id once (4 then 2)"},
           {"[2, 2, 2, 4]", "[2, 2, 2, 4] must increase, each id once (2 then 2)"}}) {
    CAPTURE(ids);
    const auto message = error_of(from_engine(small_run_config(fresh_dir("engine-order"), {"run.max_steps=1"}),
                                              reference().files, "engine_layer_ids: " + ids + ", dtype: float32"));
    CHECK_MESSAGE(message.find("pipeline.nodes[3].params.engine_layer_ids") != std::string::npos, message);
    CHECK_MESSAGE(message.find(why) != std::string::npos, message);
    CHECK_MESSAGE(message.find("the files' slots are [2, 4]") != std::string::npos, message);
  }
}

TEST_CASE("EngineFeatures.the_ready_ahead_gauge_holds_the_epoch_plan_it_walks_while_the_loader_moves_on") {
  // On a small dataset the loader can run two epochs ahead, and the plan
  // cache then drops the epoch the gauge is walking.
  nodes::RunOptions options;
  options.prepare_nodes = false;
  const nodes::RunContext run(small_run_config(fresh_dir("engine-ready-ahead")), options, nullptr);
  const auto& plans = run.plans();
  const data::PlannedBatch first = plans.get(0)->batches().front();
  const std::weak_ptr<const data::EpochPlan> epoch0 = plans.get(0);
  bool plan_alive = true;
  const int64_t ready = nodes::samples_ready_ahead(plans, first, first.rank, 8, [&](int64_t) {
    plans.get(2);  // the loader asks for epoch 2: the cache keeps epochs 1 and 2 only
    plan_alive = !epoch0.expired();
    return plan_alive;  // stops the walk at once if it was dropped
  });
  CHECK(plan_alive);
  CHECK(ready == 8);
  CHECK(epoch0.expired());  // the gauge held it; nothing else did
}

// bench/RESULTS.md "Engine files": the demo (its own assets, as `dflow train`
// makes them) over its first 50 steps online and from engine files. Skipped
// in the suite; run with --no-skip -tc='EngineFeatures.Bench.*'.
TEST_CASE("EngineFeatures.Bench.demo_first_50_steps_from_engine_files" * doctest::skip()) {
  const auto work = fresh_dir("engine-bench");
  auto demo = [&](const std::string& out) {
    return config::load_config("", {"model.target.path=" + (work / "target").string(),
                                    "data.train=[" + (work / "data").string() + "]",
                                    "eval.prompts=" + (work / "heldout.jsonl").string(),
                                    "run.out_dir=" + (work / out).string(), "run.max_steps=50",
                                    "checkpoint.every_steps=0", "metrics.sinks=[jsonl]", "run.log_level=warn"});
  };
  train::ensure_demo_assets(demo("online"));
  nodes::run_training(demo("online"), {});
  const auto online = step_records(work / "online");
  testing::write_dflow_features_as_engine_files(demo("online"), work / "hs-dflow32");
  nodes::run_training(from_engine(demo("dflow32"), work / "hs-dflow32"), {});
  MESSAGE("float32 files of dflow's own features, 50 steps: bit for bit " << (step_records(work / "dflow32") == online));
  for (const std::string dtype : {"float32", "bfloat16"}) {
    const auto files = work / ("hs-hf-" + dtype);
    const auto o = testing::run_command(testing::python() + " " + testing::source_dir() +
                                            "/tools/write_engine_features.py --target " + (work / "target").string() +
                                            " --samples " + (work / "data.jsonl").string() + " --max-length 256 --out " +
                                            files.string() + " --layer-ids 2 --dtype " + dtype,
                                        1200);
    REQUIRE(o.exit_code == 0);
    nodes::run_training(from_engine(demo("hf-" + dtype), files, "engine_layer_ids: [2, 4], dtype: " + dtype), {});
    const auto got = step_records(work / ("hf-" + dtype));
    REQUIRE(got.size() == online.size());
    double max_abs = 0, max_rel = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double a = got[i]["loss"].get<double>(), b = online[i]["loss"].get<double>();
      max_abs = std::max(max_abs, std::abs(a - b));
      max_rel = std::max(max_rel, std::abs(a - b) / std::abs(b));
    }
    MESSAGE("Hugging Face-written " << dtype << " files, 50 steps: bit for bit " << (got == online)
                                    << ", max |loss difference| " << max_abs << " (relative " << max_rel << "), loss "
                                    << online.front()["loss"].get<double>() << " -> " << online.back()["loss"].get<double>());
  }
}

TEST_CASE("EngineFeatures.packed_rows_train_from_engine_files_as_from_the_target") {
  // Each packed sample's positions take its own file's rows. The files hold
  // each sample's features from an unpacked forward; the online packed run's
  // come from a forward with document masks, equal up to the last bits.
  const std::vector<std::string> packed{"run.max_steps=3", "data.max_length=512", "data.buckets=[64, 128, 512]"};
  const auto online = fresh_dir("engine-pack-online"), engine = fresh_dir("engine-pack");
  nodes::run_training(testing::with_pad(small_run_config(online, packed), "pad_bucket.pack"), {});
  nodes::run_training(testing::with_pad(from_engine(small_run_config(engine, packed), reference().files), "pad_bucket.pack"), {});
  const auto want = step_records(online), got = step_records(engine);
  REQUIRE(want.size() == 3);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i]["sample_ids"] == want[i]["sample_ids"]);
    CHECK(got[i]["real_tokens"] == want[i]["real_tokens"]);
    CHECK(std::abs(got[i]["loss"].get<double>() - want[i]["loss"].get<double>()) <=
          1e-4 * std::abs(want[i]["loss"].get<double>()));
  }
}

// A run from before `format` existed (every run read vLLM's files) keeps its
// resume signature: the default format is not part of it; another is.
TEST_CASE("EngineFeatures.the_default_format_leaves_the_resume_signature_as_it_was") {
  const auto signature = testing::engine_resume_signature;
  const std::string vllm = signature("{dir: files, engine_layer_ids: [2, 4]}");
  CHECK(vllm.find("format") == std::string::npos);
  CHECK(vllm.find("dir: files") != std::string::npos);
  CHECK(signature("{dir: files, engine_layer_ids: [2, 4], format: vllm}") == vllm);
  CHECK(signature("{dir: files, engine_layer_ids: [1, 3], format: specforge}").find("format: specforge") !=
        std::string::npos);
}
