#include "drafter/objective.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

#include "drafter/causal_blocks.hpp"
#include "drafter/chunked_cross_entropy.hpp"
#include "target/documents.hpp"
#include "drafter/kind.hpp"

namespace dflow::drafter {

double default_loss_decay_gamma(int64_t block_size) {
  switch (block_size) {
    case 16: return 7.0;
    case 10: return 5.0;
    case 8: return 4.0;
    default:
      throw std::invalid_argument("no published loss decay gamma for block size " + std::to_string(block_size) +
                                  " (the paper gives 7 for 16, 5 for 10, 4 for 8); set loss_decay_gamma explicitly");
  }
}

DraftBlocks build_draft_blocks(const torch::Tensor& input_ids, const torch::Tensor& loss_mask,
                               const torch::Tensor& lengths, const AnchorBatch& anchors, int64_t block_size,
                               int64_t mask_token_id, double loss_decay_gamma, torch::Device device,
                               const target::DocumentBounds* bounds) {
  const int64_t batch = input_ids.size(0), length = input_ids.size(1), blocks = anchors.blocks_per_sample();
  const auto long_options = torch::TensorOptions().device(device).dtype(torch::kInt64);
  const torch::Tensor ids = input_ids.to(device, torch::kInt64);
  const torch::Tensor response = loss_mask.to(device).ne(0);
  const torch::Tensor real_lengths = lengths.to(device, torch::kInt64).view({batch, 1, 1});
  const torch::Tensor anchor = anchors.anchor_positions.to(device, torch::kInt64);  // [B, N]
  const torch::Tensor keep = anchors.block_keep.to(device, torch::kBool);           // [B, N]
  const torch::Tensor slot = torch::arange(block_size, long_options).view({1, 1, block_size});

  DraftBlocks out;
  const torch::Tensor row_positions = anchor.unsqueeze(-1) + slot;  // [B, N, Bs]: where each slot's label sits in the row
  torch::Tensor in_sample;
  if (bounds != nullptr) {
    // Packed: the anchor's own sample bounds the labels; RoPE positions are within that sample.
    const torch::Tensor safe_anchor = anchor.clamp(0, length - 1);
    const torch::Tensor sample_begin = bounds->begin.to(device).gather(1, safe_anchor).unsqueeze(-1);  // [B, N, 1]
    const torch::Tensor sample_end = bounds->end.to(device).gather(1, safe_anchor).unsqueeze(-1);
    in_sample = (row_positions < sample_end) & (row_positions < real_lengths);
    out.block_positions = row_positions - sample_begin;
  } else {
    in_sample = row_positions < real_lengths;
    out.block_positions = row_positions;
  }
  const torch::Tensor gather_index = row_positions.clamp_max(length - 1).view({batch, blocks * block_size});
  // Same-position labels: slot k predicts token[a + k], no extra shift.
  out.labels = ids.gather(1, gather_index).view({batch, blocks, block_size}).masked_fill(in_sample.logical_not(), 0);
  const torch::Tensor label_in_response = response.gather(1, gather_index).view({batch, blocks, block_size});
  out.valid = keep.unsqueeze(-1) & in_sample & (slot > 0) & label_in_response;
  const torch::Tensor decay =
      torch::exp(-(slot.to(torch::kFloat64) - 1.0) / loss_decay_gamma).to(torch::kFloat32);  // [1, 1, Bs]
  out.weights = out.valid.to(torch::kFloat32) * decay;

  out.block_tokens = torch::full({batch, blocks, block_size}, mask_token_id, long_options);
  out.block_tokens.select(2, 0).copy_(ids.gather(1, anchor.clamp(0, length - 1)));  // slot 0: the anchor token
  return out;
}

torch::Tensor dpace_position_weights(const torch::Tensor& ce, const torch::Tensor& valid, double alpha) {
  if (!(alpha > 0.0 && alpha <= 1.0))
    throw std::invalid_argument("D-PACE alpha must lie in (0, 1], got " + std::to_string(alpha));
  if (ce.dim() != 2 || valid.sizes() != ce.sizes())
    throw std::invalid_argument("dpace_position_weights: need ce and valid [K, Bs]; got " + c10::str(ce.sizes()) +
                                " and " + c10::str(valid.sizes()));
  torch::NoGradGuard no_grad;
  const torch::Tensor ok = valid.to(ce.device(), torch::kBool);
  torch::Tensor smoothed = (1.0 - alpha) * torch::exp(-ce.detach().to(torch::kFloat64)) + alpha;  // q~
  smoothed = smoothed.masked_fill(ok.logical_not(), 0.0);
  smoothed.select(1, 0).fill_(1.0);  // the anchor is given, never drafted
  const torch::Tensor accepted_through = smoothed.cumprod(1);  // prod_{i <= m} q~_i
  const torch::Tensor from_here = accepted_through.flip(1).cumsum(1).flip(1);  // sum over m >= j
  return from_here.masked_fill(ok.logical_not(), 0.0);
}

namespace {

void check_loss_inputs(const DrafterSpec& spec, const torch::Tensor& embedding_weight,
                       const torch::Tensor& lm_head_weight, const torch::Tensor& context_features,
                       const torch::Tensor& input_ids, const torch::Tensor& loss_mask, const torch::Tensor& lengths,
                       const AnchorBatch& anchors) {
  const bool shapes_ok = input_ids.dim() == 2 && loss_mask.sizes() == input_ids.sizes() && lengths.dim() == 1 &&
                         lengths.size(0) == input_ids.size(0) && context_features.dim() == 3 &&
                         context_features.sizes().slice(0, 2) == input_ids.sizes() &&
                         anchors.anchor_positions.dim() == 2 && anchors.batch_size() == input_ids.size(0);
  if (!shapes_ok) {
    throw std::invalid_argument("dflash_loss: need input_ids and loss_mask [B, S], lengths [B], context features "
                                "[B, S, n*H] and anchors for B samples; got " + c10::str(input_ids.sizes()) + ", " +
                                c10::str(loss_mask.sizes()) + ", " + c10::str(lengths.sizes()) + ", " +
                                c10::str(context_features.sizes()) + ", " + c10::str(anchors.anchor_positions.sizes()));
  }
  if (embedding_weight.size(0) <= spec.mask_token_id || lm_head_weight.size(0) != embedding_weight.size(0)) {
    throw std::invalid_argument("dflash_loss: the target embedding has " + std::to_string(embedding_weight.size(0)) +
                                " rows and the LM head " + std::to_string(lm_head_weight.size(0)) +
                                "; the drafter's mask token id is " + std::to_string(spec.mask_token_id));
  }
}

// The loss and its options, before any work: a loss that needs the
// target's distribution needs its last hidden state, and D-PACE's weights
// are built from each slot's cross-entropy on its label, which such a loss
// does not have.
void check_objective_options(const ObjectiveOptions& options, const TeacherStates* teacher) {
  options.loss.validate();
  if (options.loss.needs_teacher()) {
    const std::string loss = options.loss.text();
    if (teacher == nullptr || !teacher->final_hidden.defined()) {
      throw std::invalid_argument("dflash_loss: loss " + loss + " needs the target's last hidden state after its "
                                  "final norm (TeacherStates.final_hidden [B, S, H]); none was given");
    }
    if (options.weighting == PositionWeighting::DPace) {
      throw std::invalid_argument("dflash_loss: loss " + loss + " does not combine with D-PACE position weighting "
                                  "(its weights come from each slot's cross-entropy on its label); use decay "
                                  "weighting with " + loss);
    }
  }
  if (options.expected_acceptance && (teacher == nullptr || !teacher->final_hidden.defined()))
    throw std::invalid_argument("dflash_loss: the expected acceptance (eval.expected_acceptance) needs the target's "
                                "last hidden state after its final norm (TeacherStates.final_hidden [B, S, H]); none "
                                "was given");
  if (options.loss.uses_temperature() &&
      (!(options.kl_temperature >= kMinLossTemperature) || !std::isfinite(options.kl_temperature))) {
    throw std::invalid_argument(c10::str("dflash_loss: kl_temperature must be >= ", kMinLossTemperature, ", got ",
                                         options.kl_temperature));
  }
}

void check_teacher(const TeacherStates& teacher, const torch::Tensor& input_ids, const torch::Tensor& lm_head_weight) {
  const torch::Tensor& t = teacher.final_hidden;
  if (t.dim() != 3 || t.size(0) != input_ids.size(0) || t.size(1) != input_ids.size(1) ||
      t.size(2) != lm_head_weight.size(1)) {
    throw std::invalid_argument("dflash_loss: the teacher's final hidden states must be [B, S, H] = [" +
                                std::to_string(input_ids.size(0)) + ", " + std::to_string(input_ids.size(1)) + ", " +
                                std::to_string(lm_head_weight.size(1)) + "] like the batch and the LM head, got " +
                                c10::str(t.sizes()));
  }
}

// Rows of the frozen target embedding, looked up on its device, on `device`.
torch::Tensor frozen_embeddings(const torch::Tensor& embedding_weight, const torch::Tensor& token_ids,
                                torch::Device device) {
  torch::NoGradGuard no_grad;
  return torch::embedding(embedding_weight, token_ids.to(embedding_weight.device())).to(device);
}

// sum of `values` [P] grouped by the block slot of each flat row index [P].
std::vector<double> sum_per_slot(const torch::Tensor& rows, const torch::Tensor& values, int64_t block_size) {
  const torch::Tensor sums = torch::zeros({block_size}, values.options().dtype(torch::kFloat64))
                                 .index_add_(0, rows.remainder(block_size), values.to(torch::kFloat64))
                                 .cpu();
  return {sums.data_ptr<double>(), sums.data_ptr<double>() + block_size};
}


std::vector<double> to_vector(const torch::Tensor& values) {
  const torch::Tensor v = values.to(torch::kCPU, torch::kFloat64).contiguous();
  return {v.data_ptr<double>(), v.data_ptr<double>() + v.numel()};
}

// The loss of B rows, each row one sample unless `documents` packs several
// (then their blocks' attention, positions and labels stay in their sample).
// block_sums, when given, receives [2, B*N] float64 on CPU: each block's
// sum(w * CE) and sum(w).
ObjectiveOutput loss_of_rows(DFlashDrafterImpl& drafter, const torch::Tensor& embedding_weight,
                             const torch::Tensor& lm_head_weight, const torch::Tensor& context_features,
                             const torch::Tensor& input_ids, const torch::Tensor& loss_mask,
                             const torch::Tensor& lengths, const AnchorBatch& anchors, const ObjectiveOptions& options,
                             const target::PackedDocuments* documents, const TeacherStates* teacher,
                             torch::Tensor* block_sums);

// Packed rows: a sample never sees another, so the rows can be laid end to
// end as one row of B * S tokens. Every kept block then sits in that one row,
// with no padding blocks (N is the batch's anchor count, not B times the
// fullest row's), and attention chunks, cut where the document changes, read
// exactly their sample's context. The loss is the same sum over the same
// blocks.
ObjectiveOutput packed_rows_end_to_end(DFlashDrafterImpl& drafter, const torch::Tensor& embedding_weight,
                                       const torch::Tensor& lm_head_weight, const torch::Tensor& context_features,
                                       const torch::Tensor& input_ids, const torch::Tensor& loss_mask,
                                       const torch::Tensor& lengths, const AnchorBatch& anchors,
                                       ObjectiveOptions options, const target::PackedDocuments& documents,
                                       const TeacherStates* teacher) {
  const int64_t rows = input_ids.size(0), length = input_ids.size(1), tokens = rows * length;
  if (documents.document_ids.sizes() != input_ids.sizes() || documents.position_ids.sizes() != input_ids.sizes() ||
      anchors.anchor_positions.dim() != 2 || anchors.batch_size() != rows) {
    throw std::invalid_argument("dflash_loss: packed documents must be [B, S] like input_ids " +
                                c10::str(input_ids.sizes()) + ", with anchors for B rows; got " +
                                c10::str(documents.document_ids.sizes()) + ", " +
                                c10::str(documents.position_ids.sizes()) + " and " +
                                c10::str(anchors.anchor_positions.sizes()));
  }
  const torch::Tensor row_start = torch::arange(rows, torch::kInt64).mul(length).unsqueeze(1);  // [B, 1]
  target::PackedDocuments flat;
  flat.position_ids = documents.position_ids.reshape({1, tokens});
  // Distinct ids across rows, so that neighbouring rows' documents never merge.
  flat.document_ids =
      (documents.document_ids.to(torch::kCPU, torch::kInt64) + row_start.mul(length + 1)).reshape({1, tokens});
  const torch::Tensor keep = anchors.block_keep.to(torch::kCPU, torch::kBool);
  const torch::Tensor kept = (anchors.anchor_positions.to(torch::kCPU, torch::kInt64) + row_start).masked_select(keep);
  AnchorBatch flat_anchors;
  const int64_t kept_count = kept.size(0);
  flat_anchors.anchor_positions = kept_count > 0 ? kept.view({1, kept_count}) : torch::zeros({1, 1}, torch::kInt64);
  flat_anchors.block_keep = torch::full({1, std::max<int64_t>(kept_count, 1)}, kept_count > 0, torch::kBool);
  if (options.attention_blocks_per_chunk <= 0) {
    // Chunks sized as for one row of S tokens (not the B * S of the end-to-end row).
    const DrafterSpec& spec = drafter.spec();
    options.attention_blocks_per_chunk = blocks_per_chunk_for_budget(
        1, spec.num_attention_heads, length, spec.block_size, options.max_attention_scores_per_chunk);
  }
  const auto device = lengths.device();
  // The teacher's rows laid end to end like the context features.
  TeacherStates flat_teacher;
  if (teacher != nullptr && teacher->final_hidden.defined()) {
    check_teacher(*teacher, input_ids, lm_head_weight);
    flat_teacher.final_hidden = teacher->final_hidden.reshape({1, tokens, teacher->final_hidden.size(2)});
  }
  torch::Tensor block_sums;  // [2, K]: sum(w * loss) and sum(w) of each kept block
  ObjectiveOutput out = loss_of_rows(drafter, embedding_weight, lm_head_weight,
                                     context_features.reshape({1, tokens, context_features.size(2)}),
                                     input_ids.reshape({1, tokens}), loss_mask.reshape({1, tokens}),
                                     torch::full({1}, tokens, torch::TensorOptions().dtype(torch::kInt64).device(device)),
                                     flat_anchors, options, &flat, teacher != nullptr ? &flat_teacher : nullptr,
                                     &block_sums);
  out.real_tokens = lengths.sum().item<int64_t>();
  // Each kept block belongs to the sample its anchor sits in.
  const torch::Tensor ordinals = target::sample_ordinals(documents.document_ids, lengths).reshape({tokens});
  const int64_t samples = ordinals.max().item<int64_t>() + 1;
  torch::Tensor per_sample = torch::zeros({2, std::max<int64_t>(samples, 0)}, torch::kFloat64);
  if (kept_count > 0 && samples > 0) per_sample.index_add_(1, ordinals.index_select(0, kept), block_sums);
  out.sample_weighted_ce_sum = to_vector(per_sample[0]);
  out.sample_weight_sum = to_vector(per_sample[1]);
  return out;
}

}  // namespace

ObjectiveOutput dflash_loss(DFlashDrafterImpl& drafter, const target::TargetModel& target,
                            const torch::Tensor& context_features, const torch::Tensor& input_ids,
                            const torch::Tensor& loss_mask, const torch::Tensor& lengths, const AnchorBatch& anchors,
                            const ObjectiveOptions& options) {
  return dflash_loss(drafter, target.embedding_weight(), target.lm_head_weight(), context_features, input_ids,
                     loss_mask, lengths, anchors, options);
}

ObjectiveOutput dflash_loss(DFlashDrafterImpl& drafter, const torch::Tensor& embedding_weight,
                            const torch::Tensor& lm_head_weight, const torch::Tensor& context_features,
                            const torch::Tensor& input_ids, const torch::Tensor& loss_mask,
                            const torch::Tensor& lengths, const AnchorBatch& anchors, const ObjectiveOptions& options,
                            const target::PackedDocuments* documents, const TeacherStates* teacher) {
  check_objective_options(options, teacher);
  if (documents != nullptr && input_ids.dim() == 2) {
    return packed_rows_end_to_end(drafter, embedding_weight, lm_head_weight, context_features, input_ids, loss_mask,
                                  lengths, anchors, options, *documents, teacher);
  }
  return loss_of_rows(drafter, embedding_weight, lm_head_weight, context_features, input_ids, loss_mask, lengths,
                      anchors, options, nullptr, teacher, nullptr);
}

namespace {

ObjectiveOutput loss_of_rows(DFlashDrafterImpl& drafter, const torch::Tensor& embedding_weight,
                             const torch::Tensor& lm_head_weight, const torch::Tensor& context_features,
                             const torch::Tensor& input_ids, const torch::Tensor& loss_mask,
                             const torch::Tensor& lengths, const AnchorBatch& anchors, const ObjectiveOptions& options,
                             const target::PackedDocuments* documents, const TeacherStates* teacher,
                             torch::Tensor* block_sums) {
  const DrafterSpec& spec = drafter.spec();
  check_loss_inputs(spec, embedding_weight, lm_head_weight, context_features, input_ids, loss_mask, lengths, anchors);
  const int64_t batch = input_ids.size(0), length = input_ids.size(1), block_size = spec.block_size;
  const torch::Device device = drafter.fc->weight.device();
  // D-PACE starts from weight 1 on every labelled slot (exp(-(k - 1) / inf)) and reweighs per block.
  const double gamma = options.weighting == PositionWeighting::DPace ? std::numeric_limits<double>::infinity()
                       : options.loss_decay_gamma > 0.0            ? options.loss_decay_gamma
                                                                   : default_loss_decay_gamma(block_size);
  std::optional<target::DocumentBounds> bounds;
  torch::Tensor context_begin;  // [B, N]: first context position of each block's sample (packed rows)
  if (documents != nullptr) {
    if (documents->document_ids.sizes() != input_ids.sizes() || documents->position_ids.sizes() != input_ids.sizes()) {
      throw std::invalid_argument("dflash_loss: packed documents must be [B, S] like input_ids " +
                                  c10::str(input_ids.sizes()) + ", got " + c10::str(documents->document_ids.sizes()) +
                                  " and " + c10::str(documents->position_ids.sizes()));
    }
    bounds = target::document_bounds(documents->document_ids);
    context_begin = bounds->begin.gather(1, anchors.anchor_positions.to(torch::kCPU, torch::kInt64).clamp(0, length - 1));
  }
  const DraftBlocks blocks = build_draft_blocks(input_ids, loss_mask, lengths, anchors, block_size, spec.mask_token_id,
                                                gamma, device, bounds ? &*bounds : nullptr);
  const int64_t draft_slots = anchors.blocks_per_sample() * block_size;

  const torch::Tensor block_embeddings =
      frozen_embeddings(embedding_weight, blocks.block_tokens.view({batch, draft_slots}), device);  // [B, N*Bs, H]
  const int64_t blocks_per_chunk =
      options.attention_blocks_per_chunk > 0
          ? options.attention_blocks_per_chunk
          : blocks_per_chunk_for_budget(batch, spec.num_attention_heads, length, block_size,
                                        options.max_attention_scores_per_chunk);
  BlockAttentionPlan plan = plan_block_attention(anchors.anchor_positions, anchors.block_keep, length, block_size,
                                                 blocks_per_chunk, device, context_begin,
                                                 options.max_attention_scores_per_chunk / spec.num_attention_heads);
  if (drafter_kind(spec.kind).causal_blocks(spec.kind_fields)) make_blocks_causal(plan);
  if (spec.any_sliding()) add_sliding_window(plan, anchors.anchor_positions, spec.sliding_window);
  const torch::Tensor draft_positions = blocks.block_positions.view({batch, draft_slots});
  KindModules& kind = drafter.kind_modules();
  kind.begin_blocks(BlockTokens{blocks.block_tokens.view({batch, draft_slots}), blocks.labels.view({batch, draft_slots}),
                                options.step, options.total_steps, options.draw_seed});
  const torch::Tensor hidden =
      documents != nullptr
          ? drafter.forward(context_features.to(device), documents->position_ids.to(device, torch::kInt64),
                            block_embeddings, draft_positions, plan, options.recompute_layers)
          : drafter.forward(context_features.to(device), block_embeddings, draft_positions, plan,
                            options.recompute_layers);  // [B, N*Bs, H]

  // Only label-bearing slots reach the LM head.
  const torch::Tensor rows = blocks.valid.reshape({-1}).nonzero().squeeze(1);  // [P]
  const torch::Tensor selected = hidden.reshape({-1, spec.hidden_size}).index_select(0, rows);
  const torch::Tensor labels = blocks.labels.reshape({-1}).index_select(0, rows);
  const torch::Tensor weights = blocks.weights.reshape({-1}).index_select(0, rows);
  const torch::Tensor head = lm_head_weight.device() == device ? lm_head_weight : lm_head_weight.to(device);
  const int64_t rows_per_chunk = std::max<int64_t>(1, options.max_logits_per_chunk / std::max<int64_t>(1, head.size(0)));
  RowReweight reweight;
  if (options.weighting == PositionWeighting::DPace) {
    // Each selected row's CE back in its block's slot, the block's weights from them.
    reweight = [&](const torch::Tensor& row_ce) {
      const int64_t slots = blocks.valid.numel();
      const torch::Tensor ce_of_slot =
          torch::zeros({slots}, row_ce.options().dtype(torch::kFloat64)).index_copy_(0, rows, row_ce.to(torch::kFloat64));
      const torch::Tensor w = dpace_position_weights(ce_of_slot.view({-1, block_size}),
                                                     blocks.valid.reshape({-1, block_size}), options.dpace_alpha);
      return w.reshape({-1}).index_select(0, rows);
    };
  }

  // Slot k's previous position, anchor + k - 1 (slot 0's: the anchor, never a
  // trained row), within the anchor's sample for every slot that has a label:
  // a kind reads the token there (a bias from the previous token), and a teacher the target's
  // state there (the one that predicts the token at anchor + k).
  const bool with_teacher = options.needs_teacher() || drafter_kind(spec.kind).needs_teacher(options.kind_options);
  const int64_t blocks_total = batch * anchors.blocks_per_sample();
  torch::Tensor prev_position;  // [B, N*Bs], positions within the row
  if (kind.reads_previous_tokens() || with_teacher) {
    const auto index_options = torch::TensorOptions().device(device).dtype(torch::kInt64);
    const torch::Tensor anchor = anchors.anchor_positions.to(device, torch::kInt64).unsqueeze(-1);  // [B, N, 1]
    prev_position = (anchor + (torch::arange(block_size, index_options) - 1).clamp_min(0))
                        .clamp(0, length - 1)
                        .view({batch, draft_slots});
  }
  TrainedSlots slots;
  slots.hidden = hidden.reshape({blocks_total, block_size, spec.hidden_size});
  slots.rows = rows;
  slots.selected = selected;
  if (kind.reads_previous_tokens()) {
    const torch::Tensor ids = input_ids.to(device, torch::kInt64);
    slots.prev_tokens = ids.gather(1, prev_position).view({blocks_total, block_size});
    // The token before each anchor, where the anchor's sample has one.
    const torch::Tensor anchor = anchors.anchor_positions.to(device, torch::kInt64).clamp(0, length - 1);  // [B, N]
    const torch::Tensor sample_begin = context_begin.defined() ? context_begin.to(device, torch::kInt64)
                                                               : torch::zeros_like(anchor);
    slots.before_anchor = ids.gather(1, torch::where(anchor > sample_begin, anchor - 1, anchor)).reshape({-1});
  }
  const std::optional<LogitsBias> bias = kind.logits_bias(slots);
  torch::Tensor teacher_rows;
  if (with_teacher) {
    if (teacher == nullptr || !teacher->final_hidden.defined())
      throw std::invalid_argument("dflash_loss: a drafter of kind '" + spec.kind + "' trains against the target's "
                                  "distribution: it needs the target's last hidden state after its final norm "
                                  "(TeacherStates.final_hidden [B, S, H]); none was given");
    check_teacher(*teacher, input_ids, lm_head_weight);
    const torch::Tensor& final_hidden = teacher->final_hidden;
    const torch::Tensor flat_index =
        (prev_position + torch::arange(batch, prev_position.options()).mul(length).view({batch, 1}))
            .reshape({-1})
            .index_select(0, rows);
    teacher_rows = final_hidden.reshape({batch * length, final_hidden.size(2)})
                       .index_select(0, flat_index.to(final_hidden.device()))
                       .to(device, head.scalar_type());
  }
  slots.labels = labels;
  slots.head = head;
  slots.teacher = teacher_rows;
  slots.loss = [&](const LogitsBias* other_bias, bool position_weights) {
    if (position_weights)
      return chunked_draft_loss(selected, head, other_bias, labels, teacher_rows, options.loss,
                                options.kl_temperature, weights, rows_per_chunk, reweight);
    return chunked_draft_loss(selected, head, other_bias, labels, teacher_rows, options.loss, options.kl_temperature,
                              torch::ones_like(weights), rows_per_chunk);
  };
  // The main loss also gives the records' expected acceptance when asked
  // (the same loss, gradient and accept_rate: the kind's terms train on those).
  LossMix main_loss = options.loss;
  main_loss.expected_acceptance = options.expected_acceptance;
  const ChunkedDraftLossResult main =
      chunked_draft_loss(selected, head, bias ? &*bias : nullptr, labels, teacher_rows, main_loss,
                         options.kl_temperature, weights, rows_per_chunk, reweight);
  const torch::Tensor applied = reweight ? main.row_weights : weights;

  ObjectiveOutput out;
  out.weight_sum = applied.sum().to(torch::kFloat64).item<double>();
  out.main_loss_sum = main.weighted_loss_sum.detach().to(torch::kFloat64).item<double>();
  torch::Tensor row_terms = main.row_weighted_loss;  // [P] each row's share of loss_sum, detached
  out.loss_sum = main.weighted_loss_sum;
  out.accept_rate_per_position =
      sum_per_slot(rows, main.expected_accept_rate.defined() ? main.expected_accept_rate : main.accept_rate, block_size);
  // The kind's terms after the main loss, under its row weights.
  const std::vector<ExtraLossTerm> terms =
      kind.extra_terms(slots, MainLossRows{main.accept_rate, main.row_loss, applied}, options.kind_options);
  for (const ExtraLossTerm& term : terms) {
    out.term_loss_sums.push_back(term.weighted_sum.detach().to(torch::kFloat64).item<double>());
    out.loss_sum = out.loss_sum + term.weight * term.weighted_sum;
    row_terms = row_terms + term.weight * term.row_terms;
    out.term_series_per_position.push_back(term.slot_values.defined() ? sum_per_slot(rows, term.slot_values, block_size)
                                                                      : std::vector<double>{});
  }
  out.weighted_ce_sum = terms.empty() ? out.main_loss_sum : out.loss_sum.detach().to(torch::kFloat64).item<double>();
  out.loss = out.loss_sum / (out.weight_sum > 0.0 ? out.weight_sum : 1.0);

  out.correct_per_position = sum_per_slot(rows, main.predictions.eq(labels), block_size);
  out.count_per_position = sum_per_slot(rows, torch::ones_like(labels), block_size);
  out.num_anchors = anchors.num_anchors();
  out.real_tokens = lengths.sum().item<int64_t>();
  out.predicted_tokens = rows.size(0);

  // Per block, then per row (a row is a sample unless the caller packed it).
  const torch::Tensor block_of_row = rows.floor_divide(block_size);
  const auto sum_options = torch::TensorOptions().dtype(torch::kFloat64).device(rows.device());
  torch::Tensor sums = torch::zeros({2, blocks_total}, sum_options);
  sums[0].index_add_(0, block_of_row, row_terms.to(torch::kFloat64));
  sums[1].index_add_(0, block_of_row, applied.to(torch::kFloat64));
  sums = sums.cpu();
  if (block_sums != nullptr) *block_sums = sums;
  const torch::Tensor per_row = sums.view({2, batch, anchors.blocks_per_sample()}).sum(2);
  out.sample_weighted_ce_sum = to_vector(per_row[0]);
  out.sample_weight_sum = to_vector(per_row[1]);
  return out;
}

}  // namespace

}  // namespace dflow::drafter
