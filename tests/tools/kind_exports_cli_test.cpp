// Every registered drafter kind, trained a few steps on the demo as a new
// user runs it (`head: <kind>` with the kind's defaults, and the demo's own
// feature layers: no target_layer_ids, so the rising [0, 1, 2] the default
// gives its 4-layer target), exports in a format that serves it, and that
// export loads in the format's reference:
// - `--format speculators`: speculators 0.9.0's model class for the export's
//   speculators_model_type, from its config.json, with a strict state dict
//   and one backbone pass (tests/drafter/speculators_reference.py load);
// - `--format dflash` (z-lab's layout; SpecForge's DSpineDraftModel for
//   DSpine): `dflow eval` drafts with the exported directory, greedy and
//   lossless. SpecForge is not installed here; DSpine's names and fields are
//   checked against SpecForge's in tests/drafter/test_dspine.cpp.
// A format a kind refuses must name one the kind exports in.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../nodes/train_fixture.hpp"
#include "config/config.hpp"
#include "drafter/kind.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"
#include "train/checkpoint.hpp"

using namespace dflow;
using testing::has;
using testing::run_dflow;
namespace fs = std::filesystem;

TEST_CASE("Cli.Export.every_kind_trained_on_the_demo_exports_in_a_format_that_serves_it") {
  const auto root = testing::fresh_dir("kind-exports");
  const auto target = testing::assets_dir() / "target";
  std::ofstream(root / "prompts.jsonl") << "{\"prompt_ids\": [5, 17, 99, 3, 42, 7, 8, 9]}\n"
                                        << "{\"prompt_ids\": [11, 12, 13, 200, 300, 4, 5, 6]}\n";
  const std::vector<std::string> kinds = dflow::drafter::drafter_kind_names();
  REQUIRE(kinds.size() >= 5);
  for (const auto& kind : kinds) {
    CAPTURE(kind);
    const auto dir = root / kind;
    fs::create_directories(dir);
    // The demo's own layers: the fixture's [1, 1, 1] left out again.
    auto config = testing::small_run_config(
        dir / "run", {"model.drafter.target_layer_ids=[]", "run.max_steps=3", "eval.every_steps=0",
                      "model.drafter.kind=" + kind});
    REQUIRE(config.model.drafter.target_layer_ids.empty());
    std::ofstream(dir / "run.yaml") << config::to_yaml(config);
    auto o = run_dflow("train " + (dir / "run.yaml").string());
    REQUIRE_MESSAGE(o.exit_code == 0, o.output);
    const auto saved = nlohmann::json::parse(
        std::ifstream(train::resolve_checkpoint(dir / "run" / "checkpoints", "latest") / "drafter" / "config.json"));
    CHECK(saved["dflash_config"]["target_layer_ids"] == nlohmann::json::array({0, 1, 2}));

    std::vector<std::string> served, refused;
    for (const std::string format : {"dflash", "speculators"}) {
      CAPTURE(format);
      const auto out = dir / format;
      o = run_dflow("export " + (dir / "run").string() + " --format " + format + " --out " + out.string());
      if (o.exit_code == 2) {
        // A refusal writes nothing and names the format that serves the kind.
        CHECK_FALSE(fs::exists(out));
        CHECK_MESSAGE(has(o.output, "export it with --format"), o.output);
        refused.push_back(o.output);
        continue;
      }
      REQUIRE_MESSAGE(o.exit_code == 0, o.output);
      served.push_back(format);
      if (format == "speculators") {
        REQUIRE_FALSE(testing::python().empty());
        const auto check = testing::run_command(testing::python() + " " + testing::source_dir() +
                                                    "/tests/drafter/speculators_reference.py load " + out.string(),
                                                300);
        CHECK_MESSAGE(check.exit_code == 0, check.output);
        CHECK_MESSAGE(has(check.output, "ok"), check.output);
      } else {
        const auto json = dir / "eval.json";
        const auto eval = run_dflow("eval --target " + target.string() + " --drafter " + out.string() +
                                    " --prompts " + (root / "prompts.jsonl").string() +
                                    " --max-new-tokens 16 --json " + json.string());
        CHECK_MESSAGE(eval.exit_code == 0, eval.output);
        CHECK_MESSAGE(has(eval.output, "lossless: yes"), eval.output);
      }
    }
    REQUIRE_MESSAGE(!served.empty(), "no format serves " << kind);
    for (const auto& refusal : refused) CHECK_MESSAGE(has(refusal, "export it with --format " + served.front()), refusal);
  }
  fs::remove_all(root);
}
