// dflow's DSpark drafter and losses against vllm-project/speculators' own
// code (tests/drafter/speculators_reference.py, speculators 0.9.0 installed by
// tools/setup.sh as a test-only reference): the exported drafter's logits and
// confidence logits equal DSparkDraftModel's on the same weights and inputs,
// and chunked_draft_loss's every loss equals speculators' (losses/).
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "target/hf_reference_fixtures.hpp"
#include "kind_test_rig.hpp"
#include "speculators_check.hpp"
#include "drafter/kinds/dspark/dspark.hpp"
#include "drafter/block_attention.hpp"
#include "drafter/chunked_cross_entropy.hpp"
#include "drafter/drafter_export_speculators.hpp"
#include "target/target_head.hpp"

using namespace dflow::drafter;
using namespace dflow::target::testing;

namespace {

::dflow::testing::Outcome run_reference(const std::string& arguments) {
  if (::dflow::testing::python().empty()) FAIL("no Python beside the venv's torch: run tools/setup.sh");
  return ::dflow::testing::run_command(::dflow::testing::python() + " " + ::dflow::testing::source_dir() +
                                           "/tests/drafter/speculators_reference.py " + arguments,
                                       300);
}

using Named = std::vector<std::pair<std::string, torch::Tensor>>;

// One DSpark drafter on the tiny target (V 512, H 64, 4 layers), every
// parameter drawn large enough to move the logits (the heads start near zero
// otherwise), its block logits (backbone plus Markov bias) and confidence
// logits at four anchors of one 48-token row, exported with
// --format speculators and compared by speculators' DSparkDraftModel.
void check_dspark_against_speculators(const DraftHeads& heads, int64_t num_layers) {
  torch::set_num_threads(1);
  const auto target_dir = tiny_target_dir();
  const dflow::target::HFConfig target_config = dflow::target::load_hf_config(target_dir);
  DrafterOptions options;
  options.num_layers = num_layers;
  options.block_size = 8;
  options.target_layer_ids = {0, 2};  // rising, not the last layer (servable)
  set_dspark_heads(options, heads);
  DFlashDrafter drafter(make_drafter_spec(target_config, options), 5);
  const DrafterSpec& spec = drafter->spec();
  perturb(*drafter, 0.05, 11);
  const dflow::target::TargetHead head = dflow::target::TargetHead::load(target_dir);
  const AnchoredRow row = anchored_row(spec, {3, 11, 20, 37});  // speculators' anchors lie below T - Bs
  const int64_t T = row.length, Bs = row.block, N = row.anchors_n;
  const torch::Tensor hidden = block_hidden(*drafter, head.embedding_weight(), row);
  torch::NoGradGuard no_grad;
  torch::Tensor logits = torch::matmul(hidden, head.lm_head_weight().t());
  // Training's previous tokens (sample_from_anchor false): slot k's is the
  // data's token at anchor + k - 1, slot 0 its own anchor's.
  const torch::Tensor data_blocks = row.input_ids[0].index_select(0, row.positions[0].clamp_max(T - 1)).view({N, Bs});
  const torch::Tensor prev = torch::cat({data_blocks.narrow(1, 0, 1), data_blocks.narrow(1, 0, Bs - 1)}, 1);
  torch::Tensor prev_embedding;
  if (heads.markov()) {
    prev_embedding = markov_head(*drafter)->prev_embeddings(prev);
    logits = logits + markov_head(*drafter)->bias(markov_head(*drafter)->block_features(prev, hidden));
  }
  Named tensors{{"input_ids", row.input_ids}, {"features", row.features}, {"anchors", row.anchors.view({N})},
                {"logits", logits.contiguous()}};
  if (heads.confidence)
    tensors.emplace_back("confidence", confidence_logits(*drafter, hidden, prev_embedding).contiguous());

  check_with_speculators("dspark", *drafter, target_dir, tensors);
}

}  // namespace

TEST_CASE("Model.SpeculatorsReference.DsparkExportEqualsDSparkDraftModel") {
  DraftHeads heads;
  heads.markov_rank = 16;
  heads.confidence = true;
  heads.confidence_with_markov = true;
  for (const std::string type : {"vanilla", "gated", "rnn"}) {
    CAPTURE(type);
    heads.markov_type = type;
    check_dspark_against_speculators(heads, type == "vanilla" ? 2 : 1);
  }
  // A confidence head alone (markov_rank 0 in speculators' config), on the hidden state.
  DraftHeads confidence_only;
  confidence_only.confidence = true;
  confidence_only.confidence_with_markov = false;
  check_dspark_against_speculators(confidence_only, 1);
  // A Markov head without the confidence head.
  DraftHeads markov_only;
  markov_only.markov_rank = 8;
  check_dspark_against_speculators(markov_only, 1);
}

// Every loss, alone and in mixes, against speculators' function of the same
// logits (speculators' names, resolved by its resolve_loss_config): each
// row's loss, its acceptance rate and the gradient through the chunks equal
// speculators' and autograd's through it; at temperature 1 the weighted sum
// also equals compound_loss's (its reduction, times the rows). The labels
// are the target's argmax, which speculators' ce trains on.
TEST_CASE("Model.SpeculatorsReference.LossesEqualSpeculatorsLosses") {
  torch::set_num_threads(1);
  torch::manual_seed(3);
  const int64_t P = 37, H = 24, V = 1000, r = 6;
  // Logits spread over several nats, as a trained head's are.
  const torch::Tensor lm_head = torch::randn({V, H}) * 0.8;
  const torch::Tensor hidden = torch::randn({P, H}).requires_grad_(true);
  const torch::Tensor features = torch::randn({P, r});
  const torch::Tensor bias_weight = torch::randn({V, r}) * 0.3;
  const torch::Tensor weights = torch::rand({P}) + 0.1;
  LogitsBias bias{features, bias_weight};
  // Row 0's target is nearly one-hot where the draft is least likely: an
  // acceptance rate below speculators' 1e-5, where neg_log_acceptance is
  // held (flat, no gradient).
  const torch::Tensor held_teacher = torch::randn({P, H});
  held_teacher[0].copy_(hidden[0].detach() * -6.0);
  struct Case {
    LossMix loss;
    double temperature = 1.0;
    bool held_row = false;
  };
  const std::vector<Case> cases{
      {LossMix::single("ce")},
      {LossMix::single("kl")},
      {LossMix::single("kl"), 2.0},
      {LossMix::single("tv")},
      {LossMix::single("js")},
      {LossMix::single("reverse_kl")},
      {LossMix::single("neg_log_acceptance")},
      {LossMix::single("neg_log_acceptance"), 1.0, true},
      {LossMix::single("lk_hybrid")},
      {LossMix{{{"ce", 0.1}, {"tv", 0.9}}}},
      {LossMix{{{"ce", 0.2}, {"lk_hybrid", 0.8}}}},
      // kl at its temperature, the others at 1 (they use none).
      {LossMix{{{"kl", 0.5}, {"js", 0.2}, {"reverse_kl", 0.1}, {"neg_log_acceptance", 0.2}}}, 2.0},
  };
  ScratchDir scratch("loss-reference");
  std::string arguments = "loss";
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    CAPTURE(c.loss.text());
    const torch::Tensor teacher = c.held_row ? held_teacher : torch::randn({P, H});
    const torch::Tensor labels = at::linear(teacher, lm_head).argmax(1);
    hidden.mutable_grad() = torch::Tensor();
    const auto result =
        chunked_draft_loss(hidden, lm_head, &bias, labels, teacher, c.loss, c.temperature, weights, 8);
    result.weighted_loss_sum.backward();
    CHECK(torch::isfinite(hidden.grad()).all().item<bool>());
    if (c.held_row) {
      CHECK(result.accept_rate[0].item<double>() < 1e-5);
      CHECK(result.row_loss[0].item<double>() == doctest::Approx(-std::log(1e-5)).epsilon(1e-6));
    }
    const auto path = scratch.path() / ("case" + std::to_string(i) + ".safetensors");
    dflow::formats::write_safetensors(path,
                      {{"hidden", hidden.detach()}, {"lm_head", lm_head}, {"teacher", teacher},
                       {"features", features}, {"bias_weight", bias_weight}, {"weights", weights},
                       {"labels", labels}, {"row_loss", result.row_loss}, {"accept_rate", result.accept_rate},
                       {"hidden_grad", hidden.grad()}, {"loss_sum", result.weighted_loss_sum.detach().view({1})},
                       {"temperature", torch::full({1}, c.temperature)}},
                      {});
    nlohmann::json spec = nlohmann::json::object();
    for (const auto& [name, weight] : c.loss.terms) spec[name] = weight;
    if (c.loss.terms.size() == 1) spec = c.loss.terms.front().first;
    arguments += " '" + spec.dump() + "' " + path.string();
  }
  const auto o = run_reference(arguments);
  INFO(o.output);
  CHECK(o.exit_code == 0);
  CHECK(o.output.find("ok") != std::string::npos);
}
