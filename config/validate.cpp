#include "config/validate.hpp"

#include <algorithm>
#include <set>

namespace dflow::config {

namespace {

const std::vector<std::string> kLogLevels{"trace", "debug", "info", "warn", "error", "off"};
const std::vector<std::string> kDtypes{"float32", "bfloat16"};

void require_one_of(const YamlSection& s, const std::string& key, const std::string& value,
                    const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  throw s.error(key, "'" + value + "' is not one of: " + list + did_you_mean(value, allowed));
}

RunConfig read_run(YamlSection s) {
  RunConfig c;
  s.read("name", c.name).read("out_dir", c.out_dir).read("seed", c.seed).read("threads", c.threads)
      .read("torch_threads", c.torch_threads).read("log_level", c.log_level).read("max_steps", c.max_steps);
  s.finish();
  s.require(!c.name.empty(), "name", "must not be empty");
  s.require(!c.out_dir.empty(), "out_dir", "must not be empty");
  s.require(c.threads >= 1 && c.threads <= 256, "threads", "must lie in [1, 256]");
  s.require(c.torch_threads >= 1 && c.torch_threads <= 256, "torch_threads", "must lie in [1, 256]");
  s.require(c.max_steps >= 0, "max_steps", "must be >= 0 (0: run all epochs)");
  require_one_of(s, "log_level", c.log_level, kLogLevels);
  return c;
}

ModelConfig read_model(YamlSection s) {
  ModelConfig c;
  YamlSection t = s.section("target");
  t.read("path", c.target.path).read("dtype", c.target.dtype);
  t.finish();
  t.require(!c.target.path.empty(), "path", "must name a Hugging Face checkpoint directory");
  require_one_of(t, "dtype", c.target.dtype, kDtypes);
  YamlSection d = s.section("drafter");
  auto& dr = c.drafter;
  d.read("num_layers", dr.num_layers).read("block_size", dr.block_size)
      .read("num_target_features", dr.num_target_features).read("target_layer_ids", dr.target_layer_ids)
      .read("mask_token_id", dr.mask_token_id).read("dtype", dr.dtype);
  d.finish();
  s.finish();
  d.require(dr.num_layers >= 1, "num_layers", "must be >= 1");
  d.require(dr.block_size >= 2, "block_size", "must be >= 2 (an anchor plus at least one drafted token)");
  d.require(dr.num_target_features >= 0, "num_target_features", "must be >= 0 (0: as many as draft layers)");
  d.require(dr.mask_token_id >= -1, "mask_token_id", "must be a token id, or -1 for the target's");
  d.require(std::is_sorted(dr.target_layer_ids.begin(), dr.target_layer_ids.end()) &&
                std::all_of(dr.target_layer_ids.begin(), dr.target_layer_ids.end(), [](int v) { return v >= 0; }),
            "target_layer_ids", "must be non-negative and sorted");
  d.require(dr.target_layer_ids.empty() || dr.num_target_features == 0 ||
                dr.num_target_features == static_cast<int>(dr.target_layer_ids.size()),
            "num_target_features", "disagrees with the number of target_layer_ids");
  require_one_of(d, "dtype", dr.dtype, kDtypes);
  return c;
}

DataConfig read_data(YamlSection s) {
  DataConfig c;
  s.read("train", c.train).read("max_length", c.max_length).read("buckets", c.buckets)
      .read("tokens_per_batch", c.tokens_per_batch);
  s.finish();
  s.require(!c.train.empty(), "train", "needs at least one prepared data directory");
  s.require(c.max_length >= 2, "max_length", "must be >= 2");
  s.require(!c.buckets.empty(), "buckets", "needs at least one bucket length");
  s.require(std::is_sorted(c.buckets.begin(), c.buckets.end()) &&
                std::adjacent_find(c.buckets.begin(), c.buckets.end()) == c.buckets.end(),
            "buckets", "must be strictly increasing");
  s.require(c.buckets.front() >= 2, "buckets", "bucket lengths must be >= 2");
  s.require(c.buckets.back() >= c.max_length, "buckets",
            "the largest bucket (" + std::to_string(c.buckets.back()) + ") must hold max_length (" +
                std::to_string(c.max_length) + ")");
  s.require(c.tokens_per_batch >= c.buckets.back(), "tokens_per_batch",
            "must fit at least one sample of the largest bucket (" + std::to_string(c.buckets.back()) + ")");
  return c;
}

TrainConfig read_train(YamlSection s) {
  TrainConfig c;
  s.read("epochs", c.epochs).read("grad_accum", c.grad_accum).read("lr", c.lr).read("warmup_ratio", c.warmup_ratio)
      .read("schedule", c.schedule).read("weight_decay", c.weight_decay).read("grad_clip", c.grad_clip)
      .read("adam_beta1", c.adam_beta1).read("adam_beta2", c.adam_beta2).read("adam_eps", c.adam_eps)
      .read("anchors_per_sequence", c.anchors_per_sequence).read("loss_decay_gamma", c.loss_decay_gamma);
  s.finish();
  s.require(c.epochs >= 1, "epochs", "must be >= 1");
  s.require(c.grad_accum >= 1, "grad_accum", "must be >= 1");
  s.require(c.lr > 0, "lr", "must be > 0");
  s.require(c.warmup_ratio >= 0 && c.warmup_ratio < 1, "warmup_ratio", "must lie in [0, 1)");
  require_one_of(s, "schedule", c.schedule, {"cosine", "linear", "constant"});
  s.require(c.weight_decay >= 0, "weight_decay", "must be >= 0");
  s.require(c.grad_clip >= 0, "grad_clip", "must be >= 0 (0: no clipping)");
  s.require(c.adam_beta1 >= 0 && c.adam_beta1 < 1, "adam_beta1", "must lie in [0, 1)");
  s.require(c.adam_beta2 >= 0 && c.adam_beta2 < 1, "adam_beta2", "must lie in [0, 1)");
  s.require(c.adam_eps > 0, "adam_eps", "must be > 0");
  s.require(c.anchors_per_sequence >= 1, "anchors_per_sequence", "must be >= 1");
  s.require(c.loss_decay_gamma > 0, "loss_decay_gamma", "must be > 0");
  return c;
}

GuardConfig read_guard(YamlSection s) {
  GuardConfig c;
  s.read("policy", c.policy).read("window", c.window).read("z_threshold", c.z_threshold)
      .read("warmup_steps", c.warmup_steps).read("per_bucket", c.per_bucket)
      .read("cliff_z_threshold", c.cliff_z_threshold).read("cliff_steps", c.cliff_steps)
      .read("snapshot_every", c.snapshot_every).read("max_rollbacks", c.max_rollbacks);
  s.finish();
  require_one_of(s, "policy", c.policy, {"none", "halt", "skip", "quarantine", "rollback"});
  s.require(c.window >= 4, "window", "must be >= 4 steps");
  s.require(c.z_threshold > 0, "z_threshold", "must be > 0");
  s.require(c.warmup_steps >= 0, "warmup_steps", "must be >= 0");
  s.require(c.cliff_z_threshold > 0, "cliff_z_threshold", "must be > 0");
  s.require(c.cliff_steps >= 1, "cliff_steps", "must be >= 1");
  s.require(c.snapshot_every >= 1, "snapshot_every", "must be >= 1");
  s.require(c.max_rollbacks >= 0, "max_rollbacks", "must be >= 0");
  // A cliff is judged against the baseline of the steps before it: a window
  // no longer than the cliff would let the cliff's own losses become the
  // baseline before it is detected.
  if (c.policy == "rollback")
    s.require(c.window > 2 * c.cliff_steps, "window",
              "must be > 2 * guard.cliff_steps (" + std::to_string(2 * c.cliff_steps) +
                  ") under policy rollback, so that a cliff cannot become its own baseline");
  return c;
}

CheckpointConfig read_checkpoint(YamlSection s) {
  CheckpointConfig c;
  s.read("every_steps", c.every_steps).read("keep", c.keep).read("on_write_error", c.on_write_error);
  s.finish();
  require_one_of(s, "on_write_error", c.on_write_error, {"halt", "continue"});
  s.require(c.every_steps >= 0, "every_steps", "must be >= 0 (0: only at the end)");
  s.require(c.keep >= 1, "keep", "must be >= 1");
  return c;
}

EvalConfig read_eval(YamlSection s) {
  EvalConfig c;
  s.read("every_steps", c.every_steps).read("prompts", c.prompts).read("max_prompts", c.max_prompts)
      .read("max_new_tokens", c.max_new_tokens).read("temperature", c.temperature).read("seed", c.seed);
  s.finish();
  s.require(c.every_steps >= 0, "every_steps", "must be >= 0 (0: only after the last step)");
  s.require(c.max_prompts >= 0, "max_prompts", "must be >= 0 (0: all)");
  s.require(c.max_new_tokens >= 1, "max_new_tokens", "must be >= 1");
  s.require(c.temperature >= 0, "temperature", "must be >= 0 (0: greedy)");
  return c;
}

// A config without a pipeline section runs the default graph; without
// held-out prompts, it runs it without the eval node.
void drop_default_eval_without_prompts(Config& c) {
  if (!c.pipeline.from_default || !c.eval.prompts.empty()) return;
  std::vector<std::string> dropped;
  std::erase_if(c.pipeline.nodes, [&](const NodeDecl& n) {
    if (n.type.rfind("eval.", 0) != 0) return false;
    dropped.push_back(n.name);
    return true;
  });
  std::erase_if(c.pipeline.edges, [&](const EdgeDecl& e) {
    const std::string to = e.to.substr(0, e.to.find('.'));
    return std::find(dropped.begin(), dropped.end(), to) != dropped.end();
  });
}

// An eval node needs held-out prompts; say so at the node.
void check_eval_nodes(const Config& c) {
  for (size_t i = 0; i < c.pipeline.nodes.size(); ++i) {
    const auto& node = c.pipeline.nodes[i];
    if (node.type.rfind("eval.", 0) != 0 || !c.eval.prompts.empty()) continue;
    throw ConfigError(node.mark, "pipeline.nodes[" + std::to_string(i) + "]",
                      "node '" + node.name + "' (" + node.type +
                          ") measures tau on held-out prompts, but eval.prompts is empty: set eval.prompts to a "
                          "JSONL file of prompts that are not in the training data");
  }
}

MetricsConfig read_metrics(YamlSection s) {
  MetricsConfig c;
  s.read("sinks", c.sinks).read("console_every", c.console_every);
  s.read("drain_window_steps", c.drain_window_steps).read("drain_horizon_steps", c.drain_horizon_steps);
  s.finish();
  for (const auto& sink : c.sinks) require_one_of(s, "sinks", sink, {"jsonl", "console", "tensorboard"});
  s.require(c.console_every >= 1, "console_every", "must be >= 1");
  s.require(c.drain_window_steps >= 3, "drain_window_steps", "must be >= 3 (points in the occupancy trend)");
  s.require(c.drain_horizon_steps >= 1, "drain_horizon_steps", "must be >= 1");
  return c;
}

DevicesConfig read_devices(YamlSection s) {
  DevicesConfig c;
  s.read("target", c.target).read("drafter", c.drafter);
  s.finish();
  auto valid = [](const std::string& d) { return d == "cpu" || d.rfind("cuda", 0) == 0; };
  s.require(!c.target.empty(), "target", "needs at least one device");
  for (const auto& d : c.target) s.require(valid(d), "target", "'" + d + "' is not a device (cpu, cuda, cuda:N)");
  s.require(valid(c.drafter), "drafter", "'" + c.drafter + "' is not a device (cpu, cuda, cuda:N)");
  return c;
}

DistributedConfig read_distributed(YamlSection s) {
  DistributedConfig c;
  s.read("backend", c.backend).read("timeout_s", c.timeout_s).read("bucket_mb", c.bucket_mb);
  s.finish();
  require_one_of(s, "backend", c.backend, {"auto", "gloo", "nccl"});
  s.require(c.timeout_s >= 1, "timeout_s", "must be >= 1 second (a lost rank is noticed within it)");
  s.require(c.bucket_mb > 0 && c.bucket_mb <= 4096, "bucket_mb", "must lie in (0, 4096]");
  return c;
}

std::vector<FaultDecl> read_faults(YamlSection& root) {
  std::vector<FaultDecl> out;
  YAML::Node list = root.raw("faults");
  if (!list || list.IsNull()) return out;
  root.require(list.IsSequence(), "faults", "expected a list of faults");
  for (size_t i = 0; i < list.size(); ++i) {
    YamlSection s = root.child(list[i], "faults[" + std::to_string(i) + "]");
    FaultDecl f;
    f.mark = mark_for(list[i], s.path(), *root.origins());
    s.read("kind", f.kind).read("node", f.node).read("step", f.step).read("factor", f.factor).read("seconds", f.seconds)
        .read("rank", f.rank);
    s.finish();
    require_one_of(s, "kind", f.kind, {"exception", "nan_loss", "spike", "delay", "corrupt_weights", "stop"});
    s.require(f.step >= 0, "step", "must be >= 0");
    s.require(f.kind == "nan_loss" || f.kind == "spike" || f.kind == "corrupt_weights" || f.kind == "stop" ||
                  !f.node.empty(),
              "node", "names the node to fault");
    // Every rank stops at the same step, or the others would wait for it.
    s.require(f.kind != "stop" || f.rank == -1, "rank", "a stop ends the run on every rank; leave rank out");
    s.require(f.factor > 0, "factor", "must be > 0");
    s.require(f.seconds >= 0, "seconds", "must be >= 0");
    s.require(f.rank >= -1, "rank", "must be a rank (0, 1, ...) or -1 for every rank");
    out.push_back(std::move(f));
  }
  return out;
}

PipelineConfig default_pipeline() {
  auto origins = std::make_shared<Origins>();
  origins->file = "<default>";
  YAML::Node root = YAML::Load(default_config_yaml());
  PipelineConfig p = parse_pipeline(YamlSection(root["pipeline"], "pipeline", origins));
  p.from_default = true;
  return p;
}

}  // namespace

Config read_config(YamlSection root) {
  Config c;
  c.run = read_run(root.section("run"));
  c.model = read_model(root.section("model"));
  c.data = read_data(root.section("data"));
  c.train = read_train(root.section("train"));
  c.guard = read_guard(root.section("guard"));
  c.checkpoint = read_checkpoint(root.section("checkpoint"));
  c.eval = read_eval(root.section("eval"));
  c.metrics = read_metrics(root.section("metrics"));
  c.devices = read_devices(root.section("devices"));
  c.distributed = read_distributed(root.section("distributed"));
  c.faults = read_faults(root);
  c.pipeline = root.has("pipeline") ? parse_pipeline(root.section("pipeline")) : default_pipeline();
  root.finish();
  drop_default_eval_without_prompts(c);
  check_eval_nodes(c);
  return c;
}

}  // namespace dflow::config
