#pragma once
// examples/qwen3-8b-2026.yaml, embedded at build time (tools/CMakeLists.txt):
// `dflow init --recipe recommended` copies its choices from it, so the
// example and the configs init writes never drift apart.
#include <string>

namespace dflow::tools {

inline constexpr const char* kRecommendedRecipe = "examples/qwen3-8b-2026.yaml";
const std::string& recommended_recipe_yaml();

}  // namespace dflow::tools
