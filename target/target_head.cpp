// TargetHead: the embedding, LM head and final norm of a checkpoint, read by
// name (nothing else of the checkpoint is read), checked against config.json.
#include "target/target_head.hpp"

#include <algorithm>
#include <stdexcept>

#include "formats/safetensors.hpp"

namespace dflow::target {

namespace {

torch::Tensor checked(const formats::TensorMap& tensors, const std::filesystem::path& dir, const std::string& name,
                      const std::vector<int64_t>& expected_shape, torch::Device device, torch::Dtype dtype) {
  const auto it = tensors.find(name);
  if (it == tensors.end())
    throw std::runtime_error("target checkpoint '" + dir.string() + "' lacks tensor '" + name +
                             "' (the drafter needs the target's embedding and LM head)");
  if (it->second.sizes().vec() != expected_shape)
    throw std::runtime_error("target checkpoint '" + dir.string() + "': tensor '" + name + "' has shape " +
                             c10::str(it->second.sizes()) + " but config.json implies " +
                             c10::str(c10::IntArrayRef(expected_shape)));
  return it->second.to(device, dtype).contiguous();
}

}  // namespace

TargetHead::TargetHead(HeadConfig config, torch::Tensor embedding, torch::Tensor lm_head, torch::Tensor final_norm)
    : config_(std::move(config)), embedding_(std::move(embedding)), lm_head_(std::move(lm_head)),
      final_norm_(std::move(final_norm)) {}

const std::vector<TargetHead::Names>& TargetHead::naming_schemes() {
  static const std::vector<Names> schemes = {
      {kEmbeddingName, kFinalNormName, kLmHeadName},
      {"model.language_model.embed_tokens.weight", "model.language_model.norm.weight", "lm_head.weight"},
      {"language_model.model.embed_tokens.weight", "language_model.model.norm.weight", "language_model.lm_head.weight"},
  };
  return schemes;
}

TargetHead TargetHead::load(const std::filesystem::path& dir, torch::Device device, torch::Dtype dtype,
                            bool with_final_norm) {
  if (!at::isFloatingType(dtype))
    throw std::invalid_argument("TargetHead::load: dtype must be floating point, got " + std::string(c10::toString(dtype)));
  torch::NoGradGuard no_grad;
  HeadConfig config = load_head_config(dir);
  std::vector<std::string> names;
  for (const Names& scheme : naming_schemes()) {
    names.push_back(scheme.embedding);
    names.push_back(scheme.lm_head);
    if (with_final_norm) names.push_back(scheme.final_norm);
  }
  const formats::TensorMap tensors = formats::read_checkpoint_tensors(dir, names);
  const auto scheme = std::find_if(naming_schemes().begin(), naming_schemes().end(),
                                   [&](const Names& s) { return tensors.count(s.embedding) > 0; });
  if (scheme == naming_schemes().end()) {
    std::string tried;
    for (const Names& s : naming_schemes()) tried += (tried.empty() ? "'" : ", '") + std::string(s.embedding) + "'";
    throw std::runtime_error("target checkpoint '" + dir.string() + "' lacks the embedding under every name dflow " +
                             "knows (tried " + tried + "; the drafter needs the target's embedding and LM head)");
  }
  const int64_t vocab = config.vocab_size, hidden = config.hidden_size;
  torch::Tensor embedding = checked(tensors, dir, scheme->embedding, {vocab, hidden}, device, dtype);
  // As TargetModel::load: a tied checkpoint may still carry its own copy.
  torch::Tensor lm_head = config.tie_word_embeddings && !tensors.count(scheme->lm_head)
                              ? embedding
                              : checked(tensors, dir, scheme->lm_head, {vocab, hidden}, device, dtype);
  torch::Tensor final_norm = with_final_norm ? checked(tensors, dir, scheme->final_norm, {hidden}, device, dtype)
                                             : torch::Tensor();
  return TargetHead(std::move(config), std::move(embedding), std::move(lm_head), std::move(final_norm));
}

uint64_t TargetHead::bytes() const {
  auto bytes_of = [](const torch::Tensor& t) { return t.defined() ? static_cast<uint64_t>(t.nbytes()) : uint64_t{0}; };
  return bytes_of(embedding_) + (tied() ? 0 : bytes_of(lm_head_)) + bytes_of(final_norm_);
}

}  // namespace dflow::target
