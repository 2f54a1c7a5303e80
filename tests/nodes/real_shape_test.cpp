// A CPU smoke test at a real model's shape: the qwen3-0.6b preset (28 layers,
// hidden 1024, head_dim 128, tied embeddings, vocabulary 151936), written as
// bf16 shards with an index, trains 2 steps at max_length 512 in bf16. It
// catches what only real shapes show: token ids above 65535, a 151936-row LM
// head in the chunked loss, sharded loading, head_dim != hidden / heads.
// Peak memory (RSS) is printed; bench/RESULTS.md records it.
#include <doctest/doctest.h>
#include <sys/resource.h>
#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>

#include "data/prepare.hpp"
#include "formats/safetensors.hpp"
#include "target/target.hpp"
#include "target/tiny_target.hpp"
#include "nodes/trainer.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::step_records;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kVocab = 151936;
constexpr int kLength = 512;

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// Samples of exactly kLength tokens, ids over the whole vocabulary (the top
// ids included), a 64-token prompt then the response.
void write_samples(const fs::path& path, int count) {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int64_t> token(0, kVocab - 1);
  std::ofstream out(path);
  for (int s = 0; s < count; ++s) {
    nlohmann::json ids = nlohmann::json::array(), mask = nlohmann::json::array();
    for (int i = 0; i < kLength; ++i) {
      int64_t id = token(rng);
      if (i == 100) id = kVocab - 1;  // the last row of the embedding and the LM head
      if (i == 101) id = 70000;       // above 16 bits
      ids.push_back(id);
      mask.push_back(i < 64 ? 0 : 1);
    }
    out << nlohmann::json{{"input_ids", ids}, {"loss_mask", mask}}.dump() << "\n";
  }
}

// bf16 GEMMs on a CPU without native bf16 (AVX2 only) fall back to
// LibTorch's reference loop, about 60x slower than float32: this test then
// takes about 20 minutes instead of 40 s. It runs where the CPU has bf16
// instructions, or when DFLOW_REAL_SHAPE=1 asks for it anyway. Decided from
// what the CPU says it has, never from a timing (which a busy machine skews).
// Returns the instructions found, or "" when there are none.
std::string native_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  // cpuid, as the compiler's runtime reads it (OS support for the AVX-512
  // state included); AMX-BF16 from the kernel's flags (the kernel enables AMX).
  if (__builtin_cpu_supports("avx512bf16")) return "AVX512_BF16";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string word; cpuinfo >> word;)
    if (word == "amx_bf16") return "AMX-BF16";
  return "";
#elif defined(__aarch64__)
  return (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0 ? "BF16 (Armv8.6)" : "";
#else
  return "";
#endif
}
}  // namespace

TEST_CASE("Train.RealShape.qwen3_0_6b_bf16_two_steps_at_512") {
  torch::set_num_threads(2);
  const std::string bf16 = native_bf16();
  const char* forced = std::getenv("DFLOW_REAL_SHAPE");
  if (bf16.empty() && !(forced && std::string(forced) == "1")) {
    MESSAGE("skipped: this CPU has no native bf16 instructions (neither AVX512_BF16 nor AMX-BF16 on x86, nor BF16 on "
            "aarch64), so LibTorch's bf16 GEMMs take its reference loop; DFLOW_REAL_SHAPE=1 runs it anyway (about 20 "
            "minutes on 2 cores)");
    return;
  }
  MESSAGE((bf16.empty() ? "no native bf16 on this CPU, run as DFLOW_REAL_SHAPE=1 asks" : "native bf16: " + bf16));
  const auto dir = fresh_dir("real-shape");
  const auto started = std::chrono::steady_clock::now();

  dflow::target::TinyTargetOptions base;
  base.out_dir = dir / "target";
  base.seed = 3;
  const auto preset = dflow::target::preset_target_options("qwen3-0.6b", base);
  const dflow::target::HFConfig written = dflow::target::make_tiny_target(preset);
  CHECK(written.vocab_size == kVocab);
  CHECK(written.head_dim == 128);
  CHECK(written.tie_word_embeddings);

  // Hugging Face's sharded layout: an index naming several shards, every
  // tensor in the shard the index names, none on its own.
  REQUIRE(fs::exists(base.out_dir / "model.safetensors.index.json"));
  CHECK_FALSE(fs::exists(base.out_dir / "model.safetensors"));
  const auto index = dflow::target::read_json_file(base.out_dir / "model.safetensors.index.json");
  std::set<std::string> shards;
  for (const auto& [name, shard] : index["weight_map"].items()) shards.insert(shard.get<std::string>());
  CHECK(shards.size() >= 2);
  CHECK(index["weight_map"].size() == 2 + 11 * 28u);  // embed, norm, 11 per layer; tied: no lm_head
  CHECK(index["metadata"]["total_size"].get<int64_t>() > int64_t{1} << 30);  // ~1.2 GB of bf16

  write_samples(dir / "train.jsonl", 4);
  data::PrepareOptions prepare;
  prepare.input_path = dir / "train.jsonl";
  prepare.out_dir = dir / "data";
  prepare.max_length = kLength;
  prepare.vocab_size = kVocab;
  const auto report = data::prepare_jsonl(prepare);
  REQUIRE(report.samples_written == 4);

  // A user's file (no pipeline section, no held-out prompts: the default graph
  // without its eval node): 2 samples per micro-batch, one micro-batch per
  // step, 2 steps; 16 anchors per sample keep the LM head's 151936 columns
  // affordable on 2 cores (about 40 s in all, 2.5 GB peak RSS).
  const std::string yaml = "run: {out_dir: '" + (dir / "run").string() +
                           "', max_steps: 2, torch_threads: 2, log_level: warn}\n"
                           "model:\n"
                           "  target: {path: '" + base.out_dir.string() + "', dtype: bfloat16}\n"
                           "  drafter: {num_layers: 1, block_size: 16, dtype: bfloat16}\n"
                           "data: {train: ['" + (dir / "data").string() +
                           "'], max_length: 512, buckets: [512], tokens_per_batch: 1024}\n"
                           "train: {epochs: 1, grad_accum: 1, anchors_per_sequence: 16}\n"
                           "metrics: {sinks: [jsonl]}\n"
                           "checkpoint: {every_steps: 0}\n";
  const auto config = config::load_config_text(yaml, "real-shape.yaml");
  const auto result = nodes::run_training(config, {});
  const auto records = step_records(dir / "run");
  REQUIRE(records.size() == 2);
  for (const auto& r : records) {
    INFO(r.dump());
    const double loss = r["loss"].get<double>();
    CHECK(std::isfinite(loss));
    CHECK(loss > 0);
    CHECK(std::isfinite(r["grad_norm"].get<double>()));
    CHECK(r["grad_norm"].get<double>() > 0);
    CHECK(r["real_tokens"].get<int64_t>() == 2 * kLength);
  }
  // The drafter's checkpoint restores into a bf16 drafter of the real width.
  const dflow::formats::SafetensorsFile drafter(fs::path(result.last_checkpoint) / "drafter" / "model.safetensors");
  CHECK(drafter.entry("fc.weight").shape == std::vector<int64_t>{1024, 1024});
  CHECK(drafter.entry("layers.0.self_attn.q_proj.weight").shape == std::vector<int64_t>{16 * 128, 1024});

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  MESSAGE("qwen3-0.6b preset, bf16, 2 steps at max_length 512 (2 x 512 tokens a step): " << seconds
                                                                                           << " s in all, peak RSS "
                                                                                           << peak_rss_mib() << " MiB");
  fs::remove_all(dir);
}
