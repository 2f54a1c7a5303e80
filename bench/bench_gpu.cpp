// GPU checks and measurements (tools/gpu_check.sh runs them on a GPU machine):
//
//   bench_gpu parity --target DIR   CUDA vs CPU: target forward and drafter
//                                   forward+backward of a small model, fp32 and bf16;
//                                   packed rows in bf16 (names the attention path taken)
//   bench_gpu nccl                  a one-rank NCCL process group: the step's all-reduce path
//   bench_gpu throughput --target DIR [--batch 4 --seq 3072 --anchors 512 --layers 5 --steps 5]
//                                   the recipe in bf16: target tokens/s, drafter step time,
//                                   drafter MFU (model FLOPs / 989 TFLOP/s), peak GPU memory;
//                                   the target forward's peak against its memory model
//
// Each check prints its figures and a line `RESULT <name> pass|fail ...`;
// the exit status is 1 when any tolerance is missed, 2 without a GPU.
#include <torch/torch.h>

#ifdef DFLOW_HAVE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "drafter/objective.hpp"
#include "target/target.hpp"
#include "target/target_memory.hpp"
#include "target/varlen_attention.hpp"
#include "train/adamw.hpp"
#include "train/distributed.hpp"
#include "train/launch_env.hpp"

namespace {

namespace fs = std::filesystem;
using namespace dflow;

constexpr double kH200DenseBf16Flops = 989e12;
// Stated tolerances (relative to the reference's largest magnitude; gradients
// by relative norm of the difference).
constexpr double kFp32Tolerance = 1e-4;
constexpr double kBf16Tolerance = 3e-2;

struct Args {
  std::string command;
  fs::path target;
  int64_t batch = 4, seq = 3072, anchors = 512, layers = 5, steps = 5;
};

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) throw std::invalid_argument("usage: bench_gpu parity|nccl|throughput [--target DIR ...]");
  a.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument("missing value after " + arg);
    const std::string value = argv[++i];
    if (arg == "--target") a.target = value;
    else if (arg == "--batch") a.batch = std::stoll(value);
    else if (arg == "--seq") a.seq = std::stoll(value);
    else if (arg == "--anchors") a.anchors = std::stoll(value);
    else if (arg == "--layers") a.layers = std::stoll(value);
    else if (arg == "--steps") a.steps = std::stoll(value);
    else throw std::invalid_argument("unknown option '" + arg + "'");
  }
  return a;
}

double max_relative(const torch::Tensor& reference, const torch::Tensor& value) {
  const auto ref = reference.to(torch::kCPU, torch::kFloat64), got = value.to(torch::kCPU, torch::kFloat64);
  return (ref - got).abs().max().item<double>() / std::max(ref.abs().max().item<double>(), 1e-30);
}

bool report(const std::string& name, double error, double tolerance) {
  const bool ok = std::isfinite(error) && error <= tolerance;
  std::printf("RESULT %s %s error %.3g tolerance %.1g\n", name.c_str(), ok ? "pass" : "fail", error, tolerance);
  std::fflush(stdout);
  return ok;
}

torch::Tensor flat_grads(dflow::drafter::DFlashDrafterImpl& drafter) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : drafter.parameters())
    parts.push_back(p.grad().defined() ? p.grad().to(torch::kCPU, torch::kFloat64).flatten()
                                       : torch::zeros({p.numel()}, torch::kFloat64));
  return torch::cat(parts);
}

struct DrafterRun {
  double loss = 0;
  torch::Tensor grads;
};

DrafterRun drafter_pass(const dflow::drafter::DrafterSpec& spec, torch::Device device, torch::Dtype dtype,
                        const dflow::target::TargetModel& target, const torch::Tensor& features,
                        const torch::Tensor& ids, const torch::Tensor& loss_mask, const torch::Tensor& lengths,
                        const dflow::drafter::AnchorBatch& anchors) {
  dflow::drafter::DFlashDrafter drafter(spec, 7);
  drafter->to(device, dtype);
  const auto embedding = target.embedding_weight().to(device, dtype), head = target.lm_head_weight().to(device, dtype);
  dflow::drafter::ObjectiveOptions objective;
  auto out = dflow::drafter::dflash_loss(*drafter, embedding, head, features.to(device), ids, loss_mask, lengths,
                                         anchors, objective);
  out.loss.backward();
  return {out.loss.item<double>(), flat_grads(*drafter)};
}

bool parity(const Args& a) {
  const torch::Device cuda("cuda:0");
  torch::manual_seed(0);
  bool ok = true;
  const auto reference = dflow::target::TargetModel::load(a.target, torch::kCPU, torch::kFloat32);
  const auto& config = reference.config();
  const auto layer_ids = dflow::target::distinct_feature_layer_ids(config.num_hidden_layers, 3);
  const torch::Tensor ids = torch::randint(0, config.vocab_size - 2, {2, 96}, torch::kInt64);
  const auto ref = reference.forward(ids, layer_ids, /*want_logits=*/true);
  const torch::Tensor ref_features = torch::cat(ref.hidden_states, -1);
  torch::Tensor loss_mask = torch::ones({2, 96}, torch::kInt64);
  loss_mask.narrow(1, 0, 24).zero_();
  const torch::Tensor lengths = torch::full({2}, 96, torch::kInt64);
  dflow::drafter::AnchorSamplingOptions sampling;
  sampling.anchors_per_sequence = 8;
  const auto anchors = dflow::drafter::sample_anchors(loss_mask, lengths, sampling);
  dflow::drafter::DrafterOptions drafter_options;
  drafter_options.num_layers = 2;
  drafter_options.target_layer_ids = layer_ids;
  const auto spec = dflow::drafter::make_drafter_spec(config, drafter_options);
  const DrafterRun cpu_run = drafter_pass(spec, torch::kCPU, torch::kFloat32, reference, ref_features, ids, loss_mask,
                                          lengths, anchors);

  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const std::string tag = dtype == torch::kFloat32 ? "fp32" : "bf16";
    const double tolerance = dtype == torch::kFloat32 ? kFp32Tolerance : kBf16Tolerance;
    const auto gpu = dflow::target::TargetModel::load(a.target, cuda, dtype);
    const auto got = gpu.forward(ids.to(cuda), layer_ids, true);
    ok &= report("target_logits_" + tag, max_relative(ref.logits, got.logits), tolerance);
    ok &= report("target_features_" + tag, max_relative(ref_features, torch::cat(got.hidden_states, -1)), tolerance);
    const DrafterRun gpu_run = drafter_pass(spec, cuda, dtype, reference, ref_features, ids, loss_mask, lengths, anchors);
    ok &= report("drafter_loss_" + tag, std::abs(gpu_run.loss - cpu_run.loss) / std::abs(cpu_run.loss), tolerance);
    ok &= report("drafter_grads_" + tag,
                 ((gpu_run.grads - cpu_run.grads).norm() / cpu_run.grads.norm()).item<double>(),
                 dtype == torch::kFloat32 ? 1e-3 : 1e-1);
  }
  // Both rows packed into one in bf16: flash attention's variable-length
  // kernel where this GPU runs it, else the per-document path (and a warning).
  const auto gpu = dflow::target::TargetModel::load(a.target, cuda, torch::kBFloat16);
  const int64_t rows = ids.size(0), length = ids.size(1);
  const dflow::target::PackedDocuments packed{torch::arange(length, torch::kInt64).repeat({rows}).unsqueeze(0),
                                      torch::arange(rows, torch::kInt64).repeat_interleave(length).unsqueeze(0)};
  const torch::Tensor packed_features =
      gpu.context_features(ids.reshape({1, rows * length}).to(cuda), packed, layer_ids).view({rows, length, -1});
  const bool varlen = dflow::target::use_varlen_attention(cuda, torch::kBFloat16, config.head_dim);
  std::printf("packed rows in bf16 on cuda:0: %s\n",
              varlen ? "flash attention's variable-length kernel" : "the per-document path (the kernel cannot run here)");
  ok &= report(std::string("packed_target_features_bf16_") + (varlen ? "varlen" : "per_document"),
               max_relative(ref_features, packed_features), kBf16Tolerance);
  return ok;
}

bool nccl() {
  train::LaunchEnv env;
  env.master_addr = "127.0.0.1";
  env.master_port = train::free_loopback_port();
  train::DistributedOptions options;
  options.backend = "nccl";
  options.device = torch::Device("cuda:0");
  options.timeout = std::chrono::milliseconds(60000);
  train::Distributed group(env, options);
  // What accumulate does at a step's end: gradients in flat buckets, then the float64 sums.
  auto weight = torch::zeros({1000, 64}, torch::TensorOptions().device(options.device)).requires_grad_();
  auto bias = torch::zeros({64}, torch::TensorOptions().device(options.device).dtype(torch::kBFloat16)).requires_grad_();
  weight.mutable_grad() = torch::full_like(weight, 2.0);
  bias.mutable_grad() = torch::full_like(bias, 3.0);
  group.allreduce_gradients({weight, bias}, "gradients");
  std::vector<double> sums{1.5, 2.5};
  group.allreduce_sum(sums, "step sums");
  torch::cuda::synchronize();
  const double error = (weight.grad() - 2.0).abs().max().item<double>() + (bias.grad().to(torch::kFloat32) - 3.0).abs().max().item<double>() +
                       std::abs(sums[0] - 1.5) + std::abs(sums[1] - 2.5);
  std::printf("[bench_gpu] process group backend: %s, world size %d\n", group.backend_name().c_str(), group.world_size());
  group.mark_done();
  return report("nccl_one_rank_allreduce", error, 0.0);
}

void synchronize(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

double peak_gpu_gib(bool reset) {
#ifdef DFLOW_HAVE_CUDA
  using c10::cuda::CUDACachingAllocator::getDeviceStats;
  const double peak = static_cast<double>(
      getDeviceStats(0).allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak);
  if (reset) c10::cuda::CUDACachingAllocator::resetPeakStats(0);
  return peak / double(1 << 30);
#else
  (void)reset;
  return 0;
#endif
}

double current_gpu_gib() {
#ifdef DFLOW_HAVE_CUDA
  using c10::cuda::CUDACachingAllocator::getDeviceStats;
  return static_cast<double>(
             getDeviceStats(0).allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current) /
         double(1 << 30);
#else
  return 0;
#endif
}

// Model FLOPs of one drafter step (forward + backward; a matmul's backward
// costs twice its forward, the frozen LM head's only the input gradient).
double drafter_step_flops(const dflow::drafter::DrafterSpec& s, int64_t batch, int64_t seq, int64_t anchors_total,
                          int64_t predicted_rows) {
  const double h = s.hidden_size, q_width = s.num_attention_heads * s.head_dim, kv_width = s.num_key_value_heads * s.head_dim;
  const double draft = static_cast<double>(anchors_total * s.block_size), context = static_cast<double>(batch * seq);
  const double per_layer_draft = 2 * (h * q_width * 2 + 3 * h * s.intermediate_size);  // q, o, MLP per draft token
  const double per_layer_kv = 2 * 2 * h * kv_width;                                     // k, v per token (context + draft)
  // Each draft query sees the context up to its anchor (seq / 2 on average) and its block.
  const double attention = 2 * 2 * draft * s.num_attention_heads * s.head_dim * (seq / 2.0 + s.block_size);
  const double layers = s.num_layers * (draft * per_layer_draft + (context + draft) * per_layer_kv + attention);
  const double fc = context * 2 * static_cast<double>(s.target_layer_ids.size()) * h * h;
  const double lm_head = static_cast<double>(predicted_rows) * 2 * h * s.vocab_size;
  return 3 * (layers + fc) + 2 * lm_head;
}

bool throughput(const Args& a) {
  const torch::Device cuda("cuda:0");
  torch::manual_seed(0);
  const auto started = std::chrono::steady_clock::now();
  const auto target = dflow::target::TargetModel::load(a.target, cuda, torch::kBFloat16);
  const auto& c = target.config();
  std::printf("[bench_gpu] target %s: %lld layers, hidden %lld, vocab %lld, loaded in %.1f s\n", a.target.c_str(),
              (long long)c.num_hidden_layers, (long long)c.hidden_size, (long long)c.vocab_size,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  dflow::drafter::DrafterOptions drafter_options;
  drafter_options.num_layers = a.layers;
  drafter_options.block_size = 16;
  drafter_options.target_layer_ids = dflow::target::feature_layer_ids(c.num_hidden_layers, 5);
  const auto spec = dflow::drafter::make_drafter_spec(c, drafter_options);
  const auto ids = torch::randint(0, c.vocab_size - 300, {a.batch, a.seq}, torch::kInt64);
  torch::Tensor loss_mask = torch::ones({a.batch, a.seq}, torch::kInt64);
  loss_mask.narrow(1, 0, a.seq / 4).zero_();
  const auto lengths = torch::full({a.batch}, a.seq, torch::kInt64);
  const auto ids_gpu = ids.to(cuda);

  auto time_s = [&](auto&& body, int64_t repeats) {
    body();  // warm-up
    synchronize(cuda);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < repeats; ++i) body();
    synchronize(cuda);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(repeats);
  };
  torch::Tensor features;
  const double target_s = time_s([&] { features = target.context_features(ids_gpu, spec.target_layer_ids); }, a.steps);
  const double target_tokens_per_s = static_cast<double>(a.batch * a.seq) / target_s;
  std::printf("RESULT target_forward pass %.0f tokens/s (batch %lld x %lld, %.3f s)\n", target_tokens_per_s,
              (long long)a.batch, (long long)a.seq, target_s);
  // One forward's peak beyond what was held before it (the weights) against
  // the target's memory model (target/target_memory.hpp), the features included.
  features = torch::Tensor();
  synchronize(cuda);
  const double held = current_gpu_gib();
  peak_gpu_gib(/*reset=*/true);
  features = target.context_features(ids_gpu, spec.target_layer_ids);
  synchronize(cuda);
  const double measured = peak_gpu_gib(/*reset=*/false) - held;
  dflow::target::TargetForwardShape shape;
  shape.rows = a.batch;
  shape.length = a.seq;
  shape.element_bytes = 2;
  shape.features = static_cast<int64_t>(spec.target_layer_ids.size());
  shape.cuda = true;
  const double modelled = dflow::target::estimate_target_forward(c, shape).total_bytes() / double(1 << 30);
  const bool bounded = measured <= modelled;
  std::printf("RESULT target_forward_memory %s %.2f GiB measured, %.2f GiB modelled (%.2fx; target/target_memory.hpp)\n",
              bounded ? "pass" : "fail", measured, modelled, modelled / measured);

  dflow::drafter::DFlashDrafter drafter(spec, 0);
  drafter->to(cuda, torch::kBFloat16);
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& item : drafter->named_parameters(true)) named.emplace_back(item.key(), item.value());
  train::AdamW optimizer(named, {});
  dflow::drafter::AnchorSamplingOptions sampling;
  sampling.anchors_per_sequence = a.anchors;
  dflow::drafter::ObjectiveOptions objective;
  int64_t anchors_total = 0, predicted_rows = 0, index = 0;
  bool finite = true;
  peak_gpu_gib(/*reset=*/true);
  const double step_s = time_s(
      [&] {
        sampling.batch_index = index++;
        const auto anchors = dflow::drafter::sample_anchors(loss_mask, lengths, sampling);
        auto out = dflow::drafter::dflash_loss(*drafter, target.embedding_weight(), target.lm_head_weight(), features,
                                               ids, loss_mask, lengths, anchors, objective);
        out.loss_sum.backward();
        optimizer.scale_grads(1.0 / out.weight_sum);
        optimizer.clip_grad_norm(1.0, optimizer.grad_norm());
        optimizer.step(6e-4);
        optimizer.zero_grad();
        finite = finite && std::isfinite(out.weighted_ce_sum);
        anchors_total = out.num_anchors;
        predicted_rows = out.predicted_tokens;
      },
      a.steps);
  const double flops = drafter_step_flops(spec, a.batch, a.seq, anchors_total, predicted_rows);
  const double mfu = flops / step_s / kH200DenseBf16Flops;
  std::printf("RESULT drafter_step %s %.1f ms/step, %.1f TFLOP/step, MFU %.1f%% of 989 TFLOP/s, %lld anchors, "
              "%.0f draft tokens/s\n",
              finite ? "pass" : "fail", 1e3 * step_s, flops / 1e12, 100 * mfu, (long long)anchors_total,
              static_cast<double>(anchors_total * spec.block_size) / step_s);
  std::printf("RESULT peak_gpu_memory pass %.1f GiB (target weights, features, drafter, masters, Adam moments, "
              "activations)\n", peak_gpu_gib(false));
  return finite && bounded;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    if (!torch::cuda::is_available()) {
      std::printf("[bench_gpu] no usable CUDA device: '%s' skipped\n", a.command.c_str());
      return 2;
    }
    bool ok = false;
    if (a.command == "parity") ok = parity(a);
    else if (a.command == "nccl") ok = nccl();
    else if (a.command == "throughput") ok = throughput(a);
    else throw std::invalid_argument("unknown command '" + a.command + "' (parity, nccl, throughput)");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[bench_gpu] error: %s\n", e.what());
    return 1;
  }
}
