#pragma once
// A drafter forward and the gradients of a fixed random projection of it,
// against every parameter and the context features, and the check that two
// ways of computing it agree (sliding keys narrowed against masked, layers
// recomputed against kept).
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <functional>
#include <vector>

#include "drafter/drafter.hpp"

namespace dflow::target::testing {

using namespace dflow::drafter;  // the drafter tests' helpers sit beside the target fixtures

struct GradientPass {
  torch::Tensor out, feature_grad;
  std::vector<torch::Tensor> grads;  // one per drafter parameter, in order
};

// `forward` maps the (leaf) features to the drafter's output; the projection
// is drawn with `seed`, so two passes of one seed take the same one.
inline GradientPass gradient_pass(DFlashDrafter& drafter, const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                                  const torch::Tensor& features, uint64_t seed) {
  drafter->zero_grad();
  const torch::Tensor leaf = features.clone().set_requires_grad(true);
  GradientPass p;
  p.out = forward(leaf);
  torch::manual_seed(seed);
  (p.out * torch::randn(p.out.sizes(), p.out.options())).sum().backward();
  p.feature_grad = leaf.grad();
  for (const auto& param : drafter->parameters()) p.grads.push_back(param.grad().clone());
  return p;
}

inline void check_same_pass(const GradientPass& a, const GradientPass& b, double out_tolerance, double grad_tolerance) {
  CHECK(torch::allclose(a.out, b.out, out_tolerance, out_tolerance));
  CHECK(torch::allclose(a.feature_grad, b.feature_grad, grad_tolerance, grad_tolerance));
  REQUIRE(a.grads.size() == b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    CAPTURE(i);
    CHECK(torch::allclose(a.grads[i], b.grads[i], grad_tolerance, grad_tolerance));
  }
}

}  // namespace dflow::target::testing
