// The objective tests' rig: two padded samples, a one-layer drafter with
// perturbed weights, a random frozen embedding and LM head, and fixed anchors
// (shared by test_objective.cpp and test_dpace.cpp).
#pragma once

#include <torch/torch.h>

#include "drafter/objective.hpp"
#include "target/model_fixtures.hpp"

namespace dflow::target::testing {

using namespace dflow::drafter;  // the drafter tests' helpers sit beside the target fixtures

// Two samples of a batch padded to S = 12; sample 1 is shorter (9) and has a
// prompt of 4 tokens; sample 0 has a hole in its loss mask.
struct Batch {
  torch::Tensor input_ids, loss_mask, lengths;
  Batch() {
    torch::manual_seed(4);
    input_ids = torch::randint(0, 49, {2, 12}, torch::kInt64);
    loss_mask = torch::tensor({0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1,  //
                               0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0},
                              torch::kInt64)
                    .view({2, 12});
    lengths = torch::tensor({12, 9}, torch::kInt64);
    input_ids[1].narrow(0, 9, 3).fill_(0);  // right padding
  }
};

struct Rig {
  DrafterSpec spec = small_drafter_spec(1, 4, 2);
  DFlashDrafter drafter{spec, 8};
  torch::Tensor embedding, lm_head, features;
  Batch batch;
  explicit Rig(torch::Dtype dtype = torch::kFloat32) {
    torch::set_num_threads(1);
    drafter->to(dtype);
    torch::manual_seed(12);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : drafter->parameters()) p.add_(torch::randn_like(p) * 0.2);
    }
    embedding = torch::randn({spec.vocab_size, spec.hidden_size}, dtype);
    lm_head = torch::randn({spec.vocab_size, spec.hidden_size}, dtype) * 0.3;
    features = torch::randn({2, 12, 2 * spec.hidden_size}, dtype);
  }
  ObjectiveOutput loss(const AnchorBatch& anchors, ObjectiveOptions options = {}) {
    options.loss_decay_gamma = options.loss_decay_gamma > 0 ? options.loss_decay_gamma : 2.0;
    return dflash_loss(*drafter, embedding, lm_head, features, batch.input_ids, batch.loss_mask, batch.lengths, anchors,
                       options);
  }
};

inline AnchorBatch fixed_anchors() {
  AnchorBatch anchors;
  anchors.anchor_positions = torch::tensor({2, 6, 9, 4, 7, 0}, torch::kInt64).view({2, 3});
  anchors.block_keep = torch::tensor({1, 1, 1, 1, 1, 0}, torch::kInt64).view({2, 3}).to(torch::kBool);
  return anchors;
}

}  // namespace dflow::target::testing
