// safetensors reading (memory-mapped) and writing, plus Hugging Face
// checkpoint directories (single file or sharded through an index).
//
// Format: 8-byte little-endian header length N, N bytes of JSON header
// {"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets"}},
// then the data section; data_offsets are relative to the data section.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dflow::formats {

using TensorMap = std::map<std::string, torch::Tensor>;

// "F32" <-> torch::kFloat32 and so on; throws naming the dtype when unknown.
torch::Dtype safetensors_dtype_to_torch(const std::string& dtype_name);
std::string torch_dtype_to_safetensors(torch::Dtype dtype);
// PyTorch's name of a dtype, as configs write it ("bfloat16") -> the
// header's ("BF16"); throws naming it when unknown.
std::string safetensors_dtype_named(const std::string& torch_name);

struct SafetensorsEntry {
  std::string name;
  std::string dtype_name;       // as written in the header, e.g. "BF16"
  std::vector<int64_t> shape;
  uint64_t data_begin_bytes = 0;  // relative to the data section
  uint64_t data_end_bytes = 0;
};

class FileMapping;  // read-only private mmap of a whole file

// An open, validated safetensors file. Every entry's offsets were checked
// against the file size and its shape*dtype size when the file was opened
// (for a dtype dflow does not read, e.g. F8_E4M3, only the offsets: such an
// entry is listed, and tensor() refuses it naming the tensor, dtype and file).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // A CPU tensor over the mapped bytes (no copy when the bytes are aligned
  // for the dtype). The tensor keeps the mapping alive; the mapping is
  // copy-on-write private, so writing into the tensor never touches the file.
  // `with_float8`: F8_E4M3 and F8_E5M2 entries too, as torch's float8 dtypes
  // (a quantized checkpoint's weights, which the caller pairs with their scales).
  torch::Tensor tensor(const std::string& name, bool with_float8 = false) const;
  TensorMap all_tensors(bool with_float8 = false) const;

 private:
  std::filesystem::path path_;
  std::shared_ptr<FileMapping> mapping_;
  uint64_t data_section_offset_bytes_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (any device; copied to CPU, contiguous) in name order with
// a sorted, space-padded, 8-byte aligned header. Written to a temporary file
// in the same directory, synced, then renamed over `path`, so a reader never
// sees a partial file. Duplicate names are refused.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// All tensors of a Hugging Face checkpoint directory: sharded through
// model.safetensors.index.json when present, else model.safetensors, else
// every *.safetensors file in the directory (a name in two files is refused).
// `with_float8`: FP8 entries read as torch's float8 dtypes instead of refused.
TensorMap load_checkpoint_dir(const std::filesystem::path& dir, bool with_float8 = false);
// model.safetensors.index.json's weight_map (tensor name -> shard file),
// checked: valid JSON, an object of file names, each shard present. Throws
// naming the directory and what is wrong.
std::map<std::string, std::string> read_checkpoint_index(const std::filesystem::path& dir,
                                                         const std::filesystem::path& index_path);

// Only the named tensors of such a directory, read (pread) into owned CPU
// memory: of each file only its header and those tensors' bytes are touched,
// nothing is mapped, so a target's embedding costs its own bytes however
// large the checkpoint (formats/checkpoint_select.cpp). Names the checkpoint
// lacks are absent from the result.
TensorMap read_checkpoint_tensors(const std::filesystem::path& dir, const std::vector<std::string>& names);

}  // namespace dflow::formats
