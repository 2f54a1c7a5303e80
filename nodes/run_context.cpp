#include "nodes/run_context.hpp"
#include "nodes/plan_options.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "config/errors.hpp"
#include "config/log.hpp"
#include "data/feature_cache.hpp"
#include "graph/description.hpp"
#include "nodes/drafter_kind_choice.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/registry.hpp"
#include "text/dataset_tokenizer.hpp"
#include "train/adamw.hpp"
#include "train/devices.hpp"
#include "train/trained_against.hpp"

namespace dflow::nodes {

namespace {

// The paths the config names, checked before anything opens them: a wrong
// one is a configuration error naming its key (exit 2), not a loader's failure.
const config::Config& with_existing_paths(const config::Config& config) {
  if (config.data.train.empty())
    throw ConfigError("data.train is empty: list at least one directory made by dflow prepare");
  for (const fs::path dir : config.data.train)
    if (!fs::is_directory(dir))
      throw ConfigError("data.train: " + dir.string() + (fs::exists(dir) ? " is not a directory" : " does not exist") +
                        "; list directories made by dflow prepare");
  const fs::path target = config.model.target.path;
  if (!fs::is_directory(target))
    throw ConfigError("model.target.path: " + target.string() + (fs::exists(target) ? " is not a directory" : " does not exist") +
                      "; point it at the target model (Hugging Face layout: config.json and *.safetensors)");
  return config;
}

// model.drafter.target_layer_ids as the pipeline's feature source has them
// (RunHooks::feature_layers) when the key is empty; else the key's.
std::vector<int64_t> drafter_feature_layers(const config::Config& config, const graph::NodeRegistry& kinds,
                                            int64_t target_layers) {
  std::vector<int64_t> ids(config.model.drafter.target_layer_ids.begin(), config.model.drafter.target_layer_ids.end());
  if (!ids.empty()) return ids;
  for (size_t i = 0; i < config.pipeline.nodes.size(); ++i) {
    const auto& n = config.pipeline.nodes[i];
    const RunHooks* hooks = run_hooks(kinds, n.type);
    if (!hooks || !hooks->feature_layers) continue;
    const std::string key = "pipeline.nodes[" + std::to_string(i) + "].params";
    config::YamlSection params(n.params, key, config.pipeline.origins);
    try {
      return hooks->feature_layers(params, target_layers);
    } catch (const std::invalid_argument& e) {
      throw ConfigError(n.mark, key, "node '" + n.name + "' (" + n.type + "): " + e.what());
    }
  }
  return ids;
}

bool makes_features(const graph::NodeSpec& spec) {
  return std::any_of(spec.outputs.begin(), spec.outputs.end(),
                     [](const graph::PortSpec& p) { return p.type == "FeatureBatch"; });
}

// The kinds that make FeatureBatches and give the teacher, as they declare
// (RunHooks::gives_teacher): "features.cached, features.engine or target_forward".
std::string teacher_kinds(const graph::NodeRegistry& kinds) {
  std::vector<std::string> found;
  for (const auto& type : kinds.types()) {
    const RunHooks* hooks = run_hooks(kinds, type);
    if (hooks && hooks->gives_teacher && makes_features(*kinds.find(type))) found.push_back(type);
  }
  std::string out;
  for (size_t i = 0; i < found.size(); ++i) out += (i == 0 ? "" : i + 1 == found.size() ? " or " : ", ") + found[i];
  return out;
}

// A run that needs the teacher (loss: kl, tv, ...) is refused before anything loads
// when a node that makes FeatureBatches cannot give it, naming that node.
void check_teacher_sources(const config::Config& config, const graph::NodeRegistry& kinds, const std::string& because) {
  if (because.empty()) return;
  for (size_t i = 0; i < config.pipeline.nodes.size(); ++i) {
    const auto& n = config.pipeline.nodes[i];
    const graph::NodeSpec* spec = kinds.find(n.type);
    const RunHooks* hooks = run_hooks(kinds, n.type);
    if (!spec || (hooks && hooks->gives_teacher) || !makes_features(*spec)) continue;
    const bool by_key = because.rfind("eval.expected_acceptance", 0) == 0;
    const bool by_kind = because.rfind("model.drafter.kind", 0) == 0;
    throw ConfigError(n.mark, "pipeline.nodes[" + std::to_string(i) + "]",
                      "node '" + n.name + "' (" + n.type + ") makes the drafter's features but cannot give the "
                      "target's last hidden state, and " + because +
                          (by_key    ? ": use " + teacher_kinds(kinds) + ", or eval.expected_acceptance: false"
                           : by_kind ? ": use " + teacher_kinds(kinds) + ", or another model.drafter.kind"
                                     : " (that loss reads the target's own distribution): use " + teacher_kinds(kinds) +
                                           ", or loss: ce"));
  }
}

// Who needs the whole target in-process, and why: the caller's reason
// (RunOptions::whole_target_because), else the first node whose kind says so
// (RunHooks::needs_target). Nullopt: the run loads only the target's head.
struct WholeTargetNeed {
  const config::NodeDecl* node = nullptr;  // null for the caller's reason
  std::string who_and_why;                 // "node 'target' (target_forward) runs the target in-process"
};

std::optional<WholeTargetNeed> whole_target_need(const config::Config& config, const RunOptions& options) {
  if (!options.whole_target_because.empty()) return WholeTargetNeed{nullptr, options.whole_target_because};
  for (const auto& node : config.pipeline.nodes) {
    const RunHooks* hooks = run_hooks(options.node_kinds(), node.type);
    if (!hooks || !hooks->needs_target) continue;
    const std::string why = hooks->needs_target(config, node);
    if (!why.empty()) return WholeTargetNeed{&node, "node '" + node.name + "' (" + node.type + ") " + why};
  }
  return std::nullopt;
}

// The node params as the graph checks them (each kind's check_params, then
// the structure), before any hook reads them: a bad value is refused the way
// `dflow train` refuses it, naming the node, and before anything loads.
config::Config described(config::Config config, const graph::NodeRegistry& kinds) {
  (void)graph::describe(config.pipeline, kinds);
  (void)read_kind_config(config);  // model.drafter's kind and its params, before anything loads
  return config;
}

// The drafter kind's fields with what it derives from the target chosen,
// once, here (a resume keeps its checkpoint's choices): the drafter, its
// checkpoints and its exports all carry the resolved values.
nlohmann::json resolved_kind_fields(const DrafterKindChoice& kind, const target::TargetHead& head,
                                    const train::LoadedCheckpoint* resume) {
  std::optional<nlohmann::json> saved;
  if (resume && resume->drafter_config.is_object()) {
    const auto [saved_kind, fields] =
        drafter::drafter_kind_of_config(resume->drafter_config, (resume->dir / "drafter" / "config.json").string());
    if (saved_kind == kind.kind) saved = fields;
  }
  std::string why;
  try {
    nlohmann::json fields = drafter::drafter_kind(kind.kind).resolve_fields(kind.fields, head.lm_head_weight(),
                                                                            saved ? &*saved : nullptr, &why);
    if (!why.empty()) log::info("model", "drafter kind " + kind.kind + ": " + why);
    return fields;
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("model.drafter.kind ") + kind.kind + ": " + e.what());
  }
}

}  // namespace

std::string Batching::signature() const {
  const std::string params = policy->params_text(), who = type.empty() ? policy->name() : type;
  return params.empty() ? who : who + " " + params;
}

const graph::NodeRegistry& RunOptions::node_kinds() const { return registry ? *registry : default_registry(); }

Batching batching_of(const config::PipelineConfig& pipeline, const graph::NodeRegistry& kinds) {
  Batching b;
  for (size_t i = 0; i < pipeline.nodes.size(); ++i) {
    const auto& n = pipeline.nodes[i];
    const RunHooks* hooks = run_hooks(kinds, n.type);
    if (!hooks || !hooks->batching) continue;
    if (!b.node.empty())
      throw ConfigError(n.mark, "pipeline.nodes[" + std::to_string(i) + "]",
                        "node '" + n.name + "' (" + n.type + ") forms batches, but node '" + b.node + "' (" + b.type +
                        ") already does: a pipeline has one batching node");
    config::YamlSection params(n.params, "pipeline.nodes[" + std::to_string(i) + "].params", pipeline.origins);
    b.node = n.name;
    b.type = n.type;
    b.policy = hooks->batching(params);
  }
  return b;
}

namespace {

// The params two resume signatures of one node kind ("type {key: value,
// ...}") differ in: "params.dtype: float32 -> its default" (a key left out is
// at its default, config::OnResume), "" when the kinds differ or a signature
// is not such a map.
std::string differing_params(const std::string& before, const std::string& after) {
  auto split = [](const std::string& signature, std::string& type, YAML::Node& terms) {
    const auto space = signature.find(' ');
    type = signature.substr(0, space);
    try {
      terms = space == std::string::npos ? YAML::Node(YAML::NodeType::Map) : YAML::Load(signature.substr(space + 1));
    } catch (const YAML::Exception&) {
      return false;
    }
    return terms.IsMap();
  };
  std::string before_type, after_type;
  YAML::Node was, is;
  if (!split(before, before_type, was) || !split(after, after_type, is) || before_type != after_type) return "";
  auto text = [](const YAML::Node& value) {
    if (!value) return std::string("its default");
    YAML::Emitter out;
    out << YAML::Flow << value;
    return std::string(out.c_str());
  };
  const YAML::Node& from_terms = was;  // const: looking a key up adds none
  const YAML::Node& to_terms = is;
  std::vector<std::string> keys;
  for (const auto& term : to_terms) keys.push_back(term.first.as<std::string>());
  for (const auto& term : from_terms)
    if (!to_terms[term.first.as<std::string>()]) keys.push_back(term.first.as<std::string>());
  std::string out;
  for (const auto& key : keys) {
    const std::string from = text(from_terms[key]), to = text(to_terms[key]);
    if (from != to) out += (out.empty() ? "" : ", ") + ("params." + key + ": " + from + " -> " + to);
  }
  return out;
}

}  // namespace

std::map<std::string, std::string> resume_signatures(const config::PipelineConfig& pipeline,
                                                     const graph::NodeRegistry& kinds) {
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < pipeline.nodes.size(); ++i) {
    const auto& n = pipeline.nodes[i];
    const RunHooks* hooks = run_hooks(kinds, n.type);
    if (!hooks || !hooks->resume_signature) continue;
    config::YamlSection params(n.params, "pipeline.nodes[" + std::to_string(i) + "].params", pipeline.origins);
    const std::string text = hooks->resume_signature(params);
    out[n.name] = text.empty() ? n.type : n.type + " " + text;
  }
  return out;
}

std::optional<train::LoadedCheckpoint> open_resume_checkpoint(const config::Config& config, const RunOptions& options) {
  if (options.resume.empty()) return std::nullopt;
  const fs::path checkpoints_dir = fs::path(config.run.out_dir) / "checkpoints";
  auto dir = train::resolve_checkpoint(checkpoints_dir, options.resume);
  auto ckpt = train::read_checkpoint(dir);
  const auto& kinds = options.node_kinds();
  // A checkpoint of an earlier dflow chose the drafter kind on the drafter
  // node: read as model.drafter's, as this run gives it.
  config::Config saved_config = config::load_config_text(ckpt.config_yaml, (dir / "config.yaml").string());
  (void)move_node_kind_params(saved_config, kinds);
  auto differences = train::incompatible_config_keys(config::to_yaml(saved_config), config::to_yaml(config));
  // The drafter kind's params a resume must keep (the kind says which).
  const KindConfig saved_kind = read_kind_config(saved_config), now_kind = read_kind_config(config);
  if (saved_kind.kind == now_kind.kind) {
    const std::string before = kind_resume_text(saved_kind), after = kind_resume_text(now_kind);
    if (before != after)
      differences.push_back("model.drafter (kind " + now_kind.kind + "'s params): " +
                            (before.empty() ? "(defaults)" : before) + " -> " + (after.empty() ? "(defaults)" : after));
  }
  // The batching node's policy: another one plans other batches, and the
  // saved cursor would continue a different run. Then each node whose kind
  // says what of it a resume must keep (the objective, the optimizer).
  const config::PipelineConfig& saved_pipeline = saved_config.pipeline;
  const std::string saved = batching_of(saved_pipeline, kinds).signature();
  const Batching now = batching_of(config.pipeline, kinds);
  if (saved != now.signature())
    differences.push_back("pipeline.nodes." + now.node + " (the batching policy): " + saved + " -> " + now.signature());
  const auto saved_nodes = resume_signatures(saved_pipeline, kinds), now_nodes = resume_signatures(config.pipeline, kinds);
  for (const auto& [name, signature] : now_nodes) {
    const auto it = saved_nodes.find(name);
    const std::string before = it == saved_nodes.end() ? "(absent)" : it->second;
    if (before == signature) continue;
    const std::string keys = differing_params(before, signature);
    differences.push_back("pipeline.nodes." + name + ": " + before + " -> " + signature +
                          (keys.empty() ? "" : " (" + keys + ")"));
  }
  for (const auto& [name, signature] : saved_nodes)
    if (!now_nodes.count(name)) differences.push_back("pipeline.nodes." + name + ": " + signature + " -> (absent)");
  if (!differences.empty()) {
    std::string list;
    for (const auto& d : differences) list += "\n  " + d;
    throw ConfigError("checkpoint " + dir.string() + " was written with an incompatible config:" + list +
                      "\n  resume with the saved values (its config.yaml), or start a new run: --overwrite, or "
                      "another run.out_dir");
  }
  const int saved_world = ckpt.run_state.value("world_size", 1);
  if (saved_world != options.world_size) {
    // The plan splits each step into world_size x grad_accum batches: another
    // world size would regroup the batches and continue a different run.
    const int64_t accum = config.train.grad_accum;
    throw ConfigError("checkpoint " + dir.string() + " was written with world_size " +
                      std::to_string(saved_world) + ", this run has world_size " +
                      std::to_string(options.world_size) + " (WORLD_SIZE): batches per step would change from " +
                      std::to_string(saved_world * accum) + " to " + std::to_string(options.world_size * accum) +
                      " (world_size x train.grad_accum " + std::to_string(accum) + "); resume with " +
                      std::to_string(saved_world) + " rank(s)");
  }
  return ckpt;
}

RunContext::RunContext(config::Config cfg, RunOptions opts, const train::LoadedCheckpoint* resume)
    : config(without_nodes_that_are_off(described(std::move(cfg), opts.node_kinds()), opts.node_kinds())),
      config_yaml(config::to_yaml(config)),
      options(std::move(opts)),
      out_dir(config.run.out_dir),
      checkpoints_dir(out_dir / "checkpoints"),
      quarantine_path(out_dir / "quarantine.jsonl"),
      dataset(data::Dataset::open(with_existing_paths(config).data.train)),
      batching(batching_of(config.pipeline, options.node_kinds())) {
  text::check_dataset_tokenizer(config.data.train, config.model.target.path);  // ids must mean the same text
  auto log_plan = [](const data::EpochPlan& plan) {
    std::string summary = plan.summary();
    if (summary.rfind("[data] ", 0) == 0) summary.erase(0, 7);
    log::info("data", summary);
  };
  plans_ = std::make_unique<data::PlanCache>(
      dataset, [this](int epoch) { return plan_options(config, batching, options.world_size, epoch); }, log_plan);
  load_models(resume);
  plan_run();
  if (resume) start_from(*resume);
  for (const auto& node : config.pipeline.nodes) {
    const RunHooks* hooks = run_hooks(options.node_kinds(), node.type);
    if (!hooks) continue;
    if (hooks->prepare && options.prepare_nodes) prepared[node.name] = hooks->prepare(*this, node);
    wants_untrained_state = wants_untrained_state || hooks->wants_untrained_state;
  }
}

void RunContext::load_models(const train::LoadedCheckpoint* resume) {
  const fs::path target_dir = config.model.target.path;
  const torch::Dtype target_dtype = train::parse_dtype(config.model.target.dtype);
  const target::TargetLoadOptions target_load_options{target::parse_mxfp4_experts(config.model.target.mxfp4_experts)};
  drafter_device = train::resolve_device(config.devices.drafter, options.local_rank);
  drafter_dtype = train::parse_dtype(config.model.drafter.dtype);
  const auto need = whole_target_need(config, options);
  // The drafter node's kind and who needs the teacher, before the target
  // loads: a head-only run then loads the final norm too (features.engine
  // applies it to the files' last layer).
  const DrafterKindChoice kind = drafter_kind_choice(config, options.node_kinds(), &teacher_because);
  check_teacher_sources(config, options.node_kinds(), teacher_because);
  accept_rate_from_target = kind.objective.needs_teacher();
  // The base every drafter step's objective keeps: the kind's params and the records' expected acceptance.
  objective.kind_options = kind.objective.kind_options;
  objective.expected_acceptance = kind.objective.expected_acceptance;
  std::string loaded;  // for the log line
  if (need) {
    // Refused before anything large loads, naming who needs the target.
    const auto head_config = target::load_head_config(target_dir);
    if (!head_config.runnable()) {
      const std::string message = need->who_and_why + ", but " + target_dir.string() + " is " +
                                  head_config.architecture + ", which dflow cannot run: " +
                                  head_config.not_runnable_because +
                                  "; take features from a serving engine (features.engine) or a cache "
                                  "(features.cached), which need only the target's embedding and LM head";
      if (!need->node) throw ConfigError(message);
      throw ConfigError(need->node->mark, node_path(config.pipeline, *need->node), message);
    }
    for (const auto& d : config.devices.target)
      targets.push_back(std::make_unique<target::TargetModel>(
          target::TargetModel::load(target_dir, train::resolve_device(d, options.local_rank), target_dtype,
                                   target_load_options)));
    target_head = std::make_shared<const target::TargetHead>(targets.front()->head());
    loaded = log::str("loaded whole on ", targets.size(), " device(s) (", need->who_and_why, ")");
  } else {
    // The features come from elsewhere: the drafter needs only these, on its own device.
    target_head = std::make_shared<const target::TargetHead>(
        target::TargetHead::load(target_dir, drafter_device, target_dtype, /*with_final_norm=*/needs_teacher()));
    loaded = "head only (no node runs the target)";
  }
  target_config = target_head->config();
  loaded += log::str(": embedding and LM head", target_head->tied() ? " (tied)" : "",
                     target_head->final_norm_weight().defined() ? " and final norm" : "", " ",
                     data::format_bytes(target_head->bytes()));

  drafter::DrafterOptions drafter_options;
  drafter_options.num_layers = config.model.drafter.num_layers;
  drafter_options.block_size = config.model.drafter.block_size;
  drafter_options.num_target_features = config.model.drafter.num_target_features;
  drafter_options.target_layer_ids =
      drafter_feature_layers(config, options.node_kinds(), target_config.num_hidden_layers);
  if (config.model.drafter.mask_token_id >= 0) drafter_options.mask_token_id = config.model.drafter.mask_token_id;
  drafter_options.layer_types = config.model.drafter.layer_types;
  drafter_options.sliding_window = config.model.drafter.sliding_window;
  drafter_options.intermediate_size = config.model.drafter.intermediate_size;
  drafter_options.kind = kind.kind;
  drafter_options.kind_fields = resolved_kind_fields(kind, *target_head, resume);
  drafter_spec = drafter::make_drafter_spec(target_config, drafter_options);
  feature_layer_ids = drafter_spec.target_layer_ids;
  trained_against = train::trained_against(target_dir, config.model.target.dtype, config.data.train, feature_layer_ids)
                        .to_json();
  objective.loss_decay_gamma = config.train.loss_decay_gamma;
  pad_token_id = target_config.eos_token_ids.empty() ? 0 : target_config.eos_token_ids.front();
  std::string layers;
  for (const int64_t id : feature_layer_ids) layers += (layers.empty() ? "" : ", ") + std::to_string(id);
  std::string sliding;  // ", sliding window 2048 on layers [0, 1]"
  for (int64_t i = 0; i < drafter_spec.num_layers; ++i)
    if (drafter_spec.layer_window(i) > 0) sliding += (sliding.empty() ? "" : ", ") + std::to_string(i);
  if (!sliding.empty())
    sliding = ", sliding window " + std::to_string(drafter_spec.sliding_window) + " on layers [" + sliding + "]";
  log::info("model", log::str("target ", config.model.target.path, " (", target_config.architecture, ") ", loaded, "; ",
                              target_config.num_hidden_layers, " layers, hidden ", target_config.hidden_size, ", vocab ",
                              target_config.vocab_size, "; drafter ", drafter_spec.num_layers, " layer(s), block ",
                              drafter_spec.block_size, sliding, ", features from layers [", layers, "]"));
}

void RunContext::plan_run() {
  steps_per_epoch = plans().get(0)->steps_per_epoch();
  total_steps = steps_per_epoch * config.train.epochs;
  stop_step = config.run.max_steps > 0 ? std::min<int64_t>(config.run.max_steps, total_steps) : total_steps;
  // A stop fault interrupts the run as a kill would (but with its final
  // checkpoint): unlike run.max_steps it leaves the LR schedule the run's.
  for (const auto& f : config.faults)
    if (f.kind == "stop") stop_step = std::min(stop_step, f.step);
}

void RunContext::start_from(const train::LoadedCheckpoint& ckpt) {
  // The target must be the one the checkpoint's drafter trained against: the
  // path is checked with the config, the files here (a path whose contents
  // were replaced, another revision, a quantized copy).
  if (ckpt.trained_against.is_object()) {
    const auto file = ckpt.dir / "drafter" / train::kTrainedAgainstFile;
    const auto recorded = train::TrainedAgainst::from_json(ckpt.trained_against, file.string());
    const auto check = train::check_target(recorded.target, train::TargetIdentity::from_json(trained_against["target"], "this run"));
    if (check.refused())
      throw ConfigError("checkpoint " + ckpt.dir.string() + " was trained against another target than " +
                        config.model.target.path + " holds now:\n" + check.describe() +
                        "\n  resume with the target it was trained against, or start a new run: --overwrite, or "
                        "another run.out_dir");
    if (check.verdict != train::TargetCheck::Verdict::same) log::warn("train", "resuming against " + check.describe(""));
  }
  start = Progress::from_json(ckpt.run_state);
  // The file may be newer than the checkpoint (samples quarantined after it):
  // both are excluded, the file's lines applied in order over the
  // checkpoint's set (a release line takes samples back).
  const auto saved = ckpt.run_state.value("quarantine", std::vector<int64_t>{});
  quarantined_at_start = data::read_quarantine(quarantine_path, data::SampleSet(saved.begin(), saved.end()));
  // Those of an open run of spikes the guard may still release: drafter_step
  // drops them while they are quarantined (TrainableState), so a release
  // brings them back as in an uninterrupted run.
  for (int64_t id : ckpt.run_state.value("quarantine_pending", std::vector<int64_t>{})) quarantined_at_start.erase(id);
  for (int64_t id : quarantined_at_start)
    if (id >= dataset.size())
      throw std::runtime_error(quarantine_path.string() + " or checkpoint " + ckpt.dir.string() +
                               " quarantines sample " + std::to_string(id) + " but the dataset has " +
                               std::to_string(dataset.size()) + " samples; was it written for another data.train?");
  if (!quarantined_at_start.empty())
    log::info("guard", log::str(quarantined_at_start.size(), " quarantined sample(s) are excluded from every batch (",
                                quarantine_path.string(), ")"));
  resumed_from = ckpt.dir.string();
  log::info("train", log::str("resumed from ", resumed_from, " at step ", start.completed_steps, " (epoch ",
                              start.cursor.epoch, ", batch ", start.cursor.next_batch, ")"));
}

std::unique_ptr<train::Optimizer> RunContext::make_optimizer(
    std::vector<std::pair<std::string, torch::Tensor>> parameters) const {
  const auto& nodes = config.pipeline.nodes;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const RunHooks* hooks = run_hooks(options.node_kinds(), nodes[i].type);
    if (!hooks || !hooks->optimizer) continue;
    config::YamlSection params(nodes[i].params, "pipeline.nodes[" + std::to_string(i) + "].params", config.pipeline.origins);
    try {
      return hooks->optimizer(*this, params, std::move(parameters));
    } catch (const std::invalid_argument& e) {
      throw ConfigError(nodes[i].mark, "pipeline.nodes[" + std::to_string(i) + "]",
                        "node '" + nodes[i].name + "' (" + nodes[i].type + "): " + e.what());
    }
  }
  return std::make_unique<train::AdamW>(std::move(parameters), train::adamw_options(config.train));
}

const config::FaultDecl* RunContext::fault(const std::string& kind, const std::string& node, int64_t step) const {
  for (const auto& f : config.faults)
    if (f.kind == kind && f.step == step && (f.node.empty() || f.node == node) && (f.rank < 0 || f.rank == options.rank))
      return &f;
  return nullptr;
}

std::vector<drafter::RecordTerm> RunContext::record_terms() const {
  return drafter::drafter_kind(drafter_spec.kind).record_terms(drafter_spec.kind_fields);
}

StepTotals RunContext::step_totals_zeros() const {
  const auto terms = record_terms();
  size_t series = 0;
  for (const auto& t : terms) series += t.series.empty() ? 0 : 1;
  return StepTotals::zeros(drafter_spec.block_size, config.data.buckets.size(), terms.size(), series);
}

}  // namespace dflow::nodes
