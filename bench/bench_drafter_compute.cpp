// What the drafter step computes, measured as ratios in one run (issue 36):
//   1. sliding layers: forward + backward of 5 full-attention draft layers
//      against 4 sliding (window 2048) + 1 full, at 2k, 4k and 8k context,
//      beside the ratio of their FLOPs (counted from the same plans: the
//      keys each chunk scores, the projections, the MLP);
//   2. grouped-query attention: one chunk's attention forward + backward
//      with K/V heads read grouped against repeated first (time, peak bytes);
//   3. the gradient norm: host reads and time, one reduction against one
//      read per parameter;
//   4. activation recomputation: time and peak bytes of forward + backward,
//      and the growth per anchor measured against the memory model
//      (drafter/drafter_memory.hpp).
// The drafter is Qwen3-8B's shape narrowed (hidden 256, 4 query heads of 64
// over 1 K/V head: Qwen3-8B's 4 query heads per K/V head, intermediate 3x
// hidden, 5 target features, block 16), and chunks hold as many blocks as
// Qwen3-8B's 32 heads would get from the default score budget. Peak bytes
// come from a counting CPU allocator (drafter/cpu_memory_counter.hpp) on the
// CPU, from the caching allocator's statistics on CUDA.
//
//   bench_drafter_compute [--device cpu|cuda] [--dtype float32|bfloat16] [--threads 2]
//                         [--lengths 2048,4096,8192] [--anchors 64] [--rounds 2]
#include <ATen/DeviceAccelerator.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "drafter/cpu_memory_counter.hpp"
#include "drafter/drafter_memory.hpp"
#include "drafter/objective.hpp"
#include "target/tiny_target.hpp"
#include "train/optimizer.hpp"

namespace {

using namespace dflow::target;
using namespace dflow::drafter;

struct Options {
  torch::Device device{torch::kCPU};
  torch::Dtype dtype = torch::kFloat32;
  int threads = 2, rounds = 2;
  std::vector<int64_t> lengths = {2048, 4096, 8192};
  int64_t anchors = 64, window = 2048;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i], value = argv[i + 1];
    if (arg == "--device") o.device = torch::Device(value);
    else if (arg == "--dtype") o.dtype = value == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
    else if (arg == "--threads") o.threads = std::stoi(value);
    else if (arg == "--rounds") o.rounds = std::stoi(value);
    else if (arg == "--anchors") o.anchors = std::stoll(value);
    else if (arg == "--lengths") {
      o.lengths.clear();
      std::stringstream in(value);
      for (std::string item; std::getline(in, item, ',');) o.lengths.push_back(std::stoll(item));
    } else throw std::invalid_argument("unknown option " + arg);
  }
  return o;
}

void synchronize(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

double seconds_of(const std::function<void()>& work, torch::Device device) {
  synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  work();
  synchronize(device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Peak bytes while a meter lives, above what was held when it started: a
// counting allocator on the CPU, the accelerator's statistics on CUDA.
class PeakMeter {
 public:
  explicit PeakMeter(torch::Device device) : device_(device) {
    if (device.is_cuda()) {
      at::accelerator::resetPeakStats(0);
      start_ = allocated(false);
    } else {
      cpu_ = std::make_unique<CpuMemoryCounter>();
    }
  }
  double peak_above_start() const {
    return device_.is_cuda() ? allocated(true) - start_ : static_cast<double>(cpu_->peak_bytes());
  }

 private:
  static double allocated(bool peak) {
    const auto stats = at::accelerator::getDeviceStats(0);
    const auto& stat = stats.allocated_bytes[0];  // all pools
    return static_cast<double>(peak ? stat.peak : stat.current);
  }
  torch::Device device_;
  double start_ = 0;
  std::unique_ptr<CpuMemoryCounter> cpu_;
};

DrafterSpec bench_spec(int64_t layers, int64_t sliding_layers, int64_t window) {
  HFConfig target;
  target.hidden_size = 256;
  target.num_hidden_layers = 36;
  target.num_attention_heads = 4;
  target.num_key_value_heads = 1;
  target.head_dim = 64;
  target.intermediate_size = 768;
  target.vocab_size = 1024;
  target.max_position_embeddings = 40960;
  target.rope_theta = 1000000.0;
  target.mask_token_id = 1023;
  DrafterOptions options;
  options.num_layers = layers;
  options.block_size = 16;
  options.num_target_features = 5;
  if (sliding_layers > 0) {
    options.layer_types.assign(static_cast<size_t>(layers), "full_attention");
    for (int64_t l = 0; l < sliding_layers; ++l) options.layer_types[static_cast<size_t>(l)] = "sliding_attention";
    options.sliding_window = window;
  }
  return make_drafter_spec(target, options);
}

// The RESULT lines printed at the end (tools/gpu_check.sh reads them).
std::vector<std::string> results;

std::string fixed(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", value);
  return text;
}

// Qwen3-8B's 32 heads under the default budget of 2^25 scores per chunk.
constexpr int64_t kScoreBudget = (int64_t{1} << 25) * 4 / 32;

struct Inputs {
  torch::Tensor features, embeddings, positions, anchors, keep;
  int64_t length = 0;
};

Inputs inputs_for(const DrafterSpec& spec, int64_t length, int64_t anchors, const Options& o) {
  torch::manual_seed(11);
  Inputs in;
  in.length = length;
  // Sorted distinct anchors spread over the row, as sample_anchors draws them.
  in.anchors = std::get<0>(torch::randperm(length - 2, torch::kInt64).narrow(0, 0, anchors).add(1).sort()).view({1, anchors});
  in.keep = torch::ones({1, anchors}, torch::kBool);
  in.features = torch::randn({1, length, spec.num_features() * spec.hidden_size}).to(o.device, o.dtype);
  in.embeddings = torch::randn({1, anchors * spec.block_size, spec.hidden_size}).to(o.device, o.dtype);
  in.positions = (in.anchors.unsqueeze(-1) + torch::arange(spec.block_size, torch::kInt64)).view({1, -1}).to(o.device);
  return in;
}

BlockAttentionPlan plan_for(const DrafterSpec& spec, const Inputs& in, const Options& o, SlidingKeys keys) {
  const int64_t blocks_per_chunk =
      blocks_per_chunk_for_budget(1, spec.num_attention_heads, in.length, spec.block_size, kScoreBudget);
  BlockAttentionPlan plan =
      plan_block_attention(in.anchors, in.keep, in.length, spec.block_size, blocks_per_chunk, o.device);
  if (spec.any_sliding()) add_sliding_window(plan, in.anchors, spec.sliding_window, keys);
  return plan;
}

// Forward and backward FLOPs of the drafter on a plan: the attention scores
// and weighted sums of each chunk (the keys it reads), the projections of
// the draft slots and of the context, the MLP, fc. Backward counts twice.
double drafter_flops(const DrafterSpec& spec, const BlockAttentionPlan& plan, int64_t length) {
  const double h = static_cast<double>(spec.hidden_size), i = static_cast<double>(spec.intermediate_size);
  const double qd = static_cast<double>(spec.num_attention_heads * spec.head_dim);
  const double kd = static_cast<double>(spec.num_key_value_heads * spec.head_dim);
  const double slots = static_cast<double>(plan.num_blocks * plan.block_size);
  double forward = 2 * static_cast<double>(length) * static_cast<double>(spec.num_features()) * h * h;  // fc
  for (int64_t layer = 0; layer < spec.num_layers; ++layer) {
    const bool sliding = spec.layer_window(layer) > 0;
    forward += slots * 2 * (2 * h * qd + 2 * h * kd + 3 * h * i) + static_cast<double>(length) * 2 * 2 * h * kd;
    for (const BlockAttentionChunk& chunk : plan.chunks) {
      const double keys = static_cast<double>(sliding ? chunk.sliding_context_length : chunk.context_length) +
                          static_cast<double>(chunk.num_queries);
      forward += 2 * 2 * static_cast<double>(chunk.num_queries) * keys * qd;
    }
  }
  return 3 * forward;
}

double pass_seconds(DFlashDrafter& drafter, const Inputs& in, const BlockAttentionPlan& plan, bool recompute,
                    const Options& o) {
  return seconds_of(
      [&] {
        drafter->zero_grad();
        const torch::Tensor out = drafter->forward(in.features, in.embeddings, in.positions, plan, recompute);
        out.to(torch::kFloat32).square().mean().backward();
      },
      o.device);
}

// The fastest of `rounds` runs of each variant, the variants alternating
// (after one warm-up each): on a machine busy with other work the fastest
// run is the one least disturbed.
std::vector<double> alternate(const std::vector<std::function<double()>>& variants, int rounds) {
  std::vector<double> best(variants.size(), 1e300);
  for (const auto& v : variants) v();
  for (int r = 0; r < rounds; ++r)
    for (size_t k = 0; k < variants.size(); ++k) best[k] = std::min(best[k], variants[k]());
  return best;
}

DFlashDrafter make_drafter(const DrafterSpec& spec, const Options& o) {
  DFlashDrafter drafter(spec, 7);
  drafter->to(o.device, o.dtype);
  return drafter;
}

void sliding_layers(const Options& o) {
  std::printf("\n### 1. Sliding layers: 4 sliding (window %lld) + 1 full against 5 full, forward + backward\n\n",
              static_cast<long long>(o.window));
  std::printf("| context | anchors | 5 full s | 4 sliding + 1 full s | measured ratio | FLOP ratio | masked sliding s | "
              "narrowed / masked |\n|---|---|---|---|---|---|---|---|\n");
  const DrafterSpec full_spec = bench_spec(5, 0, 0), mixed_spec = bench_spec(5, 4, o.window);
  DFlashDrafter full = make_drafter(full_spec, o), mixed = make_drafter(mixed_spec, o);
  for (const int64_t length : o.lengths) {
    const Inputs in = inputs_for(full_spec, length, o.anchors, o);
    const BlockAttentionPlan full_plan = plan_for(full_spec, in, o, SlidingKeys::within_window);
    const BlockAttentionPlan narrowed = plan_for(mixed_spec, in, o, SlidingKeys::within_window);
    const BlockAttentionPlan masked = plan_for(mixed_spec, in, o, SlidingKeys::whole_context);
    const auto t = alternate({[&] { return pass_seconds(full, in, full_plan, false, o); },
                              [&] { return pass_seconds(mixed, in, narrowed, false, o); },
                              [&] { return pass_seconds(mixed, in, masked, false, o); }},
                             o.rounds);
    const double flop_ratio = drafter_flops(mixed_spec, narrowed, length) / drafter_flops(full_spec, full_plan, length);
    std::printf("| %lld | %lld | %.3f | %.3f | %.2f | %.2f | %.3f | %.2f |\n", static_cast<long long>(length),
                static_cast<long long>(o.anchors), t[0], t[1], t[1] / t[0], flop_ratio, t[2], t[1] / t[2]);
    results.push_back("RESULT sliding_" + std::to_string(length) + " time(4 sliding + 1 full)/time(5 full) " +
                      fixed(t[1] / t[0]) + ", FLOP ratio " + fixed(flop_ratio) + ", narrowed/masked " + fixed(t[1] / t[2]));
    std::fflush(stdout);
  }
}

void grouped_query_attention(const Options& o) {
  // One chunk at Qwen3-8B's attention shape: 32 query heads over 8 K/V heads of 128, 4 blocks of 16
  // queries, 4096 context keys plus the chunk's own blocks.
  std::printf("\n### 2. Grouped-query attention, one chunk (32 query heads over 8 K/V heads of 128, 64 queries, "
              "4096 + 64 keys), forward + backward\n\n");
  const int64_t heads = 32, kv_heads = 8, dim = 128, queries = 64, keys = 4096 + 64;
  torch::manual_seed(3);
  const auto options = torch::TensorOptions().device(o.device).dtype(o.dtype);
  const torch::Tensor q = torch::randn({1, heads, queries, dim}, options);
  const torch::Tensor k = torch::randn({1, kv_heads, keys, dim}, options), v = torch::randn({1, kv_heads, keys, dim}, options);
  const torch::Tensor mask = (torch::rand({1, 1, queries, keys}, torch::TensorOptions().device(o.device)) < 0.9);
  double peak[2] = {0, 0};
  auto run = [&](KvHeads mode, int index) {
    return seconds_of(
        [&] {
          const torch::Tensor ql = q.clone().requires_grad_(true), kl = k.clone().requires_grad_(true);
          const torch::Tensor vl = v.clone().requires_grad_(true);
          PeakMeter meter(o.device);
          grouped_attention(ql, kl, vl, mask, false, mode).to(torch::kFloat32).square().mean().backward();
          peak[index] = meter.peak_above_start();
        },
        o.device);
  };
  const auto t = alternate({[&] { return run(KvHeads::expanded, 0); }, [&] { return run(KvHeads::grouped, 1); }},
                           o.rounds + 2);
  std::printf("| K/V heads | s | peak MiB |\n|---|---|---|\n| repeated (before) | %.4f | %.1f |\n"
              "| grouped (after) | %.4f | %.1f |\n\ngrouped / repeated: time %.2f, peak memory %.2f\n",
              t[0], peak[0] / 1048576.0, t[1], peak[1] / 1048576.0, t[1] / t[0], peak[1] / peak[0]);
  results.push_back("RESULT gqa grouped/repeated time " + fixed(t[1] / t[0]) + ", peak memory " + fixed(peak[1] / peak[0]));
}

void gradient_norm(const Options& o) {
  std::printf("\n### 3. Gradient norm over the drafter's parameters (5 layers)\n\n");
  DFlashDrafter drafter = make_drafter(bench_spec(5, 4, o.window), o);
  std::vector<torch::Tensor> grads;
  for (auto& p : drafter->parameters()) {
    p.mutable_grad() = torch::randn_like(p);
    grads.push_back(p.grad());
  }
  double before = 0, after = 0;
  const int repeats = 50;
  auto per_parameter = [&] {
    return seconds_of(
        [&] {
          for (int r = 0; r < repeats; ++r) {
            double squares = 0;
            for (const auto& g : grads) squares += g.to(torch::kFloat64).pow(2).sum().item<double>();
            before = std::sqrt(squares);
          }
        },
        o.device);
  };
  auto one_reduction = [&] {
    return seconds_of([&] { for (int r = 0; r < repeats; ++r) after = dflow::train::global_grad_norm(grads); }, o.device);
  };
  const auto t = alternate({per_parameter, one_reduction}, o.rounds + 1);
  std::printf("| | host reads per norm | ms per norm |\n|---|---|---|\n| one per parameter (before) | %zu | %.3f |\n"
              "| one reduction (after) | 1 | %.3f |\n\nsame norm: %.17g vs %.17g (relative difference %.1e); "
              "time after / before %.2f\n",
              grads.size(), 1e3 * t[0] / repeats, 1e3 * t[1] / repeats, before, after, std::abs(after - before) / before,
              t[1] / t[0]);
  results.push_back("RESULT grad_norm host reads " + std::to_string(grads.size()) + " -> 1, time after/before " +
                    fixed(t[1] / t[0]));
}

void recomputation(const Options& o) {
  const int64_t length = o.lengths.back();
  std::printf("\n### 4. Activation recomputation, 4 sliding + 1 full at %lld context\n\n", static_cast<long long>(length));
  const DrafterSpec spec = bench_spec(5, 4, o.window);
  DFlashDrafter drafter = make_drafter(spec, o);
  auto measure = [&](int64_t anchors, bool recompute, double* seconds) {
    drafter->zero_grad();
    double peak = 0;
    std::unique_ptr<PeakMeter> meter = std::make_unique<PeakMeter>(o.device);  // inputs and plan masks count too
    const Inputs in = inputs_for(spec, length, anchors, o);
    const BlockAttentionPlan plan = plan_for(spec, in, o, SlidingKeys::within_window);
    const double s = seconds_of(
        [&] {
          const torch::Tensor out = drafter->forward(in.features, in.embeddings, in.positions, plan, recompute);
          out.to(torch::kFloat32).square().mean().backward();
        },
        o.device);
    peak = meter->peak_above_start();
    if (seconds != nullptr) *seconds = s;
    return peak;
  };
  auto modelled = [&](int64_t anchors, bool recompute) {
    DrafterMemoryShape shape;
    shape.rows = 1;
    shape.context_length = length;
    shape.anchors_per_sequence = anchors;
    shape.dtype = o.dtype;
    shape.recompute_layers = recompute;
    shape.max_attention_scores_per_chunk = kScoreBudget;
    return estimate_drafter_memory(spec, shape).per_anchor_bytes;
  };
  const int64_t few = o.anchors / 2, many = o.anchors;
  std::printf("| recompute | s (%lld anchors) | peak MiB | per anchor MiB, measured | per anchor MiB, model |\n"
              "|---|---|---|---|---|\n", static_cast<long long>(many));
  double time[2] = {0, 0}, peak[2] = {0, 0};
  std::string per_anchor_text[2];
  for (const bool recompute : {false, true}) measure(many, recompute, nullptr);  // warm-up
  for (int r = 0; r < o.rounds; ++r)
    for (const bool recompute : {false, true}) {
      double s = 0;
      peak[recompute] = measure(many, recompute, &s);
      time[recompute] = r == 0 ? s : std::min(time[recompute], s);  // the least disturbed run
    }
  for (const bool recompute : {false, true}) {
    const double per_anchor = (peak[recompute] - measure(few, recompute, nullptr)) / static_cast<double>(many - few);
    per_anchor_text[recompute] = fixed(per_anchor / 1048576.0);
    std::printf("| %s | %.3f | %.1f | %.3f | %.3f |\n", recompute ? "on" : "off", time[recompute],
                peak[recompute] / 1048576.0, per_anchor / 1048576.0, modelled(many, recompute) / 1048576.0);
  }
  std::printf("\nrecompute on / off: time %.2f, peak memory %.2f\n", time[1] / time[0], peak[1] / peak[0]);
  results.push_back("RESULT recompute on/off time " + fixed(time[1] / time[0]) + ", peak memory " +
                    fixed(peak[1] / peak[0]) + ", per anchor measured " + per_anchor_text[0] + " / " +
                    per_anchor_text[1] + " MiB (off/on), model " + fixed(modelled(many, false) / 1048576.0) + " / " +
                    fixed(modelled(many, true) / 1048576.0));
}

// The memory model at the real shape: Qwen3-8B's drafter (5 layers of
// hidden 4096, 32 query heads over 8 K/V heads of 128, intermediate 12288,
// vocabulary 151936) in bf16, one row of 8192 tokens.
void real_shape_memory() {
  const HFConfig target = tiny_target_config(preset_target_options("qwen3-8b"));
  DrafterOptions options;
  options.num_layers = 5;
  options.block_size = 16;
  options.num_target_features = 5;
  std::printf("\n### 5. The memory model at Qwen3-8B's drafter (bf16, 1 row of 8192 tokens)\n\n"
              "| layers | anchors | recompute | per anchor MiB | activations GiB | total GiB |\n|---|---|---|---|---|---|\n");
  for (const bool sliding : {false, true}) {
    DrafterOptions o = options;
    if (sliding) {
      o.layer_types = {"sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"};
      o.sliding_window = 2048;
    }
    const DrafterSpec spec = make_drafter_spec(target, o);
    for (const int64_t anchors : {512, 2048})
      for (const bool recompute : {false, true}) {
        DrafterMemoryShape shape;
        shape.rows = 1;
        shape.context_length = 8192;
        shape.anchors_per_sequence = anchors;
        shape.dtype = torch::kBFloat16;
        shape.recompute_layers = recompute;
        const DrafterMemoryEstimate e = estimate_drafter_memory(spec, shape);
        const double gib = 1024.0 * 1024.0 * 1024.0;
        std::printf("| %s | %lld | %s | %.2f | %.1f | %.1f |\n", sliding ? "4 sliding + 1 full" : "5 full",
                    static_cast<long long>(anchors), recompute ? "on" : "off", e.per_anchor_bytes / 1048576.0,
                    e.per_anchor_bytes * static_cast<double>(e.anchors) / gib, e.total_bytes() / gib);
      }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    torch::set_num_threads(o.threads);
    std::printf("bench_drafter_compute on %s, %s, %d threads; drafter: hidden 256, 4 query heads over 1 K/V head "
                "of 64, intermediate 768, 5 target features, block 16, %lld anchors per row\n",
                o.device.str().c_str(), o.dtype == torch::kBFloat16 ? "bfloat16" : "float32", o.threads,
                static_cast<long long>(o.anchors));
    sliding_layers(o);
    grouped_query_attention(o);
    gradient_norm(o);
    recomputation(o);
    real_shape_memory();
    std::printf("\n");
    for (const std::string& line : results) std::printf("%s\n", line.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_drafter_compute: %s\n", e.what());
    return 1;
  }
  return 0;
}
