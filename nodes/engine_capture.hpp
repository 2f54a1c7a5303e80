#pragma once
// One sample's captured target states as features.engine lays them out,
// whatever layout the capture wrote (params.format):
//   vllm       vLLM's extract_hidden_states files as speculators reads them,
//              hs_<i>.safetensors (train/engine_files.hpp), bfloat16, float16,
//              float32 or hs-connectors' FP8
//   specforge  SpecForge's offline capture, rows_<g>-<g+G>/data_<i>.ckpt or
//              .ckpt.gz (train/specforge_files.hpp)
// Both are waited for while the capture still writes them.
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "train/engine_files.hpp"

namespace dflow::nodes {

struct CaptureLayout {
  std::string format = "vllm";  // vllm | specforge
  std::filesystem::path dir;
  int64_t file_group_size = 0;  // specforge: its --file-group-size
};

struct CapturedSample {
  std::filesystem::path path;
  std::vector<int64_t> token_ids;  // [L]
  int64_t padding_from = 0;        // positions from here on are the capture batch's padding (SpecForge)
  std::string dtype;               // what the file stores the states in, as params.dtype names it
  torch::Tensor taps;              // [L, slots, H] (FP8 dequantized in bfloat16, as speculators does)
  torch::Tensor normed_last;       // [L, H] after the final norm (SpecForge's DSpark captures), or undefined
};

// Waits for the sample's file (train::wait_for_sample_file), adding the
// wait to `waited_s`, and reads it. Throws data::DataError naming the sample
// and the file when it does not come or is malformed, or (SpecForge) when its
// states' width is not a multiple of `hidden_size`.
CapturedSample wait_and_read_capture(const CaptureLayout& layout, int64_t sample_id, int64_t hidden_size,
                                     const train::EngineWaitOptions& wait, double& waited_s);

// Whether the sample's file is there and not held by a writer's lock (the
// ready-ahead gauge: a file being written in place counts).
bool capture_file_present(const CaptureLayout& layout, int64_t sample_id);

// How many sample files the directory holds now (for the log at start).
int64_t capture_files_present(const CaptureLayout& layout);

}  // namespace dflow::nodes
