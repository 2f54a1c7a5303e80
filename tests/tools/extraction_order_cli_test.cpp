// `dflow extraction-order` as a user runs it: the map it writes lists the
// samples in the order `dflow train` with the same config then reads them
// (its step records' sample_ids), and its rows are those samples, row k the
// sample file k holds.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "../nodes/train_fixture.hpp"
#include "config/config.hpp"
#include "data/dataset.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

using namespace dflow;
namespace fs = std::filesystem;

namespace {

std::vector<int64_t> ints(const nlohmann::json& list) { return list.get<std::vector<int64_t>>(); }

}  // namespace

TEST_CASE("Cli.ExtractionOrder.the_map_is_the_order_dflow_train_reads_the_samples_and_the_rows_are_those_samples") {
  const auto dir = testing::fresh_dir("xorder");
  // A whole epoch, two micro-batches a step, packed rows (several samples a row).
  auto config = testing::small_run_config(dir / "run", {"train.epochs=1", "train.grad_accum=2", "eval.every_steps=0",
                                                        "run.threads=1", "run.torch_threads=1", "run.seed=77"});
  const auto path = dir / "run.yaml";
  std::ofstream(path) << config::to_yaml(testing::with_pad(config, "pad_bucket.pack"));
  const auto rows = dir / "rows.jsonl", map = dir / "order.map.json";
  const auto written = testing::run_command(testing::dflow_binary() + " extraction-order " + path.string() + " --out " +
                                                rows.string() + " --map " + map.string() + " --epochs 3",
                                            120);
  INFO(written.output);
  REQUIRE(written.exit_code == 0);
  CHECK(written.output.find("seed 77, world_size 1, grad_accum 2, pack") != std::string::npos);
  const auto trained = testing::run_command(testing::dflow_binary() + " train " + path.string(), 300);
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);

  std::vector<int64_t> read;
  for (const auto& record : testing::step_records(dir / "run"))
    for (const int64_t id : ints(record["sample_ids"])) read.push_back(id);
  std::ifstream in(map);
  const auto order = ints(nlohmann::json::parse(in)["sample_ids"]);
  const auto dataset = data::Dataset::open(config.data.train);
  REQUIRE(static_cast<int64_t>(read.size()) == dataset.size());  // an epoch reads every sample once
  CHECK(order == read);

  std::ifstream lines(rows);
  size_t k = 0;
  for (std::string line; std::getline(lines, line); ++k) {
    REQUIRE(k < order.size());
    const auto row = nlohmann::json::parse(line);
    const auto sample = dataset.sample(order[k]);
    CHECK(ints(row["input_ids"]) == std::vector<int64_t>(sample.input_ids.begin(), sample.input_ids.end()));
    CHECK(ints(row["loss_mask"]) == std::vector<int64_t>(sample.loss_mask.begin(), sample.loss_mask.end()));
  }
  CHECK(k == order.size());
}
