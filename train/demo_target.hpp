#pragma once
// The demo's tiny target (train/demo.hpp makes it when absent): the echo
// pattern of target/tiny_target.hpp, in any architecture make-tiny-target
// writes (qwen3, the demo's own; qwen3_moe; gpt_oss), so the demo's data
// and held-out prompts can be made with, and a drafter trained on, a
// mixture-of-experts target too (make it first; ensure_demo_assets then
// leaves it and regenerates the data with it).
#include <cstdint>
#include <filesystem>
#include <string>

namespace dflow::train {

void make_demo_target(const std::filesystem::path& dir, uint64_t seed, const std::string& arch = "qwen3");

}  // namespace dflow::train
