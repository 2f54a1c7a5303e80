// Thread controls: every command that computes with LibTorch takes the same
// --threads (LibTorch's default, a thread per core, oversubscribes a machine
// that is busy with other work), checked the same way.
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <utility>
#include <vector>

#include "run_command.hpp"

namespace {

::dflow::testing::Outcome run_dflow(const std::string& args) {
  return ::dflow::testing::run_command(::dflow::testing::dflow_binary() + " " + args, 120);
}

}  // namespace

TEST_CASE("Cli.Threads.every_command_that_computes_takes_threads") {
  // Each with its required arguments, so that --threads is the one thing wrong.
  const std::vector<std::pair<std::string, std::string>> commands{
      {"eval", "--target t --drafter d --prompts p"}, {"regenerate", "--target t --out o"},
      {"replay", "ckpt --samples 1"}, {"make-tiny-target", "--out o"}, {"inspect", "ckpt"}};
  for (const auto& [command, required] : commands) {
    CAPTURE(command);
    auto help = run_dflow(command + " --help");
    CHECK(help.exit_code == 0);
    CHECK(help.output.find("--threads") != std::string::npos);
    CHECK(help.output.find("LibTorch intra-op threads") != std::string::npos);
    auto zero = run_dflow(command + " " + required + " --threads 0");
    INFO(zero.output);
    CHECK(zero.exit_code == 2);
    CHECK(zero.output.find("--threads") != std::string::npos);
  }
  // Training reads its threads from the config, like every other setting.
  auto train = run_dflow("config --set run.torch_threads=0");
  CHECK(train.exit_code == 2);
  CHECK(train.output.find("run.torch_threads") != std::string::npos);
}
