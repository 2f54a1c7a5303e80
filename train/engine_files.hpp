#pragma once
// The hidden-state files a serving engine's extraction writes, in the layout
// vLLM's extract_hidden_states connector and vllm-project/speculators use:
// a directory of hs_<i>.safetensors, one per sample i of the prepared
// dataset (0-based, dataset order), each holding `token_ids` (int64 [L]) and
// `hidden_states` ([L, K+1, H]: the K layers asked for, increasing and each
// once as vLLM keeps them, then the last layer's output before the final norm). Torch-free: the bytes
// are decoded where the features are laid out (nodes/features_engine.cpp).
//
// FP8 files (hs-connectors' `fp8` hidden-states backend, which speculators
// reads): hidden_states in float8_e4m3fn (F8_E4M3) with one float32 scale
// per token, `hidden_states_scales` [L, 1, 1] (the token's absolute maximum
// over every slot and feature / 448); the reader dequantizes as speculators'
// FP8Transfer does, in bfloat16: fp8.to(bf16) * scale.to(bf16).
//
// The extraction may still be running: a file that is absent, shorter than
// its header says, or whose `<file>.lock` a writer holds (an flock, taken
// while it writes and released without deleting the lock file) is not
// ready, and wait_for_engine_file polls it with backoff.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace dflow::train {

// <dir>/hs_<sample_id>.safetensors
std::filesystem::path engine_file_path(const std::filesystem::path& dir, int64_t sample_id);

enum class EngineFileState { missing, incomplete, ready };

// Whether a writer holds `<path>.lock` now (a shared flock cannot be taken
// without waiting). A lock file that is there but not held is a finished
// writer's: it does not make the file unready.
bool engine_file_locked(const std::filesystem::path& path);

// Whether the file is there and whole: its size reaches the end of the data
// its header declares, and no writer holds its lock. Throws data::DataError naming
// the file for a header that is whole but malformed.
EngineFileState probe_engine_file(const std::filesystem::path& path);

// One sample's file, read whole.
struct EngineSample {
  std::filesystem::path path;
  std::vector<int64_t> token_ids;        // [L]
  std::string dtype_name;                // of hidden_states: "BF16", "F16", "F32" or "F8_E4M3"
  int64_t positions = 0, slots = 0, hidden_size = 0;  // hidden_states is [positions, slots, hidden_size]
  std::vector<unsigned char> hidden_bytes;            // row-major, little-endian
  std::vector<float> scales;             // F8_E4M3 only: hidden_states_scales, one per position
};


// Reads a ready file. Throws data::DataError naming the file when a tensor is
// missing or of another dtype or shape than the layout above.
EngineSample read_engine_file(const std::filesystem::path& path);

struct EngineWaitOptions {
  std::chrono::duration<double> timeout{600};        // give up after this long without the file
  std::chrono::duration<double> first_poll{0.005};   // backoff doubles from here ...
  std::chrono::duration<double> max_poll{0.5};       // ... up to here
  std::function<bool()> cancelled = {};              // the run stops: give up at once
};

// Waits until the file of `sample_id` is ready and returns how long it waited
// (0 when it was there). Throws data::DataError naming the sample, the file and how
// long it waited when `timeout` passes first (or the run was cancelled).
std::chrono::duration<double> wait_for_engine_file(const std::filesystem::path& dir, int64_t sample_id,
                                                   const EngineWaitOptions& options);

// The same wait for a file of any capture layout: `probe` says where the
// sample's file stands; `shown` names it in the message, `incomplete` says
// what makes a file unready, `hint` what to check.
struct SampleFileWait {
  std::function<EngineFileState()> probe;
  std::string shown, incomplete, hint;
};
std::chrono::duration<double> wait_for_sample_file(int64_t sample_id, const SampleFileWait& file,
                                                   const EngineWaitOptions& options);

}  // namespace dflow::train
