// model.target.mxfp4_experts through every command that loads a gpt-oss
// target with MXFP4 experts: dflow train and replay read it from their config
// (replay also from --set), eval and regenerate take --mxfp4-experts. Each
// says which form it loaded, and dequantize gives what resident gives (the
// same bits: tests/target/test_mxfp4_resident.cpp).
#include "test_paths.hpp"
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../nodes/train_fixture.hpp"
#include "config/config.hpp"
#include "run_command.hpp"

using namespace dflow;
namespace fs = std::filesystem;

namespace {

testing::Outcome run_dflow(const std::string& args) {
  return testing::run_command(::dflow::testing::dflow_binary() + " " + args, 300);
}

std::string file_text(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json json_file(const fs::path& path) { return nlohmann::json::parse(std::ifstream(path)); }

const std::string kResident = "MXFP4 experts resident (packed";
const std::string kDequantized = "MXFP4 experts dequantized on load";

// The output says the target's experts were loaded in exactly one form.
void loaded_as(const testing::Outcome& o, const std::string& form) {
  CHECK_MESSAGE(o.output.find(form) != std::string::npos, o.output);
  CHECK_MESSAGE(o.output.find(form == kResident ? kDequantized : kResident) == std::string::npos, o.output);
}

}  // namespace

TEST_CASE("Cli.Mxfp4Experts.every_command_that_loads_the_target_takes_the_choice") {
  const auto dir = testing::fresh_dir("mxfp4-experts");
  const auto target = dir / "target";
  auto o = run_dflow("make-tiny-target --out " + target.string() + " --arch gpt_oss --mxfp4");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);

  // dflow train: the config key (on the shared demo data: the tiny targets share its vocabulary).
  const auto run = dir / "run";
  std::ofstream(dir / "run.yaml") << config::to_yaml(testing::small_run_config(
      run, {"model.target.path=" + target.string(), "model.target.mxfp4_experts=dequantize", "run.max_steps=2",
            "run.log_level=info"}));
  o = run_dflow("train " + (dir / "run.yaml").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  loaded_as(o, kDequantized);

  // replay: the run's saved config, or --set.
  o = run_dflow("replay " + run.string() + " --samples 0,1 --json-out " + (dir / "replay-dequantized.json").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  loaded_as(o, kDequantized);
  o = run_dflow("replay " + run.string() + " --samples 0,1 --set model.target.mxfp4_experts=resident --json-out " +
                (dir / "replay-resident.json").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  loaded_as(o, kResident);
  CHECK(json_file(dir / "replay-dequantized.json") == json_file(dir / "replay-resident.json"));

  std::ofstream(dir / "prompts.jsonl") << R"({"prompt_ids": [5, 17, 33, 9, 71, 2, 40, 8]})" << "\n"
                                       << R"({"prompt_ids": [100, 3, 250, 61, 7, 19]})" << "\n";
  const std::string prompts = " --prompts " + (dir / "prompts.jsonl").string();

  // eval: --mxfp4-experts (resident by default); greedy stays lossless either way.
  const std::string eval = "eval --target " + target.string() + " --drafter " + run.string() + prompts +
                           " --max-new-tokens 12 --json ";
  o = run_dflow(eval + (dir / "eval-resident.json").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  loaded_as(o, kResident);
  o = run_dflow(eval + (dir / "eval-dequantized.json").string() + " --mxfp4-experts dequantize");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  loaded_as(o, kDequantized);
  CHECK_MESSAGE(o.output.find("lossless: yes") != std::string::npos, o.output);
  for (const char* key : {"mean_tau", "tau_histogram", "acceptance_by_position", "cycles"}) {
    CAPTURE(key);
    CHECK(json_file(dir / "eval-dequantized.json")[key] == json_file(dir / "eval-resident.json")[key]);
  }

  // regenerate: the same option, the same lines.
  const std::string regenerate = "regenerate --target " + target.string() + prompts + " --max-new-tokens 8 --out ";
  o = run_dflow(regenerate + (dir / "resident.jsonl").string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  loaded_as(o, kResident);
  o = run_dflow(regenerate + (dir / "dequantized.jsonl").string() + " --mxfp4-experts dequantize");
  REQUIRE_MESSAGE(o.exit_code == 0, o.output);
  loaded_as(o, kDequantized);
  CHECK(file_text(dir / "dequantized.jsonl") == file_text(dir / "resident.jsonl"));
  CHECK_FALSE(file_text(dir / "resident.jsonl").empty());

  // Another value is refused before anything loads, naming the option.
  o = run_dflow(eval + (dir / "x.json").string() + " --mxfp4-experts fp4");
  CHECK(o.exit_code == 2);
  CHECK_MESSAGE(o.output.find("--mxfp4-experts") != std::string::npos, o.output);
  CHECK_FALSE(fs::exists(dir / "x.json"));
  fs::remove_all(dir);
}
