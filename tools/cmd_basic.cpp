// `dflow version` and `dflow config`.
#include <oneapi/tbb/version.h>
#include <torch/torch.h>

#include <iostream>

#include "config/config.hpp"
#include "config/config_keys.hpp"
#include "graph/description.hpp"
#include "nodes/drafter_kind_choice.hpp"
#include "nodes/registry.hpp"
#include "tools/cli.hpp"

namespace dflow::cli {

void add_common_options(CLI::App& sub, Common& common) {
  sub.add_option("--set", common.overrides, "override a config value: section.key=value (repeatable)");
  sub.add_option("--log-level", common.log_level, "trace, debug, info, warn, error, off (default: run.log_level)");
}

void add_version_command(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("version", "print dflow, LibTorch and oneTBB versions and whether CUDA is usable");
  sub->callback([&action] {
    action = [] {
      std::cout << "dflow " << "0.1.0" << "\n"
                << "LibTorch " << TORCH_VERSION << "\n"
                << "oneTBB " << TBB_VERSION_STRING << "\n"
#ifdef DFLOW_HAVE_CUDA
                << "CUDA build: yes\n"
#else
                << "CUDA build: no\n"
#endif
                << "CUDA available: " << (torch::cuda::is_available() ? "yes" : "no") << " ("
                << static_cast<int>(torch::cuda::device_count()) << " devices)\n";  // a DeviceIndex is a char
      return 0;
    };
  });
}

void add_config_command(CLI::App& app, Common& common, Action& action) {
  auto* sub = app.add_subcommand("config", "print the resolved configuration as YAML (the embedded demo when no FILE)");
  static std::string file;
  static bool reference = false;
  sub->add_option("FILE", file, "YAML config file")->check(CLI::ExistingFile);
  sub->add_flag("--reference", reference,
                "print every key as a Markdown table (type, default, whether a resume may change it), as docs/reference/config.md holds it");
  add_common_options(*sub, common);
  sub->callback([&action, &common] {
    action = [&common] {
      if (reference) {
        std::cout << config::config_reference_markdown() << nodes::kind_reference_markdown();
        return 0;
      }
      auto config = config::load_config(file, common.overrides);
      // The pipeline too: node types, their params and the edges, and the
      // drafter kind's params, as `dflow graph` and a run check them, before
      // anything is loaded.
      (void)graph::describe(config.pipeline, nodes::default_registry());
      (void)nodes::read_kind_config(config);
      std::cout << config::to_yaml(config);
      return 0;
    };
  });
}

}  // namespace dflow::cli
