#pragma once
// Typed configuration of a dflow run (docs/configuration.md "Sections"). Every section has a
// struct here with its defaults (docs/reference/config.md); load_config() reads YAML (or the
// embedded default), applies --set overrides and validates with file:line:column.
#include <cstdint>
#include <string>
#include <vector>

#include "config/pipeline.hpp"

namespace dflow::config {

struct RunConfig {
  std::string name = "demo";
  std::string out_dir = "runs/demo";
  uint64_t seed = 1234;
  int threads = 2;            // TBB arena size for the graph
  int torch_threads = 1;      // LibTorch intra-op threads per op
  std::string log_level = "info";
  int64_t max_steps = 0;      // stop after this many optimizer steps in total (0: all epochs)
};

struct TargetConfig {
  std::string path = "runs/demo/target";  // HF layout: config.json + *.safetensors
  std::string dtype = "float32";          // float32 | bfloat16
  std::string mxfp4_experts = "resident";  // resident | dequantize (gpt-oss's MXFP4 experts)
};

struct DrafterConfig {
  // The drafter kind (drafter/kinds/): dflash (the backbone alone), dspark, ...
  std::string kind = "dflash";
  // The kind's own params: the keys of model.drafter beside the declared
  // ones, as given (the kind declares, reads and checks them, outside
  // config/: nodes/drafter_kind_choice.hpp), and the origins their errors name.
  YAML::Node params{YAML::NodeType::Map};
  std::shared_ptr<const Origins> origins;
  SourceMark kind_mark;  // where `kind` was given (the section's mark when it was not)
  int num_layers = 1;
  int block_size = 16;
  int num_target_features = 0;          // 0: as many as draft layers (public DFlash default)
  std::vector<int> target_layer_ids;    // empty: the DFlash formula
  int64_t mask_token_id = -1;           // -1: the target config's mask token (tiny targets carry one)
  std::string dtype = "float32";
  // Per draft layer "full_attention" or "sliding_attention" (empty: all
  // full); a sliding layer sees the last sliding_window positions of context.
  std::vector<std::string> layer_types;
  int64_t sliding_window = 0;           // 0: none (every sliding layer needs one)
  // The draft layers' MLP width; 0: the target's intermediate_size, or 3 x
  // hidden_size when its config has none (a mixture of experts' text config).
  int64_t intermediate_size = 0;
};

struct ModelConfig {
  TargetConfig target;
  DrafterConfig drafter;
};

struct DataConfig {
  std::vector<std::string> train{"runs/demo/data"};
  int max_length = 512;
  std::vector<int> buckets{64, 128, 256, 512};
  int64_t tokens_per_batch = 4096;  // padded-token budget of one micro-batch (pad_bucket.token_budget)
};

struct TrainConfig {
  int epochs = 6;
  int grad_accum = 2;
  double lr = 6e-4;
  double warmup_ratio = 0.04;
  std::string schedule = "cosine";  // cosine | constant | linear
  double weight_decay = 0.0;
  double grad_clip = 1.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_eps = 1e-8;
  int anchors_per_sequence = 512;
  double loss_decay_gamma = 7.0;
};

struct GuardConfig {
  std::string policy = "skip";  // none | halt | skip | quarantine | rollback
  int window = 128;             // applied steps in the rolling baseline
  double z_threshold = 6.0;     // spike: above median + z * robust scale
  int warmup_steps = 20;        // no spike detection before this many applied steps
  bool per_bucket = false;      // also a loss baseline per bucket length (spikes of one bucket)
  // rollback: a cliff is `cliff_steps` consecutive steps whose loss exceeds
  // median + cliff_z_threshold * scale; it restores the last good in-memory
  // snapshot (taken every `snapshot_every` steps); the (max_rollbacks+1)-th
  // cliff halts.
  double cliff_z_threshold = 3.0;
  int cliff_steps = 3;
  int snapshot_every = 20;
  int max_rollbacks = 2;
};

struct CheckpointConfig {
  int every_steps = 200;  // 0: only at the end
  int keep = 3;
  // A checkpoint that cannot be written (a full disk): `halt` stops the run
  // with the error; `continue` records it (an alarm record, a warning) and
  // trains on, trying again at the next checkpoint (the run still fails at
  // the end if its last checkpoint is not saved). Either way the previous
  // checkpoints and `latest` are untouched.
  std::string on_write_error = "halt";  // halt | continue
};

// Periodic evaluation by an `eval.tau` node: speculative decoding of
// held-out prompts with a snapshot of the drafter every N steps, into the
// metrics; the snapshot with the best tau becomes checkpoints/best.
struct EvalConfig {
  int every_steps = 0;         // 0: only after the last step (and the untrained baseline)
  std::string prompts;         // JSONL of held-out prompts (never training prompts); needed by an eval node
  int max_prompts = 16;        // 0: all
  int max_new_tokens = 64;
  double temperature = 0.0;    // 0: greedy; > 0: speculative sampling (target distribution kept exactly)
  uint64_t seed = 0;           // sampling seed (per prompt: hash(seed, prompt index))
  // Step records' acceptance per slot under the target's own distribution
  // (sum min(p, q)) and the tau it implies, whatever the loss: the feature
  // source then gives the target's last hidden state with every batch.
  bool expected_acceptance = false;
};

struct MetricsConfig {
  std::vector<std::string> sinks{"jsonl", "console"};
  int console_every = 10;  // console progress line every N steps
  // Drain alarm: the least-squares trend of each edge's occupancy over the last
  // `drain_window_steps` steps; one alarm per edge when it projects the edge
  // empty within `drain_horizon_steps` steps.
  int drain_window_steps = 50;
  int drain_horizon_steps = 200;
};

struct DevicesConfig {
  std::vector<std::string> target{"cpu"};
  std::string drafter = "cpu";
};

// Data parallel over c10d (several processes, each with its own graph). Read
// only when the launcher environment (RANK, WORLD_SIZE, ...) says there are
// several ranks; a single process ignores it.
struct DistributedConfig {
  std::string backend = "auto";  // auto (nccl when the drafter is on CUDA, else gloo) | gloo | nccl
  double timeout_s = 300;        // any collective or rendezvous waiting longer fails, naming the lost rank
  double bucket_mb = 25;         // gradients are all-reduced in flat buckets of about this size
};

// Fault injection for tests and drills; empty (off) by default.
struct FaultDecl {
  std::string kind;      // exception | nan_loss | spike | delay | corrupt_weights | corrupt_init | stop
  std::string node;      // node name (exception, delay)
  int64_t step = 0;      // global optimizer step (0-based) at which it fires
  double factor = 100;   // spike: loss and gradients multiplied by this; corrupt_weights: parameters multiplied by this after the step's update; corrupt_init: every drafter tensor, the fixed ones too, when the run starts
  double seconds = 0.1;  // delay: sleep per call from `step` on
  int64_t rank = -1;     // fires on this rank only (-1: on every rank)
  SourceMark mark;
};

struct Config {
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  GuardConfig guard;
  CheckpointConfig checkpoint;
  EvalConfig eval;
  MetricsConfig metrics;
  DevicesConfig devices;
  DistributedConfig distributed;
  std::vector<FaultDecl> faults;
  PipelineConfig pipeline;
  std::string source;  // the file it came from, or "<default>"
};

// Loads `path` (empty: the embedded default) and applies overrides of the form
// "section.key=value". Throws ConfigError naming file:line:column and key.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
Config load_config_text(const std::string& yaml_text, const std::string& source_name,
                        const std::vector<std::string>& overrides = {});

// The resolved configuration as YAML (round-trips through load_config_text).
std::string to_yaml(const Config& config);

// The embedded default configuration (the demo), as YAML text.
const std::string& default_config_yaml();

}  // namespace dflow::config
