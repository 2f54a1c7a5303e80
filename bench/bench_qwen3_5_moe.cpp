// The Qwen3.5-MoE target forward (Gated DeltaNet and gated full-attention
// layers, routed experts beside a gated shared expert) against a Qwen3-MoE
// of the same width, heads and experts, on the CPU: tokens per second of
// target_forward's pass (the last layer's state, no logits) and the peak
// bytes its tensors hold above the weights (a counting allocator), per
// sequence length. Beside the two, the same Qwen3.5-MoE with every layer
// full attention (everything else equal: what the linear layers change),
// and the Gated DeltaNet mixer of one layer timed alone (its share of the
// forward: linear layers x its time / the forward's).
//
// Qwen3.5-35B-A3B at a quarter of its width so that it runs in a couple of
// minutes on 2 cores: hidden 512 (2048), 8 layers (40) of three linear to one
// full, attention 8 heads over 1 KV head of 128 (16 over 2 of 256: q width
// twice the hidden, as there), linear 4 key heads and 8 value heads of 128
// (16 and 32 of 128: key width the hidden, value width twice), conv 4,
// 64 experts (256) top-8 of 128 (512), a shared expert of 128 (512). The
// Qwen3-MoE: the same hidden, layers, heads, experts, top-k and expert
// width, no shared expert, full rotary. Random weights of make-tiny-target's
// pattern; times are the fastest of --rounds after a warm-up.
//
//   bench_qwen3_5_moe [--threads 2] [--dtype float32|bfloat16] [--seqs 1024,4096] [--batch 1]
//                     [--layers 8] [--rounds 3]
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "drafter/cpu_memory_counter.hpp"
#include "formats/safetensors.hpp"
#include "target/gated_deltanet.hpp"
#include "target/target.hpp"
#include "target/tiny_target.hpp"

namespace {

using namespace dflow::formats;
using namespace dflow::target;
using namespace dflow::drafter;
namespace fs = std::filesystem;

struct Options {
  torch::Dtype dtype = torch::kFloat32;
  int threads = 2, rounds = 3;
  int64_t batch = 1, layers = 8;
  std::vector<int64_t> seqs{1024, 4096};
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
    else if (arg == "--batch") o.batch = std::stoll(value);
    else if (arg == "--layers") o.layers = std::stoll(value);
    else if (arg == "--seqs") {
      o.seqs.clear();
      std::stringstream in(value);
      for (std::string item; std::getline(in, item, ',');) o.seqs.push_back(std::stoll(item));
    } else throw std::invalid_argument("unknown option " + arg);
  }
  return o;
}

TinyTargetOptions shape(const std::string& arch, const fs::path& dir, int64_t layers) {
  TinyTargetOptions t;
  t.out_dir = dir;
  t.arch = arch;
  t.seed = 1;
  t.num_layers = layers;
  t.hidden_size = 512;
  t.num_heads = 8;
  t.num_kv_heads = 1;
  t.head_dim = 128;
  t.num_experts = 64;
  t.experts_per_token = 8;
  t.moe_intermediate_size = 128;
  t.shared_expert_intermediate_size = 128;
  t.linear_num_key_heads = 4;
  t.linear_num_value_heads = 8;
  t.linear_key_head_dim = 128;
  t.linear_value_head_dim = 128;
  t.vocab_size = 4096;
  t.max_position_embeddings = 32768;
  return t;
}

double fastest_s(const std::function<void()>& work, int rounds) {
  work();  // warm-up
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    work();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

// Layer 0's Gated DeltaNet weights as the loader reads them.
LinearAttentionWeights first_linear_layer(const fs::path& dir, torch::Dtype dtype) {
  const TensorMap tensors = load_checkpoint_dir(dir);
  const auto take = [&](const std::string& name) {
    return tensors.at("model.language_model.layers.0.linear_attn." + name).to(dtype).contiguous();
  };
  LinearAttentionWeights w;
  w.in_proj_qkv = take("in_proj_qkv.weight");
  w.in_proj_z = take("in_proj_z.weight");
  w.in_proj_b = take("in_proj_b.weight");
  w.in_proj_a = take("in_proj_a.weight");
  w.conv = take("conv1d.weight").squeeze(1).contiguous();
  w.dt_bias = take("dt_bias");
  w.A_log = take("A_log");
  w.norm = take("norm.weight");
  w.out_proj = take("out_proj.weight");
  return w;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  torch::set_num_threads(o.threads);
  torch::NoGradGuard no_grad;
  const fs::path scratch = fs::temp_directory_path() / ("dflow-bench-qwen3_5-" + std::to_string(::getpid()));
  struct Variant {
    std::string name;
    TinyTargetOptions options;
  };
  std::vector<Variant> variants{{"qwen3_moe", shape("qwen3_moe", scratch / "qwen3_moe", o.layers)},
                                {"qwen3_5_moe", shape("qwen3_5_moe", scratch / "qwen3_5_moe", o.layers)},
                                {"qwen3_5_moe, all full_attention", shape("qwen3_5_moe", scratch / "all_full", o.layers)}};
  variants[2].options.layer_types.assign(static_cast<size_t>(o.layers), "full_attention");
  for (const Variant& v : variants) make_tiny_target(v.options);

  std::printf("dtype %s, %d threads, batch %lld, hidden 512, %lld layers, attention 8/1 heads of 128, linear 4/8 "
              "heads of 128, 64 experts top-8 of 128 (+ shared 128 in qwen3_5_moe)\n",
              o.dtype == torch::kBFloat16 ? "bfloat16" : "float32", o.threads, static_cast<long long>(o.batch),
              static_cast<long long>(o.layers));
  std::printf("| model | tokens | forward s | tokens/s | peak MiB above weights | weights MiB |\n| --- | --- | --- | --- | --- | --- |\n");
  std::vector<double> qwen3_5_seconds;
  for (const Variant& v : variants) {
    const TargetModel target = TargetModel::load(v.options.out_dir, torch::kCPU, o.dtype);
    double weight_bytes = 0;
    for (const auto& [name, tensor] : load_checkpoint_dir(v.options.out_dir))
      weight_bytes += static_cast<double>(tensor.numel()) * static_cast<double>(c10::elementSize(o.dtype));
    for (const int64_t seq : o.seqs) {
      torch::manual_seed(0);
      const torch::Tensor ids = torch::randint(0, 4094, {o.batch, seq}, torch::kInt64);
      const auto forward = [&] { (void)target.forward(ids, {target.num_layers() - 1}, /*want_logits=*/false); };
      const double seconds = fastest_s(forward, o.rounds);
      CpuMemoryCounter counter;
      forward();
      const double peak_mib = static_cast<double>(counter.peak_bytes()) / 1048576.0;
      const double tokens = static_cast<double>(o.batch * seq);
      if (v.name == "qwen3_5_moe") qwen3_5_seconds.push_back(seconds);
      std::printf("| %s | %lld | %.3f | %.0f | %.1f | %.1f |\n", v.name.c_str(), static_cast<long long>(o.batch * seq),
                  seconds, tokens / seconds, peak_mib, weight_bytes / 1048576.0);
    }
  }

  // One Gated DeltaNet mixer alone, on a normed input of the same shape.
  const TargetModel qwen3_5 = TargetModel::load(variants[1].options.out_dir, torch::kCPU, o.dtype);
  const HFConfig& config = qwen3_5.config();
  int64_t linear_layers = 0;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) linear_layers += config.linear_attention(l) ? 1 : 0;
  const LinearAttentionWeights weights = first_linear_layer(variants[1].options.out_dir, o.dtype);
  std::printf("\n| tokens | one Gated DeltaNet mixer s | x %lld linear layers / qwen3_5_moe forward |\n| --- | --- | --- |\n",
              static_cast<long long>(linear_layers));
  for (size_t i = 0; i < o.seqs.size(); ++i) {
    const torch::Tensor x = torch::randn({o.batch, o.seqs[i], config.hidden_size}).to(o.dtype);
    const double mixer_s =
        fastest_s([&] { (void)gated_deltanet(x, weights, config.linear, config.rms_norm_eps, nullptr); }, o.rounds);
    std::printf("| %lld | %.3f | %.0f%% |\n", static_cast<long long>(o.batch * o.seqs[i]), mixer_s,
                100.0 * static_cast<double>(linear_layers) * mixer_s / qwen3_5_seconds[i]);
  }
  fs::remove_all(scratch);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_qwen3_5_moe: %s\n", e.what());
  return 1;
}
