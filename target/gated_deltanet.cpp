// Gated DeltaNet (target/gated_deltanet.hpp), op for op as transformers'
// torch fallback: the chunked rule's UT transform, its triangular solves and
// its scan over chunks, with the chunk-local matrices built one window of
// chunks at a time.
#include "target/gated_deltanet.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dflow::target {

namespace {

torch::Dtype wide_dtype(torch::Dtype dtype) { return dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32; }

// FLA's l2norm: x / sqrt(sum(x^2) + eps), eps 1e-6.
torch::Tensor l2norm(const torch::Tensor& x) { return x * torch::rsqrt((x * x).sum(-1, /*keepdim=*/true) + 1e-6); }

// Qwen3_5RMSNormGated: normed in the wide dtype, cast back, scaled by
// weight, gated by SiLU(z) in the wide dtype, cast back.
torch::Tensor gated_rms_norm(const torch::Tensor& x, const torch::Tensor& z, const torch::Tensor& weight, double eps) {
  const auto dtype = x.scalar_type();
  const auto wide = wide_dtype(dtype);
  torch::Tensor h = x.to(wide);
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  h = weight * h.to(dtype);
  return (h * torch::silu(z.to(wide))).to(dtype);
}

}  // namespace

LinearAttentionState LinearAttentionState::zeros(int64_t batch, const LinearAttentionConfig& config,
                                                 torch::Device device, torch::Dtype dtype) {
  const auto options = torch::TensorOptions().device(device);
  return {torch::zeros({batch, config.conv_dim(), config.conv_kernel - 1}, options.dtype(dtype)),
          torch::zeros({batch, config.num_value_heads, config.key_head_dim, config.value_head_dim},
                       options.dtype(wide_dtype(dtype)))};
}

int64_t LinearAttentionState::bytes() const {
  return static_cast<int64_t>(conv.nbytes() + recurrent.nbytes());
}

torch::Tensor chunked_gated_delta_rule(const torch::Tensor& q_in, const torch::Tensor& k_in, const torch::Tensor& v_in,
                                       const torch::Tensor& decay_in, const torch::Tensor& beta_in, torch::Tensor& state,
                                       int64_t chunk, int64_t window) {
  const auto out_dtype = q_in.scalar_type();
  const auto wide = wide_dtype(out_dtype);
  const int64_t batch = k_in.size(0), length = k_in.size(1), key_heads = k_in.size(2), key_dim = k_in.size(3);
  const int64_t value_heads = v_in.size(2), value_dim = v_in.size(3);
  torch::Tensor q = q_in, k = k_in;
  if (value_heads != key_heads) {  // each key head serves consecutive value heads
    q = q.repeat_interleave(value_heads / key_heads, 2);
    k = k.repeat_interleave(value_heads / key_heads, 2);
  }
  // [B, Hv, S, ..] in the wide dtype.
  const auto heads_first = [&](const torch::Tensor& x) { return x.transpose(1, 2).to(wide).contiguous(); };
  q = l2norm(heads_first(q)) * std::pow(static_cast<double>(key_dim), -0.5);  // as Python's dk ** -0.5
  k = l2norm(heads_first(k));
  const torch::Tensor v = heads_first(v_in), beta = heads_first(beta_in), decay = heads_first(decay_in);
  if (!state.defined()) state = torch::zeros({batch, value_heads, key_dim, value_dim}, q.options());
  state = state.to(wide);

  chunk = std::max<int64_t>(1, std::min(chunk, length));
  const int64_t padded = (length + chunk - 1) / chunk * chunk;
  const int64_t pad = padded - length;
  // Zero padding at the end changes nothing before it, nor the final state
  // (zero keys write nothing; a zero log-decay decays nothing).
  const auto padded_tokens = [&](const torch::Tensor& x, int64_t axis_from_end) {
    if (pad == 0) return x;
    std::vector<int64_t> pads(static_cast<size_t>(2 * axis_from_end), 0);
    pads.back() = pad;
    return torch::constant_pad_nd(x, pads, 0);
  };
  const torch::Tensor qp = padded_tokens(q, 2), kp = padded_tokens(k, 2), vp = padded_tokens(v, 2);
  const torch::Tensor betap = padded_tokens(beta, 1), decayp = padded_tokens(decay, 1);
  const torch::Tensor strictly_upper =
      torch::ones({chunk, chunk}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(1);

  const int64_t chunks = padded / chunk;
  const int64_t chunks_per_window = std::max<int64_t>(1, window / chunk);
  std::vector<torch::Tensor> outputs;
  for (int64_t first = 0; first < chunks; first += chunks_per_window) {
    const int64_t n = std::min(chunks_per_window, chunks - first);
    const auto in_chunks = [&](const torch::Tensor& x) {  // [B, Hv, n, chunk, d]
      return x.narrow(2, first * chunk, n * chunk).reshape({batch, value_heads, n, chunk, x.size(-1)});
    };
    const torch::Tensor qc = in_chunks(qp), kc = in_chunks(kp);
    const torch::Tensor beta_c = betap.narrow(2, first * chunk, n * chunk).reshape({batch, value_heads, n, chunk, 1});
    const torch::Tensor v_beta = in_chunks(vp) * beta_c, k_beta = kc * beta_c;
    const torch::Tensor cumulative =
        decayp.narrow(2, first * chunk, n * chunk).reshape({batch, value_heads, n, chunk}).cumsum(3);
    const torch::Tensor pairwise = (cumulative.unsqueeze(4) - cumulative.unsqueeze(3))
                                       .masked_fill(strictly_upper, -std::numeric_limits<double>::infinity())
                                       .exp();
    const torch::Tensor k_t = kc.transpose(-1, -2);
    const torch::Tensor ut_system = torch::matmul(k_beta, k_t) * pairwise;
    const torch::Tensor intra = torch::matmul(qc, k_t) * pairwise;
    const torch::Tensor decayed_k_beta = k_beta * cumulative.exp().unsqueeze(-1);
    const torch::Tensor new_values =
        torch::linalg_solve_triangular(ut_system, v_beta, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
    const torch::Tensor k_cumdecay = torch::linalg_solve_triangular(ut_system, decayed_k_beta, /*upper=*/false,
                                                                    /*left=*/true, /*unitriangular=*/true);
    const torch::Tensor q_decayed = qc * cumulative.exp().unsqueeze(-1);
    const torch::Tensor k_decayed = kc * (cumulative.narrow(3, chunk - 1, 1) - cumulative).exp().unsqueeze(-1);
    const torch::Tensor chunk_decay = cumulative.select(3, chunk - 1).exp().unsqueeze(-1).unsqueeze(-1);
    for (int64_t i = 0; i < n; ++i) {
      const torch::Tensor v_new = new_values.select(2, i) - torch::matmul(k_cumdecay.select(2, i), state);
      outputs.push_back(torch::matmul(q_decayed.select(2, i), state) + torch::matmul(intra.select(2, i), v_new));
      state = state * chunk_decay.select(2, i) + torch::matmul(k_decayed.select(2, i).transpose(-1, -2), v_new);
    }
  }
  return torch::cat(outputs, 2).narrow(2, 0, length).transpose(1, 2).to(out_dtype).contiguous();  // [B, S, Hv, dv]
}

torch::Tensor gated_deltanet(const torch::Tensor& x, const LinearAttentionWeights& w, const LinearAttentionConfig& c,
                             double eps, LinearAttentionState* state) {
  const int64_t batch = x.size(0), length = x.size(1), channels = c.conv_dim(), history = c.conv_kernel - 1;
  const torch::Tensor mixed = at::linear(x, w.in_proj_qkv).transpose(1, 2);  // [B, C, S]
  const torch::Tensor z = at::linear(x, w.in_proj_z).view({batch, length, c.num_value_heads, c.value_head_dim});
  const torch::Tensor b = at::linear(x, w.in_proj_b), a = at::linear(x, w.in_proj_a);

  // The causal conv: the previous inputs (zeros at a sequence's start, as
  // transformers' left padding) before x, no padding, one output per token.
  const torch::Tensor before =
      state != nullptr ? state->conv.to(mixed.scalar_type()) : torch::zeros({batch, channels, history}, mixed.options());
  const torch::Tensor conv_input = torch::cat({before, mixed}, 2);
  if (state != nullptr) state->conv = conv_input.narrow(2, conv_input.size(2) - history, history).contiguous();
  const torch::Tensor conv_out =
      torch::silu(at::conv1d(conv_input.to(w.conv.scalar_type()), w.conv.unsqueeze(1), /*bias=*/torch::Tensor(),
                                /*stride=*/at::IntArrayRef{1}, /*padding=*/at::IntArrayRef{0},
                                /*dilation=*/at::IntArrayRef{1}, channels))
          .to(x.scalar_type())
          .transpose(1, 2);  // [B, S, C]
  const torch::Tensor q =
      conv_out.narrow(2, 0, c.key_dim()).reshape({batch, length, c.num_key_heads, c.key_head_dim});
  const torch::Tensor k =
      conv_out.narrow(2, c.key_dim(), c.key_dim()).reshape({batch, length, c.num_key_heads, c.key_head_dim});
  const torch::Tensor v =
      conv_out.narrow(2, 2 * c.key_dim(), c.value_dim()).reshape({batch, length, c.num_value_heads, c.value_head_dim});

  const auto wide = wide_dtype(x.scalar_type());
  const torch::Tensor beta = torch::sigmoid(b);
  const torch::Tensor decay = -w.A_log.to(wide).exp() * torch::softplus(a.to(wide) + w.dt_bias);
  torch::Tensor recurrent = state != nullptr ? state->recurrent : torch::Tensor();
  const torch::Tensor core = chunked_gated_delta_rule(q, k, v, decay, beta, recurrent);
  if (state != nullptr) state->recurrent = recurrent;
  const torch::Tensor normed = gated_rms_norm(core, z, w.norm, eps);  // [B, S, Hv, dv]
  return at::linear(normed.reshape({batch, length, c.value_dim()}), w.out_proj);
}

}  // namespace dflow::target
