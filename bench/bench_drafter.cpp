// Drafter forward+backward throughput and peak memory against the number of
// anchors per sequence. Each configuration runs in a fresh child process
// (this binary re-executed with --child) so that the RSS high-water mark
// (VmHWM) belongs to that configuration alone.
//
//   bench_drafter [--threads 2] [--seq-len 1024] [--steps 3] [--anchors 64,128,256,512]
#include <torch/torch.h>

#include <time.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "drafter/objective.hpp"

namespace {

using dflow::drafter::AnchorBatch;
using dflow::drafter::AnchorSamplingOptions;
using dflow::drafter::DFlashDrafter;
using dflow::drafter::DrafterOptions;
using dflow::target::HFConfig;
using dflow::drafter::ObjectiveOptions;

struct BenchOptions {
  int64_t threads = 2;
  int64_t seq_len_tokens = 1024;
  int64_t steps = 3;
  std::vector<int64_t> anchors = {64, 128, 256, 512};
};

// A small Qwen3-shaped target: wide enough that matmuls dominate, small
// enough for a CPU. Drafter: 1 layer, block 16, 3 target features.
HFConfig bench_target_config() {
  HFConfig c;
  c.hidden_size = 512;
  c.num_hidden_layers = 16;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = 64;
  c.intermediate_size = 1536;
  c.vocab_size = 8192;
  c.max_position_embeddings = 4096;
  c.rope_theta = 1e6;
  c.mask_token_id = 8191;
  return c;
}

// CPU seconds of the whole process: unlike wall time, barely moved by other
// processes competing for the same cores.
double process_cpu_s() {
  timespec now{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

int64_t status_kib(const std::string& key) {  // from /proc/self/status, e.g. "VmHWM"
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  }
  return -1;
}

// One configuration; prints one line:
// anchors wall_s/step cpu_s/step draft_tok/s seq_tok/s draft_tok/cpu_s baseline_MiB peak_MiB
int run_child(const BenchOptions& options, int64_t anchors_per_sequence) {
  torch::set_num_threads(static_cast<int>(options.threads));
  torch::manual_seed(0);
  const HFConfig target = bench_target_config();
  DrafterOptions drafter_options;
  drafter_options.num_layers = 1;
  drafter_options.block_size = 16;
  drafter_options.num_target_features = 3;
  DFlashDrafter drafter(dflow::drafter::make_drafter_spec(target, drafter_options), 0);
  torch::optim::AdamW optimizer(drafter->parameters(), torch::optim::AdamWOptions(6e-4).weight_decay(0.0));

  const int64_t length = options.seq_len_tokens, hidden = target.hidden_size;
  const torch::Tensor embedding = torch::randn({target.vocab_size, hidden});
  const torch::Tensor lm_head = torch::randn({target.vocab_size, hidden}) * 0.05;
  const torch::Tensor features = torch::randn({1, length, 3 * hidden});
  const torch::Tensor input_ids = torch::randint(0, target.vocab_size - 1, {1, length}, torch::kInt64);
  torch::Tensor loss_mask = torch::ones({1, length}, torch::kInt64);
  loss_mask.narrow(1, 0, length / 4).zero_();  // a prompt of a quarter of the sequence
  const torch::Tensor lengths = torch::full({1}, length, torch::kInt64);
  AnchorSamplingOptions sampling;
  sampling.anchors_per_sequence = anchors_per_sequence;
  ObjectiveOptions objective;
  objective.loss_decay_gamma = 7.0;
  const int64_t baseline_kib = status_kib("VmRSS");

  auto step = [&](int64_t index) {
    sampling.batch_index = index;
    const AnchorBatch anchors = dflow::drafter::sample_anchors(loss_mask, lengths, sampling);
    optimizer.zero_grad();
    dflow::drafter::ObjectiveOutput out = dflow::drafter::dflash_loss(*drafter, embedding, lm_head, features, input_ids,
                                                                      loss_mask, lengths, anchors, objective);
    out.loss.backward();
    optimizer.step();
    return anchors.num_anchors();
  };
  step(-1);  // warm-up: allocations, optimizer state
  const auto start = std::chrono::steady_clock::now();
  const double start_cpu_s = process_cpu_s();
  int64_t anchors_done = 0;
  for (int64_t i = 0; i < options.steps; ++i) anchors_done += step(i);
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu_s = process_cpu_s() - start_cpu_s;
  const double step_s = elapsed_s / static_cast<double>(options.steps);
  const double draft_tokens_per_s = static_cast<double>(anchors_done * drafter_options.block_size) / elapsed_s;
  const double sequence_tokens_per_s = static_cast<double>(length * options.steps) / elapsed_s;
  const double draft_tokens = static_cast<double>(anchors_done * drafter_options.block_size);
  std::printf("%lld %.4f %.4f %.1f %.1f %.1f %.1f %.1f\n", static_cast<long long>(anchors_per_sequence), step_s,
              cpu_s / static_cast<double>(options.steps), draft_tokens_per_s, sequence_tokens_per_s,
              draft_tokens / cpu_s, baseline_kib / 1024.0, status_kib("VmHWM") / 1024.0);
  return 0;
}

BenchOptions parse(int argc, char** argv, bool& child, int64_t& child_anchors) {
  BenchOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + arg);
      return argv[++i];
    };
    if (arg == "--threads") options.threads = std::stoll(value());
    else if (arg == "--seq-len") options.seq_len_tokens = std::stoll(value());
    else if (arg == "--steps") options.steps = std::stoll(value());
    else if (arg == "--child") { child = true; child_anchors = std::stoll(value()); }
    else if (arg == "--anchors") {
      options.anchors.clear();
      std::stringstream list(value());
      for (std::string item; std::getline(list, item, ',');) options.anchors.push_back(std::stoll(item));
    } else {
      throw std::invalid_argument("unknown option '" + arg + "' (use --threads, --seq-len, --steps, --anchors)");
    }
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    bool child = false;
    int64_t child_anchors = 0;
    const BenchOptions options = parse(argc, argv, child, child_anchors);
    if (child) return run_child(options, child_anchors);

    const HFConfig c = bench_target_config();
    std::printf("[bench_drafter] drafter 1 layer, block 16, 3 features; hidden %lld, heads %lld/%lld, head_dim %lld, "
                "ffn %lld, vocab %lld; seq %lld tokens (3/4 response), batch 1, %lld threads, %lld timed steps "
                "(+1 warm-up), AdamW\n",
                static_cast<long long>(c.hidden_size), static_cast<long long>(c.num_attention_heads),
                static_cast<long long>(c.num_key_value_heads), static_cast<long long>(c.head_dim),
                static_cast<long long>(c.intermediate_size), static_cast<long long>(c.vocab_size),
                static_cast<long long>(options.seq_len_tokens), static_cast<long long>(options.threads),
                static_cast<long long>(options.steps));
    std::printf("%8s %10s %10s %12s %10s %15s %13s %9s %9s\n", "anchors", "wall s", "cpu s", "draft tok/s",
                "seq tok/s", "draft tok/cpu-s", "baseline MiB", "peak MiB", "step MiB");
    for (const int64_t anchors : options.anchors) {
      std::ostringstream command;
      command << std::filesystem::read_symlink("/proc/self/exe").string() << " --child " << anchors << " --threads " << options.threads << " --seq-len "
              << options.seq_len_tokens << " --steps " << options.steps;
      FILE* pipe = ::popen(command.str().c_str(), "r");
      if (pipe == nullptr) throw std::runtime_error("cannot start child: " + command.str());
      long long anchors_read = 0;
      double step_s = 0, cpu_step_s = 0, draft_rate = 0, seq_rate = 0, draft_cpu_rate = 0, baseline_mib = 0, peak_mib = 0;
      const int fields = std::fscanf(pipe, "%lld %lf %lf %lf %lf %lf %lf %lf", &anchors_read, &step_s, &cpu_step_s,
                                     &draft_rate, &seq_rate, &draft_cpu_rate, &baseline_mib, &peak_mib);
      if (::pclose(pipe) != 0 || fields != 8) throw std::runtime_error("child failed: " + command.str());
      std::printf("%8lld %10.3f %10.3f %12.0f %10.0f %15.0f %13.1f %9.1f %9.1f\n", anchors_read, step_s, cpu_step_s,
                  draft_rate, seq_rate, draft_cpu_rate, baseline_mib, peak_mib, peak_mib - baseline_mib);
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[bench_drafter] error: %s\n", e.what());
    return 1;
  }
}
