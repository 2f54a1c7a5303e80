// Speculative decoding against a Qwen3.5 target (a tiny random wrapper
// written by transformers, tests/target/hf_qwen3_5_reference.py): every
// rejected draft sends the linear-attention layers' states back to the
// verified block's start and feeds its accepted tokens again, and the output
// is still exactly the target's own greedy continuation.
#include <doctest/doctest.h>

#include "drafter/speculative.hpp"
#include "target/hf_reference_fixtures.hpp"
#include "target/model_fixtures.hpp"
#include "test_paths.hpp"
#include "tools/run_command.hpp"

using namespace dflow::drafter;
using dflow::target::testing::ScratchDir;
namespace fs = std::filesystem;

TEST_CASE("Model.Speculative.Qwen3_5Reference.GreedyEqualsTargetGreedyThroughTheStatesRollback") {
  static ScratchDir dir("spec-qwen3_5");
  const std::string name = "qwen3_5-dense-untied";
  dflow::target::testing::write_with_python("hf_qwen3_5_reference.py", dir.path(), name);

  torch::set_num_threads(1);
  const dflow::target::TargetModel target = dflow::target::TargetModel::load(dir.path() / name);
  REQUIRE(target.config().has_linear_attention());
  DrafterOptions options;
  options.num_layers = 1;
  options.block_size = 4;
  options.target_layer_ids = {1, 3};  // a linear layer and the full one
  options.mask_token_id = 511;        // the last row of the random embedding
  DFlashDrafter drafter(make_drafter_spec(target.config(), options), 17);
  torch::manual_seed(12);
  for (int64_t i = 0; i < 4; ++i) {
    const torch::Tensor ids = torch::randint(0, 512, {3 + 5 * i}, torch::kInt64);
    const std::vector<int64_t> prompt(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
    CAPTURE(i);
    const SpeculativeResult result = speculative_generate(*drafter, target, prompt, 20, {});
    CHECK(result.tokens == target.generate(prompt, 20, 0.0, 0, {}));
    CHECK(result.acceptance_lengths.size() > 1);  // several blocks verified, each followed by a truncation
  }
}
