// Packed rows: several samples per row must compute exactly what the samples
// compute alone (target features, anchors, loss, gradients), and no token of
// one sample may reach another sample's loss.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "drafter/block_attention.hpp"
#include "target/documents.hpp"
#include "drafter/kinds/xpress/xpress.hpp"
#include "drafter/objective.hpp"
#include "target/model_fixtures.hpp"

using namespace dflow::drafter;

namespace {

// Three samples; unpacked one per row (padded to 20), packed as rows
// [s0 s1 | pad] and [s2 | pad], both 22 tokens wide.
struct PackedRig {
  const std::vector<int64_t> sample_lengths{13, 9, 20};
  const std::vector<std::vector<int64_t>> rows{{0, 1}, {2}};
  static constexpr int64_t kPackedLength = 22;
  std::vector<torch::Tensor> tokens, masks;  // per sample
  torch::Tensor unpacked_ids, unpacked_mask, unpacked_lengths;
  torch::Tensor packed_ids, packed_mask, packed_lengths;
  dflow::target::PackedDocuments documents;

  explicit PackedRig(uint64_t seed = 5) {
    torch::manual_seed(static_cast<int64_t>(seed));
    for (const int64_t length : sample_lengths) {
      tokens.push_back(torch::randint(0, 500, {length}, torch::kInt64));
      auto mask = torch::ones({length}, torch::kUInt8);
      mask.narrow(0, 0, length / 3).zero_();  // the prompt
      masks.push_back(mask);
    }
    build();
  }

  // (Re)lays out the tensors from tokens / masks.
  void build() {
    const auto count = static_cast<int64_t>(sample_lengths.size());
    unpacked_ids = torch::zeros({count, 20}, torch::kInt64);
    unpacked_mask = torch::zeros({count, 20}, torch::kUInt8);
    unpacked_lengths = torch::tensor(sample_lengths, torch::kInt64);
    for (int64_t s = 0; s < count; ++s) {
      unpacked_ids[s].narrow(0, 0, sample_lengths[s]).copy_(tokens[s]);
      unpacked_mask[s].narrow(0, 0, sample_lengths[s]).copy_(masks[s]);
    }
    const auto row_count = static_cast<int64_t>(rows.size());
    packed_ids = torch::zeros({row_count, kPackedLength}, torch::kInt64);
    packed_mask = torch::zeros({row_count, kPackedLength}, torch::kUInt8);
    documents.position_ids = torch::zeros({row_count, kPackedLength}, torch::kInt64);
    documents.document_ids = torch::zeros({row_count, kPackedLength}, torch::kInt32);
    std::vector<int64_t> row_lengths;
    for (int64_t r = 0; r < row_count; ++r) {
      int64_t used = 0, document = 0;
      for (const int64_t s : rows[static_cast<size_t>(r)]) {
        const int64_t length = sample_lengths[s];
        packed_ids[r].narrow(0, used, length).copy_(tokens[s]);
        packed_mask[r].narrow(0, used, length).copy_(masks[s]);
        documents.position_ids[r].narrow(0, used, length).copy_(torch::arange(length));
        documents.document_ids[r].narrow(0, used, length).fill_(document++);
        used += length;
      }
      documents.position_ids[r].narrow(0, used, kPackedLength - used).copy_(torch::arange(kPackedLength - used));
      documents.document_ids[r].narrow(0, used, kPackedLength - used).fill_(document);
      row_lengths.push_back(used);
    }
    packed_lengths = torch::tensor(row_lengths, torch::kInt64);
  }

  // Where sample s sits in the packed batch: (row, first token).
  std::pair<int64_t, int64_t> place(int64_t sample) const {
    for (size_t r = 0; r < rows.size(); ++r) {
      int64_t used = 0;
      for (const int64_t s : rows[r]) {
        if (s == sample) return {static_cast<int64_t>(r), used};
        used += sample_lengths[s];
      }
    }
    return {-1, -1};
  }
};

const dflow::target::TargetModel& tiny_target() {
  static const dflow::target::TargetModel target =
      dflow::target::TargetModel::load(dflow::target::testing::tiny_target_dir());
  return target;
}

// layer_types / sliding_window: as DrafterOptions (default: two full layers).
DFlashDrafter make_drafter(std::vector<std::string> layer_types = {}, int64_t sliding_window = 0) {
  DrafterOptions options;
  options.num_layers = 2;
  options.block_size = 8;
  options.num_target_features = 2;
  options.layer_types = std::move(layer_types);
  options.sliding_window = sliding_window;
  DFlashDrafter drafter(make_drafter_spec(tiny_target().config(), options), 3);
  torch::NoGradGuard no_grad;
  torch::manual_seed(9);
  for (auto& p : drafter->parameters()) p.add_(torch::randn_like(p) * 0.1);  // away from the near-identity init
  return drafter;
}

AnchorSamplingOptions anchor_options() {
  AnchorSamplingOptions options;
  options.anchors_per_sequence = 5;  // fewer than the candidates: which ones are drawn matters
  options.seed = 77;
  options.epoch = 1;
  options.batch_index = 4;
  return options;
}

double max_relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = std::max(b.abs().max().item<double>(), 1e-30);
  return (a - b).abs().max().item<double>() / scale;
}

struct LossAndGradients {
  double loss = 0;
  std::vector<torch::Tensor> gradients;
  std::vector<double> sample_ce, sample_weight;  // per sample, in the batch's order
};

LossAndGradients run_loss(DFlashDrafterImpl& drafter, const torch::Tensor& features, const torch::Tensor& ids,
                          const torch::Tensor& mask, const torch::Tensor& lengths, const AnchorBatch& anchors,
                          const dflow::target::PackedDocuments* documents, int64_t blocks_per_chunk = 0,
                          int64_t max_scores = ObjectiveOptions{}.max_attention_scores_per_chunk) {
  drafter.zero_grad();
  ObjectiveOptions options;
  options.attention_blocks_per_chunk = blocks_per_chunk;
  options.max_attention_scores_per_chunk = max_scores;
  const auto& target = tiny_target();
  auto out = dflash_loss(drafter, target.embedding_weight(), target.lm_head_weight(), features, ids, mask, lengths,
                         anchors, options, documents);
  out.loss.backward();
  LossAndGradients result{out.loss.item<double>(), {}, out.sample_weighted_ce_sum, out.sample_weight_sum};
  for (const auto& p : drafter.parameters()) result.gradients.push_back(p.grad().clone());
  return result;
}

}  // namespace

TEST_CASE("Pack.TargetFeaturesOfAPackedSampleEqualTheSampleAlone") {
  torch::set_num_threads(1);
  PackedRig rig;
  const auto& target = tiny_target();
  const std::vector<int64_t> layers{0, 2, 3};
  const auto alone = target.context_features(rig.unpacked_ids, layers);
  const auto packed = target.context_features(rig.packed_ids, rig.documents, layers);
  for (int64_t s = 0; s < 3; ++s) {
    const auto [row, first] = rig.place(s);
    const auto length = rig.sample_lengths[static_cast<size_t>(s)];
    CAPTURE(s);
    CHECK(max_relative_difference(packed[row].narrow(0, first, length), alone[s].narrow(0, 0, length)) < 1e-5);
  }
  // Without the document layout, sample 1 would see sample 0: the test can tell.
  const auto leaky = target.context_features(rig.packed_ids, layers);
  CHECK(max_relative_difference(leaky[0].narrow(0, 13, 9), alone[1].narrow(0, 0, 9)) > 1e-3);
}

TEST_CASE("Pack.AnchorsArePerSampleAndMatchTheSamplesUnpacked") {
  PackedRig rig;
  const auto packed = sample_packed_anchors(rig.packed_mask, rig.packed_lengths, rig.documents.document_ids,
                                            anchor_options());
  const auto alone = sample_anchors(rig.unpacked_mask, rig.unpacked_lengths, anchor_options());
  std::vector<int64_t> from_packed, from_alone;
  for (int64_t r = 0; r < packed.batch_size(); ++r)
    for (int64_t j = 0; j < packed.blocks_per_sample(); ++j)
      if (packed.block_keep[r][j].item<bool>()) from_packed.push_back(packed.anchor_positions[r][j].item<int64_t>());
  for (int64_t s = 0; s < 3; ++s) {
    const auto [row, first] = rig.place(s);
    for (int64_t j = 0; j < alone.blocks_per_sample(); ++j)
      if (alone.block_keep[s][j].item<bool>()) from_alone.push_back(first + alone.anchor_positions[s][j].item<int64_t>());
  }
  CHECK(from_packed == from_alone);
  CHECK(packed.num_anchors() == 15);
  // Strictly inside one sample's response: never on a sample's last token.
  const auto bounds = dflow::target::document_bounds(rig.documents.document_ids);
  for (int64_t r = 0; r < packed.batch_size(); ++r)
    for (int64_t j = 0; j < packed.blocks_per_sample(); ++j) {
      if (!packed.block_keep[r][j].item<bool>()) continue;
      const int64_t a = packed.anchor_positions[r][j].item<int64_t>();
      CHECK(a + 1 < bounds.end[r][a].item<int64_t>());
      CHECK(rig.packed_mask[r][a].item<int>() == 1);
      CHECK(rig.packed_mask[r][a + 1].item<int>() == 1);
    }
}

namespace {

// The rig's samples through `drafter` twice: one per row, and packed (each
// with its own anchors), with the features and anchors both runs used.
struct PackedAndAlone {
  torch::Tensor alone_features, packed_features;
  AnchorBatch alone_anchors, packed_anchors;
  LossAndGradients alone;
};

PackedAndAlone features_and_alone_loss(DFlashDrafterImpl& drafter, const PackedRig& rig) {
  const auto& target = tiny_target();
  const auto& layers = drafter.spec().target_layer_ids;
  PackedAndAlone out;
  out.alone_features = target.context_features(rig.unpacked_ids, layers);
  out.packed_features = target.context_features(rig.packed_ids, rig.documents, layers);
  out.alone_anchors = sample_anchors(rig.unpacked_mask, rig.unpacked_lengths, anchor_options());
  out.packed_anchors =
      sample_packed_anchors(rig.packed_mask, rig.packed_lengths, rig.documents.document_ids, anchor_options());
  out.alone = run_loss(drafter, out.alone_features, rig.unpacked_ids, rig.unpacked_mask, rig.unpacked_lengths,
                       out.alone_anchors, nullptr);
  return out;
}

}  // namespace

TEST_CASE("Pack.LossAndGradientsEqualTheSamplesRunUnpacked") {
  torch::set_num_threads(1);
  PackedRig rig;
  auto drafter = make_drafter();
  const auto [alone_features, packed_features, alone_anchors, packed_anchors, alone] =
      features_and_alone_loss(*drafter, rig);
  // Chunks of 0 (as many blocks as fit), 2 and 3 blocks; the packed row's
  // chunks batched into one attention call, or (score budget 1) each alone.
  for (const auto& [blocks_per_chunk, max_scores] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 1 << 25}, {2, 1 << 25}, {3, 1 << 25}, {0, 1}, {2, 1}}) {
    CAPTURE(blocks_per_chunk);
    CAPTURE(max_scores);
    const auto packed = run_loss(*drafter, packed_features, rig.packed_ids, rig.packed_mask, rig.packed_lengths,
                                 packed_anchors, &rig.documents, blocks_per_chunk, max_scores);
    CHECK(alone.loss > 0.1);
    CHECK(std::abs(packed.loss - alone.loss) <= 1e-5 * std::abs(alone.loss));
    // Per sample too (the per-bucket statistics are built on these): packed
    // rows list their samples in row order, here 0, 1, 2 as unpacked.
    REQUIRE(packed.sample_ce.size() == 3);
    REQUIRE(alone.sample_ce.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(alone.sample_weight[i] > 0);
      CHECK(packed.sample_weight[i] == doctest::Approx(alone.sample_weight[i]).epsilon(1e-12));
      CHECK(std::abs(packed.sample_ce[i] - alone.sample_ce[i]) <= 1e-5 * std::abs(alone.sample_ce[i]));
    }
    REQUIRE(packed.gradients.size() == alone.gradients.size());
    for (size_t i = 0; i < alone.gradients.size(); ++i) {
      CAPTURE(i);
      CHECK(max_relative_difference(packed.gradients[i], alone.gradients[i]) < 1e-5);
    }
  }
}

TEST_CASE("Pack.SlidingLayersLossEqualsTheSamplesRunUnpacked") {
  // A sliding layer of window 8 (samples of 13 and 20 tokens reach past it)
  // beside a full one: packed rows still compute each sample's own loss.
  torch::set_num_threads(1);
  PackedRig rig;
  auto drafter = make_drafter({"sliding_attention", "full_attention"}, 8);
  const auto [alone_features, packed_features, alone_anchors, packed_anchors, alone] =
      features_and_alone_loss(*drafter, rig);
  for (const int64_t blocks_per_chunk : {0, 2}) {
    CAPTURE(blocks_per_chunk);
    const auto packed = run_loss(*drafter, packed_features, rig.packed_ids, rig.packed_mask, rig.packed_lengths,
                                 packed_anchors, &rig.documents, blocks_per_chunk);
    CHECK(std::abs(packed.loss - alone.loss) <= 1e-5 * std::abs(alone.loss));
    for (size_t i = 0; i < alone.gradients.size(); ++i) {
      CAPTURE(i);
      CHECK(max_relative_difference(packed.gradients[i], alone.gradients[i]) < 1e-5);
    }
  }
  // The window changes the loss: the same weights with both layers full differ.
  auto full = make_drafter();
  const auto full_loss = run_loss(*full, alone_features, rig.unpacked_ids, rig.unpacked_mask, rig.unpacked_lengths,
                                  alone_anchors, nullptr);
  CHECK(std::abs(full_loss.loss - alone.loss) > 1e-6 * std::abs(alone.loss));
}

TEST_CASE("Pack.ATokenOfOneSampleCannotChangeAnotherSamplesLoss") {
  torch::set_num_threads(1);
  auto drafter = make_drafter();
  const auto& target = tiny_target();
  const auto& layers = drafter->spec().target_layer_ids;
  // Only sample 1 (the second of row 0) carries a loss.
  auto loss_of = [&](PackedRig& rig) {
    rig.masks[0].zero_();
    rig.masks[2].zero_();
    rig.build();
    const auto features = target.context_features(rig.packed_ids, rig.documents, layers);
    const auto anchors = sample_packed_anchors(rig.packed_mask, rig.packed_lengths, rig.documents.document_ids,
                                               anchor_options());
    return run_loss(*drafter, features, rig.packed_ids, rig.packed_mask, rig.packed_lengths, anchors, &rig.documents, 2);
  };
  PackedRig rig;
  const auto reference = loss_of(rig);
  PackedRig neighbour_changed;
  neighbour_changed.tokens[0][11] = (neighbour_changed.tokens[0][11].item<int64_t>() + 1) % 500;  // sample 0, just before sample 1
  neighbour_changed.tokens[2][3] = (neighbour_changed.tokens[2][3].item<int64_t>() + 7) % 500;
  const auto after = loss_of(neighbour_changed);
  CHECK(after.loss == reference.loss);  // bit-identical
  for (size_t i = 0; i < reference.gradients.size(); ++i) CHECK(torch::equal(after.gradients[i], reference.gradients[i]));
  PackedRig own_changed;  // a token of sample 1 itself does change it: the check above can fail
  own_changed.tokens[1][2] = (own_changed.tokens[1][2].item<int64_t>() + 1) % 500;
  CHECK(loss_of(own_changed).loss != reference.loss);
}

TEST_CASE("Pack.AttentionChunksOfAPackedRowReadExactlyTheirDocumentsContext") {
  // One end-to-end row: document 0 at [0, 40) with 3 blocks, document 1 at
  // [40, 100) with 2 blocks, document 2 at [100, 130) with 1 block. Even when
  // all blocks would fit one chunk, no chunk spans two documents, and each
  // reads its document's context from its start up to its last anchor.
  const auto anchors = torch::tensor({{10, 25, 31, 55, 90, 117}}, torch::kInt64).view({1, 6});
  const auto keep = torch::ones({1, 6}, torch::kBool);
  const auto begins = torch::tensor({{0, 0, 0, 40, 40, 100}}, torch::kInt64).view({1, 6});
  for (const int64_t blocks_per_chunk : {0, 6, 2}) {
    CAPTURE(blocks_per_chunk);
    const auto plan = plan_block_attention(anchors, keep, 130, 4, blocks_per_chunk, torch::kCPU, begins);
    std::vector<std::string> seen;  // "first block: context [first, end)"
    for (const auto& chunk : plan.chunks)
      seen.push_back(std::to_string(chunk.first_query / 4) + ": [" + std::to_string(chunk.context_first) + ", " +
                     std::to_string(chunk.context_first + chunk.context_length) + ")");
    if (blocks_per_chunk == 2) {
      CHECK(seen == std::vector<std::string>{"0: [0, 25)", "2: [0, 31)", "3: [40, 90)", "5: [100, 117)"});
    } else {
      CHECK(seen == std::vector<std::string>{"0: [0, 31)", "3: [40, 90)", "5: [100, 117)"});
    }
  }
}

TEST_CASE("Pack.BatchedChunksOfAPackedRowAttendAsEachChunkAlone") {
  // The row of the test above: documents [0, 40) with 3 blocks, [40, 100)
  // with 2, [100, 130) with 1, the fourth block a padding block. Whether the
  // chunks run batched in one call (padded to the longest) or one call each,
  // every draft query attends exactly to its document's context before its
  // anchor and to its own block: the result equals a direct computation.
  torch::manual_seed(3);
  const int64_t block = 4, heads = 4, kv_heads = 2, dim = 8, length = 130;
  const auto anchors = torch::tensor({{10, 25, 31, 55, 90, 117}}, torch::kInt64).view({1, 6});
  const auto keep = torch::tensor({{true, true, true, false, true, true}}).view({1, 6});
  const auto begins = torch::tensor({{0, 0, 0, 40, 40, 100}}, torch::kInt64).view({1, 6});
  const auto q = torch::randn({1, heads, 6 * block, dim}, torch::kFloat64);
  const auto draft_k = torch::randn({1, kv_heads, 6 * block, dim}, torch::kFloat64);
  const auto draft_v = torch::randn({1, kv_heads, 6 * block, dim}, torch::kFloat64);
  const auto context_k = torch::randn({1, kv_heads, length, dim}, torch::kFloat64);
  const auto context_v = torch::randn({1, kv_heads, length, dim}, torch::kFloat64);

  // Directly, one block at a time: softmax over [begin, anchor) and the block.
  auto expected = torch::zeros_like(q);
  for (int64_t j = 0; j < 6; ++j) {
    if (!keep[0][j].item<bool>()) continue;  // a padding block's rows are zeros
    const int64_t first = begins[0][j].item<int64_t>(), anchor = anchors[0][j].item<int64_t>();
    const auto keys = torch::cat({context_k[0].narrow(1, first, anchor - first), draft_k[0].narrow(1, j * block, block)}, 1)
                          .repeat_interleave(heads / kv_heads, 0);
    const auto values = torch::cat({context_v[0].narrow(1, first, anchor - first), draft_v[0].narrow(1, j * block, block)}, 1)
                            .repeat_interleave(heads / kv_heads, 0);
    const auto scores = torch::matmul(q[0].narrow(1, j * block, block), keys.transpose(1, 2)) / std::sqrt(double(dim));
    expected[0].narrow(1, j * block, block).copy_(torch::matmul(scores.softmax(-1), values));
  }
  for (const int64_t budget : {int64_t{0}, int64_t{1}, int64_t{2000}}) {
    CAPTURE(budget);
    // Padding allowed (fill 0): no budget puts all three documents in one
    // call; budget 1 each alone; 2000 query-key pairs the two longest
    // contexts padded together (2 * 12 * (50 + 12)), not all three.
    const auto plan = plan_block_attention(anchors, keep, length, block, 0, torch::kCPU, begins, budget, 0.0);
    CHECK(plan.groups.size() == (budget == 0 ? 1u : budget == 1 ? 3u : 2u));
    const auto got = block_attention(q, draft_k, draft_v, context_k, context_v, plan);
    REQUIRE(got.sizes() == expected.sizes());
    CHECK(torch::allclose(got, expected, 1e-12, 1e-12));
  }
  // The default fill (each chunk at least 3/4 of its padded shape): these
  // three differ too much in shape to share a call.
  const auto plan = plan_block_attention(anchors, keep, length, block, 0, torch::kCPU, begins);
  CHECK(plan.groups.size() == 3u);
  CHECK(torch::allclose(block_attention(q, draft_k, draft_v, context_k, context_v, plan), expected, 1e-12, 1e-12));
}

TEST_CASE("Pack.ALongDocumentNeitherPadsShortOnesNorRunsAsOneChunk") {
  // One end-to-end row: document 0 at [0, 200) with 8 blocks whose anchors
  // reach position 190, then six documents of 20 tokens with one block each
  // (anchor 10 tokens in). Block size 16.
  std::vector<int64_t> anchors_list{20, 60, 100, 120, 150, 170, 180, 190}, begins_list(8, 0);
  for (int64_t d = 0; d < 6; ++d) {
    anchors_list.push_back(200 + 20 * d + 10);
    begins_list.push_back(200 + 20 * d);
  }
  const auto blocks = static_cast<int64_t>(anchors_list.size());
  const auto anchors = torch::tensor(anchors_list, torch::kInt64).view({1, blocks});
  const auto begins = torch::tensor(begins_list, torch::kInt64).view({1, blocks});
  const auto keep = torch::ones({1, blocks}, torch::kBool);
  const auto plan = plan_block_attention(anchors, keep, 320, 16, 0, torch::kCPU, begins);
  // The long document (context 190 positions) is cut into chunks of at most
  // ceil(190 / 16) = 12 blocks: all its 8 blocks in one chunk; the short
  // ones (context 10) one block each.
  REQUIRE(plan.chunks.size() == 7u);
  CHECK(plan.chunks[0].num_queries == 8 * 16);
  CHECK(plan.chunks[0].context_length == 190);
  // The six short chunks share one call; the long one does not pad them to 190 keys.
  REQUIRE(plan.groups.size() == 2u);
  CHECK(plan.groups[0].num_chunks == 1);
  CHECK(plan.groups[1].num_chunks == 6);
  CHECK(plan.groups[1].max_context == 10);
  CHECK(plan.groups[1].max_queries == 16);

  // A document whose context is short for its blocks: 8 blocks over 40
  // context positions are cut into ceil(40 / 16) = 3-block chunks of near-equal
  // size (3, 3, 2), so queries never outnumber the context by far.
  const auto short_anchors = torch::tensor({5, 10, 15, 20, 25, 30, 35, 40}, torch::kInt64).view({1, 8});
  const auto short_plan = plan_block_attention(short_anchors, torch::ones({1, 8}, torch::kBool), 64, 16, 0,
                                               torch::kCPU, torch::zeros({1, 8}, torch::kInt64));
  std::vector<int64_t> sizes;
  for (const auto& chunk : short_plan.chunks) sizes.push_back(chunk.num_queries / 16);
  CHECK(sizes == std::vector<int64_t>{3, 3, 2});
}

TEST_CASE("Pack.XpressLossAndGradientsEqualTheSamplesRunUnpackedWithAnchorsAtSampleStarts") {
  // XPress reads the token before each anchor: at a sample's first token
  // it is the anchor's own, packed or not (never the sample before's last).
  torch::set_num_threads(1);
  DrafterOptions options;
  options.num_layers = 1;
  options.block_size = 8;
  options.num_target_features = 2;
  options.kind = "xpress";
  XPressShape shape;
  shape.xpress_rank = 8;
  options.kind_fields = xpress_fields(shape);
  DFlashDrafter drafter(make_drafter_spec(tiny_target().config(), options), 3);
  {
    torch::NoGradGuard no_grad;
    torch::manual_seed(9);
    for (auto& p : drafter->parameters()) p.add_(torch::randn_like(p) * 0.3);
  }
  PackedRig rig;
  for (auto& mask : rig.masks) mask.fill_(1);
  rig.build();
  const auto& target = tiny_target();
  const auto& layers = drafter->spec().target_layer_ids;
  auto batch = [](const std::vector<std::vector<int64_t>>& anchors, int64_t width) {
    AnchorBatch out;
    out.anchor_positions = torch::zeros({static_cast<int64_t>(anchors.size()), width}, torch::kInt64);
    out.block_keep = torch::zeros({static_cast<int64_t>(anchors.size()), width}, torch::kBool);
    for (size_t r = 0; r < anchors.size(); ++r)
      for (size_t j = 0; j < anchors[r].size(); ++j) {
        out.anchor_positions[static_cast<int64_t>(r)][static_cast<int64_t>(j)] = anchors[r][j];
        out.block_keep[static_cast<int64_t>(r)][static_cast<int64_t>(j)] = true;
      }
    return out;
  };
  // Sample 1 starts at 13 in packed row 0.
  const auto alone = run_loss(*drafter, target.context_features(rig.unpacked_ids, layers), rig.unpacked_ids,
                              rig.unpacked_mask, rig.unpacked_lengths, batch({{0, 5}, {0, 3}, {0, 9}}, 2), nullptr);
  const auto packed =
      run_loss(*drafter, target.context_features(rig.packed_ids, rig.documents, layers), rig.packed_ids,
               rig.packed_mask, rig.packed_lengths, batch({{0, 5, 13, 16}, {0, 9}}, 4), &rig.documents);
  CHECK(alone.loss > 0.1);
  CHECK(std::abs(packed.loss - alone.loss) <= 1e-5 * std::abs(alone.loss));
  REQUIRE(packed.gradients.size() == alone.gradients.size());
  for (size_t i = 0; i < alone.gradients.size(); ++i) {
    CAPTURE(i);
    CHECK(max_relative_difference(packed.gradients[i], alone.gradients[i]) < 1e-4);
  }
}
