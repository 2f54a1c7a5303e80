// Activation recomputation (drafter_step params.recompute): the same outputs
// and gradients as keeping every layer's activations, in float64 so that any
// difference in the math would show; and less memory held, by the amount the
// memory model (drafter/drafter_memory.hpp) says, measured with a counting CPU
// allocator.
#include <doctest/doctest.h>

#include "drafter/cpu_memory_counter.hpp"
#include "drafter/drafter_memory.hpp"
#include "gradient_pass.hpp"
#include "target/model_fixtures.hpp"

using namespace dflow::drafter;
namespace testing = dflow::target::testing;

namespace {

DrafterSpec mixed_spec(int64_t hidden, int64_t layers, int64_t window) {
  dflow::target::HFConfig target;
  target.hidden_size = hidden;
  target.num_hidden_layers = 6;
  target.num_attention_heads = 4;
  target.num_key_value_heads = 2;
  target.head_dim = hidden / 4;
  target.intermediate_size = 3 * hidden;
  target.vocab_size = 50;
  target.max_position_embeddings = 4096;
  target.rope_theta = 10000.0;
  target.mask_token_id = 49;
  DrafterOptions options;
  options.num_layers = layers;
  options.block_size = 4;
  options.num_target_features = 2;
  options.layer_types.assign(static_cast<size_t>(layers), "sliding_attention");
  options.layer_types.back() = "full_attention";
  options.sliding_window = window;
  return make_drafter_spec(target, options);
}

struct Batch {
  torch::Tensor features, embeddings, positions, anchors, keep;
};

// Two rows of `length` tokens, `blocks` sorted anchors each, the second row with a padding block.
Batch batch_of(const DrafterSpec& spec, int64_t length, int64_t blocks, torch::Dtype dtype) {
  torch::manual_seed(17);
  Batch b;
  const int64_t block = spec.block_size;
  b.anchors = std::get<0>(torch::randint(1, length - 1, {2, blocks}, torch::kInt64).sort(1));
  b.keep = torch::ones({2, blocks}, torch::kBool);
  b.keep[1][blocks - 1] = false;
  b.features = torch::randn({2, length, spec.num_features() * spec.hidden_size}, dtype);
  b.embeddings = torch::randn({2, blocks * block, spec.hidden_size}, dtype);
  b.positions = (b.anchors.unsqueeze(-1) + torch::arange(block, torch::kInt64)).view({2, -1});
  return b;
}

testing::GradientPass forward_backward(DFlashDrafter& drafter, const Batch& b, const BlockAttentionPlan& plan, bool recompute) {
  return testing::gradient_pass(
      drafter, [&](const torch::Tensor& f) { return drafter->forward(f, b.embeddings, b.positions, plan, recompute); },
      b.features, 5);
}

BlockAttentionPlan plan_for(const DrafterSpec& spec, const Batch& b, int64_t length, int64_t blocks_per_chunk) {
  BlockAttentionPlan plan = plan_block_attention(b.anchors, b.keep, length, spec.block_size, blocks_per_chunk, torch::kCPU);
  add_sliding_window(plan, b.anchors, spec.sliding_window);
  return plan;
}

}  // namespace

TEST_CASE("Model.Recompute.SameOutputsAndGradients") {
  torch::set_num_threads(1);
  const DrafterSpec spec = mixed_spec(32, 3, 6);
  DFlashDrafter drafter(spec, 3);
  drafter->to(torch::kFloat64);
  {
    torch::NoGradGuard no_grad;
    torch::manual_seed(2);
    for (auto& p : drafter->parameters()) p.add_(torch::randn_like(p) * 0.3);
  }
  const Batch b = batch_of(spec, 24, 5, torch::kFloat64);
  for (const int64_t blocks_per_chunk : {1, 0}) {
    CAPTURE(blocks_per_chunk);
    const BlockAttentionPlan plan = plan_for(spec, b, 24, blocks_per_chunk);
    const auto kept = forward_backward(drafter, b, plan, false);
    const auto recomputed = forward_backward(drafter, b, plan, true);
    testing::check_same_pass(recomputed, kept, 1e-13, 1e-12);
  }
  // Without grad mode it is the plain forward.
  torch::NoGradGuard no_grad;
  const BlockAttentionPlan plan = plan_for(spec, b, 24, 0);
  CHECK(torch::equal(drafter->forward(b.features, b.embeddings, b.positions, plan, true),
                     drafter->forward(b.features, b.embeddings, b.positions, plan, false)));
}

TEST_CASE("Model.Recompute.HoldsLessByWhatTheMemoryModelSays") {
  // Peak bytes of one forward + backward, counted by the CPU allocator, at
  // two anchor counts: the growth per anchor with and without recomputation
  // against the memory model's per-anchor bytes.
  torch::set_num_threads(1);
  const DrafterSpec spec = mixed_spec(64, 4, 64);
  DFlashDrafter drafter(spec, 3);
  const int64_t length = 512;
  auto peak_of = [&](int64_t blocks, bool recompute) {
    drafter->zero_grad();
    CpuMemoryCounter counter;  // the batch's block embeddings and the plan's masks count too
    const Batch b = batch_of(spec, length, blocks, torch::kFloat32);
    const int64_t blocks_per_chunk = blocks_per_chunk_for_budget(2, spec.num_attention_heads, length, spec.block_size, 1 << 18);
    const BlockAttentionPlan plan = plan_for(spec, b, length, blocks_per_chunk);
    const torch::Tensor out = drafter->forward(b.features, b.embeddings, b.positions, plan, recompute);
    out.square().sum().backward();
    return static_cast<double>(counter.peak_bytes());
  };
  auto modelled = [&](int64_t blocks, bool recompute) {
    DrafterMemoryShape shape;
    shape.rows = 2;
    shape.context_length = length;
    shape.anchors_per_sequence = blocks;
    shape.recompute_layers = recompute;
    shape.max_attention_scores_per_chunk = 1 << 18;
    return estimate_drafter_memory(spec, shape).per_anchor_bytes;
  };
  const int64_t few = 32, many = 96;
  const double anchors = 2.0 * static_cast<double>(many - few);
  const double kept = (peak_of(many, false) - peak_of(few, false)) / anchors;
  const double recomputed = (peak_of(many, true) - peak_of(few, true)) / anchors;
  MESSAGE("per anchor: kept ", kept, " B (model ", modelled(many, false), "), recomputed ", recomputed, " B (model ",
          modelled(many, true), ")");
  CHECK(recomputed < 0.6 * kept);
  CHECK(kept == doctest::Approx(modelled(many, false)).epsilon(0.35));
  CHECK(recomputed == doctest::Approx(modelled(many, true)).epsilon(0.35));
}
