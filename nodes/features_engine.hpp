#pragma once
// features.engine: the target's features read from the hidden-state files a
// serving engine's extraction writes (vLLM's extract_hidden_states, as
// vllm-project/speculators drives it, train/engine_files.hpp; or SpecForge's
// offline capture, train/specforge_files.hpp: params.format), in place of
// target_forward by changing `type:`. The extraction may still be running:
// a sample's file is waited for, with a timeout.
//
// vLLM's layer numbering. The engine's (and speculators') layer id k is the
// residual stream entering decoder layer k (Hugging Face's hidden_states[k]:
// 0 is the embeddings); its id N (the target's layer count) is the last
// layer's output before the final norm. dflow's target_layer_ids l is the
// output of layer l, so dflow l is engine id l + 1 for l < N - 1; dflow's
// N - 1 is the output after the final norm, which no engine slot holds.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/yaml_reader.hpp"
#include "data/plan_cache.hpp"

namespace dflow::nodes {

struct EngineFeaturesParams {
  std::string dir;                     // the extraction's output: hs_<i>.safetensors (vllm), rows_*/data_<i>.ckpt (specforge)
  std::string format = "vllm";         // the capture's layout: vllm | specforge (nodes/engine_capture.hpp)
  int64_t file_group_size = 2000;      // specforge: samples per rows_<g>-<g+G> folder (its --file-group-size)
  std::vector<int> engine_layer_ids;   // what hidden_states' slots are, in the capture's numbering: increasing
  std::string dtype = "bfloat16";      // what the files hold (checked per file); features train in model.drafter.dtype
  std::string on_mismatch = "fail";    // a file with other tokens than the sample: fail | skip (counted as excluded)
  double max_skipped_fraction = 0.01;  // skip: the run fails once more of the dataset's samples were skipped
  double timeout_s = 600;              // a sample whose file is not whole by then fails the run
  int ready_ahead_window = 256;        // samples ahead (in training order) probed for the "ready ahead" gauge
  std::string file_order;              // "": file i holds dataset sample i; else `dflow extraction-order --map`'s map
};
EngineFeaturesParams read_engine_features_params(config::YamlSection& params);

// SpecForge's numbering. Its layer id k (the draft config's
// dflash_config.target_layer_ids) is the output of decoder layer k: SGLang
// captures it before layer k + 1 (and Hugging Face's hidden_states[k + 1]
// is what SpecForge's own drafter reads), so SpecForge's k is dflow's k. The
// taps are concatenated in increasing layer order, each once. The last
// layer N - 1 (SpecForge's qwen3.5-4b-domino.json lists it) is Hugging
// Face's hidden_states[N], after the final norm, as SpecForge's Hugging Face
// target backend stored it: dflow's N - 1 as target_forward computes it, read
// as is. SGLang has no layer N to capture it before: its capture leaves the
// tap out, and a file with one tap fewer than ids ending in N - 1 is refused
// saying so. SpecForge's DSpark captures also hold target_last_hidden_states,
// the last layer after the final norm: the teacher of a `kl` run, as it is;
// a tap N - 1 must equal it (an SGLang patched to capture at its end layer
// takes it before the norm, which is refused), and without it the tap N - 1
// is the teacher.
std::vector<int64_t> specforge_slots_for(const std::vector<int>& specforge_layer_ids,
                                         const std::vector<int64_t>& feature_layer_ids, int64_t target_layers);

// The slot of hidden_states that holds each of dflow's `feature_layer_ids`
// for a target of `target_layers` layers. Throws std::invalid_argument
// naming the layer no slot holds.
std::vector<int64_t> engine_slots_for(const std::vector<int>& engine_layer_ids,
                                      const std::vector<int64_t>& feature_layer_ids, int64_t target_layers);

// dflow's feature layers the files hold: every slot but the embeddings (id 0)
// and the last layer before the final norm (id N), as dflow numbers them.
std::vector<int64_t> engine_feature_layers(const std::vector<int>& engine_layer_ids, int64_t target_layers);
// SpecForge's captures: every tap, as dflow numbers them (the same; checked
// against the target's layer count by specforge_slots_for).
std::vector<int64_t> specforge_feature_layers(const std::vector<int>& specforge_layer_ids);

// The ready-ahead gauge: how many samples after `plan`'s (`rank`'s, in
// training order, within its epoch) are `ready`, up to the first that is not
// and at most `window`: how far training can run on without waiting for the
// extraction. Holds the epoch's plan from `plans` while it walks it.
int64_t samples_ready_ahead(const data::PlanCache& plans, const data::PlannedBatch& plan, int rank, int64_t window,
                            const std::function<bool(int64_t sample_id)>& ready);

}  // namespace dflow::nodes
