// `dflow replay CKPT --samples ID,...`: loss and grad norm of chosen samples
// against a checkpoint, each alone and all together (train/replay.hpp).
#include <torch/torch.h>

#include <fstream>
#include <iostream>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "nodes/drafter_kind_choice.hpp"
#include "nodes/registry.hpp"
#include "tools/cli.hpp"
#include "tools/thread_option.hpp"
#include "train/checkpoint.hpp"
#include "train/replay.hpp"

namespace dflow::cli {

void add_replay_command(CLI::App& app, Common& common, Action& action) {
  auto* sub = app.add_subcommand("replay", "recompute the loss and grad norm of chosen samples against a checkpoint, "
                                           "each alone and all together (nothing is updated)");
  static std::string checkpoint, config_file, json_out;
  static std::vector<int64_t> samples;
  static bool json_stdout = false;
  static int threads = 1;
  sub->add_option("CKPT", checkpoint, "checkpoint (step-N) or run directory (its latest)")->required();
  sub->add_option("--samples", samples, "sample ids, comma-separated (as in metrics.jsonl and guard events)")
      ->required()
      ->delimiter(',');
  sub->add_option("--config", config_file, "config to use instead of the one saved in the checkpoint")
      ->check(CLI::ExistingFile);
  sub->add_flag("--json", json_stdout, "print the result as JSON instead of a table");
  sub->add_option("--json-out", json_out, "also write the result as JSON to this file");
  add_threads_option(*sub, threads);
  add_common_options(*sub, common);
  sub->callback([&action, &common] {
    action = [&common] {
      torch::set_num_threads(threads);
      auto dir = train::resolve_checkpoint(std::filesystem::path(checkpoint) / "checkpoints", checkpoint);
      // The run's own config by default: the data and target it trained on.
      auto config = config_file.empty()
                        ? config::load_config_text(train::read_checkpoint(dir).config_yaml,
                                                   (dir / "config.yaml").string(), common.overrides)
                        : config::load_config(config_file, common.overrides);
      // A checkpoint of an earlier dflow: its drafter kind on the drafter node.
      if (config_file.empty()) (void)nodes::move_node_kind_params(config, nodes::default_registry());
      auto report = train::replay_samples(config, dir, samples);
      if (json_stdout) std::cout << report.to_json().dump(2) << std::endl;
      else std::cout << report.table() << std::flush;
      if (!json_out.empty()) std::ofstream(json_out) << report.to_json().dump(2) << "\n";
      return 0;
    };
  });
}

}  // namespace dflow::cli
