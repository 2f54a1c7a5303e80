#include "nodes/model_token.hpp"

#include <stdexcept>

#include "nodes/trainable_state.hpp"

namespace dflow::nodes {

StateHome::StateHome(std::unique_ptr<TrainableState> state) : state_(std::move(state)) {}
StateHome::~StateHome() = default;

ModelToken StateHome::claim() {
  std::lock_guard lock(mutex_);
  if (claimed_)
    throw std::logic_error(
        "a second model token: the token cycle of drafter_step / accumulate / optimizer_step must start with exactly "
        "one token (initial: 1 on one token edge), since one owner holds the drafter's parameters at a time");
  claimed_ = true;
  return ModelToken{std::move(state_)};
}

ModelToken StateHome::take(graph::Message& message) {
  if (message.type == std::type_index(typeid(graph::Token))) return claim();
  return std::move(graph::payload<ModelToken>(message));
}

}  // namespace dflow::nodes
