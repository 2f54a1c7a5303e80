// Training throughput with packing against token-budget buckets: the same
// data, model and config through the whole declared graph, one run each in
// one process, differing only in the pipeline's pad node
// (pad_bucket.token_budget vs pad_bucket.pack). Real (unpadded) tokens per
// second over the steps' own time (sum of step_s: model loading excluded).
//
// The two alternate ROUNDS times (so that load from other processes hits
// both alike; the order flips every round); the headline is the median of
// the rounds' own ratios, and the table gives each one's median round. Also
// real tokens per CPU-second of the whole run (this process's user + system
// time, model loading included): the compute each real token costs, which
// load from other processes moves far less than it moves wall time.
//
//   build/bench/bench_packing [EPOCHS] [ROUNDS] [DATA]   (default 1, 3, demo;
//   run from the repo root after `build/dflow train` has created
//   runs/demo/target and runs/demo/data)
//
// DATA demo: the demo's own data (lengths 112-144: near-uniform, so buckets
// already fit them fairly well, and 16 anchors per sample make the drafter's
// per-sample work dominate). DATA lognormal: 1,500 synthetic samples with
// log-normal lengths (median 160, sigma 1, clamped to 32-1024; a quarter
// prompt), max_length 1024, buckets 64-1024, 4,096 tokens per batch, the
// same demo target and drafter: the spread of lengths real chat data has.
#include <torch/torch.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "config/log.hpp"
#include "data/prepare.hpp"
#include "nodes/trainer.hpp"

using namespace dflow;

namespace {

double process_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Measured {
  int64_t steps = 0, real_tokens = 0, padded_tokens = 0;
  double step_s = 0, cpu_s = 0;
  std::vector<std::pair<std::string, double>> busy_s;  // per node over the run (replicas summed)
  double tokens_per_s() const { return step_s > 0 ? static_cast<double>(real_tokens) / step_s : 0.0; }
  double tokens_per_cpu_s() const { return cpu_s > 0 ? static_cast<double>(real_tokens) / cpu_s : 0.0; }
  double efficiency() const { return padded_tokens > 0 ? static_cast<double>(real_tokens) / padded_tokens : 0.0; }
};

// The lognormal data set (see the top), prepared under `dir`; returns the
// config overrides that train on it.
std::vector<std::string> make_lognormal_data(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> token(0, 509);
  {
    std::ofstream out(dir / "samples.jsonl");
    for (int i = 0; i < 1500; ++i) {
      const int length = std::clamp(static_cast<int>(std::lround(160.0 * std::exp(normal(rng)))), 32, 1024);
      const int prompt = length / 4;
      nlohmann::json sample;
      std::vector<int> ids(static_cast<size_t>(length)), mask(static_cast<size_t>(length), 1);
      for (auto& id : ids) id = token(rng);
      std::fill(mask.begin(), mask.begin() + prompt, 0);
      sample["input_ids"] = ids;
      sample["loss_mask"] = mask;
      out << sample.dump() << "\n";
    }
  }
  data::PrepareOptions prepare;
  prepare.input_path = dir / "samples.jsonl";
  prepare.out_dir = dir / "data";
  prepare.max_length = 1024;
  prepare.overwrite = true;
  data::prepare_jsonl(prepare);
  return {"data.train=[" + (dir / "data").string() + "]", "data.max_length=1024",
          "data.buckets=[64,128,256,512,1024]", "data.tokens_per_batch=4096"};
}

Measured train_with(const std::string& pad_type, const std::filesystem::path& out_dir, int epochs,
                    const std::vector<std::string>& data_overrides) {
  std::vector<std::string> overrides{"run.out_dir=" + out_dir.string(), "metrics.sinks=[jsonl]",
                                     "checkpoint.every_steps=0", "run.log_level=warn",
                                     "train.epochs=" + std::to_string(epochs)};
  overrides.insert(overrides.end(), data_overrides.begin(), data_overrides.end());
  auto config = config::load_config("", overrides);
  for (auto& n : config.pipeline.nodes) {
    if (n.name == "pad") n.type = pad_type;
  }
  // No periodic evaluation: only training steps are timed.
  auto& p = config.pipeline;
  std::erase_if(p.nodes, [](const auto& n) { return n.type == "eval.tau"; });
  std::erase_if(p.edges, [](const auto& e) { return e.to.rfind("eval", 0) == 0; });
  torch::set_num_threads(config.run.torch_threads);
  const double cpu_before = process_cpu_seconds();
  const auto result = nodes::run_training(config, {});
  Measured m;
  m.cpu_s = process_cpu_seconds() - cpu_before;
  std::ifstream in(result.metrics_path);
  for (std::string line; std::getline(in, line);) {
    auto r = nlohmann::json::parse(line);
    if (r.value("kind", "") != "step") continue;
    m.steps += 1;
    m.real_tokens += r["real_tokens"].get<int64_t>();
    m.padded_tokens += r["padded_tokens"].get<int64_t>();
    m.step_s += r["time"]["step_s"].get<double>();
    if (r.contains("telemetry")) {  // cumulative: the last step's counts cover the run
      m.busy_s.clear();
      for (const auto& n : r["telemetry"]["nodes"]) {
        const std::string name = n["name"].get<std::string>();
        auto it = std::find_if(m.busy_s.begin(), m.busy_s.end(), [&](const auto& e) { return e.first == name; });
        if (it == m.busy_s.end()) it = m.busy_s.insert(m.busy_s.end(), {name, 0.0});
        it->second += n["busy_s"].get<double>();
      }
    }
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 1;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  const std::string data_kind = argc > 3 ? argv[3] : "demo";
  if (epochs < 1 || rounds < 1) {
    std::fprintf(stderr, "bench_packing: EPOCHS and ROUNDS must be >= 1\n");
    return 2;
  }
  if (data_kind != "demo" && data_kind != "lognormal") {
    std::fprintf(stderr, "bench_packing: DATA must be demo or lognormal, got '%s'\n", data_kind.c_str());
    return 2;
  }
  const auto base = std::filesystem::temp_directory_path() / "dflow-bench-packing";
  const auto data_dir = std::filesystem::temp_directory_path() / "dflow-bench-packing-data";
  log::set_level("warn");
  const std::vector<std::string> data_overrides =
      data_kind == "lognormal" ? make_lognormal_data(data_dir) : std::vector<std::string>{};
  std::vector<Measured> budget_rounds, packed_rounds;
  std::vector<double> round_ratios, round_cpu_ratios;  // pack / token_budget within each round
  for (int round = 0; round < rounds; ++round) {
    std::filesystem::remove_all(base);
    // Each round runs both back to back, in alternating order, so that the
    // machine's drift (other load, clock) hits both alike; the per-round
    // ratio cancels what is common to the round.
    if (round % 2 == 0) {
      budget_rounds.push_back(train_with("pad_bucket.token_budget", base / "token_budget", epochs, data_overrides));
      packed_rounds.push_back(train_with("pad_bucket.pack", base / "pack", epochs, data_overrides));
    } else {
      packed_rounds.push_back(train_with("pad_bucket.pack", base / "pack", epochs, data_overrides));
      budget_rounds.push_back(train_with("pad_bucket.token_budget", base / "token_budget", epochs, data_overrides));
    }
    round_ratios.push_back(packed_rounds.back().tokens_per_s() / budget_rounds.back().tokens_per_s());
    round_cpu_ratios.push_back(packed_rounds.back().tokens_per_cpu_s() / budget_rounds.back().tokens_per_cpu_s());
    std::printf("round %d: real tok/s token_budget %.0f, pack %.0f (ratio %.3f); real tok per CPU-s token_budget %.0f, "
                "pack %.0f (ratio %.3f)\n",
                round, budget_rounds.back().tokens_per_s(), packed_rounds.back().tokens_per_s(), round_ratios.back(),
                budget_rounds.back().tokens_per_cpu_s(), packed_rounds.back().tokens_per_cpu_s(),
                round_cpu_ratios.back());
  }
  auto median = [](std::vector<Measured> all) {
    std::sort(all.begin(), all.end(), [](const Measured& a, const Measured& b) { return a.tokens_per_s() < b.tokens_per_s(); });
    return all[all.size() / 2];
  };
  const Measured budget = median(budget_rounds), packed = median(packed_rounds);
  auto median_of = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto cpu_rates = [](const std::vector<Measured>& all) {
    std::vector<double> v;
    for (const auto& m : all) v.push_back(m.tokens_per_cpu_s());
    return v;
  };
  const double budget_cpu = median_of(cpu_rates(budget_rounds)), packed_cpu = median_of(cpu_rates(packed_rounds));
  std::printf("%-24s %6s %12s %12s %10s %12s %16s\n", "batching", "steps", "real tokens", "padded", "padding",
              "real tok/s", "real tok/CPU-s");
  for (const auto& [name, m, cpu] : {std::tuple{"pad_bucket.token_budget", budget, budget_cpu},
                                     std::tuple{"pad_bucket.pack", packed, packed_cpu}}) {
    std::printf("%-24s %6lld %12lld %12lld %9.1f%% %12.0f %16.0f\n", name, static_cast<long long>(m.steps),
                static_cast<long long>(m.real_tokens), static_cast<long long>(m.padded_tokens), 100 * m.efficiency(),
                m.tokens_per_s(), cpu);
  }
  // Where each one's time goes: busy seconds of the graph's nodes (the
  // target's forward against the drafter's forward/backward decides which
  // batching pays off).
  std::printf("node busy seconds (median round):");
  for (const auto& [name, seconds] : budget.busy_s) {
    if (seconds < 0.01 * budget.step_s) continue;
    double packed_seconds = 0;
    for (const auto& [n, s] : packed.busy_s) if (n == name) packed_seconds = s;
    std::printf(" %s %.2f/%.2f", name.c_str(), seconds, packed_seconds);
  }
  std::printf(" (token_budget/pack)\n");
  std::printf("real tokens/s, pack / token_budget: median of the %d rounds' ratios %.3f (ratio of the medians %.3f)\n",
              rounds, median_of(round_ratios), packed.tokens_per_s() / budget.tokens_per_s());
  std::printf("real tokens per CPU-second, pack / token_budget: median of the rounds' ratios %.3f (ratio of the "
              "medians %.3f)\n",
              median_of(round_cpu_ratios), packed_cpu / budget_cpu);
  std::filesystem::remove_all(base);
  std::filesystem::remove_all(data_dir);
  return 0;
}
