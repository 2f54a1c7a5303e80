// Reading one sample's captured states in either layout (nodes/engine_capture.hpp).
#include "nodes/engine_capture.hpp"

#include <memory>

#include "data/data_error.hpp"
#include "formats/safetensors.hpp"
#include "train/specforge_container.hpp"
#include "train/specforge_files.hpp"

namespace dflow::nodes {

namespace fs = std::filesystem;

namespace {

std::string dtype_named(torch::ScalarType type) {
  switch (type) {
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    case torch::kFloat32: return "float32";
    default: return c10::toString(type);
  }
}

// A tensor over the sample's bytes, which it keeps alive.
torch::Tensor tensor_over(std::vector<unsigned char>&& bytes, torch::IntArrayRef sizes, torch::ScalarType type) {
  auto owner = std::make_shared<std::vector<unsigned char>>(std::move(bytes));
  return torch::from_blob(owner->data(), sizes, [owner](void*) {}, torch::TensorOptions().dtype(type));
}

CapturedSample read_vllm(const CaptureLayout& layout, int64_t sample_id, const train::EngineWaitOptions& wait,
                         double& waited_s) {
  waited_s += train::wait_for_engine_file(layout.dir, sample_id, wait).count();
  auto file = train::read_engine_file(train::engine_file_path(layout.dir, sample_id));
  CapturedSample sample;
  sample.path = file.path;
  sample.token_ids = std::move(file.token_ids);
  sample.padding_from = static_cast<int64_t>(sample.token_ids.size());
  const std::vector<int64_t> sizes{file.positions, file.slots, file.hidden_size};
  if (file.dtype_name == "F8_E4M3") {
    // hs-connectors' dequantize_fp8_tensor with FP8Transfer's default dtype:
    // fp8.to(bfloat16) * scale.to(bfloat16), the product rounded to bfloat16.
    sample.dtype = "float8_e4m3fn";
    const auto fp8 = torch::from_blob(file.hidden_bytes.data(), sizes, torch::kFloat8_e4m3fn);
    const auto scales = torch::from_blob(file.scales.data(), {file.positions, 1, 1}, torch::kFloat32);
    sample.taps = fp8.to(torch::kBFloat16) * scales.to(torch::kBFloat16);
    return sample;
  }
  const auto type = formats::safetensors_dtype_to_torch(file.dtype_name);
  sample.dtype = dtype_named(type);
  sample.taps = tensor_over(std::move(file.hidden_bytes), sizes, type);
  return sample;
}

CapturedSample read_specforge(const CaptureLayout& layout, int64_t sample_id, int64_t hidden_size,
                              const train::EngineWaitOptions& wait, double& waited_s) {
  const auto paths = train::specforge_file_paths(layout.dir, sample_id, layout.file_group_size);
  train::SpecForgeContainer container;
  // The probe reads the file when it is whole: read once, not probed and read again.
  waited_s += train::wait_for_sample_file(
                  sample_id,
                  {[&] {
                     container = train::read_specforge_container(paths);
                     return container.state;
                   },
                   paths.plain.string() + " (or " + paths.gzipped.filename().string() + ")",
                   "its zip archive or gzip stream has not ended",
                   "is the capture (prepare_hidden_states.py) still running and writing this dataset's samples to "
                   "this directory, with --file-group-size params.file_group_size? It also writes no file for a "
                   "sample whose states hold NaN (its log says 'NaN found ... Skipping save')"},
                  wait)
                  .count();
  auto file = train::read_specforge_sample(container);
  CapturedSample sample;
  sample.path = file.path;
  sample.token_ids = std::move(file.token_ids);
  sample.padding_from = file.padding_from;
  sample.dtype = dtype_named(file.hidden_states.scalar_type());
  const int64_t width = file.hidden_states.size(1);
  if (width % hidden_size != 0 || width == 0)
    throw data::DataError("sample " + std::to_string(sample_id) + ": SpecForge capture file " + file.path.string() +
                          ": hidden_states is " + std::to_string(width) + " wide, not a multiple of the target's " +
                          "hidden size " + std::to_string(hidden_size) + " (n_taps x hidden): captured from another "
                          "target? Check model.target.path against the capture's --target-model-path");
  sample.taps = file.hidden_states.view({file.hidden_states.size(0), width / hidden_size, hidden_size});
  sample.normed_last = file.last_hidden;
  return sample;
}

}  // namespace

CapturedSample wait_and_read_capture(const CaptureLayout& layout, int64_t sample_id, int64_t hidden_size,
                                     const train::EngineWaitOptions& wait, double& waited_s) {
  if (layout.format == "specforge") return read_specforge(layout, sample_id, hidden_size, wait, waited_s);
  return read_vllm(layout, sample_id, wait, waited_s);
}

bool capture_file_present(const CaptureLayout& layout, int64_t sample_id) {
  std::error_code ec;
  if (layout.format == "specforge") {
    const auto paths = train::specforge_file_paths(layout.dir, sample_id, layout.file_group_size);
    return fs::exists(paths.plain, ec) || fs::exists(paths.gzipped, ec);
  }
  const auto path = train::engine_file_path(layout.dir, sample_id);
  return fs::exists(path, ec) && !train::engine_file_locked(path);
}

int64_t capture_files_present(const CaptureLayout& layout) {
  int64_t present = 0;
  std::error_code ec;
  if (layout.format == "specforge") {
    for (const auto& rows : fs::directory_iterator(layout.dir, ec))
      if (rows.is_directory() && rows.path().filename().string().rfind("rows_", 0) == 0)
        for (const auto& entry : fs::directory_iterator(rows.path(), ec)) {
          const auto name = entry.path().filename().string();
          if (name.rfind("data_", 0) == 0 && (name.ends_with(".ckpt") || name.ends_with(".ckpt.gz"))) ++present;
        }
    return present;
  }
  for (const auto& entry : fs::directory_iterator(layout.dir, ec))
    if (entry.path().extension() == ".safetensors" && entry.path().filename().string().rfind("hs_", 0) == 0) ++present;
  return present;
}

}  // namespace dflow::nodes
