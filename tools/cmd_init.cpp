// `dflow init CHECKPOINT_DIR`: a commented config that `dflow train` accepts,
// for a drafter of the target in CHECKPOINT_DIR. Every value it writes is one
// of the project's own rules applied to the target: the drafter's shape and
// feature layers (drafter/drafter_spec.cpp), whether dflow runs the target or
// only reads its head (target/hf_head_config.cpp), the recipe of the examples
// and of docs/drafters.md "Which recipe to pick", and the memory fit drafter_step logs
// at start (nodes/drafter_memory_fit.hpp), less the target's text model and
// its forward when it shares the drafter's device (target/target_memory.hpp).
// Each choice is written above its key, with why.
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "data/feature_cache.hpp"
#include "graph/description.hpp"
#include "drafter/drafter.hpp"
#include "target/hf_config.hpp"
#include "target/target.hpp"
#include "target/target_memory.hpp"
#include "nodes/drafter_kind_choice.hpp"
#include "tools/recommended_recipe.hpp"
#include "nodes/drafter_memory_fit.hpp"
#include "nodes/features_engine.hpp"
#include "nodes/registry.hpp"
#include "text/tokenizer.hpp"
#include "tools/cli.hpp"
#include "train/devices.hpp"

namespace dflow::cli {

namespace {

namespace fs = std::filesystem;

struct InitOptions {
  std::string dir, out, recipe = "recommended", device = "cuda", engine_files, cache;
  int draft_layers = 5;
  double memory_gib = 0;
};

// One value written into the config: a `--set` text and why it was chosen.
struct Choice {
  std::string key, value, why;
};

std::string ids_text(const std::vector<int64_t>& ids, const char* separator = ", ") {
  std::string text;
  for (const int64_t id : ids) text += (text.empty() ? "" : separator) + std::to_string(id);
  return text;
}

// A path as a YAML string, whatever characters it holds.
std::string quoted(const std::string& text) {
  YAML::Emitter out;
  out << YAML::DoubleQuoted << text;
  return out.c_str();
}

std::string bytes_text(double bytes) { return data::format_bytes(static_cast<uint64_t>(bytes)); }

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

target::HeadConfig read_target(const fs::path& dir) {
  if (!fs::is_directory(dir))
    throw ConfigError("CHECKPOINT_DIR " + dir.string() + (fs::exists(dir) ? " is not a directory" : " does not exist") +
                      ": to write a config for a target, give its Hugging Face checkpoint directory: dflow init "
                      "/models/Qwen3-8B");
  if (!fs::exists(dir / "config.json"))
    throw ConfigError((dir / "config.json").string() +
                      " does not exist: to write a config for a target, give the Hugging Face checkpoint directory "
                      "that holds its config.json: dflow init /models/Qwen3-8B");
  target::HeadConfig head;
  try {
    head = target::load_head_config(dir);
  } catch (const std::runtime_error& e) {
    throw ConfigError(e.what());  // names the file and the key
  }
  if (head.architecture.empty())
    throw ConfigError((dir / "config.json").string() +
                      ": names no architecture (neither 'architectures' nor 'model_type'), so dflow cannot tell "
                      "which model it is; to go on, add the checkpoint's 'architectures' (\"Qwen3ForCausalLM\") and "
                      "run dflow init again");
  return head;
}

// The mask token: the checkpoint's own, else the tokenizer's <|MASK|>, else
// the first embedding row past the tokenizer's tokens (Qwen3: 151669).
Choice mask_token(const fs::path& dir, const target::HeadConfig& head) {
  const std::string key = "model.drafter.mask_token_id";
  if (head.mask_token_id)
    return {key, std::to_string(*head.mask_token_id), "config.json names it (dflow_mask_token_id or dflash_config)"};
  const fs::path file = dir / "tokenizer.json";
  if (!fs::exists(file))
    throw ConfigError(file.string() + " does not exist and " + (dir / "config.json").string() +
                      " has no 'dflow_mask_token_id', where dflow init finds the mask token; to choose one (a row of "
                      "the embedding that no text produces): dflow init " + dir.string() + " --set " + key + "=ID");
  const auto tokenizer = text::Tokenizer::load(file);
  if (const auto id = tokenizer->token_id("<|MASK|>"))
    return {key, std::to_string(*id), "the tokenizer's <|MASK|> token"};
  if (tokenizer->vocab_size() < head.vocab_size)
    return {key, std::to_string(tokenizer->vocab_size()),
            "the first embedding row past the tokenizer's " + std::to_string(tokenizer->vocab_size()) +
                " tokens (of " + std::to_string(head.vocab_size) + "), which no text produces, as SpecForge's <|MASK|>"};
  throw ConfigError(file.string() + ": its " + std::to_string(tokenizer->vocab_size()) +
                    " tokens fill the embedding's 'vocab_size' " + std::to_string(head.vocab_size) +
                    " and none is <|MASK|>, so there is no free row for the mask token; to choose one: dflow init " +
                    dir.string() + " --set " + key + "=ID");
}

// The value of the last `--set key=...`, or "".
std::string user_value(const std::vector<std::string>& overrides, const std::string& key) {
  std::string value;
  for (const auto& o : overrides)
    if (o.rfind(key + "=", 0) == 0) value = o.substr(key.size() + 1);
  return value;
}

bool user_sets(const std::vector<std::string>& overrides, const std::string& key) {
  return !user_value(overrides, key).empty();
}

// The drafter's feature layers: the user's --set, else z-lab's rule for the
// draft layers, one feature each, as make_drafter_spec applies it.
std::vector<int64_t> feature_layers(const InitOptions& o, const target::HeadConfig& head,
                                    const std::vector<std::string>& overrides) {
  const std::string key = "model.drafter.target_layer_ids";
  if (const std::string set = user_value(overrides, key); !set.empty()) {
    try {
      return YAML::Load(set).as<std::vector<int64_t>>();
    } catch (const YAML::Exception&) {
      throw ConfigError("--set " + key + "=" + set + ": expected a list of layer ids, such as [1, 9, 17]");
    }
  }
  return target::distinct_feature_layer_ids(head.num_hidden_layers, o.draft_layers);
}

config::Config resolve(const std::vector<Choice>& choices, const std::vector<std::string>& user) {
  std::vector<std::string> overrides;
  for (const auto& c : choices) overrides.push_back(c.key + "=" + c.value);
  overrides.insert(overrides.end(), user.begin(), user.end());
  auto config = config::load_config_text("{}", "<dflow init>", overrides);
  (void)graph::describe(config.pipeline, nodes::default_registry());
  return config;
}

// The drafter as a run would build it from `config` (run_context.cpp's load_models).
drafter::DrafterSpec drafter_of(const config::Config& config, const target::HeadConfig& head) {
  std::string teacher;
  drafter::DrafterOptions o;
  o.num_layers = config.model.drafter.num_layers;
  o.block_size = config.model.drafter.block_size;
  o.num_target_features = config.model.drafter.num_target_features;
  o.target_layer_ids.assign(config.model.drafter.target_layer_ids.begin(),
                            config.model.drafter.target_layer_ids.end());
  if (config.model.drafter.mask_token_id >= 0) o.mask_token_id = config.model.drafter.mask_token_id;
  o.layer_types = config.model.drafter.layer_types;
  o.sliding_window = config.model.drafter.sliding_window;
  o.intermediate_size = config.model.drafter.intermediate_size;
  const nodes::DrafterKindChoice kind = nodes::drafter_kind_choice(config, nodes::default_registry(), &teacher);
  o.kind = kind.kind;
  o.kind_fields = kind.fields;
  return drafter::make_drafter_spec(head, o);
}

// Bytes of the safetensors files in `dir` (a multimodal wrapper's include its vision tower).
double checkpoint_bytes(const fs::path& dir) {
  double bytes = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".safetensors") bytes += static_cast<double>(entry.file_size());
  return bytes;
}

struct Memory {
  double device_bytes = 0;
  std::string source;
};

Memory device_memory(const InitOptions& o) {
  if (o.memory_gib > 0) return {o.memory_gib * 1024 * 1024 * 1024, "--memory-gib"};
  if (o.device == "cpu") return {train::available_memory_bytes(torch::Device("cpu")), "available RAM here"};
  if (torch::cuda::is_available()) return {train::available_memory_bytes(torch::Device("cuda:0")), "free on cuda:0 here"};
  return {80.0 * 1024 * 1024 * 1024, "assumed: an 80 GB H100 or A100, as no GPU is usable here; give --memory-gib"};
}

std::string layer_rule(int64_t target_layers, const std::vector<int64_t>& ids) {
  const auto formula = target::feature_layer_ids(target_layers, static_cast<int64_t>(ids.size()));
  std::string why = "z-lab's rule for " + std::to_string(target_layers) + " target layers and " +
                    std::to_string(ids.size()) + " features (one per draft layer): round(1 + i * (L - 4) / (n - 1))";
  if (formula != ids)
    why += ", whose [" + ids_text(formula) + "] repeats a layer here, made to rise below the last layer (every export "
           "format serves rising layers a server collects)";
  return why;
}

// The drafter kind (model.drafter.kind) of the recommended recipe.
std::string recommended_drafter_kind() {
  const YAML::Node recipe = YAML::Load(tools::recommended_recipe_yaml());
  if (recipe["model"] && recipe["model"]["drafter"] && recipe["model"]["drafter"]["kind"])
    return recipe["model"]["drafter"]["kind"].as<std::string>();
  return "dflash";
}

std::vector<Choice> recipe_choices(const InitOptions& o, const fs::path& dir, const target::HeadConfig& head,
                                   const std::vector<int64_t>& layer_ids, bool engine) {
  const bool gpu = o.device == "cuda";
  const std::string dtype = gpu ? "bfloat16" : "float32";
  const std::string name = fs::absolute(dir).lexically_normal().filename().string();
  const std::string examples = "as examples/qwen3-8b.yaml (SpecForge's recipe)";
  std::vector<Choice> c{
      {"run.name", name, "the checkpoint directory's name"},
      {"run.out_dir", "runs/" + name, "runs/ and the run's name"},
      {"run.threads", "4", examples},
      {"run.torch_threads", "4", examples},
      {"model.target.path", quoted(dir.string()), "the checkpoint given"},
      {"model.target.dtype", dtype,
       gpu ? "mixed precision on GPUs (docs/gpus.md \"Mixed precision\")" : "float32 on the CPU (bf16 is slow there)"},
      {"model.drafter.num_layers", std::to_string(o.draft_layers), "--draft-layers (default 5, " + examples + ")"},
      {"model.drafter.block_size", "16", examples},
      {"model.drafter.target_layer_ids", "[" + ids_text(layer_ids) + "]",
       layer_rule(head.num_hidden_layers, layer_ids)},
      {"model.drafter.dtype", dtype, gpu ? "as the target's (AdamW keeps fp32 masters)" : "as the target's"},
      {"data.train", "[data/" + name + "]", "where `dflow prepare` should write the training data"},
      {"data.max_length", "3072", examples},
      {"data.buckets", "[512, 1024, 2048, 3072]", examples},
      {"data.tokens_per_batch", "12288", "4 x 3072 padded tokens per micro-batch, " + examples},
      {"train.grad_accum", "1", examples},
      {"checkpoint.every_steps", "1000", examples},
      {"metrics.sinks", "[jsonl, console, tensorboard]", examples},
      {"devices.target", gpu ? "[cuda]" : "[cpu]", "--device " + o.device},
      {"devices.drafter", o.device, "--device " + o.device},
      {"eval.prompts", "\"\"",
       engine ? "tau needs the target in-process: measure acceptance in the serving engine"
              : "no held-out prompts yet, so the eval node is off; give a JSONL of prompts never trained on (and "
                "eval.every_steps) to measure tau"},
  };
  if (head.intermediate_size <= 0)
    c.push_back({"model.drafter.intermediate_size", std::to_string(3 * head.hidden_size),
                 "the target's text config has no dense intermediate_size (a mixture of experts): 3 x hidden_size, "
                 "the ratio of SpecForge's Qwen3.5-35B-A3B drafter (6144 at hidden 2048)"});
  if (o.recipe == "recommended") {
    const char* bench = "docs/drafters.md \"Which recipe to pick\" (tools/recipes_bench.sh, tools/tau_bench.sh)";
    if (o.draft_layers > 1) {
      std::string types;
      for (int i = 0; i < o.draft_layers; ++i)
        types += std::string(types.empty() ? "" : ", ") + (i + 1 < o.draft_layers ? "sliding_attention" : "full_attention");
      c.push_back({"model.drafter.layer_types", "[" + types + "]",
                   std::string("sliding layers with one full layer last, as SpecForge's 4 x 2048 + 1 full: ") + bench});
      c.push_back({"model.drafter.sliding_window", "2048", "SpecForge's window"});
    }
    c.push_back({"pipeline.nodes.optimizer.type", "optimizer_step.muon", std::string("Muon reached tau 8 first: ") + bench});
    c.push_back({"pipeline.nodes.optimizer.params", "{lr: 0.02, weight_decay: 0.01, momentum: 0.95, ns_steps: 5}",
                 "Muon's params of examples/qwen3-8b-2026.yaml"});
    c.push_back({"model.drafter.kind", recommended_drafter_kind(),
                 std::string("the drafter kind ") + tools::kRecommendedRecipe + " trains, the most tau: " + bench});
  }
  if (!o.cache.empty()) {
    c.push_back({"pipeline.nodes.target.type", "features.cached",
                 "--cache: `dflow cache-features` runs the target once and every epoch reads its features back "
                 "(docs/features.md \"Feature cache: pay for the target once\")"});
    c.push_back({"pipeline.nodes.target.params", "{dir: " + quoted(o.cache) + ", dtype: bfloat16}",
                 "--cache DIR, in bfloat16 as examples/qwen3-8b-cached.yaml"});
  }
  if (engine) {
    c.push_back({"pipeline.nodes.target.type", "features.engine",
                 head.runnable() ? "--engine-files: the features come from a serving engine's extraction"
                                 : head.architecture + " is not a target dflow runs (" + head.not_runnable_because +
                                       "): the features come from a serving engine's extraction and dflow reads "
                                       "only the target's embedding and LM head"});
    std::vector<int> engine_ids;
    for (const int64_t l : layer_ids) engine_ids.push_back(static_cast<int>(l + 1));
    // vLLM stores the layers asked for sorted and once each, whatever the order asked.
    std::sort(engine_ids.begin(), engine_ids.end());
    engine_ids.erase(std::unique(engine_ids.begin(), engine_ids.end()), engine_ids.end());
    engine_ids.push_back(static_cast<int>(head.num_hidden_layers));
    try {
      (void)nodes::engine_slots_for(engine_ids, layer_ids, head.num_hidden_layers);
    } catch (const std::invalid_argument& e) {
      throw ConfigError("features.engine cannot give these feature layers: " + std::string(e.what()) +
                        "; to read others: dflow init " + dir.string() + " --set model.drafter.target_layer_ids=[...]");
    }
    std::vector<int64_t> ids(engine_ids.begin(), engine_ids.end());
    const std::string launch(ids_text(std::vector<int64_t>(ids.begin(), ids.end() - 1), " "));
    c.push_back({"pipeline.nodes.target.params",
                 "{dir: " + quoted(o.engine_files.empty() ? std::string("hidden_states") : o.engine_files) +
                     ", engine_layer_ids: [" + ids_text(ids) + "]}",
                 "start the extraction with `launch_vllm.py --target-layer-ids " + launch +
                     "` (dflow layer l is engine id l + 1; it appends the last layer " +
                     std::to_string(head.num_hidden_layers) + ")" +
                     (o.engine_files.empty() ? "; point dir at its output (--engine-files DIR)" : "")});
  }
  return c;
}

std::string describe_target(const target::HeadConfig& h) {
  std::ostringstream s;
  s << h.architecture << ", " << h.num_hidden_layers << " layers; the drafter copies its shape: hidden " << h.hidden_size
    << ", " << h.num_attention_heads << " heads (" << h.num_key_value_heads << " key/value), head dim " << h.head_dim
    << ", MLP " << (h.intermediate_size > 0 ? std::to_string(h.intermediate_size) : std::string("(none: experts only)"))
    << ", vocabulary " << h.vocab_size << ", RoPE theta " << h.rope_theta;
  return s.str();
}

// `# why` above each key `to_yaml` writes that a choice set; pipeline nodes
// by the line of their `name:`.
std::string annotate(const std::string& yaml, const std::vector<Choice>& choices) {
  std::map<std::string, std::string> why;
  for (const auto& c : choices) {
    std::string key = c.key;
    if (key.rfind("pipeline.nodes.", 0) == 0) key = key.substr(0, key.find('.', 15));
    why[key] += (why[key].empty() ? "" : "; ") + c.why;
  }
  std::istringstream in(yaml);
  std::ostringstream out;
  std::vector<std::pair<size_t, std::string>> path;  // indent, key
  for (std::string line; std::getline(in, line);) {
    const size_t indent = line.find_first_not_of(' ');
    std::string key;
    if (indent != std::string::npos && line.compare(indent, 9, "- {name: ") == 0) {
      key = "pipeline.nodes." + line.substr(indent + 9, line.find_first_of(",}", indent) - indent - 9);
    } else if (indent != std::string::npos && line.find(':') != std::string::npos) {
      while (!path.empty() && path.back().first >= indent) path.pop_back();
      const std::string name = line.substr(indent, line.find(':') - indent);
      for (const auto& p : path) key += p.second + ".";
      key += name;
      if (line.back() == ':') path.push_back({indent, name});
    }
    if (auto it = why.find(key); it != why.end())
      out << std::string(indent, ' ') << "# " << it->second << "\n";
    out << line << "\n";
  }
  return out.str();
}

int run_init(const InitOptions& o, const Common& common) {
  const fs::path dir = o.dir;
  const auto head = read_target(dir);
  const bool engine = !o.engine_files.empty() || !head.runnable();
  if (!o.cache.empty() && (engine || !o.engine_files.empty()))
    throw ConfigError("--cache " + o.cache + ": filling a feature cache runs the target in-process, but " +
                      (o.engine_files.empty() ? head.architecture + " is not a target dflow runs (" +
                                                    head.not_runnable_because + ")"
                                              : std::string("--engine-files takes the features from a serving engine")) +
                      "; to train from a serving engine's files instead: dflow init " + o.dir +
                      " --engine-files DIR");
  std::vector<Choice> choices;
  if (!user_sets(common.overrides, "model.drafter.mask_token_id")) choices.push_back(mask_token(dir, head));
  const auto layer_ids = feature_layers(o, head, common.overrides);
  auto recipe = recipe_choices(o, dir, head, layer_ids, engine);
  choices.insert(choices.begin(), recipe.begin(), recipe.end());

  // The memory fit, as drafter_step checks it at start; recomputation, then
  // fewer anchors, when the recipe does not fit.
  auto config = resolve(choices, common.overrides);
  const Memory memory = device_memory(o);
  const bool target_beside = !engine && o.cache.empty() && !config.devices.target.empty() &&
                             config.devices.target.front() == config.devices.drafter;
  // The target beside the drafter: the text model's tensors as a load
  // keeps them (target/target_memory.hpp; not a wrapper's vision tower nor
  // mtp.* layers, which are never loaded), and its forward over the largest
  // micro-batch, which runs beside the drafter's step.
  const auto target_element_bytes =
      static_cast<int64_t>(c10::elementSize(train::parse_dtype(config.model.target.dtype)));
  const double target_bytes =
      target_beside ? static_cast<double>(target::target_resident_bytes(
                          head, target_element_bytes, target::checkpoint_stores_lm_head(dir),
                          /*mxfp4_dequantized=*/config.model.target.mxfp4_experts == "dequantize"))
                    : 0;
  const auto dtype = train::parse_dtype(config.model.drafter.dtype);
  // The step as the recipe's drafter node trains it (its loss, its kind's
  // params and whether the kind reads the teacher), and what the run holds
  // beside it: the fit the run itself makes at start.
  const auto check = [&] {
    std::string teacher;
    const auto choice = nodes::drafter_kind_choice(config, nodes::default_registry(), &teacher);
    const drafter::DrafterSpec spec = drafter_of(config, head);
    nodes::BesideTheStep beside =
        nodes::beside_the_step(config, nodes::default_registry(), spec, dtype, !teacher.empty(), /*rank=*/0);
    if (target_beside) {
      // The forward returns the feature layers and, for a teacher (kl), the last layer too.
      const auto features = static_cast<int64_t>(layer_ids.size()) + (teacher.empty() ? 0 : 1);
      beside.target_forward =
          nodes::largest_target_forward(head, config.data, features, target_element_bytes, o.device == "cuda");
    }
    return nodes::check_memory_fit(spec, config.data, config.train.anchors_per_sequence, dtype, choice.objective,
                                   memory.device_bytes - target_bytes, beside);
  };
  auto fit = check();
  if (!fit.fits && !user_sets(common.overrides, "pipeline.nodes.drafter.params.recompute")) {
    choices.push_back({"pipeline.nodes.drafter.params.recompute", "true",
                       "recompute: true, as without it the largest micro-batch does not fit the memory (the fit above)"});
    if (fit.largest_fitting_anchors_other < config.train.anchors_per_sequence && fit.largest_fitting_anchors_other > 0)
      choices.push_back({"train.anchors_per_sequence", std::to_string(fit.largest_fitting_anchors_other),
                         "the most anchors that fit with recomputation"});
    config = resolve(choices, common.overrides);
    fit = check();
  }

  std::ostringstream text;
  text << "# dflow init " << o.dir << ": a drafter for " << describe_target(head) << ".\n";
  if (engine)
    text << "# dflow runs: head only (the embedding and LM head); the features come from engine files "
            "(features.engine; docs/features.md \"Engine files: features from a serving engine (`features.engine`)\"), and tau is measured in the serving engine.\n";
  else if (!o.cache.empty())
    text << "# dflow runs: the target in-process once, in dflow cache-features (" << to_string(head.family)
         << " family); training reads the cache (features.cached) and only the target's embedding and LM head.\n";
  else
    text << "# dflow runs: the target in-process (target_forward), " << to_string(head.family) << " family.\n";
  text << "# Recipe: " << o.recipe
       << (o.recipe == "recommended" ? " (docs/drafters.md \"Which recipe to pick\"; --recipe specforge for examples/qwen3-8b.yaml)"
                                     : " (examples/qwen3-8b.yaml)")
       << ".\n# Memory on " << config.devices.drafter << ": " << gib(memory.device_bytes) << " (" << memory.source
       << ")";
  if (target_bytes > 0) {
    text << ", less the target's text model beside the drafter: " << bytes_text(target_bytes) << " of weights in "
         << config.model.target.dtype;
    if (const double files = checkpoint_bytes(dir); files > target_bytes)
      text << " (its safetensors hold " << bytes_text(files)
           << "; what a load never reads, such as a vision tower or mtp layers, is not counted)";
  }
  const std::string file = o.out.empty() ? "THIS_FILE" : o.out;
  text << ".\n# " << fit.describe("node 'drafter'", config.devices.drafter) << ".\n"
       << "# Next: dflow prepare your data into data.train, then "
       << (o.cache.empty() ? "" : "dflow cache-features " + file + ", then ") << "dflow train " << file
       << " (docs/your-own-model.md).\n";
  std::vector<Choice> notes;
  for (const auto& c : choices)
    if (!user_sets(common.overrides, c.key)) notes.push_back(c);
  for (const auto& set : common.overrides) notes.push_back({set.substr(0, set.find('=')), "", "--set " + set});
  text << annotate(config::to_yaml(config), notes);

  if (o.out.empty()) {
    std::cout << text.str();
  } else {
    if (fs::exists(o.out))
      throw ConfigError("--out " + o.out + " exists: to keep it, write elsewhere: dflow init " + o.dir +
                        " --out OTHER.yaml (or delete it first)");
    std::ofstream(o.out) << text.str();
    if (o.cache.empty())
      std::cout << "wrote " << o.out << "; train with: dflow train " << o.out << "\n";
    else
      std::cout << "wrote " << o.out << "; fill the cache, then train: dflow cache-features " << o.out
                << " && dflow train " << o.out << "\n";
  }
  return 0;
}

}  // namespace

void add_init_command(CLI::App& app, Common& common, Action& action) {
  auto* sub = app.add_subcommand(
      "init", "write a commented config for a drafter of the target in CHECKPOINT_DIR, which dflow train accepts");
  static InitOptions options;
  sub->add_option("CHECKPOINT_DIR", options.dir, "the target's Hugging Face checkpoint (config.json, tokenizer.json)")
      ->required();
  sub->add_option("--out", options.out, "write the config to this file (default: print it)");
  sub->add_option("--recipe", options.recipe,
                  "recommended (examples/qwen3-8b-2026.yaml: Muon, sliding layers, its drafter kind; "
                  "docs/drafters.md \"Which recipe to pick\") or specforge (examples/qwen3-8b.yaml)")
      ->check(CLI::IsMember({"recommended", "specforge"}))
      ->capture_default_str();
  sub->add_option("--draft-layers", options.draft_layers, "draft layers; the target layers read follow from them")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  sub->add_option("--device", options.device, "where the run trains: cuda (bf16) or cpu (float32)")
      ->check(CLI::IsMember({"cuda", "cpu"}))
      ->capture_default_str();
  sub->add_option("--memory-gib", options.memory_gib,
                  "the device's memory for the fit check (default: asked of the device here)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--cache", options.cache,
                  "train from a feature cache in DIR that dflow cache-features fills once (features.cached)");
  sub->add_option("--engine-files", options.engine_files,
                  "train from a serving engine's hidden-state files in DIR (features.engine); the config says which "
                  "layer ids to start the extraction with");
  add_common_options(*sub, common);
  sub->callback([&action, &common] { action = [&common] { return run_init(options, common); }; });
}

}  // namespace dflow::cli
