#pragma once
// The files SpecForge's offline capture writes (scripts/prepare_hidden_states.py
// in sgl-project/SpecForge), as containers: one torch.save archive per
// sample i (its index in SpecForge's dataset order) at
// <dir>/rows_<g>-<g+G>/data_<i>.ckpt, g = i rounded down to a multiple of
// the group size G (its --file-group-size, 2000), or gzip-compressed as
// data_<i>.ckpt.gz (--compress). Torch-free, so that it can be fuzzed: the
// archive's contents are read by train/specforge_files.hpp.
//
// SpecForge writes each file in place, neither locked nor renamed, so a file
// is whole only once its container has ended: a zip archive whose
// end-of-central-directory record (torch.save writes zip64's, with its
// locator) closes the file and points back at a central directory that ends
// where it begins; a gzip stream that reaches its end. A file not whole yet is
// waited for (train/engine_files.hpp's wait_for_sample_file).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "train/engine_files.hpp"

namespace dflow::train {

constexpr int64_t kSpecForgeFileGroupSize = 2000;  // prepare_hidden_states.py's --file-group-size default

// <dir>/rows_<g>-<g+group_size>/data_<sample_id>.ckpt, and the .ckpt.gz beside it.
struct SpecForgeFilePaths {
  std::filesystem::path plain, gzipped;
};
SpecForgeFilePaths specforge_file_paths(const std::filesystem::path& dir, int64_t sample_id, int64_t group_size);

// Whether [data, data + size) ends as a whole zip archive ends (above).
bool zip_archive_is_whole(const char* data, size_t size);

// gzip's stream, inflated: `state` incomplete when the bytes end before the
// stream does. Throws data::DataError naming `path` for bytes that are not a
// gzip stream or that inflate to more than `max_bytes`.
struct Inflated {
  EngineFileState state = EngineFileState::incomplete;
  std::vector<char> bytes;
};
Inflated gunzip(const std::filesystem::path& path, const char* data, size_t size, uint64_t max_bytes);

// One sample's archive, read when whole: `state` missing (neither file is
// there), incomplete (not whole yet) or ready with `archive` the zip bytes
// torch.save wrote. Throws data::DataError naming the file for a gzip stream
// that is damaged, or a gzip stream holding no whole zip archive.
struct SpecForgeContainer {
  EngineFileState state = EngineFileState::missing;
  std::filesystem::path path;  // the file read (.ckpt when both are there)
  std::vector<char> archive;
};
SpecForgeContainer read_specforge_container(const SpecForgeFilePaths& paths,
                                            uint64_t max_bytes = uint64_t{1} << 40);

}  // namespace dflow::train
