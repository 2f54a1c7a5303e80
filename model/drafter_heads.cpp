// DSpark's Markov and confidence heads (model/drafter.hpp), speculators'
// math (models/dspark/model_definitions.py).
#include <stdexcept>

#include "model/drafter.hpp"

namespace dflow::model {

MarkovHeadImpl::MarkovHeadImpl(const DrafterSpec& spec) : type_(spec.heads.markov_type), rank_(spec.heads.markov_rank) {
  const int64_t r = rank_, hidden = spec.hidden_size;
  markov_w1 = register_module("markov_w1", torch::nn::Embedding(spec.vocab_size, r));
  markov_w2 = register_module("markov_w2", torch::nn::Linear(torch::nn::LinearOptions(r, spec.vocab_size).bias(false)));
  if (type_ == "gated") gate_proj = register_module("gate_proj", torch::nn::Linear(hidden + r, r));
  if (type_ == "rnn") joint_proj = register_module("joint_proj", torch::nn::Linear(2 * r + hidden, 3 * r));
}

torch::Tensor MarkovHeadImpl::prev_embeddings(const torch::Tensor& token_ids) {
  return markov_w1->forward(token_ids.to(markov_w1->weight.device(), torch::kInt64));
}

torch::Tensor MarkovHeadImpl::block_features(const torch::Tensor& prev_tokens, const torch::Tensor& hidden) {
  const torch::Tensor emb = prev_embeddings(prev_tokens);  // [K, Bs, r]
  if (type_ == "vanilla") return emb;
  const torch::Tensor h = hidden.to(emb.scalar_type());
  if (type_ == "gated") return torch::sigmoid(gate_proj->forward(torch::cat({h, emb}, -1))) * emb;
  MarkovState state;
  std::vector<torch::Tensor> rows;
  for (int64_t k = 0; k < emb.size(1); ++k) rows.push_back(step_features(prev_tokens.select(1, k), h.select(1, k), state));
  return torch::stack(rows, 1);
}

torch::Tensor MarkovHeadImpl::step_features(const torch::Tensor& prev_token, const torch::Tensor& hidden,
                                            MarkovState& state) {
  const torch::Tensor emb = prev_embeddings(prev_token);  // [K, r]
  if (type_ == "vanilla") return emb;
  const torch::Tensor h = hidden.to(emb.scalar_type());
  if (type_ == "gated") return torch::sigmoid(gate_proj->forward(torch::cat({h, emb}, -1))) * emb;
  if (!state.state.defined()) state.state = torch::zeros({emb.size(0), rank_}, emb.options());
  const auto parts = joint_proj->forward(torch::cat({state.state, emb, h}, -1)).chunk(3, -1);
  const torch::Tensor gate = torch::sigmoid(parts[0]);
  state.state = gate * state.state + (1.0 - gate) * torch::tanh(parts[1]);
  return torch::tanh(parts[2]);
}

ConfidenceHeadImpl::ConfidenceHeadImpl(int64_t input_dim) {
  proj = register_module("proj", torch::nn::Linear(input_dim, 1));
}

torch::Tensor DFlashDrafterImpl::confidence_logits(const torch::Tensor& hidden, const torch::Tensor& prev_embedding) {
  if (!confidence_head) throw std::logic_error("confidence_logits: the drafter has no confidence head");
  if (!spec_.heads.confidence_with_markov) return confidence_head->forward(hidden);
  return confidence_head->forward(torch::cat({hidden, prev_embedding.to(hidden.scalar_type())}, -1));
}

}  // namespace dflow::model
