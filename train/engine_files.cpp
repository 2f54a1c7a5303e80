// Reading a serving engine's hidden-state files (train/engine_files.hpp).
// Torch-free: the header is parsed by model/safetensors_header (fuzzed), the
// bytes are read with plain file I/O.
#include "train/engine_files.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <thread>

#include "data/data_error.hpp"
#include "formats/safetensors_header.hpp"

namespace dflow::train {

namespace fs = std::filesystem;

namespace {

struct HeaderRead {
  EngineFileState state = EngineFileState::missing;
  formats::SafetensorsHeader header;
  uint64_t data_end_bytes = 0;  // from the file's start: where the last tensor ends
};

// The header alone, parsed as if the file were as long as it claims, so that
// a file still being written reads as incomplete rather than as corrupt.
HeaderRead read_header(const fs::path& path) {
  HeaderRead out;
  std::error_code ec;
  if (engine_file_locked(path)) {
    out.state = EngineFileState::incomplete;
    return out;
  }
  const auto size_bytes = fs::file_size(path, ec);
  if (ec) return out;  // not there (or gone between the calls): missing
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;
  out.state = EngineFileState::incomplete;
  if (size_bytes < 8) return out;
  uint64_t header_bytes = 0;
  in.read(reinterpret_cast<char*>(&header_bytes), 8);
  if (!in || header_bytes > size_bytes - 8) return out;
  std::vector<uint8_t> head(8 + header_bytes);
  std::memcpy(head.data(), &header_bytes, 8);
  in.read(reinterpret_cast<char*>(head.data()) + 8, static_cast<std::streamsize>(header_bytes));
  if (!in) return out;
  try {
    out.header = formats::parse_safetensors_header(path, head.data(), std::numeric_limits<uint64_t>::max());
  } catch (const std::runtime_error& e) {
    throw data::DataError(e.what());
  }
  out.data_end_bytes = out.header.data_section_offset_bytes;
  for (const auto& [name, entry] : out.header.entries)
    out.data_end_bytes = std::max(out.data_end_bytes, out.header.data_section_offset_bytes + entry.data_end_bytes);
  if (size_bytes >= out.data_end_bytes) out.state = EngineFileState::ready;
  return out;
}

data::DataError file_error(const fs::path& path, const std::string& what) {
  return data::DataError("engine features file " + path.string() + ": " + what);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

using SafetensorsHeaderEntryRef = const formats::SafetensorsHeaderEntry*;

// hs-connectors' per-token scales of an FP8 file: float32 [L, 1, 1].
SafetensorsHeaderEntryRef find_scales(const fs::path& path,
                                      const std::map<std::string, formats::SafetensorsHeaderEntry>& entries,
                                      int64_t positions) {
  const auto at = entries.find("hidden_states_scales");
  if (at == entries.end())
    throw file_error(path, "holds FP8 (F8_E4M3) hidden_states without hidden_states_scales, its per-token scales "
                           "(hs-connectors' fp8 backend writes both): the file is incomplete or of another writer; "
                           "extract this sample again");
  const auto& s = at->second;
  if (s.dtype_name != "F32" || s.shape != std::vector<int64_t>{positions, 1, 1})
    throw file_error(path, "hidden_states_scales must be float32 [" + std::to_string(positions) +
                               ", 1, 1] (one scale per token, as hs-connectors' fp8 backend writes it), got " +
                               s.dtype_name + " " + shape_text(s.shape));
  return &s;
}

}  // namespace

fs::path engine_file_path(const fs::path& dir, int64_t sample_id) {
  return dir / ("hs_" + std::to_string(sample_id) + ".safetensors");
}

bool engine_file_locked(const fs::path& path) {
  const int fd = ::open((path.string() + ".lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;  // no lock file (or none this process may open): nothing holds one
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // releases the shared lock when it was taken
  return held;
}

EngineFileState probe_engine_file(const fs::path& path) { return read_header(path).state; }

EngineSample read_engine_file(const fs::path& path) {
  const HeaderRead head = read_header(path);
  if (head.state != EngineFileState::ready) throw file_error(path, "not there or not completely written");
  const auto& entries = head.header.entries;
  const auto tokens = entries.find("token_ids"), hidden = entries.find("hidden_states");
  if (tokens == entries.end() || hidden == entries.end())
    throw file_error(path, "needs the tensors token_ids and hidden_states (vLLM's extract_hidden_states layout)");
  const auto& t = tokens->second;
  const auto& h = hidden->second;
  if (t.dtype_name != "I64" || t.shape.size() != 1)
    throw file_error(path, "token_ids must be int64 [L], got " + t.dtype_name + " " + shape_text(t.shape));
  const bool fp8 = h.dtype_name == "F8_E4M3";
  if ((h.dtype_name != "BF16" && h.dtype_name != "F16" && h.dtype_name != "F32" && !fp8) || h.shape.size() != 3 ||
      h.shape[0] != t.shape[0])
    throw file_error(path, "hidden_states must be [L, K+1, H] in BF16, F16, F32 or F8_E4M3 with L = " +
                               std::to_string(t.shape[0]) + " (token_ids), got " + h.dtype_name + " " +
                               shape_text(h.shape));
  // The header parser sizes only the dtypes dflow reads as tensors; an
  // F8_E4M3 span is checked here, one byte an element.
  uint64_t fp8_bytes = 0;
  if (fp8 && (__builtin_mul_overflow(static_cast<uint64_t>(h.shape[0]), static_cast<uint64_t>(h.shape[1]), &fp8_bytes) ||
              __builtin_mul_overflow(fp8_bytes, static_cast<uint64_t>(h.shape[2]), &fp8_bytes) ||
              h.data_end_bytes - h.data_begin_bytes != fp8_bytes))
    throw file_error(path, "hidden_states (F8_E4M3 " + shape_text(h.shape) + ") spans " +
                               std::to_string(h.data_end_bytes - h.data_begin_bytes) +
                               " bytes, not one a value: the file is damaged; extract this sample again");
  const SafetensorsHeaderEntryRef scales = fp8 ? find_scales(path, entries, t.shape[0]) : nullptr;
  if (!fp8 && entries.count("hidden_states_scales"))
    throw file_error(path, "holds hidden_states_scales beside " + h.dtype_name +
                               " hidden_states: only FP8 (F8_E4M3) states are scaled; the file was not written by "
                               "vLLM's connector or hs-connectors' fp8 backend");
  EngineSample sample;
  sample.path = path;
  sample.dtype_name = h.dtype_name;
  sample.positions = h.shape[0];
  sample.slots = h.shape[1];
  sample.hidden_size = h.shape[2];
  sample.token_ids.resize(static_cast<size_t>(t.shape[0]));
  sample.hidden_bytes.resize(h.data_end_bytes - h.data_begin_bytes);
  std::ifstream in(path, std::ios::binary);
  auto read_at = [&](uint64_t offset, void* into, uint64_t bytes) {
    in.seekg(static_cast<std::streamoff>(head.header.data_section_offset_bytes + offset));
    in.read(static_cast<char*>(into), static_cast<std::streamsize>(bytes));
    if (!in) throw file_error(path, "could not read " + std::to_string(bytes) + " bytes (truncated while read?)");
  };
  read_at(t.data_begin_bytes, sample.token_ids.data(), t.data_end_bytes - t.data_begin_bytes);
  read_at(h.data_begin_bytes, sample.hidden_bytes.data(), sample.hidden_bytes.size());
  if (scales) {
    sample.scales.resize(static_cast<size_t>(t.shape[0]));
    read_at(scales->data_begin_bytes, sample.scales.data(), scales->data_end_bytes - scales->data_begin_bytes);
    for (size_t i = 0; i < sample.scales.size(); ++i)
      if (!std::isfinite(sample.scales[i]) || sample.scales[i] <= 0)
        throw file_error(path, "hidden_states_scales at position " + std::to_string(i) + " is " +
                                   std::to_string(sample.scales[i]) +
                                   ", not a positive finite scale (hs-connectors writes at least 1e-12): the file is "
                                   "damaged; extract this sample again");
  }
  return sample;
}

std::chrono::duration<double> wait_for_engine_file(const fs::path& dir, int64_t sample_id,
                                                   const EngineWaitOptions& options) {
  const fs::path path = engine_file_path(dir, sample_id);
  return wait_for_sample_file(
      sample_id,
      {[&] { return probe_engine_file(path); }, path.string(),
       "shorter than its header says, or the writer still holds its .lock",
       "is the extraction still running, and writing this dataset's samples to this directory?"},
      options);
}

std::chrono::duration<double> wait_for_sample_file(int64_t sample_id, const SampleFileWait& file,
                                                   const EngineWaitOptions& options) {
  using Clock = std::chrono::steady_clock;
  const auto began = Clock::now();
  auto poll = options.first_poll;
  EngineFileState state = file.probe();
  while (state != EngineFileState::ready) {
    const std::chrono::duration<double> waited = Clock::now() - began;
    const bool cancelled = options.cancelled && options.cancelled();
    if (waited >= options.timeout || cancelled) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.1f", waited.count());
      throw data::DataError("sample " + std::to_string(sample_id) + ": engine features file " + file.shown +
                            (state == EngineFileState::missing ? " did not appear"
                                                                : " was not completely written (" + file.incomplete + ")") +
                            " within " + seconds + " s" + (cancelled ? " (the run stopped)" : " (params.timeout_s)") +
                            "; " + file.hint);
    }
    std::this_thread::sleep_for(std::min(poll, options.timeout - waited));
    poll = std::min(poll * 2, options.max_poll);
    state = file.probe();
  }
  return Clock::now() - began;
}

}  // namespace dflow::train
