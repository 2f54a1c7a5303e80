// The speculators comparisons' last step, shared by DSpark's, DFlash2's and
// XPress's: export the drafter with --format speculators, write what dflow
// computed beside it, and let tests/drafter/speculators_reference.py MODE
// load the export with speculators' class and compare.
#pragma once

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "drafter/drafter.hpp"
#include "drafter/drafter_export_speculators.hpp"
#include "formats/safetensors.hpp"
#include "target/hf_reference_fixtures.hpp"
#include "target/model_fixtures.hpp"

namespace dflow::target::testing {

using namespace dflow::drafter;  // the drafter tests' helpers sit beside the target fixtures

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Adds every parameter's gradient as "grad.<name>" (each must have one).
inline void add_gradients(DFlashDrafterImpl& drafter, NamedTensors& tensors) {
  for (const auto& item : drafter.named_parameters()) {
    REQUIRE(item.value().grad().defined());
    tensors.emplace_back("grad." + item.key(), item.value().grad().contiguous());
  }
}

inline void check_with_speculators(const std::string& mode, DFlashDrafterImpl& drafter,
                                   const std::filesystem::path& target_dir, const NamedTensors& tensors) {
  ScratchDir scratch(mode + "-reference");
  save_speculators_pretrained(drafter, {target_dir.string(), target_dir}, scratch.path() / "export");
  dflow::formats::write_safetensors(scratch.path() / "case.safetensors", tensors, {});
  if (::dflow::testing::python().empty()) FAIL("no Python beside the venv's torch: run tools/setup.sh");
  const auto o = ::dflow::testing::run_command(::dflow::testing::python() + " " + ::dflow::testing::source_dir() +
                                                   "/tests/drafter/speculators_reference.py " + mode + " " +
                                                   (scratch.path() / "export").string() + " " +
                                                   (scratch.path() / "case.safetensors").string(),
                                               300);
  INFO(o.output);
  CHECK(o.exit_code == 0);
  CHECK(o.output.find("ok") != std::string::npos);
}

}  // namespace dflow::target::testing
