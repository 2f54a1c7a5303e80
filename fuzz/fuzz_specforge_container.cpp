// SpecForge's capture files as containers (train/specforge_container.cpp,
// the torch-free part of features.engine's format: specforge): the input is
// the whole file, read once as data_0.ckpt (a torch.save zip archive) and
// once as data_0.ckpt.gz (gzip), inflated to at most 1 MiB. Only
// data::DataError may come out; a container that is ready must hold a whole
// zip archive by zip_archive_is_whole's own measure (the plain one: the
// file's bytes exactly), and one not ready none.
#include <algorithm>
#include <cstdlib>

#include "data/data_error.hpp"
#include "fuzz/fuzz_common.hpp"
#include "train/specforge_container.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflow;
  const auto paths = train::specforge_file_paths(fuzz::scratch_dir(), 0, train::kSpecForgeFileGroupSize);
  std::filesystem::create_directories(paths.plain.parent_path());
  for (const bool compressed : {false, true}) {
    std::filesystem::remove(paths.plain);
    std::filesystem::remove(paths.gzipped);
    fuzz::write_file(compressed ? paths.gzipped : paths.plain, data, size);
    try {
      const auto container = train::read_specforge_container(paths, uint64_t{1} << 20);
      const bool ready = container.state == train::EngineFileState::ready;
      if (ready != (!container.archive.empty() &&
                    train::zip_archive_is_whole(container.archive.data(), container.archive.size())))
        std::abort();
      if (ready && !compressed &&
          (container.archive.size() != size || !std::equal(container.archive.begin(), container.archive.end(),
                                                           reinterpret_cast<const char*>(data))))
        std::abort();
    } catch (const data::DataError&) {
    }
  }
  return 0;
}
