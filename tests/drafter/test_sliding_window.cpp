// Sliding-window draft layers: each layer against a float64 reference
// written with loops (naive_reference.hpp), where every query's softmax runs
// over exactly the keys it may see: context c with c < anchor, within its
// document, and, in a sliding layer, p - c < sliding_window for the query at
// position p (SpecForge's DFlash masks, z-lab's dflash/model.py); its own
// block whole. Also: a window covering the context is full attention bit for
// bit, drafting applies the window, and config.json carries it.
#include <doctest/doctest.h>

#include <functional>

#include "drafter/speculative.hpp"
#include "gradient_pass.hpp"
#include "target/model_fixtures.hpp"
#include "target/naive_reference.hpp"

using namespace dflow::drafter;
namespace testing = dflow::target::testing;
using dflow::target::testing::ScratchDir;
namespace nv = dflow::target::naive;

namespace {

// One row laid out for the reference: context rows at their positions,
// blocks with their anchors (row indices), keep flags and document starts.
struct Row {
  torch::Tensor features;                // [S, n*H]
  std::vector<int64_t> context_position;  // per context row (the document's own positions)
  torch::Tensor embeddings;              // [N*Bs, H]
  std::vector<int64_t> anchor, begin;     // per block: anchor row, first row of its document
  std::vector<bool> keep;
};

// Head h of a projected vector after the per-head norm and RoPE at `position`.
nv::Vec rotated_head(const nv::Vec& projected, int64_t head, int64_t dim, const nv::Vec& norm, double eps,
                     double position, double theta) {
  const nv::Vec part = nv::slice(projected, static_cast<size_t>(head * dim), static_cast<size_t>(dim));
  return nv::rope(nv::rms_norm(part, norm, eps), position, theta);
}

// The drafter's final hidden states for one row, [N*Bs, H], with loops.
torch::Tensor reference_forward(const DrafterSpec& spec, const std::map<std::string, torch::Tensor>& w,
                                const Row& row) {
  const int64_t block = spec.block_size, dim = spec.head_dim;
  const int64_t groups = spec.num_attention_heads / spec.num_key_value_heads;
  const int64_t slots = row.embeddings.size(0);
  const double eps = spec.rms_norm_eps, theta = spec.rope_theta;
  auto vec = [&](const std::string& name) { return nv::to_vec(w.at(name)); };
  auto mat = [&](const std::string& name) { return nv::to_mat(w.at(name)); };
  std::vector<nv::Vec> context;
  for (int64_t c = 0; c < row.features.size(0); ++c)
    context.push_back(
        nv::rms_norm(nv::matvec(mat("fc.weight"), nv::to_vec(row.features[c])), vec("hidden_norm.weight"), eps));
  std::vector<nv::Vec> h;
  for (int64_t i = 0; i < slots; ++i) h.push_back(nv::to_vec(row.embeddings[i]));
  for (int64_t layer = 0; layer < spec.num_layers; ++layer) {
    const std::string p = "layers." + std::to_string(layer) + ".";
    const nv::Mat q_proj = mat(p + "self_attn.q_proj.weight"), k_proj = mat(p + "self_attn.k_proj.weight");
    const nv::Mat v_proj = mat(p + "self_attn.v_proj.weight"), o_proj = mat(p + "self_attn.o_proj.weight");
    const nv::Vec q_norm = vec(p + "self_attn.q_norm.weight"), k_norm = vec(p + "self_attn.k_norm.weight");
    const bool slides = spec.layer_types.size() > static_cast<size_t>(layer) &&
                        spec.layer_types[static_cast<size_t>(layer)] == "sliding_attention";
    std::vector<nv::Vec> x, next;
    for (const auto& hi : h) x.push_back(nv::rms_norm(hi, vec(p + "input_layernorm.weight"), eps));
    for (int64_t i = 0; i < slots; ++i) {
      const auto j = static_cast<size_t>(i / block);
      const int64_t anchor = row.anchor[j];
      const int64_t block_start = row.context_position[static_cast<size_t>(anchor)];  // the anchor's own position
      const int64_t query_position = block_start + i % block;
      nv::Vec merged;
      for (int64_t head = 0; head < spec.num_attention_heads; ++head) {
        std::vector<nv::Vec> keys, values;
        if (row.keep[j]) {
          for (int64_t c = row.begin[j]; c < anchor; ++c) {
            const int64_t position = row.context_position[static_cast<size_t>(c)];
            if (slides && query_position - position >= spec.sliding_window) continue;  // outside the window
            keys.push_back(rotated_head(nv::matvec(k_proj, context[c]), head / groups, dim, k_norm, eps,
                                        static_cast<double>(position), theta));
            values.push_back(nv::slice(nv::matvec(v_proj, context[c]), static_cast<size_t>(head / groups * dim),
                                       static_cast<size_t>(dim)));
          }
          for (int64_t m = static_cast<int64_t>(j) * block; m < static_cast<int64_t>(j + 1) * block; ++m) {
            keys.push_back(rotated_head(nv::matvec(k_proj, x[m]), head / groups, dim, k_norm, eps,
                                        static_cast<double>(block_start + m % block), theta));
            values.push_back(nv::slice(nv::matvec(v_proj, x[m]), static_cast<size_t>(head / groups * dim),
                                       static_cast<size_t>(dim)));
          }
        }
        const nv::Vec q = rotated_head(nv::matvec(q_proj, x[i]), head, dim, q_norm, eps,
                                       static_cast<double>(query_position), theta);
        const nv::Vec attended = nv::attend(q, keys, values);
        merged.insert(merged.end(), attended.begin(), attended.end());
      }
      const nv::Vec after_attention = nv::add(h[i], nv::matvec(o_proj, merged));
      const nv::Vec y = nv::rms_norm(after_attention, vec(p + "post_attention_layernorm.weight"), eps);
      next.push_back(nv::add(after_attention, nv::swiglu(y, mat(p + "mlp.gate_proj.weight"),
                                                         mat(p + "mlp.up_proj.weight"), mat(p + "mlp.down_proj.weight"))));
    }
    h = next;
  }
  std::vector<nv::Vec> out;
  for (const auto& hi : h) out.push_back(nv::rms_norm(hi, vec("norm.weight"), eps));
  return nv::to_tensor(out);
}

DrafterSpec with_layers(DrafterSpec spec, std::vector<std::string> layer_types, int64_t sliding_window) {
  spec.num_layers = static_cast<int64_t>(layer_types.size());
  spec.layer_types = std::move(layer_types);
  spec.sliding_window = sliding_window;
  return spec;
}

// A float64 drafter with weights large enough that every path matters.
DFlashDrafter float64_drafter(const DrafterSpec& spec) {
  DFlashDrafter drafter(spec, /*init_seed=*/5);
  drafter->to(torch::kFloat64);
  torch::NoGradGuard no_grad;
  torch::manual_seed(21);
  for (auto& p : drafter->parameters()) p.add_(torch::randn_like(p) * 0.3);
  return drafter;
}

std::map<std::string, torch::Tensor> weights_of(DFlashDrafter& drafter) {
  std::map<std::string, torch::Tensor> w;
  for (const auto& item : drafter->named_parameters()) w[item.key()] = item.value();
  return w;
}

BlockAttentionPlan windowed(BlockAttentionPlan plan, const torch::Tensor& anchors, const DrafterSpec& spec) {
  if (spec.any_sliding()) add_sliding_window(plan, anchors, spec.sliding_window);
  return plan;
}

// Two rows of 14 positions, four blocks of 4 each, one a padding block.
struct UnpackedBatch {
  static constexpr int64_t batch = 2, length = 14, blocks = 4, block = 4;
  torch::Tensor features, embeddings, positions;
  torch::Tensor anchors = torch::tensor({1, 6, 9, 12, 0, 4, 8, 11}, torch::kInt64).view({batch, blocks});
  torch::Tensor keep = torch::tensor({1, 1, 1, 1, 1, 0, 1, 1}, torch::kInt64).view({batch, blocks}).to(torch::kBool);
  explicit UnpackedBatch(int64_t hidden) {
    torch::manual_seed(9);
    features = torch::randn({batch, length, 2 * hidden}, torch::kFloat64);
    embeddings = torch::randn({batch, blocks * block, hidden}, torch::kFloat64);
    positions = (anchors.unsqueeze(-1) + torch::arange(block, torch::kInt64).view({1, 1, block})).view({batch, -1});
  }
  Row row(int64_t b) const {
    Row r{features[b], {}, embeddings[b], {}, std::vector<int64_t>(blocks, 0), {}};
    for (int64_t c = 0; c < length; ++c) r.context_position.push_back(c);
    for (int64_t j = 0; j < blocks; ++j) {
      r.anchor.push_back(anchors[b][j].item<int64_t>());
      r.keep.push_back(keep[b][j].item<bool>());
    }
    return r;
  }
};

// One packed row: documents of 12, 10 and 8 tokens at rows [0, 12),
// [12, 22), [22, 30); six blocks, the fourth a padding block.
struct PackedRow {
  static constexpr int64_t length = 30, blocks = 6, block = 4;
  torch::Tensor features, embeddings, context_positions, block_positions;
  torch::Tensor anchors = torch::tensor({3, 7, 10, 13, 17, 25}, torch::kInt64).view({1, blocks});
  torch::Tensor keep = torch::tensor({true, true, true, false, true, true}).view({1, blocks});
  torch::Tensor begins = torch::tensor({0, 0, 0, 12, 12, 22}, torch::kInt64).view({1, blocks});
  explicit PackedRow(int64_t hidden) {
    torch::manual_seed(11);
    features = torch::randn({1, length, 2 * hidden}, torch::kFloat64);
    embeddings = torch::randn({1, blocks * block, hidden}, torch::kFloat64);
    context_positions =
        torch::cat({torch::arange(12), torch::arange(10), torch::arange(8)}).to(torch::kInt64).unsqueeze(0);
    const torch::Tensor anchor_positions = context_positions[0].index_select(0, anchors[0]);
    block_positions = (anchor_positions.unsqueeze(-1) + torch::arange(block, torch::kInt64)).view({1, -1});
  }
  Row row() const {
    Row r{features[0], {}, embeddings[0], {}, {}, {}};
    for (int64_t c = 0; c < length; ++c) r.context_position.push_back(context_positions[0][c].item<int64_t>());
    for (int64_t j = 0; j < blocks; ++j) {
      r.anchor.push_back(anchors[0][j].item<int64_t>());
      r.begin.push_back(begins[0][j].item<int64_t>());
      r.keep.push_back(keep[0][j].item<bool>());
    }
    return r;
  }
};

}  // namespace

TEST_CASE("Model.SlidingWindow.AQueryCountsItsOwnPositionInTheWindow") {
  // One block anchored at 5 over 8 context positions, window 4: slot k sits
  // at 5 + k and sees context c with 5 + k - c < 4 and c < 5, so slot 0 sees
  // 2..4, slot 1 3..4, slot 2 only 4, slot 3 no context; all see the block.
  const torch::Tensor anchors = torch::full({1, 1}, 5, torch::kInt64);
  for (const bool packed : {false, true}) {
    CAPTURE(packed);
    BlockAttentionPlan plan =
        packed ? plan_block_attention(anchors, torch::ones({1, 1}, torch::kBool), 8, 4, 0, torch::kCPU,
                                      torch::zeros({1, 1}, torch::kInt64))
               : plan_block_attention(anchors, torch::ones({1, 1}, torch::kBool), 8, 4, 0, torch::kCPU);
    BlockAttentionPlan whole = plan;
    add_sliding_window(whole, anchors, 4, SlidingKeys::whole_context);
    add_sliding_window(plan, anchors, 4);
    CHECK(plan.sliding_window == 4);
    const torch::Tensor full = packed ? plan.groups.at(0).visible : plan.chunks.at(0).visible;
    // Masking the whole context: [0, 5), then the block.
    const torch::Tensor masked = packed ? whole.groups.at(0).sliding_visible : whole.chunks.at(0).sliding_visible;
    REQUIRE(masked.sizes() == torch::IntArrayRef({1, 1, 4, 5 + 4}));
    const torch::Tensor expected_context =
        torch::tensor({{0, 0, 1, 1, 1}, {0, 0, 0, 1, 1}, {0, 0, 0, 0, 1}, {0, 0, 0, 0, 0}}).to(torch::kBool);
    CHECK(torch::equal(masked[0][0].narrow(1, 0, 5), expected_context));
    CHECK(torch::equal(masked[0][0].narrow(1, 5, 4), torch::ones({4, 4}, torch::kBool)));
    // Narrowed (the default): positions 0 and 1 are outside every query's
    // window, so the layer reads context [2, 5) only, with the same mask there.
    const torch::Tensor sliding = packed ? plan.groups.at(0).sliding_visible : plan.chunks.at(0).sliding_visible;
    REQUIRE(sliding.sizes() == torch::IntArrayRef({1, 1, 4, 3 + 4}));
    CHECK(torch::equal(sliding[0][0].narrow(1, 0, 3), expected_context.narrow(1, 2, 3)));
    CHECK(torch::equal(sliding[0][0].narrow(1, 3, 4), torch::ones({4, 4}, torch::kBool)));
    CHECK(plan.chunks.at(0).sliding_context_first == 2);
    CHECK(plan.chunks.at(0).sliding_context_length == 3);
    CHECK(torch::equal(full[0][0], torch::ones({4, 9}, torch::kBool)));  // the full-attention mask is untouched
  }
  BlockAttentionPlan plan = plan_block_attention(anchors, torch::ones({1, 1}, torch::kBool), 8, 4, 0, torch::kCPU);
  CHECK_THROWS_WITH_AS(add_sliding_window(plan, anchors, 3), doctest::Contains("must cover a whole block"),
                       std::invalid_argument);
}

TEST_CASE("Model.SlidingWindow.MixedLayersMatchNaiveLoops") {
  torch::set_num_threads(1);
  const DrafterSpec base = dflow::target::testing::small_drafter_spec(1, 4, 2);
  const DrafterSpec spec = with_layers(base, {"sliding_attention", "full_attention", "sliding_attention"}, 5);
  DFlashDrafter drafter = float64_drafter(spec);
  const auto w = weights_of(drafter);
  const UnpackedBatch in(spec.hidden_size);
  for (const int64_t blocks_per_chunk : {1, 3, 0}) {
    CAPTURE(blocks_per_chunk);
    const BlockAttentionPlan plan =
        windowed(plan_block_attention(in.anchors, in.keep, in.length, in.block, blocks_per_chunk, torch::kCPU),
                 in.anchors, spec);
    const torch::Tensor out = drafter->forward(in.features, in.embeddings, in.positions, plan);
    for (int64_t b = 0; b < in.batch; ++b) {
      CAPTURE(b);
      CHECK(torch::allclose(out[b], reference_forward(spec, w, in.row(b)), 1e-9, 1e-9));
    }
  }
  // The window bites: the same weights with every layer full differ.
  DFlashDrafter full = float64_drafter(with_layers(base, {"full_attention", "full_attention", "full_attention"}, 0));
  const BlockAttentionPlan plan = plan_block_attention(in.anchors, in.keep, in.length, in.block, 0, torch::kCPU);
  const torch::Tensor windowed_out =
      drafter->forward(in.features, in.embeddings, in.positions, windowed(plan, in.anchors, spec));
  CHECK_FALSE(torch::allclose(full->forward(in.features, in.embeddings, in.positions, plan), windowed_out, 1e-6, 1e-6));
  // A sliding layer refuses a plan without its window.
  CHECK_THROWS_WITH_AS(drafter->forward(in.features, in.embeddings, in.positions, plan),
                       doctest::Contains("add_sliding_window"), std::invalid_argument);
}

TEST_CASE("Model.SlidingWindow.PackedRowMatchesNaiveLoopsPerDocument") {
  torch::set_num_threads(1);
  const DrafterSpec spec =
      with_layers(dflow::target::testing::small_drafter_spec(1, 4, 2), {"sliding_attention", "full_attention"}, 5);
  DFlashDrafter drafter = float64_drafter(spec);
  const PackedRow in(spec.hidden_size);
  // One chunk per document, and chunks of one block (several groups).
  for (const int64_t blocks_per_chunk : {0, 1}) {
    CAPTURE(blocks_per_chunk);
    const BlockAttentionPlan plan = windowed(plan_block_attention(in.anchors, in.keep, in.length, in.block,
                                                                  blocks_per_chunk, torch::kCPU, in.begins),
                                             in.anchors, spec);
    REQUIRE_FALSE(plan.groups.empty());
    const torch::Tensor out =
        drafter->forward(in.features, in.context_positions, in.embeddings, in.block_positions, plan);
    CHECK(torch::allclose(out[0], reference_forward(spec, weights_of(drafter), in.row()), 1e-9, 1e-9));
  }
}

namespace {

// Narrowed and masked keys compute the same forward and gradients.
void check_same(const testing::GradientPass& narrowed, const testing::GradientPass& masked) {
  testing::check_same_pass(narrowed, masked, 1e-12, 1e-12);
}

}  // namespace

TEST_CASE("Model.SlidingWindow.NarrowedKeysEqualMaskingTheWholeContext") {
  // A sliding layer scores only the keys inside its chunks' windows; the
  // outputs and every gradient equal those of scoring the whole context and
  // masking it, and it does read fewer keys.
  torch::set_num_threads(1);
  const DrafterSpec spec = with_layers(dflow::target::testing::small_drafter_spec(1, 4, 2),
                                       {"sliding_attention", "full_attention", "sliding_attention"}, 5);
  DFlashDrafter drafter = float64_drafter(spec);
  SUBCASE("unpacked rows") {
    const UnpackedBatch in(spec.hidden_size);
    for (const int64_t blocks_per_chunk : {1, 2, 0}) {
      CAPTURE(blocks_per_chunk);
      const BlockAttentionPlan full =
          plan_block_attention(in.anchors, in.keep, in.length, in.block, blocks_per_chunk, torch::kCPU);
      BlockAttentionPlan narrowed = full, masked = full;
      add_sliding_window(narrowed, in.anchors, spec.sliding_window);
      add_sliding_window(masked, in.anchors, spec.sliding_window, SlidingKeys::whole_context);
      int64_t narrowed_keys = 0, masked_keys = 0;
      for (size_t c = 0; c < full.chunks.size(); ++c) {
        narrowed_keys += narrowed.chunks[c].sliding_context_length;
        masked_keys += masked.chunks[c].sliding_context_length;
      }
      if (blocks_per_chunk == 1) CHECK(narrowed_keys < masked_keys);
      auto run = [&](const BlockAttentionPlan& plan) {
        return testing::gradient_pass(
            drafter, [&](const torch::Tensor& f) { return drafter->forward(f, in.embeddings, in.positions, plan); },
            in.features, 31);
      };
      check_same(run(narrowed), run(masked));
    }
  }
  SUBCASE("a packed row") {
    const PackedRow in(spec.hidden_size);
    for (const int64_t blocks_per_chunk : {1, 0}) {
      CAPTURE(blocks_per_chunk);
      const BlockAttentionPlan full =
          plan_block_attention(in.anchors, in.keep, in.length, in.block, blocks_per_chunk, torch::kCPU, in.begins);
      BlockAttentionPlan narrowed = full, masked = full;
      add_sliding_window(narrowed, in.anchors, spec.sliding_window);
      add_sliding_window(masked, in.anchors, spec.sliding_window, SlidingKeys::whole_context);
      int64_t narrowed_keys = 0, masked_keys = 0;
      for (size_t g = 0; g < full.groups.size(); ++g) {
        narrowed_keys += narrowed.groups[g].num_chunks * narrowed.groups[g].max_sliding_context;
        masked_keys += masked.groups[g].num_chunks * masked.groups[g].max_sliding_context;
      }
      if (blocks_per_chunk == 1) CHECK(narrowed_keys < masked_keys);
      auto run = [&](const BlockAttentionPlan& plan) {
        return testing::gradient_pass(
            drafter,
            [&](const torch::Tensor& f) { return drafter->forward(f, in.context_positions, in.embeddings, in.block_positions, plan); },
            in.features, 31);
      };
      check_same(run(narrowed), run(masked));
    }
  }
}

TEST_CASE("Model.SlidingWindow.AWindowCoveringTheContextIsFullAttentionBitForBit") {
  torch::set_num_threads(1);
  const DrafterSpec base = dflow::target::testing::small_drafter_spec(1, 4, 2);
  const std::vector<std::string> all_full = {"full_attention", "full_attention"};
  const std::vector<std::string> mixed = {"sliding_attention", "full_attention"};
  // Query positions reach anchor + Bs - 1 <= S + Bs - 3: a window of S + Bs
  // reaches position 0 from every query.
  SUBCASE("unpacked rows") {
    const UnpackedBatch in(base.hidden_size);
    const DrafterSpec wide = with_layers(base, mixed, in.length + in.block);
    DFlashDrafter full = float64_drafter(with_layers(base, all_full, 0)), sliding = float64_drafter(wide);
    for (const int64_t blocks_per_chunk : {1, 0}) {
      const BlockAttentionPlan plan =
          plan_block_attention(in.anchors, in.keep, in.length, in.block, blocks_per_chunk, torch::kCPU);
      CHECK(torch::equal(sliding->forward(in.features, in.embeddings, in.positions, windowed(plan, in.anchors, wide)),
                         full->forward(in.features, in.embeddings, in.positions, plan)));
    }
  }
  SUBCASE("a packed row") {
    const PackedRow in(base.hidden_size);
    const DrafterSpec wide = with_layers(base, mixed, in.length + in.block);
    DFlashDrafter full = float64_drafter(with_layers(base, all_full, 0)), sliding = float64_drafter(wide);
    const BlockAttentionPlan plan =
        plan_block_attention(in.anchors, in.keep, in.length, in.block, 0, torch::kCPU, in.begins);
    CHECK(torch::equal(sliding->forward(in.features, in.context_positions, in.embeddings, in.block_positions,
                                        windowed(plan, in.anchors, wide)),
                       full->forward(in.features, in.context_positions, in.embeddings, in.block_positions, plan)));
  }
}

TEST_CASE("Model.SlidingWindow.DraftingAppliesTheWindow") {
  torch::set_num_threads(1);
  const dflow::target::TargetModel target = dflow::target::TargetModel::load(dflow::target::testing::tiny_target_dir());
  DrafterOptions options;
  options.num_layers = 2;
  options.block_size = 4;
  options.num_target_features = 2;
  options.layer_types = {"sliding_attention", "full_attention"};
  options.sliding_window = 4;
  DFlashDrafter drafter(make_drafter_spec(target.config(), options), 17);
  torch::manual_seed(3);
  const torch::Tensor ids = torch::randint(0, 500, {1, 12}, torch::kInt64);
  const torch::Tensor features = target.context_features(ids, drafter->spec().target_layer_ids);
  DrafterContextCache cache;
  cache.append(*drafter, features.narrow(1, 0, 7));
  cache.append(*drafter, features.narrow(1, 7, 5));
  const torch::Tensor logits = drafter_block_logits(*drafter, target, cache, 33);

  // The training path over the same context: one block at anchor 12.
  torch::NoGradGuard no_grad;
  const int64_t mask = drafter->spec().mask_token_id;
  const torch::Tensor block = torch::tensor({int64_t{33}, mask, mask, mask}).unsqueeze(0);
  const torch::Tensor anchors = torch::full({1, 1}, 12, torch::kInt64);
  const torch::Tensor positions = (torch::arange(4, torch::kInt64) + 12).unsqueeze(0);
  const BlockAttentionPlan plan =
      windowed(plan_block_attention(anchors, torch::ones({1, 1}, torch::kBool), 12, 4, 0, torch::kCPU), anchors,
               drafter->spec());
  const torch::Tensor hidden = drafter->forward(features, target.embed(block), positions, plan);
  const torch::Tensor expected = target.lm_head(hidden.narrow(1, 1, 3))[0];
  CHECK(torch::allclose(logits, expected.to(torch::kFloat32), 1e-5, 1e-5));
  // Drafting without the window would differ.
  options.layer_types = {"full_attention", "full_attention"};
  options.sliding_window = 0;
  DFlashDrafter full(make_drafter_spec(target.config(), options), 17);
  CHECK_FALSE(torch::allclose(drafter_block_logits(*full, target, cache, 33), logits, 1e-4, 1e-4));
}

TEST_CASE("Model.SlidingWindow.SpecRefusesInconsistentLayers") {
  const DrafterSpec base = dflow::target::testing::small_drafter_spec(2, 4, 2);
  auto refusal = [&](std::vector<std::string> types, int64_t window) {
    DrafterSpec spec = base;
    spec.layer_types = std::move(types);
    spec.sliding_window = window;
    try {
      spec.validate();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refusal({"sliding_attention"}, 8).find("layer_types has 1 entries for 2 draft layers") != std::string::npos);
  CHECK(refusal({"sliding", "full_attention"}, 8).find("layer type 'sliding'") != std::string::npos);
  const std::vector<std::string> mixed = {"sliding_attention", "full_attention"};
  CHECK(refusal(mixed, 0).find("at least block_size (4), got 0") != std::string::npos);
  CHECK(refusal(mixed, 3).find("got 3") != std::string::npos);
  CHECK(refusal({"full_attention", "full_attention"}, 8).find("without a sliding_attention layer") != std::string::npos);
  CHECK(refusal(mixed, 4) == "accepted");
  CHECK(refusal({}, 0) == "accepted");
}

TEST_CASE("Model.SlidingWindow.ConfigJsonRoundTrip") {
  torch::set_num_threads(1);
  ScratchDir dir("sliding-io");
  const DrafterSpec spec = with_layers(dflow::target::testing::small_drafter_spec(1, 4, 2),
                                       {"sliding_attention", "sliding_attention", "full_attention"}, 6);
  DFlashDrafter drafter = float64_drafter(spec);
  save_pretrained(*drafter, dir.path());

  // The names z-lab's model.py, SGLang and vLLM read, and a bidirectional block.
  nlohmann::json config = dflow::target::read_json_file(dir.path() / "config.json");
  CHECK(config["layer_types"] == nlohmann::json({"sliding_attention", "sliding_attention", "full_attention"}));
  CHECK(config["sliding_window"] == 6);
  CHECK(config["use_sliding_window"] == true);
  CHECK(config["is_causal"] == false);

  DFlashDrafter loaded = load_pretrained(dir.path());
  CHECK(loaded->spec().layer_types == spec.layer_types);
  CHECK(loaded->spec().sliding_window == 6);
  const UnpackedBatch in(spec.hidden_size);
  torch::NoGradGuard no_grad;
  const BlockAttentionPlan plan =
      windowed(plan_block_attention(in.anchors, in.keep, in.length, in.block, 0, torch::kCPU), in.anchors, spec);
  CHECK(torch::equal(loaded->forward(in.features, in.embeddings, in.positions, plan),
                     drafter->forward(in.features, in.embeddings, in.positions, plan)));

  // Hugging Face's own rule when layer_types is absent: from max_window_layers on.
  nlohmann::json derived = config;
  derived.erase("layer_types");
  derived["max_window_layers"] = 2;
  CHECK(drafter_spec_from_config(derived, "derived.json").layer_types ==
        std::vector<std::string>{"full_attention", "full_attention", "sliding_attention"});
  // A drafter whose blocks the public loaders would run causally is refused.
  nlohmann::json causal_by_default = config;
  causal_by_default.erase("is_causal");
  CHECK_THROWS_WITH_AS(drafter_spec_from_config(causal_by_default, "public.json"),
                       doctest::Contains("without \"is_causal\": false"), std::runtime_error);
  nlohmann::json causal = config;
  causal["is_causal"] = true;
  CHECK_THROWS_WITH_AS(drafter_spec_from_config(causal, "causal.json"), doctest::Contains("is_causal"),
                       std::runtime_error);
  nlohmann::json no_window = config;
  no_window.erase("sliding_window");
  CHECK_THROWS_WITH_AS(drafter_spec_from_config(no_window, "no-window.json"), doctest::Contains("sliding_window"),
                       std::runtime_error);

  // A drafter without sliding layers exports as before: no layer_types, no window.
  const nlohmann::json plain =
      drafter_config_json(dflow::target::testing::small_drafter_spec(1, 4, 2), torch::kFloat32);
  CHECK_FALSE(plain.contains("layer_types"));
  CHECK_FALSE(plain.contains("is_causal"));
  CHECK(plain["use_sliding_window"] == false);
}
