// `dflow extraction-order [CONFIG] --out ROWS.jsonl --map MAP.json`: the
// samples in the order the run's training first reads them (its seed,
// batching, train.grad_accum, --world-size ranks), as the rows a serving
// engine's extraction reads (file k is row k) and the map from file index to
// sample that features.engine's params.file_order follows
// (data/extraction_order.hpp).
#include <iostream>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "data/dataset.hpp"
#include "data/extraction_order.hpp"
#include "graph/description.hpp"
#include "nodes/plan_options.hpp"
#include "nodes/registry.hpp"
#include "nodes/run_context.hpp"
#include "tools/cli.hpp"
#include "train/demo.hpp"

namespace dflow::cli {

namespace {

struct OrderOptions {
  std::string file, rows, map;
  int world_size = 1;
  int epochs = 0;  // 0: train.epochs
};

int extraction_order(const OrderOptions& cli, const Common& common) {
  auto config = config::load_config(cli.file, common.overrides);
  (void)graph::describe(config.pipeline, nodes::default_registry());
  if (cli.file.empty()) train::ensure_demo_assets(config);
  if (cli.world_size < 1) throw ConfigError("--world-size is " + std::to_string(cli.world_size) + ": it must be >= 1");
  const int epochs = cli.epochs > 0 ? cli.epochs : config.train.epochs;
  const auto dataset = data::Dataset::open(config.data.train);
  const auto batching = nodes::batching_of(config.pipeline, nodes::default_registry());
  auto options_of = [&](int epoch) { return nodes::plan_options(config, batching, cli.world_size, epoch); };
  data::FileOrder order;
  order.data_fingerprint = dataset.fingerprint();
  order.dataset_samples = dataset.size();
  order.written_for = data::order_options_text(options_of(0));
  order.sample_ids = data::first_read_order(dataset, options_of, epochs);
  data::write_extraction_rows(cli.rows, dataset, order.sample_ids);
  data::write_file_order(cli.map, order);
  std::cout << "extraction order: " << order.sample_ids.size() << " of the dataset's " << dataset.size()
            << " samples in the order training first reads them (" << order.written_for << "); rows: " << cli.rows
            << " (the extraction's file k is row k), map: " << cli.map
            << " (features.engine params.file_order)" << std::endl;
  if (static_cast<int64_t>(order.sample_ids.size()) < dataset.size())
    std::cout << "  " << dataset.size() - static_cast<int64_t>(order.sample_ids.size())
              << " samples are read by no plan of the first " << epochs << " epoch(s): give more --epochs"
              << std::endl;
  return 0;
}

}  // namespace

void add_extraction_order_command(CLI::App& app, Common& common, Action& action) {
  auto* sub = app.add_subcommand(
      "extraction-order",
      "write the samples in the order the run's training first reads them, as the rows a serving engine's extraction "
      "reads and the map from its file index to the sample that features.engine's params.file_order follows");
  static OrderOptions options;
  sub->add_option("CONFIG", options.file, "YAML config file (the training run's; the demo when none)")
      ->check(CLI::ExistingFile);
  sub->add_option("--out", options.rows,
                  "the rows, one {\"input_ids\", \"loss_mask\"} JSON line per sample, in training order")
      ->required();
  sub->add_option("--map", options.map, "the map from file index to dataset sample (JSON)")->required();
  sub->add_option("--world-size", options.world_size, "the training run's ranks (default 1)");
  sub->add_option("--epochs", options.epochs,
                  "epochs walked (default train.epochs; it stops once every sample is listed)");
  add_common_options(*sub, common);
  sub->callback([&action, &common] { action = [&common] { return extraction_order(options, common); }; });
}

}  // namespace dflow::cli
