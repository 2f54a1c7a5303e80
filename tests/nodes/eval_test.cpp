// Does the drafter draft? The eval node measures tau on held-out prompts
// while training: the trained drafter is accepted far more often than the
// untrained one, the best snapshot becomes checkpoints/best, and greedy
// speculative decoding with it returns exactly the target's own tokens.
#include <doctest/doctest.h>

#include "config/errors.hpp"
#include "data/dataset.hpp"
#include "drafter/kinds/dspark/dspark.hpp"
#include "nodes/eval_tau.hpp"
#include "nodes/trainer.hpp"
#include "train/checkpoint.hpp"
#include "train/evaluate.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::fresh_dir;
namespace fs = std::filesystem;

namespace {
std::vector<nlohmann::json> eval_records(const fs::path& out_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(out_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto r = nlohmann::json::parse(line);
    if (r.value("kind", "") == "eval") out.push_back(r);
  }
  return out;
}
}  // namespace

TEST_CASE("Eval.Train.trained_drafter_beats_untrained_on_held_out_prompts") {
  torch::set_num_threads(1);
  auto dir = fresh_dir("eval-tau");
  const auto heldout = testing::assets_dir() / "heldout.jsonl";
  // The demo's batch size (the drafter learns the echo from ~30 steps of ~28 samples).
  auto config = testing::small_run_config(dir, {"train.epochs=6", "train.warmup_ratio=0.25", "data.tokens_per_batch=2048", "train.grad_accum=2",
                                                "eval.every_steps=40", "eval.max_prompts=6", "eval.max_new_tokens=48",
                                                "eval.prompts=" + heldout.string()});
  auto result = nodes::run_training(config, {});
  auto evals = eval_records(dir);
  REQUIRE(evals.size() >= 3);
  // The untrained baseline first, then every 40 steps, then after the last step.
  CHECK(evals.front()["global_step"] == 0);
  CHECK(evals[1]["global_step"] == 40);
  CHECK(evals.back()["global_step"] == result.total_steps);
  double best = 0;
  for (const auto& e : evals) {
    const double tau = e["mean_tau"].get<double>();
    CHECK(tau >= 1.0);
    CHECK(tau <= 16.0);  // block size
    CHECK(e["prompts"] == 6);
    best = std::max(best, tau);
  }
  const double untrained = evals.front()["mean_tau"].get<double>(), trained = evals.back()["mean_tau"].get<double>();
  INFO("tau untrained " << untrained << ", trained " << trained);
  CHECK(trained > untrained + 1.0);
  CHECK(trained > 1.5 * untrained);

  // checkpoints/best is the snapshot with the best tau, recorded in its manifest.
  const auto best_dir = train::resolve_checkpoint(dir / "checkpoints", "best");
  const auto best_eval = train::best_checkpoint_eval(dir / "checkpoints");
  REQUIRE(best_eval.has_value());
  CHECK((*best_eval)["mean_tau"].get<double>() == doctest::Approx(best));
  CHECK(train::read_checkpoint(best_dir).global_step == (*best_eval)["global_step"].get<int64_t>());
  CHECK(evals.back()["best_tau"].get<double>() == doctest::Approx(best));

  // Greedy speculative decoding with the best drafter returns exactly the
  // target's greedy tokens on every held-out prompt, at the recorded tau.
  const auto target = dflow::target::TargetModel::load(testing::assets_dir() / "target");
  auto drafter = dflow::drafter::load_pretrained(best_dir / "drafter");
  train::EvalOptions options;
  options.max_new_tokens = 48;
  options.max_prompts = 6;
  const auto report = train::evaluate_drafter(*drafter, target, train::read_prompts(heldout), options);
  CHECK(report.lossless_checked);
  CHECK(report.mismatched_prompts == 0);
  CHECK(report.mean_tau == doctest::Approx(best));
}

namespace {
// The prompt of a training sample: its tokens before the first trained one.
std::vector<int64_t> prompt_of(const data::SampleView& sample) {
  std::vector<int64_t> prompt;
  for (size_t i = 0; i < sample.input_ids.size() && sample.loss_mask[i] == 0; ++i) prompt.push_back(sample.input_ids[i]);
  return prompt;
}
}  // namespace

TEST_CASE("Eval.Prompts.training_prompts_found_reading_only_what_decides_it") {
  const auto dataset = data::Dataset::open({(testing::assets_dir() / "data").string()});
  const auto first = prompt_of(dataset.sample(0)), second = prompt_of(dataset.sample(1));
  REQUIRE(first.size() > 2);
  auto longer = second, shorter = second, wide = second;
  longer.push_back(second.back());       // the prompt and one token more
  shorter.pop_back();                    // all of the prompt but its last token
  wide.front() += int64_t{1} << 32;      // equal to it only once narrowed to 32 bits
  const std::vector<std::vector<int64_t>> candidates{first, longer, shorter, wide, second};
  nodes::PromptScanStats stats;
  const auto training = nodes::training_prompts(dataset, candidates, &stats);
  CHECK(training == std::vector<bool>{true, false, false, false, true});
  // Each sample is read only as far as it agrees with some candidate; its loss
  // mask only where it agrees with a whole candidate.
  size_t longest = 0;
  for (const auto& c : candidates) longest = std::max(longest, c.size());
  int64_t bound = 0;
  for (int64_t i = 0; i < dataset.size(); ++i) bound += std::min<int64_t>(dataset.lengths()[i], static_cast<int64_t>(longest));
  INFO("ids read " << stats.ids_read << ", mask bytes read " << stats.mask_bytes_read << " of " << dataset.num_tokens()
                   << " tokens");
  CHECK(stats.ids_read <= bound);
  CHECK(stats.ids_read < dataset.num_tokens() / 4);
  CHECK(stats.mask_bytes_read <= 4 * static_cast<int64_t>(longest + 1));
}

TEST_CASE("Eval.Prompts.an_id_outside_the_vocabulary_is_refused_naming_file_and_line") {
  auto dir = fresh_dir("eval-wide-id");
  const auto dataset = data::Dataset::open({(testing::assets_dir() / "data").string()});
  auto wide = prompt_of(dataset.sample(1));
  wide.front() += int64_t{1} << 32;  // narrowed to int32 it is a training prompt
  const auto prompts = dir / "prompts.jsonl";
  {
    std::ofstream out(prompts);
    out << nlohmann::json{{"prompt_ids", prompt_of(dataset.sample(0))}}.dump() << "\n"
        << nlohmann::json{{"prompt_ids", train::read_prompts(testing::assets_dir() / "heldout.jsonl").front()}}.dump()
        << "\n\n"
        << nlohmann::json{{"prompt_ids", wide}}.dump() << "\n";
  }
  std::string error = "(no error)";
  try {
    nodes::run_training(testing::small_run_config(dir, {"run.max_steps=1", "eval.prompts=" + prompts.string()}), {});
  } catch (const ConfigError& e) {
    error = e.what();
  }
  CHECK(error.find("eval.prompts") != std::string::npos);
  CHECK(error.find(prompts.string() + ":4") != std::string::npos);
  CHECK(error.find(std::to_string(wide.front())) != std::string::npos);
  CHECK(error.find("vocab") != std::string::npos);
}

TEST_CASE("Eval.Params.the_node_s_params_override_the_eval_section") {
  auto dir = fresh_dir("eval-params");
  auto config = testing::small_run_config(dir, {"run.max_steps=1", "eval.max_prompts=2", "eval.max_new_tokens=16"});
  size_t index = 0;
  for (size_t i = 0; i < config.pipeline.nodes.size(); ++i)
    if (config.pipeline.nodes[i].type == "eval.tau") index = i;
  auto& params = config.pipeline.nodes[index].params;
  params["max_prompts"] = 1;
  params["max_new_tokens"] = 8;
  nodes::run_training(config, {});
  const auto evals = testing::records_of_kind(dir, "eval");
  REQUIRE(evals.size() == 2);  // the untrained baseline and step 1
  for (const auto& e : evals) {
    CHECK(e["prompts"] == 1);
    CHECK(e["max_new_tokens"] == 8);
  }

  params["temperature"] = -1.0;
  std::string error = "(no error)";
  try {
    nodes::RunOptions again;
    again.overwrite = true;
    nodes::run_training(config, again);
  } catch (const ConfigError& e) {
    error = e.what();
  }
  CHECK(error.find("pipeline.nodes[" + std::to_string(index) + "].params.temperature") != std::string::npos);
  CHECK(error.find("must be >= 0") != std::string::npos);
}

TEST_CASE("Eval.Thread.evaluations_run_while_training_goes_on") {
  // Two graph threads, both kept busy by the training loop: the eval node's
  // firings still run within a few steps of their snapshot, the untrained
  // baseline included, instead of waiting for training to end.
  auto dir = fresh_dir("eval-thread");
  nodes::run_training(testing::small_run_config(dir, {"train.epochs=2", "run.threads=2", "eval.every_steps=5"}), {});
  std::vector<nlohmann::json> records;
  {
    std::ifstream in(dir / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  }
  auto position = [&](const std::string& kind, int64_t step) -> std::ptrdiff_t {
    for (size_t i = 0; i < records.size(); ++i)
      if (records[i].value("kind", "") == kind && records[i].value("global_step", int64_t{-1}) == step)
        return static_cast<std::ptrdiff_t>(i);
    return -1;
  };
  const auto evals = testing::records_of_kind(dir, "eval");
  const auto steps = testing::records_of_kind(dir, "step");
  REQUIRE(evals.size() >= 4);
  int checked = 0;
  for (const auto& e : evals) {
    const int64_t step = e["global_step"].get<int64_t>(), due = std::max<int64_t>(step, 5);
    if (due + 10 > static_cast<int64_t>(steps.size())) continue;
    INFO("eval of step " << step);
    CHECK(position("eval", step) < position("step", due + 10));
    CHECK(e["time"]["waited_s"].get<double>() >= 0.0);
    ++checked;
  }
  CHECK(checked >= 3);  // the baseline and two more
}

TEST_CASE("Eval.Record.confidence_calibration_only_with_a_confidence_head") {
  // dflow eval's record (EvalReport::to_json, also what eval.tau writes):
  // per block position k, the cycles that verified slot k on a correct
  // prefix, the head's mean predicted acceptance and the observed share;
  // absent for a plain DFlash drafter. Greedy stays lossless with the heads.
  torch::set_num_threads(1);
  const auto target = dflow::target::TargetModel::load(testing::assets_dir() / "target");
  const auto prompts = train::read_prompts(testing::assets_dir() / "heldout.jsonl");
  train::EvalOptions options;
  options.max_new_tokens = 24;
  options.max_prompts = 3;
  dflow::drafter::DrafterOptions drafter_options;
  drafter_options.block_size = 4;
  for (const bool heads : {false, true}) {
    CAPTURE(heads);
    if (heads) {
      dflow::drafter::DraftHeads dspark;
      dspark.markov_rank = 4;
      dspark.markov_type = "rnn";
      dspark.confidence = true;
      dflow::drafter::set_dspark_heads(drafter_options, dspark);
    }
    dflow::drafter::DFlashDrafter drafter(dflow::drafter::make_drafter_spec(target.config(), drafter_options), 3);
    const auto report = train::evaluate_drafter(*drafter, target, prompts, options);
    CHECK(report.mismatched_prompts == 0);
    const nlohmann::json j = report.to_json();
    if (!heads) {
      CHECK_FALSE(j.contains("confidence_calibration"));
      CHECK(report.summary().find("calibration") == std::string::npos);
      continue;
    }
    REQUIRE(j.contains("confidence_calibration"));
    const auto& rows = j["confidence_calibration"];
    REQUIRE(rows.size() == 3);  // positions 1 .. B-1
    // Every cycle verifies slot 1; slot k+1 is verified exactly when slot k was accepted.
    CHECK(rows[0]["verified"].get<int64_t>() == report.cycles);
    for (size_t k = 0; k < rows.size(); ++k) {
      CAPTURE(k);
      CHECK(rows[k]["position"] == static_cast<int64_t>(k + 1));
      const double predicted = rows[k]["predicted"].get<double>(), observed = rows[k]["observed"].get<double>();
      CHECK(predicted >= 0.0);
      CHECK(predicted <= 1.0);
      CHECK(observed >= 0.0);
      CHECK(observed <= 1.0);
      CHECK(observed * static_cast<double>(rows[k]["verified"].get<int64_t>()) ==
            doctest::Approx(report.acceptance_by_position[k] * static_cast<double>(report.cycles)));
      if (k + 1 < rows.size())
        CHECK(rows[k + 1]["verified"].get<int64_t>() ==
              static_cast<int64_t>(std::llround(observed * rows[k]["verified"].get<double>())));
    }
    CHECK(report.summary().find("confidence head calibration") != std::string::npos);
  }
}
