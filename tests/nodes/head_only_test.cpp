// A run whose features do not come from an in-process target loads only the
// target's embedding and LM head (RunContext::target_head) and trains exactly
// as the same run with the whole target loaded; a node that needs the whole
// target over a checkpoint dflow cannot run (gpt-oss, written by transformers)
// is refused before any step, naming the node and the architecture.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <fstream>

#include "config/errors.hpp"
#include "target/hf_config.hpp"
#include "nodes/cache_fill.hpp"
#include "nodes/run_context.hpp"
#include "nodes/trainer.hpp"
#include "tools/run_command.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::small_run_config;
using testing::step_records;
namespace fs = std::filesystem;

namespace {

// The target node reads the cache `dir`; no evaluation (it would decode with the target).
config::Config cached_without_eval(const fs::path& out_dir, const fs::path& dir, std::vector<std::string> extra = {}) {
  extra.push_back("eval.every_steps=0");
  extra.push_back("eval.prompts=" + (out_dir / "no-heldout.jsonl").string());
  auto config = small_run_config(out_dir, extra);
  for (auto& n : config.pipeline.nodes)
    if (n.name == "target") {
      n.type = "features.cached";
      n.params.reset(YAML::Load("{dir: " + dir.string() + "}"));
    }
  return config;
}

// A float32 cache of the demo target over the shared assets, filled once.
const fs::path& demo_cache() {
  static const fs::path dir = [] {
    const fs::path d = fresh_dir("head-only-cache");
    nodes::FillOptions options;
    options.params.dir = d.string();
    options.params.dtype = "float32";
    const auto report = nodes::fill_feature_cache(small_run_config(fresh_dir("head-only-fill")), options);
    REQUIRE(report.cached_samples == report.dataset_samples);
    return d;
  }();
  return dir;
}

std::string training_error(const config::Config& config) {
  try {
    nodes::run_training(config, {});
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("HeadOnly.a_cached_run_loads_the_head_alone_and_trains_as_with_the_whole_target") {
  torch::set_num_threads(1);
  const auto head_dir = fresh_dir("head-only-run"), whole_dir = fresh_dir("head-whole-run");
  const auto config = cached_without_eval(head_dir, demo_cache(), {"train.epochs=1", "run.max_steps=6"});
  {
    const nodes::RunContext run(config, {}, nullptr);
    CHECK(run.targets.empty());
    REQUIRE(run.target_head);
    CHECK(run.target_config.architecture == "Qwen3ForCausalLM");
    CHECK(run.target_head->embedding_weight().size(0) == run.target_config.vocab_size);
    CHECK(run.target_head->bytes() > 0);
  }
  nodes::RunOptions whole;
  whole.whole_target_because = "the test loads it whole";
  {
    const nodes::RunContext run(config, whole, nullptr);
    REQUIRE(run.targets.size() == 1);
    // The head is the loaded target's own tensors, not a second copy.
    CHECK(run.target_head->embedding_weight().data_ptr() == run.targets.front()->embedding_weight().data_ptr());
  }
  nodes::run_training(config, {});
  nodes::run_training(cached_without_eval(whole_dir, demo_cache(), {"train.epochs=1", "run.max_steps=6"}), whole);
  const auto head_only = step_records(head_dir), whole_target = step_records(whole_dir);
  REQUIRE(head_only.size() == 6);
  CHECK(head_only == whole_target);  // loss, grad norm, accuracy: every field of every step
}

TEST_CASE("HeadOnly.nodes_that_run_the_target_load_it_whole") {
  const auto out = fresh_dir("head-needs");
  // The default pipeline (target_forward, eval.tau).
  CHECK(nodes::RunContext(small_run_config(out), {}, nullptr).targets.size() == 1);
  // features.cached with its evaluation on: eval.tau decodes with the target.
  auto with_eval = small_run_config(out);
  for (auto& n : with_eval.pipeline.nodes)
    if (n.name == "target") n.type = "features.cached", n.params.reset(YAML::Load("{dir: " + demo_cache().string() + "}"));
  CHECK(nodes::RunContext(with_eval, {}, nullptr).targets.size() == 1);
  // fill: true runs the target for the samples the cache lacks.
  auto filling = cached_without_eval(out, demo_cache());
  for (auto& n : filling.pipeline.nodes)
    if (n.name == "target") n.params["fill"] = true, n.params["dtype"] = "float32";
  CHECK(nodes::RunContext(filling, {}, nullptr).targets.size() == 1);
}

TEST_CASE("HeadOnly.a_node_that_runs_a_target_dflow_cannot_run_is_refused_before_training") {
  REQUIRE_FALSE(::dflow::testing::python().empty());
  const auto checkpoints = fresh_dir("head-gpt-oss");
  const auto written = ::dflow::testing::run_command(::dflow::testing::python() + " " + ::dflow::testing::source_dir() +
                                                         "/tests/target/hf_random_checkpoints.py " + checkpoints.string(),
                                                     300);
  INFO(written.output);
  REQUIRE(written.exit_code == 0);
  const fs::path gpt_oss = checkpoints / "gpt-oss-untied-single";
  // dflow runs gpt-oss, but not one quantized by a method it does not implement.
  nlohmann::json config = dflow::target::read_json_file(gpt_oss / "config.json");
  config["quantization_config"] = {{"quant_method", "fp8"}};
  std::ofstream(gpt_oss / "config.json") << config.dump();
  const auto out = fresh_dir("head-gpt-oss-run");
  const std::string error = training_error(small_run_config(out, {"model.target.path=" + gpt_oss.string()}));
  CHECK(error.find("node 'target' (target_forward) runs the target in-process") != std::string::npos);
  CHECK(error.find(gpt_oss.string() + " is GptOssForCausalLM, which dflow cannot run") != std::string::npos);
  CHECK(error.find("features.engine") != std::string::npos);
  CHECK_FALSE(fs::exists(out / "metrics.jsonl"));  // no step ran
  INFO(error);

  // The commands that need the whole target say the same.
  nodes::FillOptions fill;
  fill.params.dir = (out / "cache").string();
  try {
    nodes::fill_feature_cache(small_run_config(out, {"model.target.path=" + gpt_oss.string()}), fill);
    FAIL("cache-features loaded a target dflow cannot run");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("cache-features runs the target in-process, but") != std::string::npos);
    CHECK(std::string(e.what()).find("GptOssForCausalLM") != std::string::npos);
  }
}
