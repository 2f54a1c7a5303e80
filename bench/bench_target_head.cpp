// Host memory of the target a run holds: the whole target (what target_forward
// needs) against its embedding and LM head alone (what a run needs whose
// features come from a cache or a serving engine), on the CPU.
//   bench_target_head TARGET_DIR whole|head [float32|bfloat16]
// Loads one way, then uses what it loaded once (whole: the features of 8
// tokens, which reads every layer's weights; head: embedding and LM head of 8
// tokens), and prints one JSON line with the process's peak resident set
// (VmHWM) and the resident bytes at the end, anonymous and file-backed. Run
// each way in its own process (peak RSS is per process), e.g. under
// /usr/bin/time -v.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "target/target.hpp"
#include "target/target_head.hpp"
#include "train/devices.hpp"

namespace {

// VmHWM, RssAnon, RssFile of /proc/self/status, in bytes.
std::map<std::string, long long> memory_status() {
  std::map<std::string, long long> out;
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    for (const char* key : {"VmHWM", "RssAnon", "RssFile"})
      if (line.rfind(std::string(key) + ":", 0) == 0) out[key] = std::stoll(line.substr(std::string(key).size() + 1)) * 1024;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || (std::string(argv[2]) != "whole" && std::string(argv[2]) != "head")) {
    std::fprintf(stderr, "usage: %s TARGET_DIR whole|head [float32|bfloat16]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1], mode = argv[2];
  const torch::Dtype dtype = dflow::train::parse_dtype(argc > 3 ? argv[3] : "bfloat16");
  torch::NoGradGuard no_grad;
  const auto started = std::chrono::steady_clock::now();
  const auto ids = torch::arange(1, 9, torch::kInt64).unsqueeze(0);  // [1, 8]
  uint64_t head_bytes = 0;
  double checksum = 0;
  double load_s = 0;
  std::map<std::string, long long> memory;  // read while what was loaded is still held
  if (mode == "whole") {
    const auto target = dflow::target::TargetModel::load(dir, torch::kCPU, dtype);
    load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    head_bytes = target.head().bytes();
    checksum = target.context_features(ids, {target.num_layers() - 1}).to(torch::kFloat32).sum().item<double>();
    memory = memory_status();
  } else {
    const auto head = dflow::target::TargetHead::load(dir, torch::kCPU, dtype);
    load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    head_bytes = head.bytes();
    const auto hidden = head.embedding_weight().index_select(0, ids.flatten());
    checksum = torch::matmul(hidden, head.lm_head_weight().t()).to(torch::kFloat32).sum().item<double>();
    memory = memory_status();
  }
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("{\"mode\": \"%s\", \"dtype\": \"%s\", \"head_bytes\": %llu, \"peak_rss_bytes\": %lld, "
              "\"rss_anon_bytes\": %lld, \"rss_file_bytes\": %lld, \"load_s\": %.2f, \"total_s\": %.2f, "
              "\"checksum\": %.6g}\n",
              mode.c_str(), c10::toString(dtype), static_cast<unsigned long long>(head_bytes), memory.at("VmHWM"),
              memory.at("RssAnon"), memory.at("RssFile"), load_s, total_s, checksum);
  return 0;
}
