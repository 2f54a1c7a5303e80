// DSpine's config (SpecForge's names, defaults and checks), its schedule,
// the transfer space from the target's LM head and the adjacent injection.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>

#include "drafter/kinds/dspine/dspine.hpp"

namespace dflow::drafter {

namespace {

std::string text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

const char* const kIntegerFields[] = {"transfer_rank", "message_size", "top_k", "alignment_warmup_steps",
                                      "replacement_layers"};
const char* const kNumberFields[] = {"ce_weight",           "alignment_weight",        "replacement_probability",
                                     "replacement_hold_ratio", "replacement_end_ratio", "candidate_mass_threshold"};

int64_t& integer_field(DSpineConfig& c, const std::string& key) {
  if (key == "transfer_rank") return c.transfer_rank;
  if (key == "message_size") return c.message_size;
  if (key == "top_k") return c.top_k;
  if (key == "alignment_warmup_steps") return c.alignment_warmup_steps;
  return c.replacement_layers;
}

double& number_field(DSpineConfig& c, const std::string& key) {
  if (key == "ce_weight") return c.ce_weight;
  if (key == "alignment_weight") return c.alignment_weight;
  if (key == "replacement_probability") return c.replacement_probability;
  if (key == "replacement_hold_ratio") return c.replacement_hold_ratio;
  if (key == "replacement_end_ratio") return c.replacement_end_ratio;
  return c.candidate_mass_threshold;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

torch::Tensor normalise(const torch::Tensor& x) {  // F.normalize(x, dim=-1)
  return x / x.norm(2, -1, /*keepdim=*/true).clamp_min(1e-12);
}

// SpecForge's .float() for the norms: float32, or float64 kept.
torch::Dtype upcast(const torch::Tensor& x) {
  return x.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

}  // namespace

void DSpineConfig::validate() const {
  DSpineConfig c = *this;
  for (const char* key : kNumberFields)
    require(std::isfinite(number_field(c, key)), std::string(key) + " must be finite, got " + text(number_field(c, key)));
  require(transfer_rank >= 0, "transfer_rank must be >= 0 (0: from the target's LM head), got " +
                                  std::to_string(transfer_rank));
  require(message_size >= 1, "message_size must be >= 1, got " + std::to_string(message_size));
  require(top_k >= 1, "top_k must be >= 1, got " + std::to_string(top_k));
  require(ce_weight >= 0.0 && ce_weight <= 1.0, "ce_weight must lie in [0, 1], got " + text(ce_weight));
  require(alignment_weight >= 0.0, "alignment_weight must be >= 0, got " + text(alignment_weight));
  require(alignment_warmup_steps >= 0, "alignment_warmup_steps must be >= 0, got " + std::to_string(alignment_warmup_steps));
  require(replacement_layers >= 0, "replacement_layers must be >= 0, got " + std::to_string(replacement_layers));
  require(replacement_probability >= 0.0 && replacement_probability <= 1.0,
          "replacement_probability must lie in [0, 1], got " + text(replacement_probability));
  require(replacement_hold_ratio >= 0.0 && replacement_hold_ratio < replacement_end_ratio &&
              replacement_end_ratio <= 1.0,
          "replacement_hold_ratio " + text(replacement_hold_ratio) + " and replacement_end_ratio " +
              text(replacement_end_ratio) + " must satisfy 0 <= replacement_hold_ratio < replacement_end_ratio <= 1");
  require(candidate_mass_threshold >= 0.0 && candidate_mass_threshold < 1.0,
          "candidate_mass_threshold must lie in [0, 1), got " + text(candidate_mass_threshold));
}

void DSpineConfig::validate_for(const DrafterSpec& spec) const {
  validate();
  require(spec.block_size >= 2, "block_size " + std::to_string(spec.block_size) +
                                    " leaves no slot to inject into (DSpine needs the anchor and one proposal)");
  require(transfer_rank >= 1, "transfer_rank 0 (from the target) is resolved when a run starts, from the target's "
                              "LM head; a drafter is built with the rank itself");
  const int64_t most = std::min(spec.hidden_size, spec.vocab_size - 1);
  require(transfer_rank <= most, "transfer_rank " + std::to_string(transfer_rank) +
                                     " exceeds min(hidden size, vocabulary - 1) = " + std::to_string(most) +
                                     ": set the drafter node's transfer_rank to at most " + std::to_string(most));
  require(top_k <= spec.vocab_size,
          "top_k " + std::to_string(top_k) + " exceeds the vocabulary " + std::to_string(spec.vocab_size));
}

int64_t DSpineConfig::rank_for(const DrafterSpec& spec) const {
  if (transfer_rank > 0) return transfer_rank;
  return std::max<int64_t>(1, std::min({spec.hidden_size, spec.vocab_size - 1, kSpecForgeTransferRank}));
}

nlohmann::json dspine_fields(const DSpineConfig& c) {
  return {{"transfer_rank", c.transfer_rank},
          {"message_size", c.message_size},
          {"top_k", c.top_k},
          {"ce_weight", c.ce_weight},
          {"alignment_weight", c.alignment_weight},
          {"alignment_warmup_steps", c.alignment_warmup_steps},
          {"replacement_layers", c.replacement_layers},
          {"replacement_probability", c.replacement_probability},
          {"replacement_hold_ratio", c.replacement_hold_ratio},
          {"replacement_end_ratio", c.replacement_end_ratio},
          {"candidate_mass_threshold", c.candidate_mass_threshold}};
}

DSpineConfig dspine_config(const nlohmann::json& fields) {
  DSpineConfig c;
  for (const char* key : kIntegerFields) {
    if (!fields.contains(key) || fields[key].is_null()) continue;
    if (!fields[key].is_number_integer())
      throw std::invalid_argument(std::string(key) + " must be an integer, got " + fields[key].dump());
    integer_field(c, key) = fields[key].get<int64_t>();
  }
  for (const char* key : kNumberFields) {
    if (!fields.contains(key) || fields[key].is_null()) continue;
    if (!fields[key].is_number() || fields[key].is_boolean())
      throw std::invalid_argument(std::string(key) + " must be a number, got " + fields[key].dump());
    number_field(c, key) = fields[key].get<double>();
  }
  return c;
}

std::pair<double, double> dspine_schedule(const DSpineConfig& c, int64_t step, int64_t total_steps) {
  const double at = static_cast<double>(std::max<int64_t>(step, 0));
  const int64_t warmup = c.alignment_warmup_steps;
  const double beta = c.alignment_weight * (warmup > 0 ? std::min(at / static_cast<double>(warmup), 1.0) : 1.0);
  if (total_steps <= 0) return {beta, 0.0};
  const double progress = at / static_cast<double>(total_steps);
  const double fraction =
      (c.replacement_end_ratio - progress) / (c.replacement_end_ratio - c.replacement_hold_ratio);
  return {beta, c.replacement_probability * std::clamp(fraction, 0.0, 1.0)};
}

namespace {

// The normalised rows' covariance's eigenvalues (ascending, as
// torch.linalg.eigh orders them) and eigenvectors, their mean, and the
// smallest eigenvalue that counts as variance: one computation, so that the
// default rank and the codes agree on which directions have it.
struct Spectrum {
  torch::Tensor mean, values, directions;
  double least = 0.0;
  bool finite = true;
  int64_t positive() const { return finite ? values.gt(least).sum().item<int64_t>() : 0; }
};

constexpr int64_t kChunk = 4096;

Spectrum spectrum_of(const torch::Tensor& lm_head_weight) {
  const int64_t vocab = lm_head_weight.size(0), width = lm_head_weight.size(1);
  const auto options = torch::TensorOptions().device(lm_head_weight.device()).dtype(torch::kFloat32);
  torch::Tensor covariance = torch::zeros({width, width}, options);
  torch::Tensor total = torch::zeros({width}, options);
  for (int64_t begin = 0; begin < vocab; begin += kChunk) {
    const torch::Tensor rows = normalise(lm_head_weight.narrow(0, begin, std::min(kChunk, vocab - begin)).to(torch::kFloat32));
    total.add_(rows.sum(0));
    covariance.add_(torch::matmul(rows.t(), rows));
  }
  Spectrum s;
  s.mean = total / static_cast<double>(vocab);
  covariance.sub_(torch::outer(s.mean, s.mean) * static_cast<double>(vocab));
  std::tie(s.values, s.directions) = torch::linalg_eigh(covariance);
  // Positive beyond float32 rounding: a direction a millionth of the largest
  // is rounding noise, and whitening would blow it up into a code's axis.
  s.least = 1e-6 * s.values[width - 1].item<double>();
  s.finite = torch::isfinite(s.values).all().item<bool>();
  return s;
}

}  // namespace

int64_t dspine_principal_directions(const torch::Tensor& lm_head_weight) {
  torch::NoGradGuard no_grad;
  return spectrum_of(lm_head_weight).positive();
}

TransferSpace dspine_transfer_space(const torch::Tensor& lm_head_weight, int64_t transfer_rank) {
  torch::NoGradGuard no_grad;
  const int64_t vocab = lm_head_weight.size(0), width = lm_head_weight.size(1);
  const auto options = torch::TensorOptions().device(lm_head_weight.device()).dtype(torch::kFloat32);
  Spectrum s = spectrum_of(lm_head_weight);
  const torch::Tensor mean = s.mean;
  torch::Tensor values = s.values, directions = s.directions;
  if (!s.finite || !(values[width - transfer_rank].item<double>() > s.least))
    throw std::invalid_argument("the target's LM head has " + std::to_string(s.positive()) +
                                " principal directions of positive variance, fewer than transfer_rank = " +
                                std::to_string(transfer_rank) + ": set the drafter node's transfer_rank to at most "
                                "that, or leave it out (the default takes them from the target)");
  values = values.narrow(0, width - transfer_rank, transfer_rank);
  directions = directions.narrow(1, width - transfer_rank, transfer_rank).contiguous();
  TransferSpace out;
  out.directions = directions;
  out.codes = torch::empty({vocab, transfer_rank}, options);
  const torch::Tensor scale = values.sqrt();
  for (int64_t begin = 0; begin < vocab; begin += kChunk) {
    const int64_t n = std::min(kChunk, vocab - begin);
    const torch::Tensor rows = normalise(lm_head_weight.narrow(0, begin, n).to(torch::kFloat32));
    out.codes.narrow(0, begin, n).copy_(normalise(torch::matmul(rows - mean, directions) / scale));
  }
  return out;
}

AdjacentInjectionImpl::AdjacentInjectionImpl(int64_t hidden_size, int64_t num_layers, const DSpineConfig& config)
    : rank_(config.transfer_rank) {
  auto linear = [](int64_t in, int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
  };
  readouts = register_module("readouts", torch::nn::ModuleList());
  writes = register_module("writes", torch::nn::ModuleList());
  for (int64_t i = 0; i < num_layers; ++i) {
    readouts->push_back(linear(hidden_size, rank_));
    writes->push_back(linear(config.message_size, hidden_size));
  }
  message = register_module("message", linear(rank_, config.message_size));
  receiver_gate = register_module("receiver_gate", linear(rank_, config.message_size));
  predecessor_gate = register_module("predecessor_gate", linear(rank_, config.message_size));
  bias = register_parameter("bias", torch::zeros({config.message_size}));
}

torch::Tensor AdjacentInjectionImpl::feature(const torch::Tensor& hidden, int64_t layer) {
  const torch::Tensor projected = readouts->ptr<torch::nn::LinearImpl>(static_cast<size_t>(layer))->forward(hidden);
  return (normalise(projected.to(upcast(projected))) * std::sqrt(static_cast<double>(rank_))).to(hidden.scalar_type());
}

torch::Tensor AdjacentInjectionImpl::write(const torch::Tensor& hidden, const torch::Tensor& receiver,
                                           const torch::Tensor& predecessor, int64_t layer) {
  const torch::Tensor pred = predecessor.to(receiver.scalar_type());
  const torch::Tensor gate = torch::sigmoid(receiver_gate(receiver) + predecessor_gate(pred) + bias);
  const torch::Tensor delta =
      writes->ptr<torch::nn::LinearImpl>(static_cast<size_t>(layer))->forward(gate * message(pred));
  const torch::Tensor scale = (hidden.to(upcast(hidden)).norm(2, -1, /*keepdim=*/true) /
                               std::sqrt(static_cast<double>(hidden.size(-1))))
                                  .to(hidden.scalar_type());
  return hidden + scale * delta;
}

}  // namespace dflow::drafter
