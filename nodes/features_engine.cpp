// features.engine: features read from a serving engine's hidden-state files
// (nodes/features_engine.hpp). Each replica reads the files of the batch it
// holds; the read-ahead is the graph's: its replicas read that many batches
// at once and the edges after it bound the batches read ahead of the
// drafter, so the node never builds a queue of its own. The time a replica waits for files
// the extraction has not written yet is reported to the graph's telemetry
// (outside_wait_s), with how many samples ahead in training order are ready.
#include "nodes/features_engine.hpp"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <optional>
#include <set>

#include "config/errors.hpp"
#include "config/log.hpp"
#include "data/data_error.hpp"
#include "data/extraction_order.hpp"
#include "graph/telemetry.hpp"
#include "formats/safetensors.hpp"
#include "target/target.hpp"
#include "nodes/engine_capture.hpp"
#include "nodes/exclude_samples.hpp"
#include "nodes/feature_source.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/node_params.hpp"
#include "nodes/node_support.hpp"
#include "nodes/plan_options.hpp"
#include "nodes/registry.hpp"
#include "train/engine_files.hpp"

namespace dflow::nodes {

namespace {

namespace fs = std::filesystem;

std::string ids_text(const auto& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}

// vLLM keeps the layers it is asked for sorted and each once
// (tuple(sorted(set(layers)))), so its files' slots only ever increase: ids
// in another order would name the wrong layer for a slot.
std::optional<std::string> check_engine_layer_ids(const std::vector<int>& ids) {
  if (ids.empty()) return "must list the files' slots, e.g. [2, 14, 25, 28]";
  for (size_t i = 1; i < ids.size(); ++i)
    if (ids[i] <= ids[i - 1]) {
      std::set<int> sorted(ids.begin(), ids.end());
      return ids_text(ids) + " must increase, each id once (" + std::to_string(ids[i - 1]) + " then " +
             std::to_string(ids[i]) + "): vLLM writes the layers it is asked for sorted and each once, whatever "
             "order --target-layer-ids gives them in, so the files' slots are " +
             ids_text(std::vector<int>(sorted.begin(), sorted.end())) + " for these ids";
    }
  return std::nullopt;
}

const config::KeySet<EngineFeaturesParams>& engine_keys() {
  using config::OnResume;
  static const config::KeySet<EngineFeaturesParams> keys = [] {
    config::KeySet<EngineFeaturesParams> k;
    k.add("dir", [](EngineFeaturesParams& p) -> auto& { return p.dir; }, OnResume::must_match,
          "the extraction's output directory (vllm: hs_<i>.safetensors per sample i; specforge: "
          "rows_<g>-<g+G>/data_<i>.ckpt or .ckpt.gz, prepare_hidden_states.py's --output-path)",
          config::must<std::string>([](const std::string& v) { return !v.empty(); }, "must name the directory"));
    k.add("format", [](EngineFeaturesParams& p) -> auto& { return p.format; }, OnResume::must_match,
          "the capture's layout: vllm (vLLM's extract_hidden_states, as speculators drives it) or specforge "
          "(SpecForge's scripts/prepare_hidden_states.py)",
          config::one_of({"vllm", "specforge"}));
    k.add("file_group_size", [](EngineFeaturesParams& p) -> auto& { return p.file_group_size; },
          OnResume::may_change,
          "format: specforge: samples per rows_<g>-<g+G> folder (its --file-group-size, 2000); only where the files "
          "are looked for (a value other than the folders' is refused at start)",
          config::must<int64_t>([](int64_t v) { return v > 0; }, "must be > 0"));
    k.add("engine_layer_ids", [](EngineFeaturesParams& p) -> auto& { return p.engine_layer_ids; },
          OnResume::must_match,
          "the layer ids of hidden_states' slots in the capture's numbering, increasing. vllm: the extraction's ids "
          "sorted, each once, the last layer N appended; engine id k is dflow layer k - 1. specforge: the draft "
          "config's dflash_config.target_layer_ids, sorted; SpecForge's id k is dflow layer k",
          check_engine_layer_ids);
    k.add("dtype", [](EngineFeaturesParams& p) -> auto& { return p.dtype; }, OnResume::must_match,
          "the dtype the files hold (each file is checked): float8_e4m3fn is hs-connectors' fp8 backend (vllm only), "
          "dequantized as speculators does; features are converted to model.drafter.dtype",
          config::one_of({"bfloat16", "float16", "float32", "float8_e4m3fn"}));
    k.add("on_mismatch", [](EngineFeaturesParams& p) -> auto& { return p.on_mismatch; }, OnResume::may_change,
          "a file whose tokens differ from its sample's: fail the run, or skip the sample (counted in the step "
          "record's excluded_samples)",
          config::one_of({"fail", "skip"}));
    k.add("max_skipped_fraction", [](EngineFeaturesParams& p) -> auto& { return p.max_skipped_fraction; },
          OnResume::may_change,
          "the run fails once the samples skipped are more than this fraction of the dataset's (0.01), naming how "
          "many and the first file",
          config::must<double>([](double v) { return v >= 0.0 && v <= 1.0; }, "must lie in [0, 1]"))
        .only_when("on_mismatch: skip");
    k.add("timeout_s", [](EngineFeaturesParams& p) -> auto& { return p.timeout_s; }, OnResume::may_change,
          "how long to wait for a sample's file before the run fails",
          config::must<double>([](double v) { return v > 0; }, "must be > 0"));
    k.add("ready_ahead_window", [](EngineFeaturesParams& p) -> auto& { return p.ready_ahead_window; },
          OnResume::may_change, "samples ahead of training (in its order) looked for, for the ready-ahead gauge",
          config::must<int>([](int v) { return v >= 0; }, "must be >= 0"));
    k.add("file_order", [](EngineFeaturesParams& p) -> auto& { return p.file_order; }, OnResume::must_match,
          "which sample each file holds: empty, file i holds dataset sample i (the extraction read the dataset in "
          "order); else the map `dflow extraction-order --map` wrote beside the rows the extraction read (training "
          "order), file k holding the sample it lists k-th. A map of another dataset, or one that does not list "
          "each sample once, is refused at start");
    return k;
  }();
  return keys;
}

// Samples whose files held other tokens (on_mismatch: skip), over every
// replica of the node: files of another dataset or tokenization skip them
// all, and the run must stop rather than train on nothing.
struct SkippedSamples {
  std::mutex mutex;
  data::SampleSet ids;
  std::string first;  // the first one: its sample, file and difference
};

// What the replicas share, checked before the graph exists.
struct EngineSource {
  EngineFeaturesParams params;
  std::vector<int64_t> slots;  // hidden_states slot of each drafter feature layer
  int64_t last_slot = -1;      // vllm: the slot of engine id N (before the final norm) when the run needs the teacher
  int64_t normed_last_slot = -1;  // specforge: the tap of layer N - 1 (after the final norm), when listed
  bool teacher = false;        // the run needs the teacher (specforge: each file's target_last_hidden_states)
  CaptureLayout layout;
  std::vector<int64_t> file_of_sample;  // params.file_order's map by sample id (empty: file i is sample i)
  std::shared_ptr<SkippedSamples> skipped = std::make_shared<SkippedSamples>();
};

using PreparedEngine = std::shared_ptr<const EngineSource>;

// SpecForge names its folders rows_<g>-<g+G> by its --file-group-size G: a
// folder of another span means params.file_group_size is not the capture's,
// and every file would be looked for in the wrong folder.
void check_file_groups(const config::NodeDecl& node, const std::string& key, const EngineFeaturesParams& p) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(p.dir, ec)) {
    const auto name = entry.path().filename().string();
    long long first = 0, end = 0;
    char tail = 0;
    if (!entry.is_directory() || std::sscanf(name.c_str(), "rows_%lld-%lld%c", &first, &end, &tail) != 2) continue;
    if (end - first != p.file_group_size || first % p.file_group_size != 0)
      throw ConfigError(node.mark, key + ".params.file_group_size",
                        "node '" + node.name + "' (features.engine): " + p.dir + " holds " + name + ", a folder of " +
                            std::to_string(end - first) + " samples, and file_group_size is " +
                            std::to_string(p.file_group_size) + ": set file_group_size to the capture's "
                            "--file-group-size (" + std::to_string(end - first) + ")");
  }
}

// params.file_order's map, checked against the dataset, as the file index
// of each sample. A map written for another plan (seed, batching, ranks)
// still says which sample each file holds, so training reads it right, only
// in an order the extraction did not follow: said, not refused.
std::vector<int64_t> files_by_sample(const RunContext& run, const config::NodeDecl& node, const std::string& key,
                                     const std::string& path) {
  data::FileOrder order;
  try {
    order = data::read_file_order(path);
    data::check_file_order(order, run.dataset, path);
  } catch (const data::DataError& e) {
    throw ConfigError(node.mark, key + ".params.file_order", "node '" + node.name + "' (features.engine): " + e.what());
  }
  const auto run_order = data::order_options_text(plan_options(run.config, run.batching, run.options.world_size, 0));
  if (order.written_for != run_order)
    log::warn("data", "node '" + node.name + "' (features.engine): " + path + " follows the plan of " +
                          order.written_for + ", this run plans with " + run_order +
                          ": its files are read right, but not in the order the extraction wrote them, so training "
                          "may wait for it; write the order with this config (`dflow extraction-order`) before "
                          "extracting");
  std::vector<int64_t> file_of(order.sample_ids.size());
  for (size_t k = 0; k < order.sample_ids.size(); ++k) file_of[static_cast<size_t>(order.sample_ids[k])] = static_cast<int64_t>(k);
  return file_of;
}

PreparedEngine prepare_engine(const RunContext& run, const config::NodeDecl& node) {
  const std::string key = node_path(run.config.pipeline, node);
  auto section = node_params(run.config.pipeline, node);
  auto source = std::make_shared<EngineSource>();
  source->params = read_engine_features_params(section);
  const auto& p = source->params;
  const bool specforge = p.format == "specforge";
  source->layout = {p.format, p.dir, p.file_group_size};
  source->teacher = run.needs_teacher();
  try {
    source->slots = specforge
                        ? specforge_slots_for(p.engine_layer_ids, run.feature_layer_ids, run.drafter_spec.num_target_layers)
                        : engine_slots_for(p.engine_layer_ids, run.feature_layer_ids, run.drafter_spec.num_target_layers);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(node.mark, key + ".params.engine_layer_ids",
                      "node '" + node.name + "' (features.engine): engine_layer_ids " + ids_text(p.engine_layer_ids) +
                          " do not hold the drafter's feature layers " + ids_text(run.feature_layer_ids) +
                          " (model.drafter.target_layer_ids, dflow numbering): " + e.what());
  }
  if (specforge) {
    const int64_t n = run.drafter_spec.num_target_layers;
    const auto at = std::find(p.engine_layer_ids.begin(), p.engine_layer_ids.end(), static_cast<int>(n - 1));
    if (at != p.engine_layer_ids.end()) source->normed_last_slot = at - p.engine_layer_ids.begin();
  }
  if (run.needs_teacher() && !specforge) {
    const int64_t n = run.drafter_spec.num_target_layers;
    const auto at = std::find(p.engine_layer_ids.begin(), p.engine_layer_ids.end(), static_cast<int>(n));
    if (at == p.engine_layer_ids.end())
      throw ConfigError(node.mark, key + ".params.engine_layer_ids",
                        "node '" + node.name + "' (features.engine): engine_layer_ids " + ids_text(p.engine_layer_ids) +
                            " have no slot of engine id " + std::to_string(n) + " (the " + std::to_string(n) +
                            "-layer target's last layer, before its final norm), and " + run.teacher_because +
                            ", which needs the target's last hidden state: extract with the last layer appended (" +
                            std::to_string(n) + ") and list it here");
    if (!run.target_head->final_norm_weight().defined())
      throw std::logic_error("features.engine: the run needs the teacher but the target's final norm is not loaded");
    const auto& head = run.target_head->config();
    if (head.norm == target::NormStyle::Unknown)
      throw ConfigError(node.mark, key + ".params.engine_layer_ids",
                        "node '" + node.name + "' (features.engine): " + run.teacher_because + ", which applies the "
                        "target's final norm to the engine's last layer, but dflow does not know how " +
                            head.architecture + " (model_type '" + head.model_type + "') applies its norm, and "
                            "will not guess: train with loss: ce (the default), or extract the final-normed last "
                            "layer as SpecForge captures do (format: specforge)");
    source->last_slot = at - p.engine_layer_ids.begin();
  }
  if (!fs::is_directory(p.dir))
    throw ConfigError(node.mark, key + ".params.dir",
                      "node '" + node.name + "' (features.engine): dir '" + p.dir + "' is not a directory" +
                          (fs::path(p.dir).is_relative() ? " (relative to " + fs::current_path().string() + ")" : "") +
                          ": the extraction's output directory must exist before training starts (files in it are "
                          "waited for; the directory is not)");
  if (specforge) check_file_groups(node, key, p);
  if (!p.file_order.empty()) source->file_of_sample = files_by_sample(run, node, key, p.file_order);
  const int64_t present = capture_files_present(source->layout);
  log::info("data", log::str("engine features ", p.dir, " (", p.format, "): ", present, " of ", run.dataset.size(),
                             " sample files there now (", p.dtype, ", slots ", ids_text(source->slots), " of ",
                             ids_text(p.engine_layer_ids), " for layers ", ids_text(run.feature_layer_ids),
                             "); a missing one is waited for up to ", p.timeout_s, " s"));
  return source;
}

class FeaturesEngine final : public graph::FunctionBody {
 public:
  FeaturesEngine(const RunContext& run, std::string name, int replica, PreparedEngine source, graph::NodeMeter* meter,
                 std::stop_token stop)
      : run_(run), name_(std::move(name)), replica_(replica), source_(std::move(source)), meter_(meter),
        stop_(std::move(stop)) {
    wait_.timeout = std::chrono::duration<double>(source_->params.timeout_s);
    wait_.cancelled = [this] { return stop_.stop_requested(); };
    if (meter_) meter_->set_ready_ahead(0);
  }

  void process(graph::Inputs& in, graph::Emitter& out) override {
    auto message = in[0];
    auto& batch = graph::payload<PaddedBatch>(message);
    torch::Tensor features;  // [B, S, n*H] on the drafter's device
    torch::Tensor teacher;   // [B, S, H] likewise, when the run needs it
    data::SampleSet mismatched;
    with_batch_context(batch.plan, batch.position, [&] {
      inject_node_faults(run_, name_, batch.position.global_step);
      if (batch.plan.rows() == 0) return;  // a rank's empty share of a short step
      features = read_batch(batch, mismatched, teacher);
      if (meter_) meter_->set_ready_ahead(ready_ahead(batch.plan));
    });
    FeatureBatch result{std::move(batch), std::move(features), replica_, std::move(teacher)};
    if (!mismatched.empty()) result = without_samples(run_, result, mismatched);
    out.emit(graph::make_message(message.seq, message.cost, std::move(result)));
  }

 private:
  torch::Tensor read_batch(const PaddedBatch& batch, data::SampleSet& mismatched, torch::Tensor& teacher) {
    const auto& p = source_->params;
    const int64_t hidden = run_.drafter_spec.hidden_size, layers = static_cast<int64_t>(source_->slots.size());
    const bool host_drafter = run_.drafter_device.is_cpu();
    auto options = torch::TensorOptions().dtype(host_drafter ? run_.drafter_dtype : torch::kFloat32)
                       .pinned_memory(!host_drafter && run_.drafter_device.is_cuda());
    auto features = torch::zeros({batch.input_ids.size(0), batch.input_ids.size(1), layers * hidden}, options);
    // The last layer before the final norm (vllm), in the target's dtype
    // (the norm runs as the target's would), or after it (specforge: its
    // target_last_hidden_states, else its tap of layer N - 1), on the host
    // first.
    const auto& head = *run_.target_head;
    torch::Tensor last;
    if (source_->teacher)
      last = torch::zeros({batch.input_ids.size(0), batch.input_ids.size(1), hidden},
                          torch::TensorOptions().dtype(head.dtype()).pinned_memory(run_.drafter_device.is_cuda()));
    const auto slots = torch::tensor(source_->slots, torch::kInt64);
    double waited_s = 0;
    for (const auto& place : sample_places(batch.plan, run_.dataset.lengths())) {
      const auto sample = read_sample(place.sample_id, hidden, waited_s);
      check_layout(sample, place.sample_id);
      if (const auto why = token_mismatch(sample, place.sample_id); !why.empty()) {
        const std::string what = "sample " + std::to_string(place.sample_id) + ": engine features file " +
                                 sample.path.string() + order_note(place.sample_id) +
                                 " holds other tokens than the dataset's sample (" + why + ")";
        if (p.on_mismatch == "fail")
          throw data::DataError(what + "; the extraction ran on another dataset or tokenization" +
                                (p.file_order.empty() ? "" : ", or on rows other than those written with this map") +
                                " (set on_mismatch: skip to train without such samples)");
        log::warn("data", log::str(what, ": skipped (node '", name_, "', on_mismatch: skip)"));
        count_skipped(place.sample_id, what);
        mismatched.insert(place.sample_id);
        continue;
      }
      // A SpecForge file may run on past the sample into its capture batch's padding.
      const auto taps = sample.taps.narrow(0, 0, place.length);
      features[place.row].narrow(0, place.first, place.length).copy_(taps.index_select(1, slots).reshape({place.length, -1}));
      if (last.defined())
        last[place.row].narrow(0, place.first, place.length)
            .copy_(source_->last_slot >= 0        ? taps.select(1, source_->last_slot)
                   : sample.normed_last.defined() ? sample.normed_last.narrow(0, 0, place.length)
                                                  : taps.select(1, source_->normed_last_slot));
    }
    if (meter_) meter_->on_outside_wait(waited_s);
    if (last.defined()) {
      // Padding rows stay zero through the norm (0 * rsqrt(eps) = 0).
      const auto normed = source_->last_slot >= 0
                              ? target::family_rms_norm(head.config(), last.to(head.device()), head.final_norm_weight())
                              : last;
      teacher = normed.to(run_.drafter_device, run_.drafter_dtype).contiguous();
    }
    return host_drafter ? features : for_drafter(run_, features);
  }

  int64_t file_index(int64_t sample_id) const {
    return source_->file_of_sample.empty() ? sample_id : source_->file_of_sample[static_cast<size_t>(sample_id)];
  }

  // " (file 7 by params.file_order runs/x/order.map.json)", or "" without a map.
  std::string order_note(int64_t sample_id) const {
    if (source_->file_of_sample.empty()) return "";
    return " (file " + std::to_string(file_index(sample_id)) + " by params.file_order " + source_->params.file_order +
           ")";
  }

  // The sample's file, waited for; with a map, its errors name the sample
  // as well as the file index they are about.
  CapturedSample read_sample(int64_t sample_id, int64_t hidden, double& waited_s) const {
    if (source_->file_of_sample.empty())
      return wait_and_read_capture(source_->layout, sample_id, hidden, wait_, waited_s);
    try {
      return wait_and_read_capture(source_->layout, file_index(sample_id), hidden, wait_, waited_s);
    } catch (const data::DataError& e) {
      throw data::DataError("sample " + std::to_string(sample_id) + order_note(sample_id) + ": " + e.what());
    }
  }

  // Throws once more samples were skipped than max_skipped_fraction allows.
  void count_skipped(int64_t sample_id, const std::string& what) const {
    auto& skipped = *source_->skipped;
    std::lock_guard lock(skipped.mutex);
    if (skipped.ids.empty()) skipped.first = what;
    skipped.ids.insert(sample_id);
    const double fraction = source_->params.max_skipped_fraction;
    const int64_t samples = run_.dataset.size();
    if (static_cast<double>(skipped.ids.size()) <= fraction * static_cast<double>(samples)) return;
    throw data::DataError(log::str(
        "node '", name_, "' (features.engine): the engine files of ", skipped.ids.size(),
        " samples hold other tokens than the dataset's, more than max_skipped_fraction ", fraction, " of its ", samples,
        " samples; the first: ", skipped.first, ". The extraction ran on another dataset or tokenization, or data.train "
        "lists other samples or another order: check them (or raise params.max_skipped_fraction)"));
  }

  // A SpecForge file with one tap fewer than engine_layer_ids, which end in
  // the last layer: SGLang's capture takes layer k before layer k + 1, and
  // there is no layer N to take N - 1 before, so its capture leaves it out.
  std::string without_last_layer(const CapturedSample& sample) const {
    const auto& ids = source_->params.engine_layer_ids;
    const int64_t n = run_.drafter_spec.num_target_layers;
    const std::vector<int> held(ids.begin(), ids.end() - 1);
    return "hidden_states holds " + std::to_string(sample.taps.size(1)) + " taps, params.engine_layer_ids lists " +
           std::to_string(ids.size()) + " " + ids_text(ids) + ", the last of them the target's last layer " +
           std::to_string(n - 1) + ": SGLang's capture takes layer k before layer k + 1, and the " +
           std::to_string(n) + "-layer target has no layer " + std::to_string(n) +
           ", so its files leave layer " + std::to_string(n - 1) + " out and hold " + ids_text(held) +
           ". List those (and leave " + std::to_string(n - 1) + " out of model.drafter.target_layer_ids), or "
           "capture the last layer as Hugging Face's hidden_states[" + std::to_string(n) +
           "] (after the final norm), as SpecForge's Hugging Face target backend did";
  }

  // "" when the tap of layer N - 1 is the file's target_last_hidden_states
  // (both the last layer after the final norm, from one forward), else why
  // it is not read: a tap taken before the norm (an SGLang patched to
  // capture at its end layer) would be read as the normed layer.
  std::string last_tap_mismatch(const CapturedSample& sample) const {
    const int64_t length = std::min(sample.taps.size(0), sample.normed_last.size(0));
    const auto tap = sample.taps.select(1, source_->normed_last_slot).narrow(0, 0, length).to(torch::kFloat32);
    const auto normed = sample.normed_last.narrow(0, 0, length).to(torch::kFloat32);
    // Bounded by the storage dtype's rounding (at most 2^-8 of each value in
    // bfloat16); before the norm the states differ in scale entirely.
    const double difference = (tap - normed).norm().item<double>(), size = normed.norm().item<double>();
    if (difference <= 0.01 * size) return "";
    const int64_t n = run_.drafter_spec.num_target_layers;
    return log::str("the tap of the last layer ", n - 1, " differs from target_last_hidden_states by ",
                    difference / std::max(size, 1e-30), " of its norm: dflow reads SpecForge's id ", n - 1,
                    " as Hugging Face's hidden_states[", n, "], the last layer after the final norm (which "
                    "target_last_hidden_states is), and this capture took it otherwise (before the norm, as an "
                    "SGLang patched to capture at its end layer does); leave ", n - 1,
                    " out of engine_layer_ids and model.drafter.target_layer_ids, or capture it after the norm");
  }

  void check_layout(const CapturedSample& sample, int64_t sample_id) const {
    const auto& p = source_->params;
    const bool specforge = p.format == "specforge";
    const int64_t hidden = run_.drafter_spec.hidden_size;
    std::string what;
    if (sample.dtype != p.dtype)
      what = "hidden_states is " + sample.dtype + ", params.dtype says " + p.dtype;
    else if (specforge && sample.taps.size(1) + 1 == static_cast<int64_t>(p.engine_layer_ids.size()) &&
             p.engine_layer_ids.back() == run_.drafter_spec.num_target_layers - 1)
      what = without_last_layer(sample);
    else if (sample.taps.size(1) != static_cast<int64_t>(p.engine_layer_ids.size()))
      what = specforge ? "hidden_states holds " + std::to_string(sample.taps.size(1)) + " taps of hidden size " +
                             std::to_string(hidden) + ", params.engine_layer_ids lists " +
                             std::to_string(p.engine_layer_ids.size()) + " " + ids_text(p.engine_layer_ids) +
                             " (list the draft config's dflash_config.target_layer_ids the capture used)"
                       : "hidden_states has " + std::to_string(sample.taps.size(1)) +
                             " slots, params.engine_layer_ids lists " + std::to_string(p.engine_layer_ids.size()) +
                             " " + ids_text(p.engine_layer_ids);
    else if (sample.taps.size(2) != hidden)
      what = "hidden size " + std::to_string(sample.taps.size(2)) + ", the target's is " + std::to_string(hidden) +
             " (another target?)";
    else if (source_->teacher && specforge && !sample.normed_last.defined() && source_->normed_last_slot < 0)
      what = "no target_last_hidden_states, and " + run_.teacher_because +
             ", which needs the target's last hidden state: capture with prepare_hidden_states.py --strategy dspark "
             "(its records hold it), or train with a loss that needs no teacher";
    else if (sample.normed_last.defined() && sample.normed_last.size(1) != hidden)
      what = "target_last_hidden_states is " + std::to_string(sample.normed_last.size(1)) +
             " wide, the target's hidden size is " + std::to_string(hidden) + " (another target?)";
    else if (sample.normed_last.defined() && source_->normed_last_slot >= 0)
      what = last_tap_mismatch(sample);
    if (!what.empty())
      throw data::DataError("sample " + std::to_string(sample_id) + ": engine features file " + sample.path.string() +
                            ": " + what + " (node '" + name_ + "')");
  }

  // "" when the file's tokens are the sample's, else where they differ. A
  // SpecForge file may hold more positions, its capture batch's padding.
  std::string token_mismatch(const CapturedSample& sample, int64_t sample_id) const {
    const auto tokens = run_.dataset.sample(sample_id).input_ids;
    const auto held = static_cast<int64_t>(sample.token_ids.size()), wanted = static_cast<int64_t>(tokens.size());
    if (held != wanted && !(held > wanted && sample.padding_from <= wanted))
      return std::to_string(held) + " tokens" +
             (sample.padding_from < held ? " (" + std::to_string(sample.padding_from) + " before its padding)" : "") +
             ", the sample has " + std::to_string(wanted);
    for (size_t i = 0; i < tokens.size(); ++i)
      if (sample.token_ids[i] != tokens[i])
        return "position " + std::to_string(i) + ": " + std::to_string(sample.token_ids[i]) + " in the file, " +
               std::to_string(tokens[i]) + " in the sample";
    return "";
  }

  int64_t ready_ahead(const data::PlannedBatch& plan) const {
    return samples_ready_ahead(run_.plans(), plan, run_.options.rank, source_->params.ready_ahead_window,
                               [&](int64_t sample_id) {
                                 return capture_file_present(source_->layout, file_index(sample_id));
                               });
  }

  const RunContext& run_;
  std::string name_;
  int replica_;
  PreparedEngine source_;
  graph::NodeMeter* meter_;
  std::stop_token stop_;
  train::EngineWaitOptions wait_;
};

}  // namespace

EngineFeaturesParams read_engine_features_params(config::YamlSection& params) {
  const bool bound_given = params.has("max_skipped_fraction");
  EngineFeaturesParams p = read_params(engine_keys(), params);
  if (bound_given && p.on_mismatch != "skip")
    throw params.error("max_skipped_fraction", "max_skipped_fraction bounds the samples on_mismatch: skip leaves out, "
                                               "and on_mismatch is " + p.on_mismatch +
                                               ": set on_mismatch: skip, or leave max_skipped_fraction out");
  if (p.format != "specforge" && params.has("file_group_size"))
    throw params.error("file_group_size", "file_group_size is SpecForge's folder size, and format is " + p.format +
                                              ": set format: specforge, or leave file_group_size out");
  if (p.format == "specforge" && p.dtype == "float8_e4m3fn")
    throw params.error("dtype", "float8_e4m3fn is hs-connectors' FP8 layout of vLLM's files; SpecForge's captures "
                                "hold the target's dtype: set dtype to it (bfloat16 for a bf16 target)");
  return p;
}

std::vector<int64_t> specforge_slots_for(const std::vector<int>& specforge_layer_ids,
                                         const std::vector<int64_t>& feature_layer_ids, int64_t target_layers) {
  for (const int id : specforge_layer_ids)
    if (id < 0 || id > target_layers - 1)
      throw std::invalid_argument(
          "SpecForge layer id " + std::to_string(id) + " outside [0, " + std::to_string(target_layers - 1) +
          "] for a " + std::to_string(target_layers) + "-layer target: SpecForge's id k is decoder layer k's output, "
          "and the target has no layer " + std::to_string(id) + "; was the capture made for another target?");
  std::vector<int64_t> slots;
  for (const int64_t layer : feature_layer_ids) {
    const auto at = std::find(specforge_layer_ids.begin(), specforge_layer_ids.end(), static_cast<int>(layer));
    if (at == specforge_layer_ids.end())
      throw std::invalid_argument("no tap holds dflow layer " + std::to_string(layer) + " (SpecForge id " +
                                  std::to_string(layer) + ", the same numbering)");
    slots.push_back(at - specforge_layer_ids.begin());
  }
  return slots;
}

std::vector<int64_t> specforge_feature_layers(const std::vector<int>& specforge_layer_ids) {
  return {specforge_layer_ids.begin(), specforge_layer_ids.end()};
}

std::vector<int64_t> engine_slots_for(const std::vector<int>& engine_layer_ids,
                                      const std::vector<int64_t>& feature_layer_ids, int64_t target_layers) {
  for (const int id : engine_layer_ids)
    if (id < 0 || id > target_layers)
      throw std::invalid_argument("engine layer id " + std::to_string(id) + " outside [0, " +
                                  std::to_string(target_layers) + "] for a " + std::to_string(target_layers) +
                                  "-layer target");
  std::vector<int64_t> slots;
  for (const int64_t layer : feature_layer_ids) {
    if (layer == target_layers - 1)
      throw std::invalid_argument(
          "dflow layer " + std::to_string(layer) + " is the last layer's output after the final norm (as "
          "target_forward computes it); the engine's id " + std::to_string(target_layers) +
          " is before the norm, and no slot holds the normed one: choose layers below " + std::to_string(layer));
    const auto at = std::find(engine_layer_ids.begin(), engine_layer_ids.end(), static_cast<int>(layer + 1));
    if (at == engine_layer_ids.end())
      throw std::invalid_argument("no slot holds dflow layer " + std::to_string(layer) + " (engine id " +
                                  std::to_string(layer + 1) + ")");
    slots.push_back(at - engine_layer_ids.begin());
  }
  return slots;
}

int64_t samples_ready_ahead(const data::PlanCache& plans, const data::PlannedBatch& plan, int rank, int64_t window,
                            const std::function<bool(int64_t sample_id)>& ready) {
  // Held while walking it: the cache drops an epoch's plan once the loader,
  // running ahead, asks for the epoch after next.
  const auto epoch = plans.get(plan.epoch);
  const auto batches = epoch->batches();
  int64_t count = 0;
  for (auto i = static_cast<size_t>(plan.index_in_epoch) + 1; i < batches.size() && count < window; ++i) {
    if (batches[i].rank != rank) continue;
    for (const int64_t id : batches[i].sample_ids) {
      if (!ready(id)) return count;
      if (++count >= window) break;
    }
  }
  return count;
}

std::vector<int64_t> engine_feature_layers(const std::vector<int>& engine_layer_ids, int64_t target_layers) {
  std::vector<int64_t> layers;
  for (const int id : engine_layer_ids)
    if (id > 0 && id < target_layers) layers.push_back(id - 1);
  if (layers.empty())
    throw std::invalid_argument("engine_layer_ids " + ids_text(engine_layer_ids) +
                                " hold no layer a drafter reads (ids 1 .. " + std::to_string(target_layers - 1) +
                                "; 0 is the embeddings, " + std::to_string(target_layers) +
                                " the last layer before the final norm)");
  return layers;
}

void register_features_engine(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "features.engine";
  spec.description = "the target's features read from a serving engine's hidden-state files (params.dir: vLLM's "
                     "hs_<i>.safetensors, or SpecForge's offline captures with format: specforge) in place of "
                     "target_forward; waits for files an extraction still writes";
  spec.inputs = {{"in", "PaddedBatch"}};
  spec.outputs = {{"out", "FeatureBatch"}};
  spec.check_params = [](config::YamlSection& params) { read_engine_features_params(params); };
  spec.params = engine_keys().docs();
  spec.when_bound = "That is the reader of the engine's hidden-state files: its busy time is reading and converting "
                    "them, and waiting for those the extraction has not written yet (below).";
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    const auto& run = environment(context).run;
    return std::make_unique<FeaturesEngine>(run, context.name, context.replica,
                                            run.prepared_for<PreparedEngine>(context.name), context.meter,
                                            context.stop);
  };
  RunHooks hooks;
  hooks.prepare = [](const RunContext& run, const config::NodeDecl& node) -> std::any { return prepare_engine(run, node); };
  hooks.resume_signature = [](config::YamlSection& params) {
    return resume_text(engine_keys(), read_engine_features_params(params));
  };
  hooks.feature_layers = [](config::YamlSection& params, int64_t target_layers) {
    const auto p = read_engine_features_params(params);
    return p.format == "specforge" ? specforge_feature_layers(p.engine_layer_ids)
                                   : engine_feature_layers(p.engine_layer_ids, target_layers);
  };
  hooks.gives_teacher = true;  // vllm: the last slot through the final norm (prepare_engine refuses one without);
                               // specforge: target_last_hidden_states (a file without it is refused)
  add_node_kind(registry, std::move(spec), std::move(hooks));
}

}  // namespace dflow::nodes
