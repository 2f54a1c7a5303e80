// Exit codes as docs/commands.md documents them: 2 for every refusal of what the
// user gave (arguments, config, a resume that does not fit the run), 1 for a
// failure at run time; each refusal says what to change.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <fstream>

#include "../nodes/train_fixture.hpp"
#include "run_command.hpp"

using namespace dflow;
using testing::fresh_dir;
namespace fs = std::filesystem;

namespace {

testing::Outcome run_dflow(const std::string& args) {
  return testing::run_command(::dflow::testing::dflow_binary() + " " + args, 300);
}

fs::path write_config(const fs::path& dir, const std::string& name, const std::vector<std::string>& overrides) {
  auto path = dir / name;
  std::ofstream(path) << config::to_yaml(testing::small_run_config(dir, overrides));
  return path;
}

// A 2-step run (checkpoint step-2) that the refusals below start from.
const fs::path& trained_run() {
  static const fs::path dir = [] {
    auto d = fresh_dir("exit-codes");
    auto o = run_dflow("train " + write_config(d, "run.yaml", {"run.max_steps=2"}).string());
    INFO(o.output);
    REQUIRE(o.exit_code == 0);
    return d;
  }();
  return dir;
}

struct Case {
  std::string what;
  std::string args;      // after `dflow`
  int exit_code;
  std::string says;      // part of the error line
};

}  // namespace

TEST_CASE("Cli.ExitCodes.every_refusal_of_user_input_exits_2_and_runtime_failures_exit_1") {
  const fs::path run = trained_run();
  const std::string config = (run / "run.yaml").string();
  const std::string nowhere = (run / "no-such-checkpoint").string();
  auto empty = fresh_dir("exit-codes-empty");
  const std::string empty_config = write_config(empty, "run.yaml", {}).string();
  const std::string no_data =
      write_config(empty, "no-data.yaml", {"data.train=[" + (empty / "no-shards").string() + "]"}).string();
  const std::string no_target =
      write_config(empty, "no-target.yaml", {"model.target.path=" + (empty / "no-target").string()}).string();
  // A checkpoint whose weights were damaged on disk: a runtime failure.
  fs::copy(run / "checkpoints" / "step-2", empty / "damaged", fs::copy_options::recursive);
  std::ofstream(empty / "damaged" / "drafter" / "config.json", std::ios::app) << " ";

  const std::vector<Case> cases{
      {"an override of the wrong type", "config --set train.lr=abc", 2, "train.lr: expected a number"},
      {"a config file that does not exist", "train " + (empty / "absent.yaml").string(), 2, "absent.yaml"},
      {"an unknown option", "train " + config + " --resum latest", 2, "--resum"},
      {"a fresh run in an out_dir that holds checkpoints", "train " + config, 2,
       "already holds checkpoints (newest step-2): continue it with --resume latest"},
      {"a resume with a config that computes something else", "train " + config + " --resume latest --set train.lr=0.1",
       2, "was written with an incompatible config:\n  train.lr: 0.02 -> 0.1"},
      {"a resume from a directory that is no checkpoint", "train " + config + " --resume " + nowhere, 2,
       "'" + nowhere + "' is not a complete checkpoint"},
      {"a resume where nothing was saved", "train " + empty_config + " --resume latest", 2, "nothing to resume"},
      {"a resume with another number of ranks", "launch -n 2 " + config + " --resume latest", 2,
       "was written with world_size 1, this run has world_size 2"},
      {"data.train naming a directory that does not exist", "train " + no_data, 2, "data.train"},
      {"model.target.path naming a directory that does not exist", "train " + no_target, 2, "model.target.path"},
      {"a ranks count below 1", "launch -n 0 " + config, 2, "--nproc"},
      {"a --serve address that is no HOST:PORT", "train " + config + " --serve nowhere", 2,
       "--serve 'nowhere': expected HOST:PORT"},
      {"inspect of a directory that is no checkpoint", "inspect " + nowhere, 2, "is not a complete checkpoint"},
      {"export of a directory that is no checkpoint", "export " + nowhere + " --out " + (empty / "x").string(), 2,
       "is not a complete checkpoint"},
      {"replay of a sample the data does not hold", "replay " + run.string() + " --samples 99999", 2,
       "unknown sample id(s) 99999"},
      {"eval at a negative temperature", "eval --target t --drafter d --prompts p --temperature -1", 2, "--temperature"},
      {"regenerate without --prompts or --chats", "regenerate --target t --out o", 2, "exactly one of --prompts and --chats"},
      {"prepare with an unknown --too-long policy", "prepare " + config + " --out " + (empty / "p").string() +
       " --too-long maybe", 2, "--too-long"},
      {"init of a directory without config.json", "init " + empty.string(), 2,
       (empty / "config.json").string() + " does not exist"},
      {"make-tiny-target with an unknown preset", "make-tiny-target --out x --preset llama-70b", 2, "qwen3-0.6b"},
      {"nodes of a type no node kind has", "nodes drafter_stp", 2, "did you mean 'drafter_step'?"},
      // Run time: what was given is fine, what happened is not.
      {"inspect of a checkpoint that fails its checksum", "inspect " + (empty / "damaged").string(), 1,
       "does not match its checksum"},
      // Last: refused, it would otherwise have trained on in the run directory.
      {"a resume past the end of the run's LR schedule (run.max_steps 2 sized it)",
       "train " + config + " --resume latest --set run.max_steps=4", 2, "the run's LR schedule ends at step 2"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    auto o = run_dflow(c.args);
    INFO(o.output);
    CHECK(o.exit_code == c.exit_code);
    CHECK(o.output.find(c.says) != std::string::npos);
  }
}
