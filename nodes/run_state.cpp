#include "nodes/run_state.hpp"

#include <algorithm>

#include "config/log.hpp"
#include "report/live_server.hpp"
#include "text/dataset_tokenizer.hpp"

namespace dflow::nodes {

namespace {

torch::Dtype parse_dtype(const std::string& text) { return text == "bfloat16" ? torch::kBFloat16 : torch::kFloat32; }

// The declared pad_bucket node decides how batches are formed.
data::BatchMode batch_mode_of(const config::PipelineConfig& pipeline) {
  for (const auto& n : pipeline.nodes)
    if (n.type == "pad_bucket.fixed_batch") return data::BatchMode::FixedBatch;
  return data::BatchMode::TokenBudget;
}

}  // namespace

RunState::RunState(config::Config cfg, RunOptions opts)
    : config(std::move(cfg)),
      config_yaml(config::to_yaml(config)),
      options(std::move(opts)),
      out_dir(config.run.out_dir),
      checkpoints_dir(fs::path(config.run.out_dir) / "checkpoints"),
      dataset(data::Dataset::open(config.data.train)),
      guard(config.guard),
      quarantine_path(fs::path(config.run.out_dir) / "quarantine.jsonl") {
  text::check_dataset_tokenizer(config.data.train, config.model.target.path);  // ids must mean the same text
  batch_mode = batch_mode_of(config.pipeline);
  drain = report::DrainDetector({.window_steps = config.metrics.drain_window_steps,
                                 .horizon_steps = config.metrics.drain_horizon_steps});
  load_models();
  plan_run();
  if (!options.resume.empty()) {
    restore(options.resume);
  } else if (auto existing = train::list_checkpoints(checkpoints_dir); !existing.empty()) {
    // Never lose saved work by accident.
    if (!options.overwrite)
      throw std::runtime_error(out_dir.string() + " already holds checkpoints (newest " +
                               existing.back().filename().string() +
                               "): continue it with --resume latest, start over with --overwrite (deletes them), "
                               "or choose another run.out_dir");
    if (options.rank == 0) fs::remove_all(checkpoints_dir);
  }
  if (resumed_from.empty() && options.rank == 0) fs::remove(quarantine_path);  // a fresh run starts clean
  fs::create_directories(out_dir);
  if (options.rank == 0) {
    // A fresh run starts a fresh metrics file; a resumed one continues it.
    auto mode = std::ios::out | (resumed_from.empty() ? std::ios::trunc : std::ios::app);
    metrics_jsonl.open(out_dir / "metrics.jsonl", mode);
    if (!metrics_jsonl) throw std::runtime_error("cannot write " + (out_dir / "metrics.jsonl").string());
  }
}

torch::Device RunState::parse_device(const std::string& text) const {
  torch::Device device(text);
  if (device.is_cuda() && !torch::cuda::is_available())
    throw std::runtime_error("device '" + text + "' is configured but CUDA is not available on this machine");
  // Several ranks on one machine: a bare "cuda" is this rank's own GPU.
  if (device.is_cuda() && !device.has_index() && options.world_size > 1)
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(options.local_rank));
  return device;
}

void RunState::load_models() {
  for (const auto& d : config.devices.target)
    targets.push_back(std::make_unique<model::TargetModel>(
        model::TargetModel::load(config.model.target.path, parse_device(d), parse_dtype(config.model.target.dtype))));
  drafter_device = parse_device(config.devices.drafter);
  const auto& target_config = targets.front()->config();

  model::DrafterOptions drafter_options;
  drafter_options.num_layers = config.model.drafter.num_layers;
  drafter_options.block_size = config.model.drafter.block_size;
  drafter_options.num_target_features = config.model.drafter.num_target_features;
  for (int id : config.model.drafter.target_layer_ids) drafter_options.target_layer_ids.push_back(id);
  if (config.model.drafter.mask_token_id >= 0) drafter_options.mask_token_id = config.model.drafter.mask_token_id;
  auto spec = model::make_drafter_spec(target_config, drafter_options);
  feature_layer_ids = spec.target_layer_ids;
  drafter = model::DFlashDrafter(spec, config.run.seed);
  drafter->to(drafter_device, parse_dtype(config.model.drafter.dtype));

  train::AdamWOptions adam;
  adam.beta1 = config.train.adam_beta1;
  adam.beta2 = config.train.adam_beta2;
  adam.eps = config.train.adam_eps;
  adam.weight_decay = config.train.weight_decay;
  optimizer = std::make_unique<train::AdamW>(drafter_parameters(), adam);
  objective.loss_decay_gamma = config.train.loss_decay_gamma;
  pad_token_id = target_config.eos_token_ids.empty() ? 0 : target_config.eos_token_ids.front();
  log::info("model", log::str("target ", config.model.target.path, ": ", target_config.num_hidden_layers, " layers, hidden ",
                              target_config.hidden_size, ", vocab ", target_config.vocab_size, " on ", targets.size(),
                              " device(s); drafter ", spec.num_layers, " layer(s), block ", spec.block_size,
                              ", features from layers ", feature_layer_ids.size()));
}

data::PlanOptions RunState::plan_options(int epoch) const {
  data::PlanOptions o;
  o.seed = config.run.seed;
  o.epoch = epoch;
  o.buckets = config.data.buckets;
  o.tokens_per_batch = config.data.tokens_per_batch;
  o.mode = batch_mode;
  o.batch_size = config.data.batch_size;
  o.grad_accum = config.train.grad_accum;
  o.world_size = options.world_size;
  return o;
}

const data::EpochPlan& RunState::plan(int epoch) {
  auto it = plans_.find(epoch);
  if (it == plans_.end()) {
    it = plans_.emplace(epoch, data::build_epoch_plan(dataset, plan_options(epoch))).first;
    std::string summary = it->second.summary();
    if (summary.rfind("[data] ", 0) == 0) summary.erase(0, 7);
    log::info("data", summary);
    plans_.erase(plans_.begin(), plans_.lower_bound(epoch - 1));  // keep memory flat over long runs
  }
  return it->second;
}

void RunState::plan_run() {
  steps_per_epoch = plan(0).steps_per_epoch();
  total_steps = steps_per_epoch * config.train.epochs;
  stop_step = config.run.max_steps > 0 ? std::min<int64_t>(config.run.max_steps, total_steps) : total_steps;
  schedule.peak_lr = config.train.lr;
  schedule.total_steps = total_steps;
  schedule.warmup_ratio = config.train.warmup_ratio;
  schedule.kind = config.train.schedule;
  cursor = data::PlanCursor{0, 0};
}

std::vector<std::pair<std::string, torch::Tensor>> RunState::drafter_parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : drafter->named_parameters(true))
    if (item.value().requires_grad()) out.emplace_back(item.key(), item.value());
  return out;
}

train::CheckpointState RunState::snapshot() const {
  torch::NoGradGuard no_grad;
  train::CheckpointState s;
  s.global_step = completed_steps;
  if (options.rank != 0) return s;
  s.config_yaml = config_yaml;
  for (const auto& [name, t] : drafter_parameters()) s.drafter_tensors.emplace_back(name, t.detach().to(torch::kCPU).clone());
  s.drafter_config = model::drafter_config_json(drafter->spec(), drafter_parameters().front().second.scalar_type());
  for (const auto& [name, t] : optimizer->state_tensors()) s.optimizer_tensors.emplace_back(name, t.to(torch::kCPU).clone());
  s.optimizer_steps = optimizer->steps_taken();
  s.run_state = {{"epoch", cursor.epoch},
                 {"next_batch", cursor.next_batch},
                 {"steps_per_epoch", steps_per_epoch},
                 {"total_steps", total_steps},
                 {"world_size", options.world_size},
                 {"guard", guard.state()},
                 {"quarantine", std::vector<int64_t>(quarantined.begin(), quarantined.end())}};
  return s;
}

void RunState::restore(const std::string& which) {
  auto dir = train::resolve_checkpoint(checkpoints_dir, which);
  auto ckpt = train::read_checkpoint(dir);
  auto differences = train::incompatible_config_keys(ckpt.config_yaml, config_yaml);
  if (!differences.empty()) {
    std::string list;
    for (const auto& d : differences) list += "\n  " + d;
    throw std::runtime_error("checkpoint " + dir.string() + " was written with an incompatible config:" + list);
  }
  int saved_world = ckpt.run_state.value("world_size", 1);
  if (saved_world != options.world_size) {
    // The plan splits each step into world_size x grad_accum batches: another
    // world size would regroup the batches and continue a different run.
    const int64_t accum = config.train.grad_accum;
    throw std::runtime_error("checkpoint " + dir.string() + " was written with world_size " +
                             std::to_string(saved_world) + ", this run has world_size " +
                             std::to_string(options.world_size) + " (WORLD_SIZE): batches per step would change from " +
                             std::to_string(saved_world * accum) + " to " + std::to_string(options.world_size * accum) +
                             " (world_size x train.grad_accum " + std::to_string(accum) + "); resume with " +
                             std::to_string(saved_world) + " rank(s)");
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, param] : drafter_parameters()) {
    auto it = ckpt.drafter_tensors.find(name);
    if (it == ckpt.drafter_tensors.end()) throw std::runtime_error("checkpoint " + dir.string() + " lacks " + name);
    param.copy_(it->second);
  }
  optimizer->load_state_tensors(ckpt.optimizer_tensors, ckpt.optimizer_steps);
  completed_steps = ckpt.global_step;
  completed_steps_at_start = completed_steps;
  cursor = data::PlanCursor{ckpt.run_state.at("epoch").get<int>(), ckpt.run_state.at("next_batch").get<int64_t>()};
  guard.restore(ckpt.run_state.value("guard", nlohmann::json::object()));
  // The file may be newer than the checkpoint (samples quarantined after it):
  // both are excluded.
  quarantined = data::read_quarantine(quarantine_path);
  for (int64_t id : ckpt.run_state.value("quarantine", std::vector<int64_t>{})) quarantined.insert(id);
  for (int64_t id : quarantined)
    if (id >= dataset.size())
      throw std::runtime_error(quarantine_path.string() + " or checkpoint " + dir.string() + " quarantines sample " +
                               std::to_string(id) + " but the dataset has " + std::to_string(dataset.size()) +
                               " samples; was it written for another data.train?");
  quarantined_at_start = quarantined;
  if (!quarantined.empty())
    log::info("guard", log::str(quarantined.size(), " quarantined sample(s) are excluded from every batch (",
                                quarantine_path.string(), ")"));
  resumed_from = dir.string();
  log::info("train", log::str("resumed from ", dir.string(), " at step ", completed_steps, " (epoch ", cursor.epoch,
                              ", batch ", cursor.next_batch, ")"));
}

void RunState::quarantine_samples(int64_t global_step, const std::string& reason, const std::vector<int64_t>& ids) {
  quarantined.insert(ids.begin(), ids.end());
  if (options.rank == 0) data::append_quarantine(quarantine_path, global_step, reason, ids);
}

void RunState::write_metrics(const nlohmann::json& record) {
  static const auto has_jsonl = [](const config::Config& c) {
    return std::find(c.metrics.sinks.begin(), c.metrics.sinks.end(), "jsonl") != c.metrics.sinks.end();
  };
  if (has_jsonl(config) && metrics_jsonl.is_open()) {
    std::lock_guard lock(metrics_mutex_);
    metrics_jsonl << record.dump() << "\n" << std::flush;
  }
  if (options.live) options.live->publish(record);
}

const config::FaultDecl* RunState::fault(const std::string& kind, const std::string& node, int64_t step) const {
  for (const auto& f : config.faults)
    if (f.kind == kind && f.step == step && (f.node.empty() || f.node == node)) return &f;
  return nullptr;
}

}  // namespace dflow::nodes
