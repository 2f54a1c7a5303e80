// DFlash2's modules: the grouped dynamic convolutions and the candidate
// selector, and the shape fields they are built from.
#include <stdexcept>
#include <string>
#include <vector>

#include "drafter/kinds/dflash2/dflash2.hpp"

namespace dflow::drafter {

namespace {

const char* const kFieldNames[] = {"conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"};

int64_t& field_of(DFlash2Shape& shape, const std::string& key) {
  if (key == "conv_kernel_size") return shape.conv_kernel_size;
  if (key == "conv_group_size") return shape.conv_group_size;
  if (key == "selector_rank") return shape.selector_rank;
  return shape.selector_top_k;
}

}  // namespace

void DFlash2Shape::validate() const {
  DFlash2Shape copy = *this;
  for (const char* key : kFieldNames) {
    if (field_of(copy, key) < 1)
      throw std::invalid_argument(std::string(key) + " must be >= 1, got " + std::to_string(field_of(copy, key)));
  }
  if (!sliding_window_non_causal)
    throw std::invalid_argument("sliding_window_non_causal false (causal blocks in sliding layers) is not what dflow "
                                "trains: its draft blocks are whole in every layer; leave it true");
}

void DFlash2Shape::validate_for(const DrafterSpec& spec) const {
  validate();
  if (spec.hidden_size % conv_group_size != 0)
    throw std::invalid_argument("conv_group_size " + std::to_string(conv_group_size) + " does not divide the hidden "
                                "size " + std::to_string(spec.hidden_size) + " (each group of channels shares a kernel)");
  if (conv_kernel_size > spec.block_size)
    throw std::invalid_argument("conv_kernel_size " + std::to_string(conv_kernel_size) + " exceeds the block size " +
                                std::to_string(spec.block_size) + " (the convolution stays within its block)");
  if (selector_top_k > spec.vocab_size)
    throw std::invalid_argument("selector_top_k " + std::to_string(selector_top_k) + " exceeds the vocabulary " +
                                std::to_string(spec.vocab_size));
}

nlohmann::json dflash2_fields(const DFlash2Shape& shape) {
  return {{"conv_kernel_size", shape.conv_kernel_size},
          {"conv_group_size", shape.conv_group_size},
          {"selector_rank", shape.selector_rank},
          {"selector_top_k", shape.selector_top_k},
          {"sliding_window_non_causal", shape.sliding_window_non_causal}};
}

DFlash2Shape dflash2_shape(const nlohmann::json& fields) {
  DFlash2Shape shape;
  for (const char* key : kFieldNames) {
    if (!fields.contains(key) || fields[key].is_null()) continue;
    if (!fields[key].is_number_integer())
      throw std::invalid_argument(std::string(key) + " must be an integer, got " + fields[key].dump());
    field_of(shape, key) = fields[key].get<int64_t>();
  }
  if (fields.contains("sliding_window_non_causal") && !fields["sliding_window_non_causal"].is_null()) {
    if (!fields["sliding_window_non_causal"].is_boolean())
      throw std::invalid_argument("sliding_window_non_causal must be true or false, got " +
                                  fields["sliding_window_non_causal"].dump());
    shape.sliding_window_non_causal = fields["sliding_window_non_causal"].get<bool>();
  }
  return shape;
}

GroupedDynamicConvImpl::GroupedDynamicConvImpl(int64_t hidden_size, int64_t block_size, const DFlash2Shape& shape)
    : block_size_(block_size),
      kernel_size_(shape.conv_kernel_size),
      group_size_(shape.conv_group_size),
      groups_(hidden_size / shape.conv_group_size) {
  base_kernel = register_parameter("base_kernel", torch::empty({2, kernel_size_, hidden_size}));
  kernel_projection = register_module(
      "kernel_projection",
      torch::nn::Linear(torch::nn::LinearOptions(hidden_size, 2 * kernel_size_ * groups_).bias(false)));
  reset();
}

void GroupedDynamicConvImpl::reset() {
  torch::NoGradGuard no_grad;
  base_kernel.zero_();
  base_kernel.select(1, 0).fill_(1.0);
  kernel_projection->weight.zero_();
}

// out[s] = sum over taps t <= s (within the block) of x[s - t] * (base[t] +
// delta[s, t, group]), each group's delta shared by its channels.
torch::Tensor GroupedDynamicConvImpl::convolve(const torch::Tensor& x, const torch::Tensor& delta,
                                               const torch::Tensor& base) const {
  if (x.dim() != 3 || x.size(1) % block_size_ != 0)
    throw std::invalid_argument("DFlash2 convolution: need whole blocks of " + std::to_string(block_size_) +
                                " slots [B, Q, H], got " + c10::str(x.sizes()));
  const torch::Tensor flat = x.reshape({-1, groups_, group_size_});
  const torch::Tensor flat_delta = delta.reshape({-1, kernel_size_, groups_});
  const int64_t rows = flat.size(0);
  const torch::Tensor slot =
      torch::arange(rows, torch::TensorOptions().device(x.device()).dtype(torch::kInt64)).remainder(block_size_);
  torch::Tensor out = torch::zeros_like(flat);
  for (int64_t tap = 0; tap < kernel_size_; ++tap) {
    const torch::Tensor shifted =
        tap == 0 ? flat : torch::cat({flat.new_zeros({tap, groups_, group_size_}), flat.narrow(0, 0, rows - tap)}, 0);
    const torch::Tensor coefficient =
        base[tap].to(flat.scalar_type()).view({1, groups_, group_size_}) + flat_delta.select(1, tap).unsqueeze(-1);
    const torch::Tensor valid = slot.ge(tap).view({-1, 1, 1});
    out = out + shifted * coefficient * valid;
  }
  return out.reshape(x.sizes());
}

std::pair<torch::Tensor, torch::Tensor> GroupedDynamicConvImpl::prepare(const torch::Tensor& x) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.insert(shape.end(), {2, kernel_size_, groups_});
  const torch::Tensor kernels = kernel_projection->forward(x).view(shape);  // [B, Q, 2, K, G]
  return {convolve(x, kernels.select(-3, 0), base_kernel[0]), kernels.select(-3, 1)};
}

torch::Tensor GroupedDynamicConvImpl::finish(const torch::Tensor& y, const torch::Tensor& output_kernel) {
  return convolve(y, output_kernel, base_kernel[1]);
}

CandidateSelectorImpl::CandidateSelectorImpl(int64_t vocab_size, int64_t hidden_size, int64_t rank) {
  predecessor_codebook = register_parameter("predecessor_codebook", torch::empty({vocab_size, rank}));
  successor_codebook = register_parameter("successor_codebook", torch::empty({vocab_size, rank}));
  hidden_projection =
      register_module("hidden_projection", torch::nn::Linear(torch::nn::LinearOptions(hidden_size, rank).bias(false)));
}

torch::Tensor CandidateSelectorImpl::scores(const torch::Tensor& unary, const torch::Tensor& hidden,
                                            const torch::Tensor& prev, const torch::Tensor& candidates) {
  const int64_t rank = predecessor_codebook.size(1);
  auto rows_of = [rank](const torch::Tensor& table, const torch::Tensor& ids) {
    std::vector<int64_t> shape(ids.sizes().begin(), ids.sizes().end());
    shape.push_back(rank);
    return table.index_select(0, ids.reshape({-1}).to(torch::kInt64)).view(shape);
  };
  const torch::Tensor predecessor = rows_of(predecessor_codebook, prev);  // [..., r]
  const torch::Tensor context = predecessor * hidden_projection->forward(hidden).to(predecessor.scalar_type());
  const torch::Tensor transition = (context.unsqueeze(-2) * rows_of(successor_codebook, candidates)).sum(-1);
  return unary + transition.to(unary.scalar_type());
}

}  // namespace dflow::drafter
