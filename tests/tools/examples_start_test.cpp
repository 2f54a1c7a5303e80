// Every file in examples/ starts as its header says to run it: `dflow train
// EXAMPLE` (after `dflow cache-features EXAMPLE` when its target node reads a
// feature cache), from a working directory outside the checkout, for 2 steps
// on CPU. The target is a tiny Qwen3-architecture model as deep as the
// examples' target_layer_ids need, so each example's drafter (its layers,
// layer ids, objective, optimizer, pipeline) is trained as written; only the
// sizes that belong to the machine and the model are set: the target and
// data, the mask id of the tiny vocabulary, sequence lengths, anchors,
// devices, threads and out_dir. A file added to examples/ is covered by
// being there.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "../nodes/train_fixture.hpp"
#include "config/config.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

using namespace dflow;
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> example_files() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(fs::path(testing::source_dir()) / "examples"))
    if (entry.path().extension() == ".yaml" || entry.path().extension() == ".yml") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

bool has_node_of_type(const config::Config& c, const std::string& type) {
  return std::any_of(c.pipeline.nodes.begin(), c.pipeline.nodes.end(), [&](const auto& n) { return n.type == type; });
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

// The --set overrides that fit `example` to the tiny target and data on CPU.
std::string tiny_overrides(const config::Config& example, const fs::path& target, const fs::path& out_dir) {
  const std::vector<std::string> overrides{"model.target.path=" + target.string(),
                                           "model.drafter.mask_token_id=-1",
                                           "data.train=[" + (testing::assets_dir() / "data").string() + "]",
                                           "data.max_length=128",
                                           "data.buckets=[64,128]",
                                           "data.tokens_per_batch=512",
                                           "train.anchors_per_sequence=8",
                                           "devices.target=[cpu]",
                                           "devices.drafter=cpu",
                                           "run.threads=2",
                                           "run.torch_threads=1",
                                           "run.max_steps=2",
                                           "run.out_dir=" + out_dir.string()};
  std::string sets;
  for (const auto& s : overrides) sets += " --set '" + s + "'";
  // Held-out prompts go with the target and data: an example that names its
  // own measures tau on the tiny target's.
  if (!example.eval.prompts.empty())
    sets += " --set eval.prompts=" + (testing::assets_dir() / "heldout.jsonl").string() +
            " --set eval.max_prompts=2 --set eval.max_new_tokens=16";
  // A window shorter than the tiny sequences, so that sliding layers slide.
  const auto& types = example.model.drafter.layer_types;
  if (std::find(types.begin(), types.end(), "sliding_attention") != types.end())
    sets += " --set model.drafter.sliding_window=32";
  return sets;
}

}  // namespace

TEST_CASE("Cli.Examples.every_example_trains_from_outside_the_checkout") {
  const auto examples = example_files();
  REQUIRE(examples.size() >= 3);  // qwen3-8b, its 2026 recipe, its cached-features run
  // As deep as the deepest layer an example reads (Qwen3-8B's 36 at least).
  int64_t layers = 36;
  for (const auto& file : examples) {
    INFO("loading ", file.string());
    for (const int id : config::load_config(file.string()).model.drafter.target_layer_ids)
      layers = std::max<int64_t>(layers, id + 1);
  }
  const auto dir = testing::fresh_dir("examples");
  const auto target = dir / "target";
  const std::string dflow = testing::dflow_binary();
  auto made = testing::run_command(dflow + " make-tiny-target --out " + target.string() + " --layers " +
                                       std::to_string(layers) + " --hidden-size 32 --heads 2 --kv-heads 1 "
                                       "--intermediate-size 64 --vocab 512",
                                   120);
  REQUIRE_MESSAGE(made.exit_code == 0, made.output);

  for (const auto& file : examples) {
    const std::string name = file.stem().string();
    CAPTURE(name);
    const auto example = config::load_config(file.string());
    const auto cwd = dir / name;  // relative paths in the example land here
    fs::create_directories(cwd);
    const auto out_dir = dir / (name + "-run");
    const std::string sets = tiny_overrides(example, target, out_dir);
    if (has_node_of_type(example, "features.cached")) {
      auto cached =
          testing::run_command("env -C " + cwd.string() + " " + dflow + " cache-features " + file.string() + sets, 180);
      CHECK_MESSAGE(cached.exit_code == 0, cached.output);
      if (cached.exit_code != 0) continue;  // the next example still runs
    }
    auto trained = testing::run_command("env -C " + cwd.string() + " " + dflow + " train " + file.string() + sets, 180);
    INFO(trained.output);
    CHECK(trained.exit_code == 0);
    const auto steps = testing::records_of_kind(out_dir, "step");
    CHECK(steps.size() == 2);
    if (trained.exit_code != 0 || steps.empty()) continue;  // the next example still runs
    CHECK(steps.back()["global_step"] == 2);
    CHECK(std::isfinite(steps.back()["loss"].get<double>()));
    // An eval node without held-out prompts is off, said once.
    for (const auto& node : example.pipeline.nodes)
      if (node.type.rfind("eval.", 0) == 0 && example.eval.prompts.empty() && !node.params["prompts"])
        CHECK(count_of(trained.output, "node '" + node.name + "' (" + node.type + ") is off: no held-out prompts") ==
              1);
    if (has_node_of_type(example, "features.cached"))
      CHECK(trained.output.find("the target is not run") != std::string::npos);
  }
}
