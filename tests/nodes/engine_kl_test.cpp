// features.engine for loss: kl: the teacher is the files' last slot (engine
// id N, before the final norm) through the target's final norm; files
// without that slot are refused naming the node, the key and the ids.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "config/errors.hpp"
#include "engine_files.hpp"
#include "nodes/trainer.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::from_engine;
using testing::small_run_config;
using testing::step_records;

namespace {

config::Config with_kl(config::Config config) {
  for (auto& n : config.pipeline.nodes)
    if (n.name == "drafter") n.params.reset(YAML::Load("{loss: kl}"));
  return config;
}

}  // namespace

TEST_CASE("EngineFeatures.Kl.a_kl_run_reads_its_teacher_from_the_last_slot_and_needs_that_slot") {
  const auto files = fresh_dir("engine-kl-files"), run_dir = fresh_dir("engine-kl-run");
  testing::write_dflow_features_as_engine_files(small_run_config(run_dir, {"run.max_steps=2"}), files);
  nodes::run_training(with_kl(from_engine(small_run_config(run_dir, {"run.max_steps=2", "eval.every_steps=0"}), files)),
                      {});
  const auto records = step_records(run_dir);
  REQUIRE(records.size() == 2);
  for (const auto& r : records) CHECK(std::isfinite(r["loss"].get<double>()));

  // Head only (no evaluation decodes with the target): the run loads the
  // final norm with the embedding and LM head, and trains the same steps.
  const auto head_dir = fresh_dir("engine-kl-head-only");
  nodes::run_training(with_kl(from_engine(small_run_config(head_dir, {"run.max_steps=2", "eval.every_steps=0",
                                                                      "eval.prompts=" + (head_dir / "none.jsonl").string()}),
                                          files)),
                      {});
  CHECK(step_records(head_dir) == records);

  // Without engine id 4 (the 4-layer target's last layer) there is no teacher.
  const auto refused_dir = fresh_dir("engine-kl-refused");
  std::string e;
  try {
    nodes::run_training(with_kl(from_engine(small_run_config(refused_dir, {"run.max_steps=2"}), files,
                                            "engine_layer_ids: [2], dtype: float32")),
                        {});
  } catch (const std::exception& error) {
    e = error.what();
  }
  CHECK_MESSAGE(e.find("params.engine_layer_ids") != std::string::npos, e);
  CHECK_MESSAGE(e.find("node 'target' (features.engine): engine_layer_ids [2] have no slot of engine id 4") !=
                    std::string::npos,
                e);
  CHECK_MESSAGE(e.find("trains with loss: kl") != std::string::npos, e);
}

// The teacher itself, numerically: files an engine would write (Hugging
// Face's forward, the last slot the last layer before the final norm, float32)
// train a kl drafter as the online run does, within float32 rounding. A
// teacher taken without the final norm, or from the wrong slot, moves the kl
// loss far outside that.
TEST_CASE("EngineFeatures.Kl.an_engine_s_last_slot_through_the_final_norm_is_the_online_teacher") {
  const std::vector<std::string> layers{"run.max_steps=3", "eval.every_steps=0", "model.drafter.target_layer_ids=[1, 2]",
                                        "model.drafter.num_target_features=2"};
  const auto online = fresh_dir("engine-kl-online");
  nodes::run_training(with_kl(small_run_config(online, layers)), {});
  const auto want = step_records(online);
  REQUIRE(want.size() == 3);
  const auto files = fresh_dir("engine-kl-hf"), run = fresh_dir("engine-kl-hf-run");
  const auto written = testing::write_engine_files_with_python(files, "--layer-ids 2 3 --dtype float32");
  INFO(written.output);
  REQUIRE(written.exit_code == 0);
  nodes::run_training(with_kl(from_engine(small_run_config(run, layers), files, "engine_layer_ids: [2, 3, 4], dtype: float32")),
                      {});
  const auto got = step_records(run);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i]["sample_ids"] == want[i]["sample_ids"]);
    for (const char* key : {"loss", "grad_norm"}) {
      CAPTURE(key);
      CHECK(std::abs(got[i][key].get<double>() - want[i][key].get<double>()) <= 1e-4 * std::abs(want[i][key].get<double>()));
    }
  }
}
