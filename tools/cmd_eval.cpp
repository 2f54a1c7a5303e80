// `dflow eval`, `dflow export` and `dflow regenerate`: does the drafter draft,
// hand it over in Hugging Face layout, and make DFlash training data.
#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <optional>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "data/feature_cache.hpp"
#include "drafter/activation_probe.hpp"
#include "drafter/kind.hpp"
#include "drafter/drafter.hpp"
#include "drafter/drafter_export_speculators.hpp"
#include "formats/json_file.hpp"
#include "target/target.hpp"
#include "tools/cli.hpp"
#include "tools/mxfp4_option.hpp"
#include "tools/thread_option.hpp"
#include "train/checkpoint.hpp"
#include "train/devices.hpp"
#include "train/evaluate.hpp"
#include "train/regenerate.hpp"
#include "train/regenerate_chats.hpp"
#include "train/regenerate_features.hpp"
#include "train/trained_against.hpp"
#include "text/chat_encode.hpp"
#include "text/chat_template.hpp"
#include "text/dataset_tokenizer.hpp"
#include "text/draft_marks.hpp"
#include "text/tokenizer.hpp"

namespace dflow::cli {

namespace {
namespace fs = std::filesystem;

// A checkpoint's drafter directory (step-N/drafter), an exported drafter, or a run dir's latest.
fs::path drafter_dir(const std::string& path) {
  if (fs::exists(fs::path(path) / "config.json") && fs::exists(fs::path(path) / "model.safetensors")) return path;
  return train::resolve_checkpoint(fs::path(path) / "checkpoints", path) / "drafter";
}
void print_output(const text::Tokenizer& tokenizer, size_t index, const train::EvalOutput& output) {
  const std::vector<int32_t> prompt(output.prompt.begin(), output.prompt.end());
  std::cout << "\n--- prompt " << index << " ---\n"
            << tokenizer.decode(prompt) << "\n--- answer (accepted drafts in " << text::kDraftOpen << " "
            << text::kDraftClose << ") ---\n"
            << text::mark_accepted_drafts(tokenizer, output.tokens, output.acceptance_lengths) << "\n";
}

// Compares what `drafter` records it was trained against (`record`, read
// from it) with the target given now and says so; throws ConfigError (exit
// 2) for another target unless `allow_other`. A drafter a dflow before the
// record wrote is let through, said.
void check_trained_against(const std::optional<train::TrainedAgainst>& record, const fs::path& drafter,
                           const fs::path& target_dir, bool allow_other, const std::string& command) {
  if (!record) {
    std::cout << "target: " << drafter.string() << " records no target (" << train::kTrainedAgainstFile
              << "; written before dflow recorded one): not checked\n";
    return;
  }
  const auto check = train::check_target(record->target, train::target_identity(target_dir));
  if (check.refused() && !allow_other)
    throw ConfigError(command + ": " + target_dir.string() + " is " + check.describe("") +
                      "\n  pass the target it was trained against, or --allow-other-target to go on");
  std::cout << "target: " << target_dir.string() << " is " << check.describe("") << "\n";
}

// The chat template that rendered the eval prompts, where the prompts sit in
// a prepared dataset's directory (its tokenizer_fingerprint.json), against
// the templates of the training data: another rendering is warned about.
void check_prompt_template(const std::optional<train::TrainedAgainst>& record, const fs::path& prompts) {
  const fs::path file = prompts.parent_path() / text::kTokenizerFingerprintFile;
  if (!record || !fs::exists(file)) return;
  std::string template_name;
  try {
    std::ifstream in(file);
    template_name = nlohmann::json::parse(in).value("chat_template", std::string());
  } catch (const nlohmann::json::exception&) {
    return;  // the dataset's own reader names it when training reads it
  }
  std::string trained;
  for (const auto& d : record->data) {
    if (d.chat_template.empty() || d.chat_template == template_name) return;
    trained += (trained.empty() ? "" : ", ") + d.chat_template;
  }
  if (trained.empty() || template_name.empty()) return;
  std::cout << "warning: the prompts " << prompts.string() << " were rendered with chat template " << template_name
            << " (" << file.string() << "), the training data with " << trained
            << ": acceptance measured here is not what serving with the trained template gives\n";
}

}  // namespace

void add_eval_command(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("eval", "speculative decoding with the drafter: acceptance length tau and speed-up "
                                         "against target-only decoding, with a losslessness check");
  static std::string target_dir, drafter, prompts, json_out, tokenizer_dir;
  static train::EvalOptions options;
  static int threads = 1;
  static std::string mxfp4_experts = config::TargetConfig{}.mxfp4_experts;
  sub->add_option("--target", target_dir, "target model directory (Hugging Face layout)")->required();
  sub->add_option("--drafter", drafter,
                  "checkpoint (step-N, or the latest/best pointer), run directory (its latest), or exported drafter")
      ->required();
  sub->add_option("--prompts", prompts, "JSONL: {\"prompt_ids\": [...]} or training samples")->required();
  sub->add_option("--max-new-tokens", options.max_new_tokens)->capture_default_str();
  sub->add_option("--max-prompts", options.max_prompts, "0: all")->capture_default_str();
  sub->add_option("--temperature", options.temperature,
                  "0: greedy (lossless check); > 0: speculative sampling, which keeps the target's distribution")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--seed", options.seed, "sampling seed (per prompt: hash(seed, prompt index))")->capture_default_str();
  add_threads_option(*sub, threads);
  add_mxfp4_experts_option(*sub, mxfp4_experts);
  sub->add_option("--json", json_out, "also write the report as JSON to this file");
  sub->add_option("--show", options.keep_outputs,
                  "print the decoded text of the first N prompts and their answers, accepted drafts marked")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--tokenizer", tokenizer_dir, "--show: the tokenizer.json (or its directory); default: the target's");
  static bool allow_other_target = false;
  sub->add_flag("--allow-other-target", allow_other_target,
                "evaluate against a target other than the one the drafter was trained against (refused otherwise)");
  sub->callback([&action] {
    action = [] {
      torch::set_num_threads(threads);
      const auto prompt_ids = train::read_prompts(prompts);  // before the models: a bad file fails at once
      std::shared_ptr<const text::Tokenizer> tokenizer;  // loaded first: a missing one fails before decoding
      if (options.keep_outputs > 0) tokenizer = text::Tokenizer::load(tokenizer_dir.empty() ? target_dir : tokenizer_dir);
      const fs::path drafter_path = drafter_dir(drafter);
      const auto record = train::read_trained_against(drafter_path);
      check_trained_against(record, drafter_path, target_dir, allow_other_target, "eval");
      check_prompt_template(record, prompts);
      auto target = target::TargetModel::load(target_dir, torch::kCPU, torch::kFloat32,
                                             target_load_options(mxfp4_experts));
      auto draft = drafter::load_pretrained(drafter_path);
      draft->to(torch::kFloat32);
      auto report = train::evaluate_drafter(*draft, target, prompt_ids, options);
      std::cout << report.summary() << std::endl;
      for (size_t i = 0; i < report.outputs.size(); ++i) print_output(*tokenizer, i, report.outputs[i]);
      if (!json_out.empty()) std::ofstream(json_out) << report.to_json().dump(2) << "\n";
      return report.mismatched_prompts == 0 ? 0 : 1;
    };
  });
}

namespace {

// The target a speculators export names: --verifier, else the target the run
// that wrote the checkpoint trained against (its resolved config's
// model.target.path). Read from --target, else from the verifier itself when
// it is a local directory.
drafter::SpeculatorsVerifier find_verifier(const fs::path& drafter, const std::string& verifier,
                                         const std::string& target) {
  drafter::SpeculatorsVerifier found;
  found.name_or_path = verifier;
  // A checkpoint's drafter (step-N/drafter) sits beside its run's config;
  // an exported drafter directory records no run.
  const auto run_config = drafter.parent_path() / "config.yaml";
  if (found.name_or_path.empty() && drafter.filename() == "drafter" && fs::exists(run_config)) {
    std::ifstream in(run_config);
    const std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    found.name_or_path = config::load_config_text(yaml, run_config.string()).model.target.path;
  }
  if (found.name_or_path.empty()) {
    throw std::runtime_error("export --format speculators: '" + drafter.string() +
                             "' records no target (model.target.path of its run); pass --verifier NAME_OR_PATH");
  }
  found.local_dir = !target.empty() ? fs::path(target) : fs::path(found.name_or_path);
  if (!fs::is_directory(found.local_dir)) {
    throw std::runtime_error("export --format speculators: verifier '" + found.name_or_path +
                             "' is not a local directory; pass --target DIR, a local copy of it, to read its "
                             "config.json, embedding and LM head from");
  }
  return found;
}

// What the drafter was trained against travels with the export: its own
// file beside config.json, and the same record inside config.json (z-lab's
// and speculators' config loaders keep a key they do not know).
void record_trained_against(const std::optional<train::TrainedAgainst>& record, const fs::path& out) {
  if (!record) return;
  train::write_trained_against(out, *record);
  nlohmann::json config = target::read_json_file(out / "config.json");
  config[train::kTrainedAgainstConfigKey] = record->to_json();
  formats::write_json_atomically(out / "config.json", config);
}

// float16's largest finite value: a weight beyond it is inf once cast.
constexpr double kFloat16Max = 65504.0;

// A weight beyond float16's range is refused, naming the tensor (a drafter
// served with inf weights drafts nothing a target accepts).
void check_float16_weights(drafter::DFlashDrafterImpl& drafter) {
  torch::NoGradGuard no_grad;
  for (const auto& item : drafter.named_parameters(/*recurse=*/true)) {
    const double most = item.value().abs().max().item<double>();
    if (!(most <= kFloat16Max))
      throw ConfigError("export --dtype float16: tensor '" + item.key() + "' holds " + c10::str(most) +
                        ", beyond float16's range (+-65504): served in float16 it would be inf; export in "
                        "bfloat16 or float32");
  }
}

// Casts the drafter for export (as-trained: left as it is).
void cast_for_export(drafter::DFlashDrafterImpl& drafter, const std::string& dtype) {
  if (dtype == "as-trained") return;
  drafter.to(dtype == "float16" ? torch::kFloat16 : dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32);
}

// The run config beside a checkpoint's drafter (step-N/drafter); null for an
// exported drafter, which records no run.
std::optional<config::Config> run_config_of(const fs::path& drafter) {
  const auto file = drafter.parent_path() / "config.yaml";
  if (drafter.filename() != "drafter" || !fs::exists(file)) return std::nullopt;
  std::ifstream in(file);
  const std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return config::load_config_text(yaml, file.string());
}

// Prompts drafted to find the activations' range (of the file's first), and
// the new tokens each: enough cycles to reach every slot and layer.
constexpr int64_t kRangePrompts = 8;
constexpr int64_t kRangeNewTokens = 32;

// float16 serves a drafter whose activations, not only its weights, stay
// within +-65504 (an activation beyond it is inf and the draft is lost):
// the drafter (float32 here) drafts the held-out prompts against the target
// under an ActivationProbe, and any point beyond the range is refused,
// naming it. The prompts are --prompts, else the run's eval.prompts; the
// target --target, else the run's model.target.path.
void check_float16_activations(drafter::DFlashDrafterImpl& drafter, const fs::path& drafter_path,
                               const std::optional<train::TrainedAgainst>& record, const std::string& prompts_arg,
                               const std::string& target_arg, bool allow_other_target) {
  const auto run = run_config_of(drafter_path);
  const fs::path prompts = !prompts_arg.empty() ? fs::path(prompts_arg)
                           : run ? fs::path(run->eval.prompts)
                                 : fs::path();
  const fs::path target_dir = !target_arg.empty() ? fs::path(target_arg)
                              : run ? fs::path(run->model.target.path)
                                    : fs::path();
  auto missing = [&](const std::string& what) {
    return ConfigError("export --dtype float16 checks the drafter's activations over held-out prompts, and " + what +
                       ": give --prompts FILE and --target DIR (the target it drafts for), or export in bfloat16");
  };
  if (prompts.empty() || !fs::is_regular_file(prompts))
    throw missing(prompts.empty() ? "'" + drafter_path.string() + "' records no run whose eval.prompts to use"
                                  : "the prompts '" + prompts.string() + "' are not a file");
  if (target_dir.empty() || !fs::is_directory(target_dir))
    throw missing(target_dir.empty() ? "'" + drafter_path.string() + "' records no run whose target to use"
                                     : "the target '" + target_dir.string() + "' is not a directory");
  check_trained_against(record, drafter_path, target_dir, allow_other_target, "export");
  const auto prompt_ids = train::read_prompts(prompts);
  auto target = target::TargetModel::load(target_dir, torch::kCPU, torch::kFloat32,
                                         target_load_options(config::TargetConfig{}.mxfp4_experts));
  train::EvalOptions options;
  options.max_prompts = kRangePrompts;
  options.max_new_tokens = kRangeNewTokens;
  options.compare_with_target = false;
  drafter::ActivationProbe probe;
  (void)train::evaluate_drafter(drafter, target, prompt_ids, options);
  std::string worst;
  double most = -1;
  for (const auto& [name, value] : probe.maxima())
    if (value > most) {
      most = value;
      worst = name;
    }
  const int64_t drafted = std::min<int64_t>(kRangePrompts, static_cast<int64_t>(prompt_ids.size()));
  const std::string over = std::to_string(drafted) + " held-out prompt(s) of " + prompts.string();
  if (!(most <= kFloat16Max))
    throw ConfigError("export --dtype float16: activation '" + worst + "' reaches " + c10::str(most) + " over " +
                      over + ", beyond float16's range (+-65504): served in float16 it would be inf; export in "
                      "bfloat16 or float32");
  std::cout << "float16: the drafter's activations over " << over << " peak at " << most << " (" << worst
            << "), within float16's range\n";
}

}  // namespace

void add_export_command(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("export", "write a checkpoint's drafter in Hugging Face layout: z-lab's DFlash "
                                           "layout (default), or speculators' for vLLM (--format speculators)");
  static std::string checkpoint, out, format = "dflash", verifier, target;
  sub->add_option("CKPT", checkpoint, "checkpoint (step-N) or run directory (its latest)")->required();
  sub->add_option("--out", out, "output directory")->required();
  sub->add_option("--format", format,
                  "dflash: z-lab's config.json and weights (the serving engine is told the target; refused for a "
                  "drafter kind it cannot carry); speculators: vllm-project/speculators' layout (DFlash, or the "
                  "speculators model of the drafter's kind), naming the target and carrying its embedding and LM "
                  "head")
      ->check(CLI::IsMember({"dflash", "speculators"}))
      ->capture_default_str();
  sub->add_option("--verifier", verifier,
                  "speculators: the target's name or path as the serving engine should load it (default: the run's "
                  "model.target.path)");
  sub->add_option("--target", target,
                  "speculators: a local copy of the target to read config.json and the head tensors from (default: "
                  "--verifier when it is a directory); --dtype float16: the target the drafter drafts for while its "
                  "activations are checked (default: the run's model.target.path)");
  static std::string export_dtype = "as-trained", range_prompts;
  sub->add_option("--dtype", export_dtype,
                  "the weights' dtype: as-trained (model.drafter.dtype), bfloat16, float32, or float16 (refused "
                  "when a weight, or an activation while drafting the held-out prompts, lies beyond float16's "
                  "range)")
      ->check(CLI::IsMember({"as-trained", "bfloat16", "float32", "float16"}))
      ->capture_default_str();
  sub->add_option("--prompts", range_prompts,
                  "--dtype float16: JSONL of held-out prompts whose drafting must keep every activation within "
                  "float16's range (the first 8; default: the run's eval.prompts)");
  static bool allow_other_target = false;
  sub->add_flag("--allow-other-target", allow_other_target,
                "speculators: name a verifier other than the target the drafter was trained against (refused "
                "otherwise, when --target or --verifier is a local directory)");
  sub->callback([&action] {
    if (format != "speculators" && !verifier.empty()) throw CLI::ValidationError("--verifier", "needs --format speculators");
    if (format != "speculators" && export_dtype != "float16" && !target.empty())
      throw CLI::ValidationError("--target", "needs --format speculators or --dtype float16");
    if (export_dtype != "float16" && !range_prompts.empty())
      throw CLI::ValidationError("--prompts", "needs --dtype float16");
    action = [] {
      const fs::path dir = drafter_dir(checkpoint);
      auto draft = drafter::load_pretrained(dir);  // verifies names and shapes
      const drafter::DrafterKind& kind = drafter::drafter_kind(draft->spec().kind);
      // A format that cannot carry what the drafter's kind adds (z-lab's
      // layout has only the backbone: a DFlash server would draft without
      // the rest, accepting less than dflow eval reported) is refused (a
      // refusal of the option: exit 2) before anything is written.
      if (const std::string why = kind.refuses_format(format, draft->spec().kind_fields); !why.empty())
        throw ConfigError("export: the drafter in '" + dir.string() + "' " + why);
      const auto record = train::read_trained_against(dir);
      if (export_dtype == "float16") {
        check_float16_weights(*draft);
        cast_for_export(*draft, "float32");  // the true activations, which float16 would turn to inf
        check_float16_activations(*draft, dir, record, range_prompts, target, allow_other_target);
      }
      cast_for_export(*draft, export_dtype);
      if (format == "speculators") {
        const auto found = find_verifier(dir, verifier, target);
        check_trained_against(record, dir, found.local_dir, allow_other_target, "export");
        drafter::save_speculators_pretrained(*draft, found, out);
        record_trained_against(record, out);
        std::cout << "exported drafter to " << out << " (speculators format, "
                  << kind.speculators_names().model_type << ", verifier " << found.name_or_path << ")\n";
        return 0;
      }
      drafter::save_pretrained(*draft, out);
      record_trained_against(record, out);
      std::cout << "exported drafter to " << out << "\n";
      // vLLM's DFlash method collects each target layer once, in layer order
      // (as speculators' format requires, which refuses such ids); z-lab's
      // own Hugging Face code indexes hidden_states per id and serves them.
      const auto& ids = draft->spec().target_layer_ids;
      for (size_t i = 1; i < ids.size(); ++i) {
        if (ids[i] > ids[i - 1]) continue;
        std::cout << "warning: the drafter's target layers " << nlohmann::json(ids).dump()
                  << " repeat or fall: vLLM collects each target layer once, in layer order, and would feed it "
                     "other features than it trained on; serve it with z-lab's code, or train with rising ids\n";
        break;
      }
      return 0;
    };
  });
}

namespace {

int regenerate_conversations_impl(const target::TargetModel& target, const std::string& target_dir,
                                  train::ChatRegenerateOptions chat_options) {
  const auto tokenizer = text::Tokenizer::load(target_dir);
  chat_options.progress = &std::cerr;
  const auto report = train::regenerate_chats(target, *tokenizer, chat_options);
  std::cout << "wrote " << report.written << " samples to " << chat_options.out.string() << " ("
            << report.already_done << " already there from an earlier run, " << report.rejected.size()
            << " conversations not answered)\n";
  // This run's records were logged at publishing; the earlier lines' are said here.
  if (chat_options.features.enabled() && report.already_done > 0) {
    std::cout << "features: of the " << report.already_done << " lines already in " << chat_options.out.string() << ", "
              << report.features_recomputed << " lacked features in " << chat_options.features.dir.string()
              << (report.features_recomputed > 0 ? " (an earlier run without --features, or killed before publishing)"
                                                    " and got them now"
                                                  : "");
    if (report.features_mismatched > 0)
      std::cout << "; " << report.features_mismatched
                << " are cached there for other tokens (an earlier run for another output): training on this output "
                   "with that cache refuses them, give a new --features directory";
    std::cout << "\n";
  }
  for (const auto& rejection : report.rejected) std::cout << "  " << chat_options.chats.string() << " " << rejection << "\n";
  return 0;
}

}  // namespace

void add_regenerate_command(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("regenerate", "let the target answer each prompt or conversation itself, written as "
                                               "training JSONL with the loss mask on the response");
  static std::string target_dir, prompts, chats, chat_template = "qwen3", out;
  static bool enable_thinking = false;
  static int threads = 1;
  static train::RegenerateOptions options;
  sub->add_option("--target", target_dir, "target model directory (with --chats: also its tokenizer.json)")->required();
  sub->add_option("--prompts", prompts, "JSONL: {\"prompt_ids\": [...]} or samples (their prompts are used)");
  sub->add_option("--chats", chats,
                  "JSONL conversations ({\"messages\"} or ShareGPT {\"conversations\"}): each is answered from "
                  "its last user turn; a rerun with the same --out continues where it stopped");
  sub->add_option("--chat-template", chat_template, "with --chats: qwen3 | qwen3.5 | qwen2.5 | chatml | llama3 | harmony (gpt-oss)")
      ->capture_default_str();
  static std::string current_date;
  sub->add_option("--current-date", current_date,
                  "with --chats and harmony: the system message's \"Current date\" (YYYY-MM-DD; default today's, "
                  "as gpt-oss's template writes it), for prompts that do not change with the day they are made");
  sub->add_flag("--enable-thinking", enable_thinking, "with --chats and qwen3 or qwen3.5: let the target think (default: off, "
                                                      "as the DFlash recipe regenerates)");
  sub->add_option("--out", out, "output JSONL")->required();
  sub->add_option("--max-new-tokens", options.max_new_tokens)->capture_default_str();
  sub->add_option("--temperature", options.temperature, "0: greedy (batched); > 0: sampling, one prompt at a time")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--seed", options.seed)->capture_default_str();
  add_threads_option(*sub, threads);
  static std::string device = "cpu", dtype = "float32";
  static std::string mxfp4_experts = config::TargetConfig{}.mxfp4_experts;
  sub->add_option("--device", device, "where the target runs: cpu, cuda or cuda:N (as devices.target)")
      ->capture_default_str();
  sub->add_option("--dtype", dtype,
                  "the target's compute dtype (as model.target.dtype): float32 | bfloat16; with --features, "
                  "the training run that reads the cache must use the same")
      ->check(CLI::IsMember({"float32", "bfloat16"}))
      ->capture_default_str();
  add_mxfp4_experts_option(*sub, mxfp4_experts);
  static std::string features_dir, features_dtype = "bfloat16";
  static int64_t num_target_features = config::DrafterConfig{}.num_target_features;
  static std::vector<int64_t> target_layer_ids;
  auto* features_option = sub->add_option("--features", features_dir,
                  "also write each output line's target hidden states (the layers the drafter reads, every position) "
                  "to a feature cache here, sample id = the line's index; the generation computes them anyway");
  sub->add_option("--features-dtype", features_dtype, "with --features: bfloat16 | float32 | float8_e4m3")
      ->needs(features_option)
      ->capture_default_str();
  sub->add_option("--num-target-features", num_target_features,
                  "with --features: how many target layers, chosen as training chooses them (model.drafter."
                  "num_target_features; 0: as many as the default draft layers)")
      ->needs(features_option)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--target-layer-ids", target_layer_ids,
                  "with --features: these layers instead (model.drafter.target_layer_ids), e.g. 1,9,17")
      ->needs(features_option)
      ->delimiter(',');
  sub->callback([&action] {
    action = [] {
      torch::set_num_threads(threads);
      if (prompts.empty() == chats.empty()) throw ConfigError("regenerate needs exactly one of --prompts and --chats");
      if (!chats.empty()) text::chat_template(chat_template);  // an unknown name fails before the model loads
      train::FeatureCaptureOptions features;
      if (!features_dir.empty()) {
        try {
          features.dtype = data::parse_feature_dtype(features_dtype);
        } catch (const std::invalid_argument& e) {
          throw ConfigError(std::string("--features-dtype: ") + e.what());
        }
        features.dir = features_dir;
        features.target_dir = target_dir;
        features.log = &std::cout;
      }
      torch::Device target_device = torch::kCPU;
      torch::Dtype target_dtype = torch::kFloat32;
      try {
        target_device = train::resolve_device(device);
        target_dtype = train::parse_dtype(dtype);
      } catch (const c10::Error& e) {
        throw ConfigError(std::string("--device ") + device + ": " + e.what_without_backtrace());
      } catch (const std::exception& e) {
        throw ConfigError(std::string("--device ") + device + ": " + e.what());
      }
      auto target =
          target::TargetModel::load(target_dir, target_device, target_dtype, target_load_options(mxfp4_experts));
      if (features.enabled()) {
        try {
          features.layer_ids = train::regenerate_feature_layers(target.config(), num_target_features, target_layer_ids);
        } catch (const std::exception& e) {  // e.g. a layer id past the target's layers
          throw ConfigError(std::string(target_layer_ids.empty() ? "--num-target-features" : "--target-layer-ids") +
                            ": " + e.what());
        }
      }
      options.features = features;
      if (!chats.empty()) {
        train::ChatRegenerateOptions chat_options;
        chat_options.chats = chats;
        chat_options.out = out;
        chat_options.chat_template = chat_template;
        chat_options.enable_thinking = enable_thinking;
        chat_options.current_date = text::checked_current_date(current_date, "--current-date");
        chat_options.max_new_tokens = options.max_new_tokens;
        chat_options.temperature = options.temperature;
        chat_options.seed = options.seed;
        chat_options.features = features;
        return regenerate_conversations_impl(target, target_dir, chat_options);
      }
      int64_t written = train::regenerate_jsonl(target, train::read_prompts(prompts), options, out);
      std::cout << "wrote " << written << " samples to " << out << "\n";
      return 0;
    };
  });
}

}  // namespace dflow::cli
