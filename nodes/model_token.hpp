#pragma once
// The model token (invariant 1: one owner of the drafter's parameters at a
// time). It *is* the trainable state: the drafter, its optimizer, the guard,
// progress and the live quarantine travel inside it, so drafter_step,
// accumulate and optimizer_step reach parameters only through the token they
// hold — the type system, not a comment, keeps two nodes from touching them
// at once. Move-only.
//
// The graph runtime places a plain graph::Token on the token edge at start;
// the first holder exchanges it for the state through StateHome::claim(),
// which hands the state out exactly once.
#include <memory>
#include <mutex>

#include "graph/message.hpp"

namespace dflow::nodes {

class TrainableState;

struct ModelToken {
  std::unique_ptr<TrainableState> state;
  TrainableState& operator*() const { return *state; }
  TrainableState* operator->() const { return state.get(); }
};

// Holds the trainable state until the token's first holder claims it.
class StateHome {
 public:
  explicit StateHome(std::unique_ptr<TrainableState> state);
  ~StateHome();
  // The state, once; a second claim (a token cycle declared with more than
  // one initial token) throws.
  ModelToken claim();
  // The token as a message's payload: a ModelToken, or the runtime's initial
  // graph::Token exchanged for the state.
  ModelToken take(graph::Message& message);

 private:
  std::mutex mutex_;
  std::unique_ptr<TrainableState> state_;
  bool claimed_ = false;
};

}  // namespace dflow::nodes
