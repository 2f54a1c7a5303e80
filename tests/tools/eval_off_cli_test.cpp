// A run without held-out prompts trains: with eval.every_steps 0 the eval
// node is off, said once in the log, whether its prompts are unset or name a
// file that is not there (the demo's relative runs/demo/heldout.jsonl in a
// config started from another directory); with every_steps > 0 the same
// config is refused, naming the node and what is missing.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../nodes/train_fixture.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

using namespace dflow;
namespace fs = std::filesystem;

namespace {

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

// `dflow train CONFIG` from `cwd` on the shared tiny assets, 2 steps, with
// `extra` overrides; eval.prompts stays what CONFIG says.
testing::Outcome train_from(const fs::path& cwd, const fs::path& config, const fs::path& out_dir,
                            const std::vector<std::string>& extra) {
  std::string sets;
  for (const auto& s : testing::small_run_overrides(out_dir))
    if (s.rfind("eval.prompts=", 0) != 0 && s.rfind("run.log_level=", 0) != 0) sets += " --set '" + s + "'";
  for (const auto& s : extra) sets += " --set '" + s + "'";
  fs::create_directories(cwd);
  return testing::run_command("env -C " + cwd.string() + " " + testing::dflow_binary() + " train " + config.string() +
                                  sets + " --set run.max_steps=2",
                              180);
}

}  // namespace

TEST_CASE("Cli.Eval.without_prompts_the_run_trains_with_its_eval_node_off") {
  const auto dir = testing::fresh_dir("eval-off");
  // The demo's config as `dflow config` writes it: eval.prompts is the
  // relative runs/demo/heldout.jsonl, which the directory below lacks.
  const auto demo = dir / "demo.yaml";
  auto written = testing::run_command(testing::dflow_binary() + " config --set eval.every_steps=0 > " + demo.string());
  REQUIRE(written.exit_code == 0);
  const auto elsewhere = dir / "elsewhere";

  auto missing = train_from(elsewhere, demo, dir / "missing", {});
  INFO(missing.output);
  REQUIRE(missing.exit_code == 0);
  CHECK(testing::records_of_kind(dir / "missing", "step").size() == 2);
  CHECK(testing::records_of_kind(dir / "missing", "eval").empty());
  CHECK(count_of(missing.output, "node 'eval' (eval.tau) is off: its held-out prompts file "
                                 "'runs/demo/heldout.jsonl' does not exist (relative to " +
                                     elsewhere.string() + ") and eval.every_steps is 0") == 1);

  auto unset = train_from(elsewhere, demo, dir / "unset", {"eval.prompts="});
  INFO(unset.output);
  REQUIRE(unset.exit_code == 0);
  CHECK(testing::records_of_kind(dir / "unset", "step").size() == 2);
  CHECK(count_of(unset.output, "node 'eval' (eval.tau) is off: no held-out prompts (neither its params.prompts nor "
                               "eval.prompts is set) and eval.every_steps is 0") == 1);

  // Asked for tau every 5 steps: refused, naming the node and the file.
  auto asked = train_from(elsewhere, demo, dir / "asked", {"eval.every_steps=5"});
  CHECK(asked.exit_code == 2);
  CHECK(asked.output.find("node 'eval' (eval.tau): prompts (params, or eval.prompts): cannot read the held-out prompts "
                          "file 'runs/demo/heldout.jsonl'") != std::string::npos);
  auto asked_unset = train_from(elsewhere, demo, dir / "asked-unset", {"eval.every_steps=5", "eval.prompts="});
  CHECK(asked_unset.exit_code == 2);
  CHECK(asked_unset.output.find("while eval.every_steps 5 asks for tau every 5 steps") != std::string::npos);

  // With the file there, every_steps 0 still measures tau after the last step.
  auto present = train_from(dir, demo, dir / "present",
                            {"eval.prompts=" + (testing::assets_dir() / "heldout.jsonl").string()});
  INFO(present.output);
  REQUIRE(present.exit_code == 0);
  CHECK(present.output.find("is off") == std::string::npos);
  CHECK_FALSE(testing::records_of_kind(dir / "present", "eval").empty());
}
