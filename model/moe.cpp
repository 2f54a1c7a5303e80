// Routed experts grouped by expert (model/moe.hpp).
#include "model/moe.hpp"

#include <stdexcept>

namespace dflow::model {

torch::Tensor routed_experts(const torch::Tensor& /*x*/, const ExpertWeights& /*weights*/,
                             const ExpertOptions& /*options*/) {
  throw std::logic_error("routed_experts is not implemented yet");
}

}  // namespace dflow::model
