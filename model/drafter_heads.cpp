// DSpark's Markov and confidence heads (speculators' models/dspark
// model_definitions.py math), declared in model/drafter.hpp.
#include <stdexcept>

#include "model/drafter.hpp"

namespace dflow::model {

MarkovHeadImpl::MarkovHeadImpl(const DrafterSpec& spec)
    : type_(spec.heads.markov_type), rank_(spec.heads.markov_rank) {
  if (rank_ < 1) throw std::invalid_argument("MarkovHead: markov_rank must be >= 1, got " + std::to_string(rank_));
  const int64_t hidden = spec.hidden_size;
  markov_w1 = register_module("markov_w1", torch::nn::Embedding(spec.vocab_size, rank_));
  markov_w2 = register_module("markov_w2", torch::nn::Linear(torch::nn::LinearOptions(rank_, spec.vocab_size).bias(false)));
  if (type_ == "gated") {
    gate_proj = register_module("gate_proj", torch::nn::Linear(hidden + rank_, rank_));
  } else if (type_ == "rnn") {
    joint_proj = register_module("joint_proj", torch::nn::Linear(2 * rank_ + hidden, 3 * rank_));
  } else if (type_ != "vanilla") {
    throw std::invalid_argument("MarkovHead: markov_type must be vanilla, gated or rnn, got '" + type_ + "'");
  }
}

torch::Tensor MarkovHeadImpl::prev_embeddings(const torch::Tensor& token_ids) {
  return markov_w1->forward(token_ids.to(markov_w1->weight.device(), torch::kInt64));
}

namespace {

// One rnn step: state [K, r], prev embedding [K, r], hidden [K, H] -> (new state, u).
std::pair<torch::Tensor, torch::Tensor> rnn_step(torch::nn::Linear& joint, const torch::Tensor& state,
                                                 const torch::Tensor& prev, const torch::Tensor& hidden) {
  const auto parts = joint->forward(torch::cat({state, prev, hidden}, -1)).chunk(3, -1);
  const torch::Tensor gate = torch::sigmoid(parts[0]);
  const torch::Tensor next = gate * state + (1.0 - gate) * torch::tanh(parts[1]);
  return {next, torch::tanh(parts[2])};
}

}  // namespace

torch::Tensor MarkovHeadImpl::block_features(const torch::Tensor& prev_tokens, const torch::Tensor& hidden) {
  if (prev_tokens.dim() != 2 || hidden.dim() != 3 || hidden.sizes().slice(0, 2) != prev_tokens.sizes()) {
    throw std::invalid_argument("MarkovHead: need prev_tokens [K, Bs] and hidden [K, Bs, H], got " +
                                c10::str(prev_tokens.sizes()) + " and " + c10::str(hidden.sizes()));
  }
  const torch::Tensor prev = prev_embeddings(prev_tokens).to(markov_w2->weight.scalar_type());  // [K, Bs, r]
  if (type_ == "vanilla") return prev;
  const torch::Tensor h = hidden.to(prev.scalar_type());
  if (type_ == "gated") return torch::sigmoid(gate_proj->forward(torch::cat({h, prev}, -1))) * prev;
  torch::Tensor state = prev.new_zeros({prev.size(0), rank_});
  std::vector<torch::Tensor> outputs;
  for (int64_t k = 0; k < prev.size(1); ++k) {
    auto [next, u] = rnn_step(joint_proj, state, prev.select(1, k), h.select(1, k));
    state = next;
    outputs.push_back(u);
  }
  return torch::stack(outputs, 1);
}

torch::Tensor MarkovHeadImpl::step_features(const torch::Tensor& prev_token, const torch::Tensor& hidden,
                                            MarkovState& state) {
  if (prev_token.dim() != 1 || hidden.dim() != 2 || hidden.size(0) != prev_token.size(0)) {
    throw std::invalid_argument("MarkovHead: need prev_token [K] and hidden [K, H], got " +
                                c10::str(prev_token.sizes()) + " and " + c10::str(hidden.sizes()));
  }
  const torch::Tensor prev = prev_embeddings(prev_token).to(markov_w2->weight.scalar_type());  // [K, r]
  if (type_ == "vanilla") return prev;
  const torch::Tensor h = hidden.to(prev.scalar_type());
  if (type_ == "gated") return torch::sigmoid(gate_proj->forward(torch::cat({h, prev}, -1))) * prev;
  if (!state.state.defined()) state.state = prev.new_zeros({prev.size(0), rank_});
  auto [next, u] = rnn_step(joint_proj, state.state, prev, h);
  state.state = next;
  return u;
}

ConfidenceHeadImpl::ConfidenceHeadImpl(int64_t input_dim) {
  proj = register_module("proj", torch::nn::Linear(input_dim, 1));
}

torch::Tensor DFlashDrafterImpl::confidence_logits(const torch::Tensor& hidden, const torch::Tensor& prev_embedding) {
  if (!confidence_head) throw std::invalid_argument("DFlashDrafter: no confidence head (heads.confidence is off)");
  const auto dtype = confidence_head->proj->weight.scalar_type();
  if (!spec_.heads.confidence_with_markov) return confidence_head->forward(hidden.to(dtype));
  if (!prev_embedding.defined() || prev_embedding.dim() != hidden.dim() ||
      prev_embedding.sizes().slice(0, hidden.dim() - 1) != hidden.sizes().slice(0, hidden.dim() - 1)) {
    throw std::invalid_argument("DFlashDrafter: the confidence head takes the Markov embedding too "
                                "(confidence_with_markov): need prev_embedding [..., r] beside hidden " +
                                c10::str(hidden.sizes()));
  }
  return confidence_head->forward(torch::cat({hidden.to(dtype), prev_embedding.to(dtype)}, -1));
}

}  // namespace dflow::model
