#include "train/replay.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "config/errors.hpp"
#include "data/collate.hpp"
#include "data/dataset.hpp"
#include "train/devices.hpp"
#include "train/optimizer.hpp"
#include "data/plan.hpp"
#include "drafter/anchors.hpp"
#include "drafter/drafter.hpp"
#include "drafter/objective.hpp"
#include "target/target.hpp"
#include "train/checkpoint.hpp"

namespace dflow::train {

namespace {

struct Replayer {
  const config::Config& config;
  const data::Dataset& dataset;
  const target::TargetModel& target;
  drafter::DFlashDrafter& drafter;
  torch::Device device;

  // The bucket a row of `length` tokens is padded to in training (its own
  // length when it exceeds the largest bucket).
  int bucket_of(int64_t length) const {
    for (int b : config.data.buckets)
      if (b >= length) return b;
    return static_cast<int>(length);
  }

  ReplayRow run(const std::string& label, const std::vector<int64_t>& ids) {
    ReplayRow row;
    row.label = label;
    row.sample_ids = ids;
    data::PlannedBatch plan;
    plan.sample_ids = ids;
    for (int64_t id : ids) {
      row.lengths.push_back(dataset.lengths()[static_cast<size_t>(id)]);
      plan.padded_length = std::max(plan.padded_length, bucket_of(row.lengths.back()));
    }
    row.padded_length = plan.padded_length;
    const int64_t pad_id = target.config().eos_token_ids.empty() ? 0 : target.config().eos_token_ids.front();
    auto host = data::collate(dataset, plan, pad_id);
    const int64_t rows = host.rows, length = host.padded_length;
    auto input_ids = torch::from_blob(host.input_ids.data(), {rows, length}, torch::kInt64).clone();
    auto loss_mask = torch::from_blob(host.loss_mask.data(), {rows, length}, torch::kUInt8).clone();
    auto lengths = torch::from_blob(host.lengths.data(), {rows}, torch::kInt32).to(torch::kInt64);

    torch::Tensor features;
    {
      torch::NoGradGuard no_grad;
      features = target.context_features(input_ids.to(target.device()), drafter->spec().target_layer_ids)
                     .to(device, torch::kFloat32);
    }
    drafter::AnchorSamplingOptions anchor_options;
    anchor_options.anchors_per_sequence = config.train.anchors_per_sequence;
    anchor_options.seed = config.run.seed;
    auto anchors = drafter::sample_anchors(loss_mask, lengths, anchor_options);
    drafter::ObjectiveOptions objective;
    objective.loss_decay_gamma = config.train.loss_decay_gamma;
    drafter->zero_grad();
    auto result = drafter::dflash_loss(*drafter, target, features, input_ids.to(device), loss_mask.to(device),
                                     lengths.to(device), anchors, objective);
    row.loss_weight = result.weight_sum;
    row.anchors = result.num_anchors;
    if (result.weight_sum > 0) {
      result.loss_sum.backward();
      row.loss = result.weighted_ce_sum / result.weight_sum;
      std::vector<torch::Tensor> grads;
      for (const auto& p : drafter->parameters()) grads.push_back(p.grad());
      row.grad_norm = train::global_grad_norm(grads) / result.weight_sum;
    }
    return row;
  }
};

}  // namespace

ReplayReport replay_samples(const config::Config& config, const std::filesystem::path& checkpoint_dir,
                            const std::vector<int64_t>& sample_ids) {
  if (sample_ids.empty()) throw ConfigError("--samples: give at least one sample id");
  auto dataset = data::Dataset::open(config.data.train);
  std::string unknown;
  for (int64_t id : sample_ids)
    if (id < 0 || id >= dataset.size()) unknown += (unknown.empty() ? "" : ", ") + std::to_string(id);
  if (!unknown.empty())
    throw ConfigError("--samples: unknown sample id(s) " + unknown + ": the dataset of data.train has " +
                      std::to_string(dataset.size()) + " samples (ids 0.." + std::to_string(dataset.size() - 1) + ")");

  auto ckpt = read_checkpoint(checkpoint_dir);
  const torch::Device device = resolve_device(config.devices.drafter);
  auto target = target::TargetModel::load(config.model.target.path, device, parse_dtype(config.model.target.dtype),
                                         {target::parse_mxfp4_experts(config.model.target.mxfp4_experts)});
  auto spec = drafter::drafter_spec_from_config(ckpt.drafter_config, (ckpt.dir / "drafter").string());
  drafter::DFlashDrafter drafter(spec, config.run.seed);
  {
    torch::NoGradGuard no_grad;
    for (auto& item : drafter->named_parameters(true)) {
      if (!item.value().requires_grad()) continue;  // checkpoints hold the trained parameters
      auto it = ckpt.drafter_tensors.find(item.key());
      if (it == ckpt.drafter_tensors.end())
        throw std::runtime_error("checkpoint " + ckpt.dir.string() + " lacks drafter tensor " + item.key());
      item.value().copy_(it->second);
    }
  }
  drafter->to(device, torch::kFloat32);

  ReplayReport report;
  report.checkpoint = ckpt.dir.string();
  report.global_step = ckpt.global_step;
  Replayer replayer{config, dataset, target, drafter, device};
  for (int64_t id : sample_ids) report.rows.push_back(replayer.run("sample " + std::to_string(id), {id}));
  if (sample_ids.size() > 1) report.rows.push_back(replayer.run("together", sample_ids));
  return report;
}

std::string ReplayReport::table() const {
  std::ostringstream out;
  out << "replay against " << checkpoint << " (after step " << global_step << ")\n";
  out << std::left << std::setw(16) << "samples" << std::right << std::setw(10) << "tokens" << std::setw(8) << "bucket"
      << std::setw(10) << "loss" << std::setw(12) << "grad_norm" << std::setw(12) << "loss_weight" << std::setw(9)
      << "anchors" << "\n";
  out << std::fixed;
  for (const auto& r : rows) {
    int64_t tokens = 0;
    for (auto l : r.lengths) tokens += l;
    out << std::left << std::setw(16) << r.label << std::right << std::setw(10) << tokens << std::setw(8)
        << r.padded_length << std::setprecision(4) << std::setw(10) << r.loss << std::setw(12) << r.grad_norm
        << std::setprecision(2) << std::setw(12) << r.loss_weight << std::setw(9) << r.anchors << "\n";
  }
  return out.str();
}

nlohmann::json ReplayReport::to_json() const {
  nlohmann::json rows_json = nlohmann::json::array();
  for (const auto& r : rows)
    rows_json.push_back({{"label", r.label},
                         {"sample_ids", r.sample_ids},
                         {"lengths", r.lengths},
                         {"padded_length", r.padded_length},
                         {"loss", r.loss},
                         {"loss_weight", r.loss_weight},
                         {"grad_norm", r.grad_norm},
                         {"anchors", r.anchors}});
  return {{"checkpoint", checkpoint}, {"global_step", global_step}, {"rows", rows_json}};
}

}  // namespace dflow::train
