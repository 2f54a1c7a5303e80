// A drafter kind defined entirely in this file, registered here and nowhere
// else: a learned unigram bias on the draft logits (a trainable [V, 1]
// table, features of ones) with an L2 term on it. It trains through the
// drafter (`model.drafter.kind: unigram_bias`, its own param refused naming the key),
// its term and series reach the step records, its checkpoint loads back as
// this kind, it drafts through `dflow eval`'s code path (lossless greedy),
// and its export names it, with the default layout refused as its kind says.
#include <doctest/doctest.h>

#include <fstream>

#include "drafter/kind.hpp"
#include "drafter/kind_params.hpp"
#include "drafter/drafter_export_speculators.hpp"
#include "drafter_params.hpp"
#include "error_of.hpp"
#include "formats/safetensors.hpp"
#include "nodes/trainer.hpp"
#include "train/checkpoint.hpp"
#include "train/evaluate.hpp"
#include "train_fixture.hpp"

using namespace dflow;
namespace fs = std::filesystem;

namespace {

struct UnigramParams {
  double l2 = 0.5;
};

const dflow::drafter::KeySetParams<UnigramParams>& unigram_params() {
  static const dflow::drafter::KeySetParams<UnigramParams> params = [] {
    config::KeySet<UnigramParams> k;
    k.add("l2", [](UnigramParams& p) -> auto& { return p.l2; }, config::OnResume::must_match,
          "weight of the bias's L2 term (> 0)",
          config::must<double>([](double v) { return v > 0.0; }, "must be > 0"));
    return dflow::drafter::KeySetParams<UnigramParams>(std::move(k),
                                              [](const UnigramParams& p) { return nlohmann::json{{"l2", p.l2}}; });
  }();
  return params;
}

class UnigramModules final : public dflow::drafter::KindModules {
 public:
  explicit UnigramModules(dflow::drafter::DFlashDrafterImpl& drafter) {
    table = drafter.register_module("unigram", torch::nn::Embedding(drafter.spec().vocab_size, 1));
  }
  std::optional<dflow::drafter::LogitsBias> logits_bias(const dflow::drafter::TrainedSlots& slots) override {
    dflow::drafter::LogitsBias bias;
    bias.features = torch::ones({slots.rows.size(0), 1}, table->weight.options());
    bias.weight = table->weight;  // [V, 1]
    return bias;
  }
  std::vector<dflow::drafter::ExtraLossTerm> extra_terms(const dflow::drafter::TrainedSlots&,
                                                         const dflow::drafter::MainLossRows& main,
                                                         const nlohmann::json& options) override {
    const torch::Tensor penalty = table->weight.pow(2).mean().to(main.row_weights.scalar_type());  // scalar
    const torch::Tensor rows = main.row_weights * penalty;                                        // [P]
    dflow::drafter::ExtraLossTerm term;
    term.weighted_sum = rows.sum();
    term.row_terms = rows.detach();
    term.weight = options.at("l2").get<double>();
    term.slot_values = penalty.detach().expand_as(main.row_weights);
    return {term};
  }
  dflow::drafter::BlockDraft draft_block(const dflow::drafter::BlockDraftInputs& in) override {
    dflow::drafter::BlockDraftInputs biased = in;
    biased.backbone_logits = in.backbone_logits.to(torch::kFloat32) +
                             table->weight.view({1, -1}).to(in.backbone_logits.device(), torch::kFloat32);
    return KindModules::draft_block(biased);
  }
  torch::nn::Embedding table{nullptr};
};

class UnigramKind final : public dflow::drafter::DrafterKind {
 public:
  std::string name() const override { return "unigram_bias"; }
  std::string summary() const override { return "a learned unigram bias on the draft logits (a test's kind)"; }
  std::vector<config::KeyDoc> params() const override { return unigram_params().params(); }
  nlohmann::json read_params(config::YamlSection& params) const override { return unigram_params().read(params); }
  std::vector<std::pair<std::string, std::string>> resume_terms(const nlohmann::json& p) const override {
    return unigram_params().resume_terms(p);
  }
  nlohmann::json spec_fields(const nlohmann::json&) const override { return {{"unigram_bias", true}}; }
  std::optional<nlohmann::json> fields_from_config(const nlohmann::json& config, const std::string&) const override {
    if (!config.value("unigram_bias", false)) return std::nullopt;
    return nlohmann::json{{"unigram_bias", true}};
  }
  std::shared_ptr<dflow::drafter::KindModules> add_modules(dflow::drafter::DFlashDrafterImpl& drafter) const override {
    return std::make_shared<UnigramModules>(drafter);
  }
  std::vector<std::string> adamw_parameters() const override { return {"unigram"}; }
  std::vector<dflow::drafter::RecordTerm> record_terms(const nlohmann::json&) const override {
    return {{"unigram_l2", "unigram_l2_per_position"}};
  }
  std::string refuses_format(const std::string& format, const nlohmann::json&) const override {
    return format == "dflash" ? "has a unigram bias, which z-lab's layout cannot carry" : "";
  }
  dflow::drafter::SpeculatorsNames speculators_names() const override {
    return {"UnigramSpeculator", "unigram_bias", "unigram_bias"};
  }
};

void register_once() {
  if (dflow::drafter::find_drafter_kind("unigram_bias") == nullptr)
    dflow::drafter::register_drafter_kind(std::make_shared<UnigramKind>());
}


}  // namespace

TEST_CASE("DrafterKinds.Plugin.a_kind_defined_in_a_test_trains_drafts_and_exports") {
  register_once();
  const auto dir = testing::fresh_dir("kind-plugin");
  const auto config = testing::with_kind(
      testing::small_run_config(dir, {"run.max_steps=3", "eval.every_steps=0", "checkpoint.every_steps=3",
                                      // feature layers a speculators server can name (not the target's last)
                                      "model.drafter.num_target_features=3", "model.drafter.target_layer_ids=[0, 1, 2]"}),
      "{kind: unigram_bias, l2: 0.25}");

  // Its param is refused naming the key, as the built-in kinds' are.
  const std::string bad = testing::error_of([&] {
    nodes::run_training(testing::with_kind(config, "{kind: unigram_bias, l2: 0}"), {});
  });
  CHECK_MESSAGE(bad.find("model.drafter.l2") != std::string::npos, bad);
  CHECK_MESSAGE(bad.find("must be > 0") != std::string::npos, bad);

  nodes::run_training(config, {});
  const auto steps = testing::step_records(dir);
  REQUIRE(steps.size() == 3);
  for (const auto& s : steps) {
    CHECK(s.contains("main_loss"));
    CHECK(s.contains("unigram_l2_loss"));
    CHECK(s["unigram_l2_per_position"].size() == s["accuracy_per_position"].size());
    // loss = main + l2 * term
    CHECK(s["loss"].get<double>() ==
          doctest::Approx(s["main_loss"].get<double>() + 0.25 * s["unigram_l2_loss"].get<double>()).epsilon(1e-6));
  }
  // The bias trained: its table moved away from its initialisation.
  const auto checkpoint = train::resolve_checkpoint(dir / "checkpoints", "latest");
  auto drafter = dflow::drafter::load_pretrained(checkpoint / "drafter");
  CHECK(drafter->spec().kind == "unigram_bias");
  REQUIRE(drafter->named_parameters().contains("unigram.weight"));

  // dflow eval's code path: greedy speculative decoding stays lossless.
  const auto target = dflow::target::TargetModel::load(testing::assets_dir() / "target");
  train::EvalOptions options;
  options.max_new_tokens = 16;
  options.max_prompts = 2;
  const auto report =
      train::evaluate_drafter(*drafter, target, train::read_prompts(testing::assets_dir() / "heldout.jsonl"), options);
  CHECK(report.prompts == 2);
  CHECK(report.mismatched_prompts == 0);

  // Export: the default layout is refused as the kind says; speculators' names it.
  const dflow::drafter::DrafterKind& kind = dflow::drafter::drafter_kind(drafter->spec().kind);
  CHECK(kind.refuses_format("dflash", drafter->spec().kind_fields) ==
        "has a unigram bias, which z-lab's layout cannot carry");
  dflow::drafter::save_speculators_pretrained(*drafter, {"org/target", testing::assets_dir() / "target"},
                                              dir / "export");
  std::ifstream in(dir / "export" / "config.json");
  const auto exported = nlohmann::json::parse(in);
  CHECK(exported["speculators_model_type"] == "unigram_bias");
  CHECK(exported["architectures"] == nlohmann::json::array({"UnigramSpeculator"}));
  CHECK(exported["unigram_bias"] == true);
  CHECK(dflow::formats::load_checkpoint_dir(dir / "export").count("unigram.weight") == 1);
  fs::remove_all(dir);
}
