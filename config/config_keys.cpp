// Every key of the run config, declared once (config/keys.hpp): path,
// member, whether a resume may change it, one line of documentation and its
// check. The default is the member's initialiser in config/config.hpp.
// Checks that span several keys follow the table.
#include "config/config_keys.hpp"

#include <algorithm>

namespace dflow::config {

namespace {

constexpr auto must_match = OnResume::must_match;
constexpr auto may_change = OnResume::may_change;
const std::vector<std::string> kDtypes{"float32", "bfloat16"};

template <class T>
Check<T> at_least(T minimum, std::string message) {
  return must<T>([minimum](const T& v) { return v >= minimum; }, std::move(message));
}
template <class T>
Check<T> above(T minimum, std::string message) {
  return must<T>([minimum](const T& v) { return v > minimum; }, std::move(message));
}
Check<double> fraction(std::string message) {
  return must<double>([](double v) { return v >= 0 && v < 1; }, std::move(message));
}
bool is_device(const std::string& d) { return d == "cpu" || d.rfind("cuda", 0) == 0; }

KeySet<Config> declare() {
  KeySet<Config> k;
  // run
  k.add("run.name", [](Config& c) -> auto& { return c.run.name; }, may_change, "a label for the run",
        must<std::string>([](const std::string& v) { return !v.empty(); }, "must not be empty"));
  k.add("run.out_dir", [](Config& c) -> auto& { return c.run.out_dir; }, may_change,
        "where metrics, checkpoints and the report go",
        must<std::string>([](const std::string& v) { return !v.empty(); }, "must not be empty"));
  k.add("run.seed", [](Config& c) -> auto& { return c.run.seed; }, must_match,
        "seeds the batch plan, anchor sampling and initialisation");
  k.add("run.threads", [](Config& c) -> auto& { return c.run.threads; }, may_change,
        "TBB arena size for the graph",
        must<int>([](int v) { return v >= 1 && v <= 256; }, "must lie in [1, 256]"));
  k.add("run.torch_threads", [](Config& c) -> auto& { return c.run.torch_threads; }, may_change,
        "LibTorch intra-op threads per op",
        must<int>([](int v) { return v >= 1 && v <= 256; }, "must lie in [1, 256]"));
  k.add("run.log_level", [](Config& c) -> auto& { return c.run.log_level; }, may_change,
        "trace, debug, info, warn, error or off", one_of({"trace", "debug", "info", "warn", "error", "off"}));
  k.add("run.max_steps", [](Config& c) -> auto& { return c.run.max_steps; }, may_change,
        "stop after this many optimizer steps in total (0: all epochs); sizes the LR schedule when it ends the run early",
        at_least<int64_t>(0, "must be >= 0 (0: run all epochs)"));
  // model
  k.add("model.target.path", [](Config& c) -> auto& { return c.model.target.path; }, must_match,
        "the target in Hugging Face layout (config.json, *.safetensors)",
        must<std::string>([](const std::string& v) { return !v.empty(); },
                          "must name a Hugging Face checkpoint directory"));
  k.add("model.target.dtype", [](Config& c) -> auto& { return c.model.target.dtype; }, must_match,
        "the target's compute dtype: float32 or bfloat16", one_of(kDtypes));
  k.add("model.target.mxfp4_experts", [](Config& c) -> auto& { return c.model.target.mxfp4_experts; }, may_change,
        "a gpt-oss checkpoint's MXFP4 experts: resident (kept packed, each expert dequantized while it computes; "
        "gpt-oss-120b fits one GPU) or dequantize (once, on load, into model.target.dtype: faster, about 3.8x the "
        "expert memory in bf16); the outputs are the same bits either way",
        one_of({"resident", "dequantize"}));
  k.add("model.drafter.kind", [](Config& c) -> auto& { return c.model.drafter.kind; }, must_match,
        "the drafter kind: dflash (the backbone alone) or another registered kind, whose own params are keys of "
        "model.drafter beside this one (the reference's \"Drafter kinds\" lists each kind's)",
        must<std::string>([](const std::string& v) { return !v.empty(); }, "must name a drafter kind"));
  k.open(
      "model.drafter",
      [](YamlSection& section, Config& c) {
        c.model.drafter.params.reset(section.take_unread());
        c.model.drafter.origins = section.origins();
        c.model.drafter.kind_mark = section.mark_of("kind");
      },
      [](const Config& c) { return c.model.drafter.params; });
  k.add("model.drafter.num_layers", [](Config& c) -> auto& { return c.model.drafter.num_layers; }, must_match,
        "draft layers", at_least(1, "must be >= 1"));
  k.add("model.drafter.block_size", [](Config& c) -> auto& { return c.model.drafter.block_size; }, must_match,
        "tokens drafted per block, the anchor included",
        at_least(2, "must be >= 2 (an anchor plus at least one drafted token)"));
  k.add("model.drafter.num_target_features", [](Config& c) -> auto& { return c.model.drafter.num_target_features; },
        must_match, "target layers read (0: as many as draft layers)",
        at_least(0, "must be >= 0 (0: as many as draft layers)"));
  k.add("model.drafter.target_layer_ids", [](Config& c) -> auto& { return c.model.drafter.target_layer_ids; },
        must_match,
        "the target layers read (empty: the DFlash formula, made to rise below the last layer where it repeats one)",
        must<std::vector<int>>(
            [](const std::vector<int>& ids) {
              return std::is_sorted(ids.begin(), ids.end()) &&
                     std::all_of(ids.begin(), ids.end(), [](int v) { return v >= 0; });
            },
            "must be non-negative and sorted"));
  k.add("model.drafter.mask_token_id", [](Config& c) -> auto& { return c.model.drafter.mask_token_id; }, must_match,
        "the mask token's id (-1: the target config's)",
        at_least<int64_t>(-1, "must be a token id, or -1 for the target's"));
  k.add("model.drafter.dtype", [](Config& c) -> auto& { return c.model.drafter.dtype; }, must_match,
        "the drafter's parameter dtype: float32 or bfloat16 (fp32 masters)", one_of(kDtypes));
  k.add("model.drafter.layer_types", [](Config& c) -> auto& { return c.model.drafter.layer_types; }, must_match,
        "per draft layer: full_attention or sliding_attention (empty: all full)",
        each_one_of({"full_attention", "sliding_attention"}));
  k.add("model.drafter.sliding_window", [](Config& c) -> auto& { return c.model.drafter.sliding_window; },
        must_match, "positions a sliding layer's query sees, its own included (0: none)",
        at_least<int64_t>(0, "must be >= 0 (0: no sliding layers)"));
  k.add("model.drafter.intermediate_size", [](Config& c) -> auto& { return c.model.drafter.intermediate_size; },
        must_match,
        "the draft layers' MLP width (0: the target's intermediate_size, or 3 x its hidden_size when its config has "
        "no dense one, as a mixture of experts' text config)",
        at_least<int64_t>(0, "must be >= 0 (0: from the target)"));
  // data
  k.add("data.train", [](Config& c) -> auto& { return c.data.train; }, must_match,
        "prepared shard directories (dflow prepare)",
        must<std::vector<std::string>>([](const auto& v) { return !v.empty(); },
                                       "needs at least one prepared data directory"));
  k.add("data.max_length", [](Config& c) -> auto& { return c.data.max_length; }, must_match,
        "longest sample in tokens", at_least(2, "must be >= 2"));
  k.add("data.buckets", [](Config& c) -> auto& { return c.data.buckets; }, must_match,
        "bucket lengths of pad_bucket.token_budget, increasing",
        [](const std::vector<int>& b) -> std::optional<std::string> {
          if (b.empty()) return "needs at least one bucket length";
          if (!std::is_sorted(b.begin(), b.end()) || std::adjacent_find(b.begin(), b.end()) != b.end())
            return "must be strictly increasing";
          if (b.front() < 2) return "bucket lengths must be >= 2";
          return std::nullopt;
        });
  k.add("data.tokens_per_batch", [](Config& c) -> auto& { return c.data.tokens_per_batch; }, must_match,
        "padded-token budget of one micro-batch");
  // train
  k.add("train.epochs", [](Config& c) -> auto& { return c.train.epochs; }, must_match,
        "passes over the data (the schedule spans them)", at_least(1, "must be >= 1"));
  k.add("train.grad_accum", [](Config& c) -> auto& { return c.train.grad_accum; }, must_match,
        "micro-batches per optimizer step and rank", at_least(1, "must be >= 1"));
  k.add("train.lr", [](Config& c) -> auto& { return c.train.lr; }, must_match, "peak learning rate",
        above(0.0, "must be > 0"));
  k.add("train.warmup_ratio", [](Config& c) -> auto& { return c.train.warmup_ratio; }, must_match,
        "share of the schedule spent warming up", fraction("must lie in [0, 1)"));
  k.add("train.schedule", [](Config& c) -> auto& { return c.train.schedule; }, must_match,
        "cosine, linear or constant after warmup", one_of({"cosine", "linear", "constant"}));
  k.add("train.weight_decay", [](Config& c) -> auto& { return c.train.weight_decay; }, must_match,
        "AdamW weight decay", at_least(0.0, "must be >= 0"));
  k.add("train.grad_clip", [](Config& c) -> auto& { return c.train.grad_clip; }, must_match,
        "global grad-norm clip (0: none)", at_least(0.0, "must be >= 0 (0: no clipping)"));
  k.add("train.adam_beta1", [](Config& c) -> auto& { return c.train.adam_beta1; }, must_match, "AdamW beta1",
        fraction("must lie in [0, 1)"));
  k.add("train.adam_beta2", [](Config& c) -> auto& { return c.train.adam_beta2; }, must_match, "AdamW beta2",
        fraction("must lie in [0, 1)"));
  k.add("train.adam_eps", [](Config& c) -> auto& { return c.train.adam_eps; }, must_match, "AdamW epsilon",
        above(0.0, "must be > 0"));
  k.add("train.anchors_per_sequence", [](Config& c) -> auto& { return c.train.anchors_per_sequence; }, must_match,
        "DFlash anchors sampled per sample", at_least(1, "must be >= 1"));
  k.add("train.loss_decay_gamma", [](Config& c) -> auto& { return c.train.loss_decay_gamma; }, must_match,
        "position weight exp(-(k-1)/gamma) of the loss", above(0.0, "must be > 0"));
  // guard: may change, so that a halted run can resume under another policy
  k.add("guard.policy", [](Config& c) -> auto& { return c.guard.policy; }, may_change,
        "none, halt, skip, quarantine or rollback", one_of({"none", "halt", "skip", "quarantine", "rollback"}));
  k.add("guard.window", [](Config& c) -> auto& { return c.guard.window; }, may_change,
        "applied steps in the rolling baseline", at_least(4, "must be >= 4 steps"));
  k.add("guard.z_threshold", [](Config& c) -> auto& { return c.guard.z_threshold; }, may_change,
        "a spike is above median + z * robust scale", above(0.0, "must be > 0"));
  k.add("guard.warmup_steps", [](Config& c) -> auto& { return c.guard.warmup_steps; }, may_change,
        "no spike detection before this many applied steps", at_least(0, "must be >= 0"));
  k.add("guard.per_bucket", [](Config& c) -> auto& { return c.guard.per_bucket; }, may_change,
        "also a loss baseline per bucket length");
  k.add("guard.cliff_z_threshold", [](Config& c) -> auto& { return c.guard.cliff_z_threshold; }, may_change,
        "rollback: a cliff step's loss exceeds median + this * scale", above(0.0, "must be > 0"));
  k.add("guard.cliff_steps", [](Config& c) -> auto& { return c.guard.cliff_steps; }, may_change,
        "rollback: consecutive cliff steps that trigger a rollback", at_least(1, "must be >= 1"));
  k.add("guard.snapshot_every", [](Config& c) -> auto& { return c.guard.snapshot_every; }, may_change,
        "rollback: steps between in-memory snapshots", at_least(1, "must be >= 1"));
  k.add("guard.max_rollbacks", [](Config& c) -> auto& { return c.guard.max_rollbacks; }, may_change,
        "rollback: cliffs rolled back before the next one halts", at_least(0, "must be >= 0"));
  // checkpoint
  k.add("checkpoint.every_steps", [](Config& c) -> auto& { return c.checkpoint.every_steps; }, may_change,
        "steps between checkpoints (0: only at the end)",
        at_least(0, "must be >= 0 (0: only at the end)"));
  k.add("checkpoint.keep", [](Config& c) -> auto& { return c.checkpoint.keep; }, may_change,
        "newest step checkpoints kept", at_least(1, "must be >= 1"));
  k.add("checkpoint.on_write_error", [](Config& c) -> auto& { return c.checkpoint.on_write_error; }, may_change,
        "a checkpoint that cannot be written: halt, or continue with an alarm", one_of({"halt", "continue"}));
  // eval
  k.add("eval.every_steps", [](Config& c) -> auto& { return c.eval.every_steps; }, may_change,
        "steps between evaluations (0: only after the last step)",
        at_least(0, "must be >= 0 (0: only after the last step)"));
  k.add("eval.prompts", [](Config& c) -> auto& { return c.eval.prompts; }, may_change,
        "JSONL of held-out prompts (never training prompts)");
  k.add("eval.max_prompts", [](Config& c) -> auto& { return c.eval.max_prompts; }, may_change,
        "prompts evaluated (0: all)", at_least(0, "must be >= 0 (0: all)"));
  k.add("eval.max_new_tokens", [](Config& c) -> auto& { return c.eval.max_new_tokens; }, may_change,
        "tokens generated per prompt", at_least(1, "must be >= 1"));
  k.add("eval.temperature", [](Config& c) -> auto& { return c.eval.temperature; }, may_change,
        "0: greedy; > 0: speculative sampling", at_least(0.0, "must be >= 0 (0: greedy)"));
  k.add("eval.seed", [](Config& c) -> auto& { return c.eval.seed; }, may_change, "sampling seed");
  k.add("eval.expected_acceptance", [](Config& c) -> auto& { return c.eval.expected_acceptance; }, may_change,
        "step records carry the acceptance per slot under the target's distribution (sum min(p, q)) and the tau "
        "it implies with any loss (a loss that reads the target's distribution always does): the feature source "
        "gives the target's last hidden state with every batch");
  // metrics
  k.add("metrics.sinks", [](Config& c) -> auto& { return c.metrics.sinks; }, may_change,
        "jsonl, console, tensorboard", each_one_of({"jsonl", "console", "tensorboard"}));
  k.add("metrics.console_every", [](Config& c) -> auto& { return c.metrics.console_every; }, may_change,
        "console progress line every N steps", at_least(1, "must be >= 1"));
  k.add("metrics.drain_window_steps", [](Config& c) -> auto& { return c.metrics.drain_window_steps; }, may_change,
        "steps in an edge's occupancy trend", at_least(3, "must be >= 3 (points in the occupancy trend)"));
  k.add("metrics.drain_horizon_steps", [](Config& c) -> auto& { return c.metrics.drain_horizon_steps; }, may_change,
        "alarm when the trend empties an edge within this many steps", at_least(1, "must be >= 1"));
  // devices
  k.add("devices.target", [](Config& c) -> auto& { return c.devices.target; }, may_change,
        "one device per target_forward replica",
        [](const std::vector<std::string>& devices) -> std::optional<std::string> {
          if (devices.empty()) return "needs at least one device";
          for (const auto& d : devices)
            if (!is_device(d)) return "'" + d + "' is not a device (cpu, cuda, cuda:N)";
          return std::nullopt;
        });
  k.add("devices.drafter", [](Config& c) -> auto& { return c.devices.drafter; }, may_change, "the drafter's device",
        [](const std::string& d) -> std::optional<std::string> {
          if (is_device(d)) return std::nullopt;
          return "'" + d + "' is not a device (cpu, cuda, cuda:N)";
        });
  // distributed
  k.add("distributed.backend", [](Config& c) -> auto& { return c.distributed.backend; }, may_change,
        "auto (nccl when the drafter is on CUDA, else gloo), gloo or nccl", one_of({"auto", "gloo", "nccl"}));
  k.add("distributed.timeout_s", [](Config& c) -> auto& { return c.distributed.timeout_s; }, may_change,
        "a collective waiting longer fails, naming the lost rank",
        at_least(1.0, "must be >= 1 second (a lost rank is noticed within it)"));
  k.add("distributed.bucket_mb", [](Config& c) -> auto& { return c.distributed.bucket_mb; }, may_change,
        "gradients are all-reduced in buckets of about this size",
        must<double>([](double v) { return v > 0 && v <= 4096; }, "must lie in (0, 4096]"));
  // Keys that moved, for configs written for an older dflow.
  k.moved("data.batch_size",
          "the batching node's params.batch_size: pipeline.nodes: - {name: pad, type: pad_bucket.fixed_batch, "
          "params: {batch_size: 8}}");
  return k;
}

}  // namespace

const KeySet<Config>& config_keys() {
  static const KeySet<Config> keys = declare();
  return keys;
}

void check_across_keys(const Config& c, const std::map<std::string, YamlSection>& sections) {
  const auto& drafter = sections.at("model.drafter");
  const auto& dr = c.model.drafter;
  drafter.require(dr.target_layer_ids.empty() || dr.num_target_features == 0 ||
                      dr.num_target_features == static_cast<int>(dr.target_layer_ids.size()),
                  "num_target_features", "disagrees with the number of target_layer_ids");
  if (!dr.layer_types.empty())
    drafter.require(dr.layer_types.size() == static_cast<size_t>(dr.num_layers), "layer_types",
                    "has " + std::to_string(dr.layer_types.size()) + " entries but num_layers is " +
                        std::to_string(dr.num_layers) + ": give one type per draft layer");
  if (std::find(dr.layer_types.begin(), dr.layer_types.end(), "sliding_attention") != dr.layer_types.end()) {
    drafter.require(dr.sliding_window > 0, "sliding_window",
                    "is " + std::to_string(dr.sliding_window) +
                        ", but layer_types has sliding_attention layers: a window of 0 would let them see nothing; "
                        "give the window in positions (e.g. 2048)");
    // Within a block the public implementations disagree on a window
    // shorter than the block (one-sided or two-sided); dflow keeps the
    // block whole and asks for a window that covers it.
    drafter.require(dr.sliding_window >= dr.block_size, "sliding_window",
                    "is " + std::to_string(dr.sliding_window) + ", shorter than block_size (" +
                        std::to_string(dr.block_size) + "): a window must cover at least one whole block");
  } else {
    // A window with no layer to apply it to would be silently ignored.
    drafter.require(dr.sliding_window == 0, "sliding_window",
                    "is set but no layer slides: list the sliding layers in layer_types (e.g. [sliding_attention, "
                    "full_attention]), or leave sliding_window at 0");
  }
  const auto& data = sections.at("data");
  data.require(c.data.buckets.back() >= c.data.max_length, "buckets",
               "the largest bucket (" + std::to_string(c.data.buckets.back()) + ") must hold max_length (" +
                   std::to_string(c.data.max_length) + ")");
  data.require(c.data.tokens_per_batch >= c.data.buckets.back(), "tokens_per_batch",
               "must fit at least one sample of the largest bucket (" + std::to_string(c.data.buckets.back()) + ")");
  // A cliff is judged against the baseline of the steps before it: a window
  // no longer than the cliff would let the cliff's own losses become the
  // baseline before it is detected.
  if (c.guard.policy == "rollback")
    sections.at("guard").require(c.guard.window > 2 * c.guard.cliff_steps, "window",
                                 "must be > 2 * guard.cliff_steps (" + std::to_string(2 * c.guard.cliff_steps) +
                                     ") under policy rollback, so that a cliff cannot become its own baseline");
}

}  // namespace dflow::config

namespace dflow::config {

std::string config_reference_markdown() {
  std::string out = "| key | type | default | on `--resume` | what it sets |\n| --- | --- | --- | --- | --- |\n";
  for (const auto& k : config_keys().docs())
    out += "| `" + k.name + "` | " + k.type + " | `" + k.default_text + "` | " +
           (k.on_resume == OnResume::may_change ? "may change" : "must match") + " | " + k.doc + " |\n";
  return out;
}

}  // namespace dflow::config
