// What a loss holds while it computes one chunk: each loss declares its peak
// in [rows, vocabulary] buffers (DraftLoss::chunk_buffers), which the memory
// model and the fit check read; a counting allocator measures it here.
#include <doctest/doctest.h>

#include <yaml-cpp/yaml.h>

#include <map>

#include "config/yaml_reader.hpp"
#include "drafter/cpu_memory_counter.hpp"
#include "drafter/drafter_memory.hpp"
#include "drafter/kind.hpp"
#include "drafter/loss.hpp"
#include "target/model_fixtures.hpp"

using namespace dflow::drafter;
using dflow::config::YamlSection;

namespace {

// The measured peak of one chunk of `mix`, in [rows, V] float32 buffers, the
// draft logits and the teacher's (allocated while counting) included.
double measured_buffers(const LossMix& mix, double temperature, bool gradient) {
  const int64_t rows = 64, vocab = 4096;
  torch::manual_seed(3);
  const torch::Tensor draft = torch::randn({rows, vocab}), teacher = torch::randn({rows, vocab});
  const torch::Tensor labels = torch::randint(vocab, {rows, 1}, torch::kInt64), weights = torch::rand({rows});
  CpuMemoryCounter counter;
  LossChunk chunk{draft.clone(), labels, mix.needs_teacher() ? teacher.clone() : torch::Tensor(), weights,
                  temperature, /*stats=*/true, gradient};
  { const LossChunkResult result = mixed_chunk(mix, chunk); }
  return static_cast<double>(counter.peak_bytes()) / static_cast<double>(rows * vocab * 4);
}

}  // namespace

TEST_CASE("Model.LossMemory.EachLossHoldsAtMostTheBuffersItDeclares") {
  torch::set_num_threads(1);
  std::vector<LossMix> mixes;
  for (const std::string& name : draft_loss_names()) mixes.push_back(LossMix::single(name));
  mixes.push_back(LossMix{{{"ce", 0.1}, {"tv", 0.9}}});
  mixes.push_back(LossMix{{{"kl", 0.5}, {"js", 0.5}}});
  for (const LossMix& mix : mixes)
    for (const double temperature : {1.0, 2.0}) {
      CAPTURE(mix.text());
      CAPTURE(temperature);
      const double declared = mix.chunk_buffers(temperature), measured = measured_buffers(mix, temperature, true);
      // Rows' vectors ([c] and [c, 1]) come on top of the [c, V] buffers.
      CHECK(measured <= declared + 0.02);
      CHECK(measured >= declared - 0.5);  // declared tightly: the fit check would refuse batches that fit
      CHECK(measured_buffers(mix, temperature, false) <= declared + 0.02);  // statistics alone hold no more
    }
  // A mix's last term runs in place of the chunk's logits: ce then tv holds
  // tv's buffers and the summed gradient, not a third copy of the inputs.
  CHECK(LossMix({{{"ce", 0.1}, {"tv", 0.9}}}).chunk_buffers(1.0) == doctest::Approx(5.25));
}

TEST_CASE("Model.LossMemory.TheFitCountsEveryKindsModulesAndTheLossesBuffers") {
  torch::set_num_threads(1);
  const dflow::target::HFConfig target = dflow::target::load_hf_config(dflow::target::testing::tiny_target_dir());
  // Each kind at its defaults, but DSpine's transfer_rank, which a run
  // resolves from the target's LM head (set here, as this drafter is built
  // without a run), and its message width.
  const std::map<std::string, std::string> fitting = {{"dspine", "{transfer_rank: 16, message_size: 16}"}};
  for (const std::string& name : drafter_kind_names()) {
    CAPTURE(name);
    const DrafterKind& kind = drafter_kind(name);
    YamlSection params(fitting.count(name) ? YAML::Load(fitting.at(name)) : YAML::Node(YAML::NodeType::Map), "params",
                       std::make_shared<dflow::config::Origins>());
    DrafterOptions options;
    options.num_layers = 2;
    options.block_size = 4;
    options.kind = name;
    options.kind_fields = kind.spec_fields(kind.read_params(params));
    DFlashDrafter drafter(make_drafter_spec(target, options), 1);
    int64_t trained = 0, frozen = 0;
    for (const auto& p : drafter->parameters()) (p.requires_grad() ? trained : frozen) += p.numel();
    // float32: weights and gradients, AdamW's two moments; the frozen
    // embedding and LM head are the target's, not the drafter's parameters.
    DrafterMemoryShape shape;
    shape.context_length = 16;
    shape.anchors_per_sequence = 2;
    const DrafterMemoryEstimate estimate = estimate_drafter_memory(drafter->spec(), shape);
    CHECK(estimate.parameter_bytes == doctest::Approx(16.0 * static_cast<double>(trained)));
    CHECK(estimate.frozen_bytes == doctest::Approx(4.0 * static_cast<double>(frozen + 2 * target.vocab_size * target.hidden_size)));
  }
  // The loss's buffers: kl holds more per chunk of logits than ce, and the
  // target's last hidden state per token and per slot.
  const DrafterSpec spec = make_drafter_spec(target, DrafterOptions{});
  DrafterMemoryShape ce, kl;
  ce.context_length = kl.context_length = 64;
  ce.anchors_per_sequence = kl.anchors_per_sequence = 8;
  kl.loss_chunk_buffers = LossMix::single("kl").chunk_buffers(1.0);
  kl.teacher = true;
  const DrafterMemoryEstimate a = estimate_drafter_memory(spec, ce), b = estimate_drafter_memory(spec, kl);
  const double logits = 8.0 * spec.block_size * static_cast<double>(spec.vocab_size);
  CHECK(b.transient_bytes - a.transient_bytes == doctest::Approx(logits * 4));
  CHECK(b.context_bytes - a.context_bytes == doctest::Approx(64.0 * spec.hidden_size * 4));
  CHECK(b.per_anchor_bytes - a.per_anchor_bytes == doctest::Approx(spec.block_size * spec.hidden_size * 4.0));
}
