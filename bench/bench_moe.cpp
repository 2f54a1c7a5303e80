// The routed experts' compute (target/moe.hpp) as a ratio to a dense SwiGLU
// MLP of the same active parameters (intermediate = top_k x the experts'
// intermediate), over one micro-batch, on the CPU. Qwen3-30B-A3B's ratios
// scaled down to fit a few minutes of a small CPU: by default hidden 1024,
// 64 experts of intermediate 384, top-8 (Qwen3-30B-A3B: 2048, 128 of 768,
// top-8), 2048 tokens. Beside the two, the floor of the expert products
// alone: the same per-expert matrix products over rows already grouped
// (what routing, the gather and the weighted sum add is the difference).
// Times are the fastest of --rounds alternating runs after a warm-up.
//
//   bench_moe [--threads 2] [--dtype float32|bfloat16] [--tokens 2048] [--hidden 1024]
//             [--experts 64] [--inter 384] [--top-k 8] [--rounds 3]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

#include "target/layers.hpp"
#include "target/moe.hpp"

namespace {

using namespace dflow::target;

struct Options {
  torch::Dtype dtype = torch::kFloat32;
  int threads = 2, rounds = 3;
  int64_t tokens = 2048, hidden = 1024, experts = 64, inter = 384, top_k = 8;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i], value = argv[i + 1];
    if (arg == "--dtype") {
      if (value != "float32" && value != "bfloat16") throw std::invalid_argument("--dtype float32|bfloat16");
      o.dtype = value == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
    } else if (arg == "--threads") o.threads = std::stoi(value);
    else if (arg == "--rounds") o.rounds = std::stoi(value);
    else if (arg == "--tokens") o.tokens = std::stoll(value);
    else if (arg == "--hidden") o.hidden = std::stoll(value);
    else if (arg == "--experts") o.experts = std::stoll(value);
    else if (arg == "--inter") o.inter = std::stoll(value);
    else if (arg == "--top-k") o.top_k = std::stoll(value);
    else throw std::invalid_argument("unknown option " + arg);
  }
  return o;
}

double seconds_of(const std::function<void()>& work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  torch::set_num_threads(o.threads);
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  const auto scaled = [&](std::vector<int64_t> shape, int64_t fan_in) {
    return (torch::randn(shape) / std::sqrt(static_cast<double>(fan_in))).to(o.dtype);
  };
  const int64_t dense_inter = o.top_k * o.inter;
  const torch::Tensor x = torch::randn({o.tokens, o.hidden}).to(o.dtype);

  ExpertWeights experts;
  experts.router = scaled({o.experts, o.hidden}, o.hidden);
  experts.gate_up = scaled({o.experts, 2 * o.inter, o.hidden}, o.hidden);
  experts.down = scaled({o.experts, o.hidden, o.inter}, o.inter);
  ExpertOptions options;
  options.top_k = o.top_k;
  options.normalize_top_k = true;

  const torch::Tensor gate = scaled({dense_inter, o.hidden}, o.hidden), up = scaled({dense_inter, o.hidden}, o.hidden);
  const torch::Tensor down = scaled({o.hidden, dense_inter}, dense_inter);

  // The floor: the experts' products over pre-grouped rows, an even split.
  const int64_t pairs = o.tokens * o.top_k;
  const torch::Tensor grouped_rows = x.repeat({o.top_k, 1});
  const auto expert_products = [&] {
    int64_t start = 0;
    for (int64_t e = 0; e < o.experts; ++e) {
      const int64_t n = pairs / o.experts + (e < pairs % o.experts ? 1 : 0);
      const torch::Tensor rows = grouped_rows.narrow(0, start, n);
      const torch::Tensor gu = at::linear(rows, experts.gate_up[e]);
      (void)at::linear(torch::silu(gu.narrow(-1, 0, o.inter)) * gu.narrow(-1, o.inter, o.inter), experts.down[e]);
      start += n;
    }
  };

  // How even the routing is (random router): the busiest expert's share.
  const torch::Tensor logits = at::linear(x, experts.router).to(torch::kFloat);
  const torch::Tensor picked = std::get<1>(torch::topk(logits, o.top_k, -1)).flatten();
  const torch::Tensor counts = torch::bincount(picked, {}, o.experts);
  const double busiest = counts.max().item<double>() / (static_cast<double>(pairs) / o.experts);

  const auto routed = [&] { (void)routed_experts(x, experts, options); };
  const auto dense = [&] { (void)swiglu_mlp(x, gate, up, down); };
  routed();
  dense();
  expert_products();
  double best_routed = std::numeric_limits<double>::infinity(), best_dense = best_routed, best_floor = best_routed;
  for (int r = 0; r < o.rounds; ++r) {
    best_routed = std::min(best_routed, seconds_of(routed));
    best_dense = std::min(best_dense, seconds_of(dense));
    best_floor = std::min(best_floor, seconds_of(expert_products));
  }
  std::printf("dtype %s, %d threads, %lld tokens, hidden %lld, %lld experts of %lld, top-%lld "
              "(busiest expert %.2fx the mean), dense intermediate %lld\n",
              o.dtype == torch::kBFloat16 ? "bfloat16" : "float32", o.threads, static_cast<long long>(o.tokens),
              static_cast<long long>(o.hidden), static_cast<long long>(o.experts), static_cast<long long>(o.inter),
              static_cast<long long>(o.top_k), busiest, static_cast<long long>(dense_inter));
  std::printf("| dense SwiGLU s | routed experts s | routed / dense | expert products alone s | routed / products |\n");
  std::printf("| %.3f | %.3f | %.2f | %.3f | %.2f |\n", best_dense, best_routed, best_routed / best_dense, best_floor,
              best_routed / best_floor);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_moe: %s\n", e.what());
  return 1;
}
