// DSpine (drafter/kinds/dspine) against SpecForge's equations
// (specforge/modeling/draft/dspine.py, specforge/algorithms/dspine/model.py;
// no installable reference), recomputed here in float64 with plain LibTorch
// ops over the drafter's own tensors: the whitened PCA codes of the LM head,
// the injection after every layer (teacher-forced or not) on causal blocks, the loss's terms
// and every parameter's gradient (an independent autograd pass), the
// schedule, the chained candidate selection; a fresh drafter computes what
// DFlash does; greedy drafting is lossless; the export carries SpecForge's
// DSpineDraftModel names and fields.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "drafter/block_attention.hpp"
#include "drafter/causal_blocks.hpp"
#include "drafter/kind.hpp"
#include "drafter/kinds/dspine/dspine.hpp"
#include "drafter/objective.hpp"
#include "drafter/speculative.hpp"
#include "formats/json_file.hpp"
#include "formats/safetensors.hpp"
#include "target/layers.hpp"
#include "target/model_fixtures.hpp"
#include "target/target_head.hpp"
#include "kind_test_rig.hpp"

using namespace dflow::drafter;
using namespace dflow::target::testing;

namespace {

DSpineConfig small_config() {
  DSpineConfig c;
  c.transfer_rank = 16;
  c.message_size = 12;
  c.top_k = 6;
  c.replacement_layers = 1;
  return c;
}

DrafterOptions dspine_options(int64_t num_layers, int64_t block_size, const DSpineConfig& c) {
  return kind_options("dspine", dspine_fields(c), num_layers, block_size);
}

torch::Tensor unit(const torch::Tensor& x) { return x / x.norm(2, -1, true).clamp_min(1e-12); }

torch::Tensor weight_of(torch::nn::ModuleList& list, int64_t i) {
  return list->ptr<torch::nn::LinearImpl>(static_cast<size_t>(i))->weight;
}

// SpecForge's AdjacentInjection and refine, written out over the drafter's tensors.
struct Equations {
  DFlashDrafterImpl& drafter;
  AdjacentInjectionImpl& injection;
  torch::Tensor codes;
  double root;  // sqrt(r)
  int64_t replacement_layers;

  explicit Equations(DFlashDrafterImpl& d, int64_t replacement)
      : drafter(d),
        injection(dspine_injection(d)),
        codes(dspine_transfer_codes(d)),
        root(std::sqrt(static_cast<double>(dspine_transfer_codes(d).size(1)))),
        replacement_layers(replacement) {}

  torch::Tensor feature(const torch::Tensor& h, int64_t layer) {
    return root * unit(torch::matmul(h, weight_of(injection.readouts, layer).t()));
  }
  torch::Tensor write(const torch::Tensor& h, const torch::Tensor& receiver, const torch::Tensor& pred, int64_t layer) {
    const torch::Tensor gate = torch::sigmoid(torch::matmul(receiver, injection.receiver_gate->weight.t()) +
                                              torch::matmul(pred, injection.predecessor_gate->weight.t()) + injection.bias);
    const torch::Tensor message = torch::matmul(pred, injection.message->weight.t());
    const torch::Tensor delta = torch::matmul(gate * message, weight_of(injection.writes, layer).t());
    return h + h.norm(2, -1, true) / std::sqrt(static_cast<double>(h.size(-1))) * delta;
  }
  torch::Tensor code(const torch::Tensor& ids) { return root * codes.index({ids}); }
  // h [N, Bs, H], ids / data [N, Bs]; replace [N] bool or undefined.
  torch::Tensor inject(const torch::Tensor& h, int64_t layer, const torch::Tensor& ids, const torch::Tensor& data,
                       const torch::Tensor& replace) {
    using torch::indexing::Slice;
    const torch::Tensor f = feature(h, layer);
    torch::Tensor pred = torch::cat({code(ids.index({Slice(), Slice(0, 1)})), f.index({Slice(), Slice(1, -1)})}, 1);
    if (replace.defined() && layer < replacement_layers)
      pred = torch::where(replace.view({-1, 1, 1}), code(data.index({Slice(), Slice(0, -1)})), pred);
    const torch::Tensor after = write(h.index({Slice(), Slice(1)}), f.index({Slice(), Slice(1)}), pred, layer);
    return torch::cat({h.index({Slice(), Slice(0, 1)}), after}, 1);
  }
  torch::Tensor refine(const torch::Tensor& h, const torch::Tensor& pred_ids) {
    const int64_t last = drafter.spec().num_layers - 1;
    return dflow::target::rms_norm(write(h, feature(h, last), code(pred_ids), last), drafter.norm->weight,
                                   drafter.spec().rms_norm_eps);
  }
};

struct Pass {
  torch::Tensor final_hidden;  // [N, Bs, H] after the final norm
  torch::Tensor pre;           // [N, Bs, H] the last layer's output before its injection
  std::vector<torch::Tensor> features;  // per layer [N, Bs, r] after its injection
};

// The drafter's forward rebuilt: the backbone's layers, then SpecForge's injection after each.
Pass reference_pass(DFlashDrafterImpl& d, Equations& eq, const torch::Tensor& features, const torch::Tensor& embeddings,
                    const torch::Tensor& positions, const BlockAttentionPlan& plan, const torch::Tensor& ids,
                    const torch::Tensor& data, const torch::Tensor& replace) {
  const DrafterSpec& spec = d.spec();
  const int64_t T = features.size(1), N = ids.size(0), Bs = spec.block_size;
  const std::vector<ContextKV> kv = d.context_kv(d.project_features(features), 0);
  (void)T;
  const dflow::target::RotaryTables rotary =
      dflow::target::rotary_tables(positions, spec.head_dim, spec.rope_theta, embeddings.scalar_type());
  Pass out;
  torch::Tensor h = embeddings;
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    h = d.layers->ptr<DraftLayerImpl>(static_cast<size_t>(l))->forward(h, kv[static_cast<size_t>(l)], rotary, plan);
    out.pre = h.view({N, Bs, -1});
    const torch::Tensor injected = eq.inject(out.pre, l, ids, data, replace);
    out.features.push_back(eq.feature(injected, l));
    h = injected.view({1, N * Bs, -1});
  }
  out.final_hidden = dflow::target::rms_norm(h, d.norm->weight, spec.rms_norm_eps).view({N, Bs, -1});
  return out;
}


}  // namespace

TEST_CASE("DSpine.Codes.whitened_pca_of_the_head_rows_equals_a_float64_recomputation") {
  torch::set_num_threads(1);
  const dflow::target::TargetHead head = dflow::target::TargetHead::load(tiny_target_dir());
  const torch::Tensor w = head.lm_head_weight().to(torch::kFloat64);
  const int64_t r = 16;
  const TransferSpace space = dspine_transfer_space(head.lm_head_weight(), r);
  // SpecForge's initialize_transfer_space in float64.
  const torch::Tensor rows = unit(w);
  const torch::Tensor mean = rows.mean(0);
  const torch::Tensor centred = rows - mean;
  auto [values, directions] = torch::linalg_eigh(torch::matmul(centred.t(), centred));
  values = values.narrow(0, values.size(0) - r, r);
  directions = directions.narrow(1, directions.size(1) - r, r);
  // Each direction up to its sign (eigh's choice), the codes then exactly so.
  const torch::Tensor mine = space.directions.to(torch::kFloat64);
  const torch::Tensor agreement = (mine * directions).sum(0);
  CHECK(agreement.abs().min().item<double>() > 1.0 - 1e-4);
  const torch::Tensor expected = unit(torch::matmul(centred, directions * agreement.sign()) / values.sqrt());
  CHECK((space.codes.to(torch::kFloat64) - expected).abs().max().item<double>() < 2e-4);
  CHECK(torch::allclose(space.codes.norm(2, -1), torch::ones({w.size(0)}), 1e-5, 1e-5));

  // A drafter's codes and every readout from the head; a rank the head cannot give is refused.
  DFlashDrafter drafter(
      make_drafter_spec(dflow::target::load_hf_config(tiny_target_dir()), dspine_options(2, 8, small_config())), 3);
  drafter->kind_modules().initialize_from_head(head.lm_head_weight());
  CHECK(torch::equal(dspine_transfer_codes(*drafter), space.codes));
  for (int64_t l = 0; l < 2; ++l) CHECK(torch::equal(weight_of(dspine_injection(*drafter).readouts, l), space.directions.t()));
  DSpineConfig too_wide = small_config();
  too_wide.transfer_rank = 80;
  CHECK_THROWS_WITH_AS(
      DFlashDrafter(make_drafter_spec(dflow::target::load_hf_config(tiny_target_dir()), dspine_options(2, 8, too_wide)),
                    3),
      doctest::Contains("transfer_rank 80 exceeds min(hidden size, vocabulary - 1) = 64: set the drafter node's "
                        "transfer_rank to at most 64"),
      std::invalid_argument);
  // A head of rank 8 (its rows in an 8-dimensional subspace) has at most 8
  // directions of variance beyond rounding: the refusal says how many.
  const torch::Tensor low_rank = torch::matmul(torch::randn({512, 8}), torch::randn({8, 64}));
  CHECK_THROWS_WITH_AS(dspine_transfer_space(low_rank, 16),
                       doctest::Contains("has 8 principal directions of positive variance, fewer than transfer_rank = 16"),
                       std::invalid_argument);
}

TEST_CASE("DSpine.Rank.left_out_it_is_the_directions_the_head_has_at_most_hidden_and_1024") {
  torch::manual_seed(11);
  const DrafterKind& kind = drafter_kind("dspine");
  DSpineConfig unset = small_config();
  unset.transfer_rank = 0;
  const nlohmann::json fields = dspine_fields(unset);
  auto resolved = [&](const torch::Tensor& head, const nlohmann::json* saved, std::string& why) {
    return kind.resolve_fields(fields, head, saved, &why).at("transfer_rank").get<int64_t>();
  };
  // A head of rank 8 gives 8, which its codes accept (and not one more).
  std::string why;
  const torch::Tensor low_rank = torch::matmul(torch::randn({512, 8}), torch::randn({8, 64}));
  CHECK(dspine_principal_directions(low_rank) == 8);
  CHECK(resolved(low_rank, nullptr, why) == 8);
  CHECK(why == "transfer_rank 8 (left to the target): the target's LM head has 8 principal directions of positive "
               "variance (hidden size 64); set the drafter node's transfer_rank to choose");
  CHECK(dspine_transfer_space(low_rank, 8).codes.size(1) == 8);
  // A full-rank head: its hidden size, below SpecForge's 1024.
  CHECK(resolved(torch::randn({512, 48}), nullptr, why) == 48);
  // A large one: SpecForge's 1024 (its 1100 directions said too).
  CHECK(resolved(torch::randn({4096, 1100}), nullptr, why) == 1024);
  CHECK(why.find("transfer_rank 1024 (left to the target): SpecForge's default (the target's LM head has 1100 "
                 "principal directions") != std::string::npos);
  // A resume keeps its checkpoint's, whatever the head; a value set is kept as set.
  const nlohmann::json saved = dspine_fields(small_config());
  CHECK(resolved(low_rank, &saved, why) == 16);
  CHECK(why.find("as the run started with") != std::string::npos);
  std::string none;
  CHECK(kind.resolve_fields(dspine_fields(small_config()), low_rank, nullptr, &none) == dspine_fields(small_config()));
  CHECK(none.empty());
  // The memory fit counts the most it can be before the run resolves it.
  const DrafterSpec spec =
      make_drafter_spec(dflow::target::load_hf_config(tiny_target_dir()), dspine_options(2, 8, small_config()));
  CHECK(unset.rank_for(spec) == 64);
  // A drafter is never built with it unresolved; a config.json without it has SpecForge's 1024.
  CHECK_THROWS_WITH_AS(
      DFlashDrafter(make_drafter_spec(dflow::target::load_hf_config(tiny_target_dir()), dspine_options(2, 8, unset)),
                    3),
      doctest::Contains("transfer_rank 0 (from the target) is resolved when a run starts"), std::invalid_argument);
  nlohmann::json without = dspine_fields(small_config());
  without.erase("transfer_rank");
  CHECK(kind.fields_from_config({{"dspine_config", without}}, "config.json")->at("transfer_rank") == 1024);
}

TEST_CASE("DSpine.Schedule.warmup_and_teacher_forcing_follow_SpecForge's_formula") {
  const DSpineConfig c;  // SpecForge's defaults: 0.5 over 146 steps; p 0.5 held to 1/6, 0 from 1/3
  auto at = [&](int64_t step, int64_t total) { return dspine_schedule(c, step, total); };
  CHECK(at(0, 600).first == 0.0);
  CHECK(at(73, 600).first == doctest::Approx(0.25));
  CHECK(at(146, 600).first == doctest::Approx(0.5));
  CHECK(at(400, 600).first == doctest::Approx(0.5));
  CHECK(at(0, 600).second == doctest::Approx(0.5));
  CHECK(at(100, 600).second == doctest::Approx(0.5));   // progress 1/6: still held
  CHECK(at(150, 600).second == doctest::Approx(0.25));  // (1/3 - 1/4) / (1/3 - 1/6) = 1/2
  CHECK(at(200, 600).second == 0.0);
  CHECK(at(10, 0).second == 0.0);  // the run's length unknown: no replacement
  DSpineConfig no_warmup = c;
  no_warmup.alignment_warmup_steps = 0;
  CHECK(dspine_schedule(no_warmup, 0, 10).first == doctest::Approx(0.5));
}

TEST_CASE("DSpine.Forward.a_fresh_drafter_computes_what_DFlash_does_on_causal_blocks") {
  torch::set_num_threads(1);
  const dflow::target::HFConfig target_config = dflow::target::load_hf_config(tiny_target_dir());
  const DrafterOptions options = dspine_options(2, 8, small_config());
  DFlashDrafter dspine(make_drafter_spec(target_config, options), 5);
  dspine->kind_modules().initialize_from_head(dflow::target::TargetHead::load(tiny_target_dir()).lm_head_weight());
  DFlashDrafter dflash = dflash_twin(target_config, options, *dspine);
  TwoBlocks b = two_blocks(dflash->spec().hidden_size, 8);
  const int64_t Bs = b.block;
  const torch::Tensor &features = b.features, &positions = b.positions, &embeddings = b.embeddings;
  BlockAttentionPlan& plan = b.plan;
  make_blocks_causal(plan);  // SpecForge's DSpine masks
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::randint(0, 500, {1, 2 * Bs}, torch::kInt64);
  dspine->kind_modules().begin_blocks(BlockTokens{tokens, {}});
  const torch::Tensor out = dspine->forward(features, embeddings, positions, plan);
  CHECK(torch::equal(out, dflash->forward(features, embeddings, positions, plan)));
  // Causal within the block, the injection included: slot 5 of the first
  // block changes no earlier slot, and every slot of its block from 5 on.
  perturb(*dspine, 0.05, 3);
  dspine->kind_modules().begin_blocks(BlockTokens{tokens, {}});
  const torch::Tensor before = dspine->forward(features, embeddings, positions, plan);
  torch::Tensor changed = embeddings.clone();
  changed[0][5].add_(1.0);
  dspine->kind_modules().begin_blocks(BlockTokens{tokens, {}});
  const torch::Tensor after = dspine->forward(features, changed, positions, plan);
  CHECK(torch::equal(after.narrow(1, 0, 5), before.narrow(1, 0, 5)));
  CHECK(torch::equal(after.narrow(1, Bs, Bs), before.narrow(1, Bs, Bs)));
  CHECK((after[0][7] - before[0][7]).abs().max().item<double>() > 1e-4);
}

TEST_CASE("DSpine.Loss.forward_terms_and_gradients_equal_SpecForge's_equations_in_float64") {
  torch::set_num_threads(1);
  const dflow::target::TargetHead target_head = dflow::target::TargetHead::load(tiny_target_dir());
  DSpineConfig c = small_config();
  c.alignment_warmup_steps = 4;
  c.replacement_probability = 1.0;  // every block teacher-forced in layer 0 at this step
  c.ce_weight = 0.3;
  c.candidate_mass_threshold = 0.05;
  c.top_k = 64;  // the labels among the untrained drafter's candidates at some slots
  DFlashDrafter drafter(make_drafter_spec(dflow::target::load_hf_config(tiny_target_dir()), dspine_options(2, 8, c)),
                        5);
  drafter->kind_modules().initialize_from_head(target_head.lm_head_weight());
  drafter->to(torch::kFloat64);
  perturb(*drafter, 0.05, 11);
  const DrafterSpec& spec = drafter->spec();
  const torch::Tensor head = target_head.lm_head_weight().to(torch::kFloat64);
  const torch::Tensor embedding = target_head.embedding_weight().to(torch::kFloat64);

  torch::manual_seed(7);
  const AnchoredRow row = anchored_row(spec, {3, 11, 20, 37}, torch::kFloat64);
  const int64_t T = row.length, Bs = row.block, N = row.anchors_n, H = spec.hidden_size;
  const torch::Tensor &input_ids = row.input_ids, &features = row.features, &anchors = row.anchors,
                      &loss_mask = row.loss_mask;
  const TeacherStates& teacher = row.teacher;

  ObjectiveOptions options;
  options.loss = LossMix{{{"ce", 0.3}, {"tv", 1.4}}};  // SpecForge's backbone pair at ce_weight 0.3 (L1 = 2 TV)
  options.loss_decay_gamma = 4.0;
  options.kind_options = dspine_fields(c);
  options.step = 2;
  options.total_steps = 100;
  const ObjectiveOutput out = row_objective(*drafter, embedding, head, row, options);
  REQUIRE(out.term_loss_sums.size() == 2);
  out.loss_sum.backward();
  std::vector<std::pair<std::string, torch::Tensor>> grads;
  for (auto& item : drafter->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    REQUIRE(item.value().grad().defined());
    grads.emplace_back(item.key(), item.value().grad().clone());
    item.value().mutable_grad().zero_();
  }

  // The same in SpecForge's equations.
  const torch::Tensor slot = torch::arange(Bs, torch::kInt64);
  const torch::Tensor at = anchors.view({N, 1}) + slot;  // [N, Bs]
  const torch::Tensor ids_row = input_ids[0];
  const torch::Tensor data = ids_row.index({at.clamp_max(T - 1)}).masked_fill(at.ge(T), 0);
  torch::Tensor block_ids = torch::full({N, Bs}, spec.mask_token_id, torch::kInt64);
  block_ids.select(1, 0).copy_(data.select(1, 0));
  const torch::Tensor embeddings = torch::embedding(embedding, block_ids.view({1, N * Bs}));
  auto plan = plan_block_attention(anchors, torch::ones({1, N}, torch::kBool), T, Bs, 0, torch::kCPU);
  make_blocks_causal(plan);
  Equations eq(*drafter, c.replacement_layers);
  const Pass pass = reference_pass(*drafter, eq, features, embeddings, at.view({1, N * Bs}), plan, block_ids, data,
                                   torch::ones({N}, torch::kBool));
  const torch::Tensor valid =
      slot.gt(0).view({1, Bs}) & at.lt(T) & loss_mask[0].index({at.clamp_max(T - 1)}).ne(0);  // [N, Bs]
  const torch::Tensor rows = valid.reshape({-1}).nonzero().squeeze(1);
  // The position weights exp(-(k - 1) / gamma), held in float32 as dflow's blocks hold them.
  const torch::Tensor w = torch::exp(-(slot.to(torch::kFloat64) - 1.0) / 4.0)
                              .to(torch::kFloat32)
                              .to(torch::kFloat64)
                              .expand({N, Bs})
                              .reshape({-1})
                              .index({rows});
  const torch::Tensor labels = data.reshape({-1}).index({rows});
  const torch::Tensor prev = data.reshape({-1}).index({rows - 1});
  const torch::Tensor hidden = pass.final_hidden.reshape({-1, H}).index({rows});
  const torch::Tensor teacher_rows = teacher.final_hidden[0].index({(at - 1).clamp_min(0).reshape({-1}).index({rows})});
  const torch::Tensor logits = torch::matmul(hidden, head.t());
  const torch::Tensor log_p = logits.log_softmax(-1);
  const torch::Tensor ce = -log_p.gather(1, labels.unsqueeze(1)).squeeze(1);
  const torch::Tensor p_target = torch::matmul(teacher_rows, head.t()).softmax(-1);
  const torch::Tensor l1 = (log_p.exp() - p_target).abs().sum(-1);
  const torch::Tensor backbone = ((c.ce_weight * ce + (1 - c.ce_weight) * l1) * w).sum();
  const torch::Tensor candidates = std::get<1>(logits.detach().topk(c.top_k, -1));
  const torch::Tensor refined = eq.refine(pass.pre.reshape({-1, H}).index({rows}), prev);
  const torch::Tensor scores = (head.index({candidates}) * refined.unsqueeze(1)).sum(-1);
  const torch::Tensor log_q = scores.log_softmax(-1);
  torch::Tensor target_candidates = p_target.gather(1, candidates);
  const torch::Tensor mass = target_candidates.sum(-1);
  target_candidates = target_candidates / mass.unsqueeze(-1).clamp_min(1e-30);
  const torch::Tensor covered = candidates.eq(labels.unsqueeze(-1));
  const torch::Tensor refined_ce = -(log_q * covered).sum(-1);
  const torch::Tensor refined_l1 = (log_q.exp() - target_candidates).abs().sum(-1) * mass.gt(c.candidate_mass_threshold);
  const torch::Tensor refinement = ((c.ce_weight * refined_ce + (1 - c.ce_weight) * refined_l1) * w).sum();
  torch::Tensor alignment = torch::zeros({}, torch::kFloat64);
  const torch::Tensor label_codes = dspine_transfer_codes(*drafter).index({labels});
  for (const torch::Tensor& f : pass.features) {
    const torch::Tensor fr = f.reshape({-1, c.transfer_rank}).index({rows});
    alignment = alignment + ((1 - (fr * label_codes).sum(-1) / (fr.norm(2, -1) * label_codes.norm(2, -1))) * w).sum();
  }
  const double beta = c.alignment_weight * 2.0 / 4.0;
  const double mean_ce = ((ce * w).sum() / w.sum()).item<double>();
  const torch::Tensor total = backbone + refinement + beta * mean_ce * alignment;

  CHECK(covered.any(-1).any().item<bool>());  // the refinement's cross-entropy is exercised
  CHECK(out.main_loss_sum == doctest::Approx(backbone.item<double>()).epsilon(1e-9));
  CHECK(out.term_loss_sums[0] == doctest::Approx(refinement.item<double>()).epsilon(1e-9));
  CHECK(out.term_loss_sums[1] == doctest::Approx(alignment.item<double>()).epsilon(1e-9));
  CHECK(out.loss_sum.item<double>() == doctest::Approx(total.item<double>()).epsilon(1e-9));
  total.backward();
  for (auto& [name, grad] : grads) {
    CAPTURE(name);
    const torch::Tensor expected = drafter->named_parameters()[name].grad();
    CHECK((grad - expected).abs().max().item<double>() <= 1e-9 * (1.0 + expected.abs().max().item<double>()));
  }
}

TEST_CASE("DSpine.Drafting.the_chained_selection_equals_select_cached_and_greedy_is_lossless") {
  torch::set_num_threads(1);
  const dflow::target::TargetModel target = dflow::target::TargetModel::load(tiny_target_dir());
  DSpineConfig c = small_config();
  c.top_k = 5;
  DFlashDrafter drafter(make_drafter_spec(target.config(), dspine_options(1, 4, c)), 23);
  drafter->kind_modules().initialize_from_head(target.lm_head_weight());
  perturb(*drafter, 0.3, 9);
  torch::manual_seed(12);
  int64_t changed = 0;
  for (int64_t i = 0; i < 4; ++i) {
    const std::vector<int64_t> prompt = random_prompt(3 + 5 * i);
    CAPTURE(i);
    check_greedy_is_lossless(*drafter, target, prompt);

    DrafterContextCache cache = prefilled_context(*drafter, target, prompt);
    const std::vector<int64_t> drafts = drafter_generate_block(*drafter, target, cache, prompt.back());
    // SpecForge's transition_scores over all candidate pairs and select_cached.
    torch::NoGradGuard no_grad;
    Equations eq(*drafter, c.replacement_layers);
    const torch::Tensor pre = dspine_pre_injection(*drafter)[0].narrow(0, 1, 3);  // [S, H]
    const torch::Tensor hidden = dflow::target::rms_norm(eq.inject(dspine_pre_injection(*drafter).view({1, 4, -1}), 0,
                                                    torch::tensor({{prompt.back(), int64_t{0}, int64_t{0}, int64_t{0}}}, torch::kInt64),
                                                    torch::Tensor(), torch::Tensor())[0],
                                          drafter->norm->weight, drafter->spec().rms_norm_eps);
    const torch::Tensor unary = torch::matmul(hidden.narrow(0, 1, 3), target.lm_head_weight().t());
    const torch::Tensor candidates = std::get<1>(unary.topk(c.top_k, -1));  // [S, K]
    const torch::Tensor predecessors =
        torch::cat({torch::full({1, c.top_k}, prompt.back(), torch::kInt64), candidates.narrow(0, 0, 2)}, 0);
    const torch::Tensor refined = eq.refine(pre.unsqueeze(1).expand({3, c.top_k, pre.size(1)}), predecessors);
    const torch::Tensor scores =
        torch::einsum("ikh,ijh->ikj", {refined, target.lm_head_weight().index({candidates})});  // [S, K, K]
    int64_t index = 0;
    std::vector<int64_t> expected;
    for (int64_t s = 0; s < 3; ++s) {
      index = scores[s][index].argmax().item<int64_t>();
      expected.push_back(candidates[s][index].item<int64_t>());
    }
    CHECK(drafts == expected);
    // The rows it drafts (and samples) from: the K scores at the candidates, nothing elsewhere.
    const torch::Tensor rows = drafter_block_logits(*drafter, target, cache, prompt.back());
    CHECK(torch::isfinite(rows).sum(-1).eq(c.top_k).all().item<bool>());
    for (int64_t s = 0; s < 3; ++s) CHECK(rows[s].argmax().item<int64_t>() == expected[static_cast<size_t>(s)]);
    for (int64_t s = 0; s < 3; ++s) changed += expected[static_cast<size_t>(s)] != unary[s].argmax().item<int64_t>();
  }
  CHECK(changed > 0);  // the refinement reorders the backbone's candidates somewhere
}

TEST_CASE("DSpine.Export.SpecForge's_DSpineDraftModel_names_and_fields") {
  torch::set_num_threads(1);
  const dflow::target::HFConfig target_config = dflow::target::load_hf_config(tiny_target_dir());
  const DSpineConfig c = small_config();
  DFlashDrafter drafter(make_drafter_spec(target_config, dspine_options(2, 8, c)), 5);
  drafter->kind_modules().initialize_from_head(dflow::target::TargetHead::load(tiny_target_dir()).lm_head_weight());
  ScratchDir scratch("dspine-export");
  save_pretrained(*drafter, scratch.path());
  const auto config = dflow::target::read_json_file(scratch.path() / "config.json");
  CHECK(config["architectures"] == nlohmann::json::array({"DSpineDraftModel"}));
  CHECK(config["dspine_config"] == dspine_fields(c));
  CHECK(config["dspine_config"].size() == 11);
  CHECK(config["dflash_config"]["target_layer_ids"] == nlohmann::json::array({0, 2}));
  const dflow::formats::SafetensorsFile file(scratch.path() / "model.safetensors");
  const auto tensors = file.all_tensors();
  for (const std::string name :
       {"injection.readouts.0.weight", "injection.readouts.1.weight", "injection.writes.0.weight",
        "injection.writes.1.weight", "injection.message.weight", "injection.receiver_gate.weight",
        "injection.predecessor_gate.weight", "injection.bias", "transfer_codes", "transfer_ready", "fc.weight",
        "layers.1.mlp.down_proj.weight"}) {
    CAPTURE(name);
    CHECK(tensors.count(name) == 1);
  }
  CHECK((tensors.at("transfer_ready").scalar_type() == torch::kBool));
  CHECK(tensors.at("transfer_ready").item<bool>());
  CHECK(tensors.at("injection.readouts.0.weight").sizes() == torch::IntArrayRef({16, 64}));
  CHECK(tensors.at("injection.writes.0.weight").sizes() == torch::IntArrayRef({64, 12}));
  CHECK(tensors.at("transfer_codes").sizes() == torch::IntArrayRef({512, 16}));
  // Loaded back whole; speculators' layout refused, naming what it cannot carry.
  DFlashDrafter loaded = load_pretrained(scratch.path());
  CHECK(loaded->spec().kind == "dspine");
  CHECK(torch::equal(dspine_transfer_codes(*loaded), dspine_transfer_codes(*drafter)));
  const DrafterKind& kind = drafter_kind("dspine");
  CHECK(kind.refuses_format("dflash", loaded->spec().kind_fields).empty());
  const std::string why = kind.refuses_format("speculators", loaded->spec().kind_fields);
  CHECK(why.find("speculators has no DSpine model") != std::string::npos);
  CHECK(why.find("--format dflash") != std::string::npos);
}
