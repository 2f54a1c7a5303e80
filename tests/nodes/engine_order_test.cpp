// features.engine over an extraction that ran in training order: with the
// map `dflow extraction-order` writes (params.file_order) the files train as
// the same files in dataset order do, and a map that does not fit the
// dataset, or the files, is refused naming the map and the sample.
#include <doctest/doctest.h>

#include <fstream>
#include <functional>

#include "data/dataset.hpp"
#include "data/extraction_order.hpp"
#include "engine_files.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/plan_options.hpp"
#include "nodes/registry.hpp"
#include "nodes/run_context.hpp"
#include "nodes/trainer.hpp"

using namespace dflow;
using testing::fresh_dir;
using testing::from_engine;
using testing::small_run_config;
using testing::step_records;
namespace fs = std::filesystem;

namespace {

std::string error_of(const config::Config& config) {
  try {
    nodes::run_training(config, {});
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

config::Config order_config(const fs::path& out_dir) {
  return small_run_config(out_dir, {"run.max_steps=4", "train.grad_accum=2"});
}

// The order the config's training first reads the samples in, as the map writes it.
data::FileOrder training_order(const config::Config& config) {
  const auto dataset = data::Dataset::open(config.data.train);
  const auto batching = nodes::batching_of(config.pipeline, nodes::default_registry());
  auto options_of = [&](int epoch) { return nodes::plan_options(config, batching, 1, epoch); };
  data::FileOrder order;
  order.data_fingerprint = dataset.fingerprint();
  order.dataset_samples = dataset.size();
  order.written_for = data::order_options_text(options_of(0));
  order.sample_ids = data::first_read_order(dataset, options_of, 1);
  return order;
}

// Files in dataset order (hs_<sample>), their dataset-order run's records,
// and the same files renamed into training order (hs_<k> holds the k-th
// sample training reads) with their map.
struct OrderedFiles {
  fs::path by_sample = fresh_dir("order-by-sample");
  fs::path by_order = fresh_dir("order-by-order");
  fs::path map = fresh_dir("order-map") / "order.map.json";
  data::FileOrder order;
  std::vector<nlohmann::json> dataset_order_records;
  OrderedFiles() {
    const auto config = order_config(fresh_dir("order-writer"));
    testing::write_dflow_features_as_engine_files(config, by_sample);
    order = training_order(config);
    data::write_file_order(map, order);
    for (size_t k = 0; k < order.sample_ids.size(); ++k)
      fs::copy_file(train::engine_file_path(by_sample, order.sample_ids[k]),
                    train::engine_file_path(by_order, static_cast<int64_t>(k)));
    const auto run = fresh_dir("order-dataset-run");
    nodes::run_training(from_engine(order_config(run), by_sample), {});
    dataset_order_records = step_records(run);
  }
};
const OrderedFiles& ordered() {
  static const OrderedFiles files;
  return files;
}

std::string with_map(const fs::path& map) {
  return "engine_layer_ids: [2, 4], dtype: float32, file_order: " + map.string();
}

fs::path edited_map(const std::string& name, const std::function<void(data::FileOrder&)>& edit) {
  auto order = ordered().order;
  edit(order);
  const auto path = fresh_dir(name) / "order.map.json";
  data::write_file_order(path, order);
  return path;
}

}  // namespace

TEST_CASE("EngineOrder.the_order_starts_with_the_samples_of_trainings_first_steps") {
  const auto& order = ordered().order.sample_ids;
  std::vector<int64_t> read;
  for (const auto& record : ordered().dataset_order_records)
    for (const int64_t id : record["sample_ids"].get<std::vector<int64_t>>()) read.push_back(id);
  REQUIRE(read.size() > 8);
  REQUIRE(order.size() >= read.size());
  CHECK(std::vector<int64_t>(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(read.size())) == read);
}

TEST_CASE("EngineOrder.files_in_training_order_with_their_map_train_as_the_same_files_in_dataset_order") {
  const auto dir = fresh_dir("order-run");
  nodes::run_training(from_engine(order_config(dir), ordered().by_order, with_map(ordered().map)), {});
  const auto records = step_records(dir);
  REQUIRE(records.size() == 4);
  CHECK(records == ordered().dataset_order_records);  // every field of every step
}

TEST_CASE("EngineOrder.a_map_that_does_not_fit_the_dataset_is_refused_naming_the_map_and_the_sample") {
  auto refused = [](const fs::path& map) {
    return error_of(from_engine(order_config(fresh_dir("order-refused-run")), ordered().by_order, with_map(map)));
  };
  SUBCASE("another dataset") {
    const auto map = edited_map("order-other-data", [](data::FileOrder& o) { o.data_fingerprint ^= 1; });
    const auto message = refused(map);
    CHECK_MESSAGE(message.find("params.file_order") != std::string::npos, message);
    CHECK_MESSAGE(message.find(map.string() + " was written for another dataset") != std::string::npos, message);
  }
  SUBCASE("a sample listed twice") {
    const auto& ids = ordered().order.sample_ids;
    const auto map = edited_map("order-twice", [](data::FileOrder& o) { o.sample_ids[3] = o.sample_ids[1]; });
    const auto message = refused(map);
    CHECK_MESSAGE(message.find(map.string() + ": sample " + std::to_string(ids[1]) + " is listed for files 1 and 3") !=
                      std::string::npos,
                  message);
  }
  SUBCASE("a sample no file holds") {
    const int64_t last = ordered().order.sample_ids.back();
    const auto map = edited_map("order-short", [](data::FileOrder& o) { o.sample_ids.pop_back(); });
    const auto message = refused(map);
    CHECK_MESSAGE(message.find(map.string() + ": no file holds sample " + std::to_string(last)) != std::string::npos,
                  message);
  }
  SUBCASE("not a map") {
    const auto path = fresh_dir("order-not-a-map") / "order.map.json";
    std::ofstream(path) << "{\"sample_ids\": [1, 2]}\n";
    const auto message = refused(path);
    CHECK_MESSAGE(message.find(path.string() + ": its \"format\" is not") != std::string::npos, message);
  }
}

TEST_CASE("EngineOrder.a_map_other_than_the_extractions_is_caught_at_the_first_file_naming_sample_file_and_map") {
  // Files 0 and 1 swapped in the map: each file holds the other sample's tokens.
  const auto& ids = ordered().order.sample_ids;
  const auto map = edited_map("order-swapped", [](data::FileOrder& o) { std::swap(o.sample_ids[0], o.sample_ids[1]); });
  const auto message =
      error_of(from_engine(order_config(fresh_dir("order-swapped-run")), ordered().by_order, with_map(map)));
  // Sample ids[0], read first, is looked for in file 1, which holds ids[1].
  CHECK_MESSAGE(message.find("sample " + std::to_string(ids[0]) + ": engine features file " +
                             train::engine_file_path(ordered().by_order, 1).string() + " (file 1 by params.file_order " +
                             map.string() + ") holds other tokens") != std::string::npos,
                message);
  CHECK_MESSAGE(message.find("rows other than those written with this map") != std::string::npos, message);
}

// A run from before file_order existed keeps its resume signature; a map is
// part of it (another map reads other files for the same samples).
TEST_CASE("EngineOrder.no_file_order_leaves_the_resume_signature_as_it_was_and_a_map_is_part_of_it") {
  const auto signature = testing::engine_resume_signature;
  CHECK(signature("{dir: files, engine_layer_ids: [2, 4]}").find("file_order") == std::string::npos);
  CHECK(signature("{dir: files, engine_layer_ids: [2, 4], file_order: order.map.json}").find("file_order: order.map.json") !=
        std::string::npos);
}
