// `dflow train [CONFIG] [--resume latest|PATH]` and `dflow inspect CKPT`.
#include <torch/torch.h>

#include <iostream>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "config/log.hpp"
#include "graph/description.hpp"
#include "nodes/registry.hpp"
#include "nodes/trainer.hpp"
#include "report/live_server.hpp"
#include "tools/cli.hpp"
#include "train/demo.hpp"
#include "train/devices.hpp"
#include "train/distributed.hpp"

namespace dflow::cli {

namespace {

std::optional<train::LaunchEnv> read_launch_env_or_usage_error() {
  try {
    return train::read_launch_env();
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("launcher environment: ") + e.what());
  }
}

train::DistributedOptions distributed_options(const config::Config& config, int local_rank) {
  train::DistributedOptions o;
  o.backend = config.distributed.backend;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(config.distributed.timeout_s * 1000));
  o.bucket_bytes = static_cast<int64_t>(config.distributed.bucket_mb * (1 << 20));
  o.device = train::resolve_device(config.devices.drafter, local_rank);
  return o;
}

}  // namespace

void add_train_command(CLI::App& app, Common& common, Action& action) {
  auto* sub = app.add_subcommand("train", "train a drafter with the graph the config declares (the demo when no CONFIG)");
  static std::string file, resume;
  sub->add_option("CONFIG", file, "YAML config file")->check(CLI::ExistingFile);
  static bool overwrite = false;
  static std::string serve;
  sub->add_option("--resume", resume, "continue from 'latest' or a checkpoint directory");
  sub->add_flag("--overwrite", overwrite, "start over in an out_dir that holds checkpoints (deletes them)");
  sub->add_option("--serve", serve, "live view at HOST:PORT (loopback only): /, /metrics (Prometheus), /graph.json");
  add_common_options(*sub, common);
  sub->callback([&action, &common] {
    action = [&common] {
      auto config = config::load_config(file, common.overrides);
      (void)graph::describe(config.pipeline, nodes::default_registry());  // node params before any model loads
      if (common.log_level.empty()) log::set_level(config.run.log_level);
      torch::set_num_threads(config.run.torch_threads);
      if (file.empty()) train::ensure_demo_assets(config);
      nodes::RunOptions options;
      options.resume = resume;
      options.overwrite = overwrite;
      // Several ranks (torchrun, `dflow launch`): join the process group first.
      std::unique_ptr<train::Distributed> dist;
      if (auto env = read_launch_env_or_usage_error()) {
        options.rank = env->rank;
        options.world_size = env->world_size;
        options.local_rank = env->local_rank;
        if (env->world_size > 1) {
          if (file.empty())
            throw ConfigError("a run over several ranks needs a CONFIG file (the demo's assets are made by one process)");
          dist = std::make_unique<train::Distributed>(*env, distributed_options(config, env->local_rank));
          options.dist = dist.get();
        }
      }
      std::unique_ptr<report::LiveServer> live;
      if (!serve.empty()) {
        auto live_options = report::parse_serve_address(serve);
        live_options.run_dir = config.run.out_dir;
        live = std::make_unique<report::LiveServer>(live_options);
        live->start();
        log::info("report", "live view at " + live->url());
        options.live = live.get();
      }
      auto result = nodes::run_training(config, options);
      if (options.rank == 0) std::cout << nodes::summarize(result) << std::endl;
      return 0;
    };
  });
}

}  // namespace dflow::cli
