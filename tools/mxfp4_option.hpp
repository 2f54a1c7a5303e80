#pragma once
// One --mxfp4-experts for the commands that load a target without a config
// (eval, regenerate): model.target.mxfp4_experts, which dflow train,
// cache-features and replay read from their config (replay: --set).
#include <CLI/CLI.hpp>
#include <string>

#include "target/target.hpp"

namespace dflow::cli {

inline void add_mxfp4_experts_option(CLI::App& sub, std::string& mode) {
  sub.add_option("--mxfp4-experts", mode,
                 "a gpt-oss target's MXFP4 experts (as model.target.mxfp4_experts): resident (kept packed, each "
                 "expert dequantized while it computes) or dequantize (once, on load: faster, about 3.8x the expert "
                 "memory in bf16); the outputs are the same bits either way")
      ->check(CLI::IsMember({"resident", "dequantize"}))
      ->capture_default_str();
}

inline target::TargetLoadOptions target_load_options(const std::string& mxfp4_experts) {
  return {target::parse_mxfp4_experts(mxfp4_experts)};
}

}  // namespace dflow::cli
