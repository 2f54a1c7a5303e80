#include "data/extraction_order.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/batching_policy.hpp"
#include "data/data_error.hpp"
#include "data/dataset.hpp"

namespace dflow::data {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "dflow extraction order 1";

std::string hex(uint64_t value) { return fmt::format("{:016x}", value); }

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw DataError("cannot write " + path.string() + ": check the directory exists and is writable");
}

}  // namespace

std::vector<int64_t> first_read_order(const Dataset& dataset, const std::function<PlanOptions(int epoch)>& options_of,
                                      int epochs) {
  std::vector<int64_t> order;
  std::vector<bool> listed(static_cast<size_t>(dataset.size()), false);
  for (int epoch = 0; epoch < epochs && static_cast<int64_t>(order.size()) < dataset.size(); ++epoch) {
    const auto plan = build_epoch_plan(dataset, options_of(epoch));
    for (const auto& batch : plan.batches())
      for (const int64_t id : batch.sample_ids)
        if (!listed[static_cast<size_t>(id)]) {
          listed[static_cast<size_t>(id)] = true;
          order.push_back(id);
        }
  }
  return order;
}

std::string order_options_text(const PlanOptions& options) {
  const auto policy = options.batching ? options.batching : token_budget_batching();
  const std::string params = policy->params_text();
  return fmt::format("seed {}, world_size {}, grad_accum {}, {}{}, buckets [{}], tokens_per_batch {}, max_length {}",
                     options.seed, options.world_size, options.grad_accum, policy->name(),
                     params.empty() ? "" : " " + params, fmt::join(options.buckets, ", "), options.tokens_per_batch,
                     options.max_length);
}

void write_file_order(const fs::path& path, const FileOrder& order) {
  nlohmann::json j;
  j["format"] = kFormat;
  j["dataset_fingerprint"] = hex(order.data_fingerprint);
  j["dataset_samples"] = order.dataset_samples;
  j["written_for"] = order.written_for;
  j["sample_ids"] = order.sample_ids;
  write_text(path, j.dump() + "\n");
}

FileOrder read_file_order(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw DataError(path.string() + ": cannot read the extraction order file; write it with `dflow extraction-order "
                                    "CONFIG --out ROWS.jsonl --map " + path.string() + "`");
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, false);
  auto fail = [&](const std::string& what) {
    return DataError(path.string() + ": " + what + "; it is the map `dflow extraction-order --map` writes (rewrite it "
                                                   "with that command)");
  };
  if (j.is_discarded() || !j.is_object()) throw fail("not a JSON object");
  if (j.value("format", "") != kFormat) throw fail("its \"format\" is not \"" + std::string(kFormat) + "\"");
  FileOrder order;
  try {
    order.data_fingerprint = std::stoull(j.at("dataset_fingerprint").get<std::string>(), nullptr, 16);
    order.dataset_samples = j.at("dataset_samples").get<int64_t>();
    order.written_for = j.value("written_for", "");
    for (const auto& id : j.at("sample_ids")) {
      if (!id.is_number_integer())
        throw fail("file " + std::to_string(order.sample_ids.size()) + "'s sample id " + id.dump() +
                   " is not an integer");
      order.sample_ids.push_back(id.get<int64_t>());
    }
  } catch (const nlohmann::json::exception& e) {
    throw fail(std::string("malformed (") + e.what() + ")");
  } catch (const std::logic_error& e) {  // stoull
    throw fail("\"dataset_fingerprint\" is not a hexadecimal number");
  }
  return order;
}

void check_file_order(const FileOrder& order, const Dataset& dataset, const fs::path& path) {
  const int64_t samples = dataset.size();
  if (order.data_fingerprint != dataset.fingerprint() || order.dataset_samples != samples)
    throw DataError(path.string() + " was written for another dataset (" + std::to_string(order.dataset_samples) +
                    " samples, fingerprint " + hex(order.data_fingerprint) + "), data.train holds " +
                    std::to_string(samples) + " samples (fingerprint " + hex(dataset.fingerprint()) +
                    "): its files hold other samples; write the order for this data.train with `dflow "
                    "extraction-order` and extract in it, or point data.train at the dataset the extraction read");
  std::vector<int64_t> file_of(static_cast<size_t>(samples), -1);
  for (size_t k = 0; k < order.sample_ids.size(); ++k) {
    const int64_t id = order.sample_ids[k];
    if (id < 0 || id >= samples)
      throw DataError(fmt::format("{}: file {} holds sample {}, outside the dataset's {} samples: the map was edited or "
                                  "damaged; rewrite it with `dflow extraction-order`",
                                  path.string(), k, id, samples));
    if (file_of[static_cast<size_t>(id)] >= 0)
      throw DataError(fmt::format("{}: sample {} is listed for files {} and {}: each sample is extracted once; the map "
                                  "was edited or damaged, rewrite it with `dflow extraction-order`",
                                  path.string(), id, file_of[static_cast<size_t>(id)], k));
    file_of[static_cast<size_t>(id)] = static_cast<int64_t>(k);
  }
  for (int64_t id = 0; id < samples; ++id)
    if (file_of[static_cast<size_t>(id)] < 0)
      throw DataError(fmt::format("{}: no file holds sample {} (it lists {} of the dataset's {} samples), and training "
                                  "reads every sample: write the order with `dflow extraction-order` over enough "
                                  "--epochs to list them all",
                                  path.string(), id, order.sample_ids.size(), samples));
}

void write_extraction_rows(const fs::path& path, const Dataset& dataset, std::span<const int64_t> sample_ids) {
  std::string text;
  for (const int64_t id : sample_ids) {
    const auto sample = dataset.sample(id);
    text += fmt::format("{{\"input_ids\": [{}], \"loss_mask\": [{}]}}\n", fmt::join(sample.input_ids, ", "),
                        fmt::join(sample.loss_mask, ", "));
  }
  write_text(path, text);
}

}  // namespace dflow::data
