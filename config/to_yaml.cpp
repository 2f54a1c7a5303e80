#include <yaml-cpp/yaml.h>

#include <charconv>

#include "config/config.hpp"

namespace dflow::config {

namespace {
// Shortest text that reads back to the same double ("0.003", not
// "0.0030000000000000001"), so resolved configs and their diffs read well.
std::string num(double v) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  std::string text(buffer, end);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";  // stays a float in YAML
  return text;
}

template <class T>
void flow_list(YAML::Emitter& out, const char* key, const std::vector<T>& values) {
  out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const auto& v : values) out << v;
  out << YAML::EndSeq;
}

void emit_pipeline(YAML::Emitter& out, const PipelineConfig& p) {
  out << YAML::Key << "pipeline" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "nodes" << YAML::Value << YAML::BeginSeq;
  for (const auto& n : p.nodes) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value << n.name << YAML::Key << "type"
        << YAML::Value << n.type;
    if (n.replicas != 1) out << YAML::Key << "replicas" << YAML::Value << n.replicas;
    if (n.params && !n.params.IsNull()) out << YAML::Key << "params" << YAML::Value << n.params;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::Key << "edges" << YAML::Value << YAML::BeginSeq;
  for (const auto& e : p.edges) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "from" << YAML::Value << e.from << YAML::Key << "to"
        << YAML::Value << e.to << YAML::Key << "capacity" << YAML::Value << e.capacity;
    if (e.token) out << YAML::Key << "token" << YAML::Value << true;
    if (e.initial) out << YAML::Key << "initial" << YAML::Value << e.initial;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
}
}  // namespace

std::string to_yaml(const Config& c) {
  YAML::Emitter out;
  out.SetDoublePrecision(17);
  out << YAML::BeginMap;
  out << YAML::Key << "run" << YAML::Value << YAML::BeginMap << YAML::Key << "name" << YAML::Value << c.run.name
      << YAML::Key << "out_dir" << YAML::Value << c.run.out_dir << YAML::Key << "seed" << YAML::Value << c.run.seed
      << YAML::Key << "threads" << YAML::Value << c.run.threads << YAML::Key << "torch_threads" << YAML::Value
      << c.run.torch_threads << YAML::Key << "log_level" << YAML::Value << c.run.log_level << YAML::Key
      << "max_steps" << YAML::Value << c.run.max_steps << YAML::EndMap;

  const auto& d = c.model.drafter;
  out << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "target" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "path" << YAML::Value
      << c.model.target.path << YAML::Key << "dtype" << YAML::Value << c.model.target.dtype << YAML::EndMap;
  out << YAML::Key << "drafter" << YAML::Value << YAML::BeginMap << YAML::Key << "num_layers" << YAML::Value
      << d.num_layers << YAML::Key << "block_size" << YAML::Value << d.block_size << YAML::Key
      << "num_target_features" << YAML::Value << d.num_target_features;
  flow_list(out, "target_layer_ids", d.target_layer_ids);
  out << YAML::Key << "mask_token_id" << YAML::Value << d.mask_token_id << YAML::Key << "dtype" << YAML::Value
      << d.dtype << YAML::EndMap << YAML::EndMap;

  out << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  flow_list(out, "train", c.data.train);
  out << YAML::Key << "max_length" << YAML::Value << c.data.max_length;
  flow_list(out, "buckets", c.data.buckets);
  out << YAML::Key << "tokens_per_batch" << YAML::Value << c.data.tokens_per_batch << YAML::EndMap;

  const auto& t = c.train;
  out << YAML::Key << "train" << YAML::Value << YAML::BeginMap << YAML::Key << "epochs" << YAML::Value << t.epochs
      << YAML::Key << "grad_accum" << YAML::Value << t.grad_accum << YAML::Key << "lr" << YAML::Value << num(t.lr)
      << YAML::Key << "warmup_ratio" << YAML::Value << num(t.warmup_ratio) << YAML::Key << "schedule" << YAML::Value
      << t.schedule << YAML::Key << "weight_decay" << YAML::Value << num(t.weight_decay) << YAML::Key << "grad_clip"
      << YAML::Value << num(t.grad_clip) << YAML::Key << "adam_beta1" << YAML::Value << num(t.adam_beta1) << YAML::Key
      << "adam_beta2" << YAML::Value << num(t.adam_beta2) << YAML::Key << "adam_eps" << YAML::Value << num(t.adam_eps)
      << YAML::Key << "anchors_per_sequence" << YAML::Value << t.anchors_per_sequence << YAML::Key
      << "loss_decay_gamma" << YAML::Value << num(t.loss_decay_gamma) << YAML::EndMap;

  out << YAML::Key << "guard" << YAML::Value << YAML::BeginMap << YAML::Key << "policy" << YAML::Value
      << c.guard.policy << YAML::Key << "window" << YAML::Value << c.guard.window << YAML::Key << "z_threshold"
      << YAML::Value << num(c.guard.z_threshold) << YAML::Key << "warmup_steps" << YAML::Value << c.guard.warmup_steps
      << YAML::Key << "per_bucket" << YAML::Value << c.guard.per_bucket << YAML::Key << "cliff_z_threshold"
      << YAML::Value << num(c.guard.cliff_z_threshold) << YAML::Key << "cliff_steps" << YAML::Value
      << c.guard.cliff_steps << YAML::Key << "snapshot_every" << YAML::Value << c.guard.snapshot_every << YAML::Key
      << "max_rollbacks" << YAML::Value << c.guard.max_rollbacks << YAML::EndMap;
  out << YAML::Key << "checkpoint" << YAML::Value << YAML::BeginMap << YAML::Key << "every_steps" << YAML::Value
      << c.checkpoint.every_steps << YAML::Key << "keep" << YAML::Value << c.checkpoint.keep << YAML::Key
      << "on_write_error" << YAML::Value << c.checkpoint.on_write_error << YAML::EndMap;
  out << YAML::Key << "eval" << YAML::Value << YAML::BeginMap << YAML::Key << "every_steps" << YAML::Value
      << c.eval.every_steps << YAML::Key << "prompts" << YAML::Value << c.eval.prompts << YAML::Key << "max_prompts"
      << YAML::Value << c.eval.max_prompts << YAML::Key << "max_new_tokens" << YAML::Value << c.eval.max_new_tokens
      << YAML::Key << "temperature" << YAML::Value << num(c.eval.temperature) << YAML::Key << "seed" << YAML::Value
      << c.eval.seed << YAML::EndMap;
  out << YAML::Key << "metrics" << YAML::Value << YAML::BeginMap;
  flow_list(out, "sinks", c.metrics.sinks);
  out << YAML::Key << "console_every" << YAML::Value << c.metrics.console_every;
  out << YAML::Key << "drain_window_steps" << YAML::Value << c.metrics.drain_window_steps;
  out << YAML::Key << "drain_horizon_steps" << YAML::Value << c.metrics.drain_horizon_steps << YAML::EndMap;
  out << YAML::Key << "devices" << YAML::Value << YAML::BeginMap;
  flow_list(out, "target", c.devices.target);
  out << YAML::Key << "drafter" << YAML::Value << c.devices.drafter << YAML::EndMap;
  out << YAML::Key << "distributed" << YAML::Value << YAML::BeginMap << YAML::Key << "backend" << YAML::Value
      << c.distributed.backend << YAML::Key << "timeout_s" << YAML::Value << num(c.distributed.timeout_s) << YAML::Key
      << "bucket_mb" << YAML::Value << num(c.distributed.bucket_mb) << YAML::EndMap;
  if (!c.faults.empty()) {
    out << YAML::Key << "faults" << YAML::Value << YAML::BeginSeq;
    for (const auto& f : c.faults)
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "kind" << YAML::Value << f.kind << YAML::Key << "node"
          << YAML::Value << f.node << YAML::Key << "step" << YAML::Value << f.step << YAML::Key << "factor"
          << YAML::Value << num(f.factor) << YAML::Key << "seconds" << YAML::Value << num(f.seconds) << YAML::Key << "rank" << YAML::Value << f.rank
          << YAML::EndMap;
    out << YAML::EndSeq;
  }
  emit_pipeline(out, c.pipeline);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace dflow::config
