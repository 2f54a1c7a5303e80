// DSpark's Markov and confidence heads (speculators' models/dspark
// model_definitions.py math) and the fields that give them.
#include <stdexcept>

#include "drafter/kinds/dspark/dspark.hpp"
#include "drafter/kinds/dspark/limits.hpp"

namespace dflow::drafter {

void DraftHeads::validate() const {
  if (markov_rank < 0 || markov_rank > kMaxMarkovRank)
    throw std::invalid_argument("markov_rank must lie in [1, " + std::to_string(kMaxMarkovRank) +
                                "] for a Markov head (0: none), got " + std::to_string(markov_rank));
  if (markov_type != "vanilla" && markov_type != "gated" && markov_type != "rnn")
    throw std::invalid_argument("markov_type must be vanilla, gated or rnn, got '" + markov_type + "'");
  if (confidence && confidence_with_markov && !markov())
    throw std::invalid_argument("a confidence head with the Markov embedding (confidence_with_markov) needs "
                                "markov_rank >= 1");
}

nlohmann::json dspark_fields(const DraftHeads& heads) {
  if (!heads.any()) return nlohmann::json::object();
  return {{"markov_rank", heads.markov_rank},
          {"markov_head_type", heads.markov_type},
          {"enable_confidence_head", heads.confidence},
          {"confidence_head_with_markov", heads.confidence && heads.confidence_with_markov}};
}

DraftHeads dspark_heads(const nlohmann::json& fields) {
  auto error = [&](const std::string& key, const std::string& what) {
    return std::invalid_argument("'" + key + "' " + what + ", got " + fields[key].dump());
  };
  auto present = [&](const char* key) { return fields.contains(key) && !fields[key].is_null(); };
  DraftHeads heads;
  if (present("markov_rank")) {
    if (!fields["markov_rank"].is_number_integer()) throw error("markov_rank", "must be an integer");
    heads.markov_rank = fields["markov_rank"].get<int64_t>();
  }
  if (present("markov_head_type")) {
    if (!fields["markov_head_type"].is_string()) throw error("markov_head_type", "must be a string");
    heads.markov_type = fields["markov_head_type"].get<std::string>();
  }
  if (present("enable_confidence_head")) {
    if (!fields["enable_confidence_head"].is_boolean()) throw error("enable_confidence_head", "must be true or false");
    heads.confidence = fields["enable_confidence_head"].get<bool>();
  }
  if (present("confidence_head_with_markov")) {
    if (!fields["confidence_head_with_markov"].is_boolean())
      throw error("confidence_head_with_markov", "must be true or false");
    heads.confidence_with_markov = fields["confidence_head_with_markov"].get<bool>();
  }
  return heads;
}

void set_dspark_heads(DrafterSpec& spec, const DraftHeads& heads) {
  spec.kind = heads.any() ? "dspark" : "dflash";
  spec.kind_fields = dspark_fields(heads);
}

void set_dspark_heads(DrafterOptions& options, const DraftHeads& heads) {
  options.kind = heads.any() ? "dspark" : "dflash";
  options.kind_fields = dspark_fields(heads);
}

DraftHeads dspark_heads(const DrafterSpec& spec) {
  return spec.kind == "dspark" ? dspark_heads(spec.kind_fields) : DraftHeads{};
}

MarkovHeadImpl::MarkovHeadImpl(const DrafterSpec& spec, const DraftHeads& heads)
    : type_(heads.markov_type), rank_(heads.markov_rank) {
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

}  // namespace dflow::drafter
