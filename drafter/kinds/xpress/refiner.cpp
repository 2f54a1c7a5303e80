// XPress's refiner and the shape fields it is built from.
#include <stdexcept>
#include <string>

#include "drafter/kinds/xpress/xpress.hpp"

namespace dflow::drafter {

namespace {

const char* const kFieldNames[] = {"xpress_rank", "xpress_mlp_ratio", "num_jacobi_passes"};

int64_t& field_of(XPressShape& shape, const std::string& key) {
  if (key == "xpress_rank") return shape.xpress_rank;
  if (key == "xpress_mlp_ratio") return shape.xpress_mlp_ratio;
  return shape.num_jacobi_passes;
}

torch::nn::Linear linear(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

}  // namespace

void XPressShape::validate() const {
  if (xpress_rank < 1) throw std::invalid_argument("xpress_rank must be >= 1, got " + std::to_string(xpress_rank));
  if (xpress_mlp_ratio < 1)
    throw std::invalid_argument("xpress_mlp_ratio must be >= 1, got " + std::to_string(xpress_mlp_ratio));
  if (num_jacobi_passes < 0)
    throw std::invalid_argument("num_jacobi_passes must be >= 0, got " + std::to_string(num_jacobi_passes));
}

nlohmann::json xpress_fields(const XPressShape& shape) {
  return {{"xpress_rank", shape.xpress_rank},
          {"xpress_mlp_ratio", shape.xpress_mlp_ratio},
          {"num_jacobi_passes", shape.num_jacobi_passes}};
}

XPressShape xpress_shape(const nlohmann::json& fields) {
  XPressShape shape;
  for (const char* key : kFieldNames) {
    if (!fields.contains(key) || fields[key].is_null()) continue;
    if (!fields[key].is_number_integer())
      throw std::invalid_argument(std::string(key) + " must be an integer, got " + fields[key].dump());
    field_of(shape, key) = fields[key].get<int64_t>();
  }
  return shape;
}

// Registered in speculators' order (its state dict's names and the order
// the drafter draws their initial values in).
RefinerHeadImpl::RefinerHeadImpl(int64_t vocab_size, int64_t hidden_size, int64_t block_size,
                                 const XPressShape& shape) {
  const int64_t r = shape.xpress_rank, m = shape.xpress_rank * shape.xpress_mlp_ratio;
  token_embed = register_module("token_embed", torch::nn::Embedding(vocab_size, r));
  down_h = register_module("down_h", linear(hidden_size, r));
  down_g = register_module("down_g", linear(hidden_size, r));
  in_proj = register_module("in_proj", linear(3 * r, r));
  mix_l = register_parameter("mix_l", torch::zeros({r, block_size, block_size}));
  mlp_gate = register_module("mlp_gate", linear(r, m));
  mlp_up = register_module("mlp_up", linear(r, m));
  mlp_down = register_module("mlp_down", linear(m, r));
  readout = register_module("readout", linear(r, vocab_size));
}

torch::Tensor RefinerHeadImpl::hidden_cache(const torch::Tensor& hidden) {
  if (hidden.dim() != 3 || hidden.size(1) != mix_l.size(1))
    throw std::invalid_argument("XPress refiner: hidden states must be whole blocks [N, " +
                                std::to_string(mix_l.size(1)) + ", H], got " + c10::str(hidden.sizes()));
  const torch::Tensor h = hidden.to(down_h->weight.scalar_type());
  const torch::Tensor global = h.mean(1, /*keepdim=*/true).expand_as(h);
  return torch::cat({down_h->forward(h), down_g->forward(global)}, -1);
}

// x = in_proj([cache ; token_embed(prev)]); x += sum_{j <= k} L[:, k, j] x_j
// (each channel its own causal mix across the block); x += SwiGLU(x).
torch::Tensor RefinerHeadImpl::features(const torch::Tensor& prev, const torch::Tensor& cache) {
  if (prev.dim() != 2 || prev.sizes() != cache.sizes().slice(0, 2))
    throw std::invalid_argument("XPress refiner: previous tokens " + c10::str(prev.sizes()) +
                                " do not match the hidden cache " + c10::str(cache.sizes()));
  const torch::Tensor embedded = token_embed->forward(prev.to(torch::kInt64)).to(cache.scalar_type());
  torch::Tensor x = in_proj->forward(torch::cat({cache, embedded}, -1));
  const int64_t block = mix_l.size(1);
  const torch::Tensor mix = mix_l * torch::ones({block, block}, mix_l.options()).tril();
  x = x + torch::einsum("ckj,njc->nkc", {mix, x});
  return x + mlp_down->forward(torch::silu(mlp_gate->forward(x)) * mlp_up->forward(x));
}

}  // namespace dflow::drafter
