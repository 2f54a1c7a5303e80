// A gpt-oss target with MXFP4 experts held as model.target.mxfp4_experts
// says (resident: packed, each expert dequantized while it computes;
// dequantize: once, on load): its experts' bytes, the tokens/s of a forward
// over one micro-batch on the CPU, and the process's peak RSS. Run once per
// mode (peak RSS is the process's): the target from
// `dflow make-tiny-target --arch gpt_oss --mxfp4 ...`.
//
//   bench_mxfp4_target --target DIR --mode resident|dequantize [--dtype bfloat16|float32]
//                      [--threads 2] [--batch 4] [--seq 256] [--rounds 3]
#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

#include "target/target.hpp"

namespace {

using namespace dflow::target;

struct Options {
  std::string target, mode = "resident";
  torch::Dtype dtype = torch::kBFloat16;
  int threads = 2, rounds = 3;
  int64_t batch = 4, seq = 256;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i], value = argv[i + 1];
    if (arg == "--target") {
      o.target = value;
    } else if (arg == "--mode") {
      o.mode = value;
    } else if (arg == "--dtype") {
      if (value != "bfloat16" && value != "float32") throw std::invalid_argument("--dtype: bfloat16 or float32");
      o.dtype = value == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
    } else if (arg == "--threads") {
      o.threads = std::stoi(value);
    } else if (arg == "--batch") {
      o.batch = std::stoll(value);
    } else if (arg == "--seq") {
      o.seq = std::stoll(value);
    } else if (arg == "--rounds") {
      o.rounds = std::stoi(value);
    } else {
      throw std::invalid_argument("unknown flag " + arg);
    }
  }
  if (o.target.empty()) throw std::invalid_argument("--target DIR is required");
  return o;
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux: KiB
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  torch::set_num_threads(o.threads);
  torch::NoGradGuard no_grad;
  const TargetModel target =
      TargetModel::load(o.target, torch::kCPU, o.dtype, TargetLoadOptions{parse_mxfp4_experts(o.mode)});
  torch::manual_seed(0);
  const torch::Tensor ids = torch::randint(target.config().vocab_size, {o.batch, o.seq}, torch::kInt64);
  const auto forward = [&] { (void)target.forward(ids, {target.num_layers() - 1}, /*want_logits=*/false); };
  forward();  // warm-up
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < o.rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    forward();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::printf("| mode | dtype | threads | tokens | expert bytes | forward s | tokens/s | peak RSS MiB |\n");
  std::printf("| %s | %s | %d | %lld | %lld | %.3f | %.0f | %.0f |\n", o.mode.c_str(),
              o.dtype == torch::kBFloat16 ? "bfloat16" : "float32", o.threads,
              static_cast<long long>(o.batch * o.seq), static_cast<long long>(target.expert_projection_bytes()), best,
              static_cast<double>(o.batch * o.seq) / best, peak_rss_mib());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_mxfp4_target: %s\n", e.what());
  return 1;
}
