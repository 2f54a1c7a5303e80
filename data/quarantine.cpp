#include "data/quarantine.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/data_error.hpp"

namespace dflow::data {

namespace fs = std::filesystem;

SampleSet read_quarantine(const fs::path& path, SampleSet ids) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ids;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  size_t begin = 0;
  for (int line_no = 1; begin < text.size(); ++line_no) {
    const size_t end = text.find('\n', begin);
    const bool terminated = end != std::string::npos;
    const std::string line = text.substr(begin, terminated ? end - begin : std::string::npos);
    begin = terminated ? end + 1 : text.size();
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto fail = [&](const std::string& what) {
      return DataError(path.string() + ":" + std::to_string(line_no) + ": " + what +
                       "; the quarantine file is written by the stability guard (one JSON object per line with "
                       "\"sample_ids\" or \"released_sample_ids\"): repair or remove that line");
    };
    auto record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded()) {
      if (!terminated) break;  // a torn final write
      throw fail("not valid JSON");
    }
    auto ids_of = [&](const char* key) {
      std::vector<int64_t> out;
      if (!record.contains(key)) return out;
      if (!record[key].is_array()) throw fail(std::string("\"") + key + "\" is not a list");
      for (const auto& id : record[key]) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0)
          throw fail("sample id " + id.dump() + " is not a non-negative integer");
        out.push_back(id.get<int64_t>());
      }
      return out;
    };
    if (!record.is_object() || !(record.contains("sample_ids") || record.contains("released_sample_ids")))
      throw fail("expected an object with a \"sample_ids\" or \"released_sample_ids\" list");
    for (int64_t id : ids_of("sample_ids")) ids.insert(id);
    for (int64_t id : ids_of("released_sample_ids")) ids.erase(id);
  }
  return ids;
}

namespace {

// One JSON line, appended and fsynced before the run goes on.
void append_line(const fs::path& path, const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  auto fail = [&](const char* what) {
    const int error = errno;
    if (fd >= 0) ::close(fd);
    return DataError("cannot " + std::string(what) + " " + path.string() + ": " + std::strerror(error));
  };
  if (fd < 0) throw fail("open");
  size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = ::write(fd, line.data() + written, line.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw fail("append to");
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) throw fail("fsync");
  ::close(fd);
}

}  // namespace

void append_quarantine(const fs::path& path, int64_t global_step, const std::string& reason,
                       const std::vector<int64_t>& sample_ids) {
  append_line(path, {{"global_step", global_step}, {"reason", reason}, {"sample_ids", sample_ids}});
}

void append_release(const fs::path& path, int64_t global_step, const std::string& reason,
                    const std::vector<int64_t>& sample_ids) {
  append_line(path, {{"global_step", global_step}, {"reason", reason}, {"released_sample_ids", sample_ids}});
}

PlannedBatch without_samples(const PlannedBatch& batch, const SampleSet& excluded, std::span<const int32_t> lengths) {
  PlannedBatch out = batch;
  if (excluded.empty()) return out;
  out.sample_ids.clear();
  out.row_begin.clear();
  out.real_tokens = 0;
  for (int64_t row = 0; row < batch.rows(); ++row) {
    const auto first = static_cast<size_t>(batch.packed() ? batch.row_begin[static_cast<size_t>(row)] : row);
    const auto last = batch.packed() ? static_cast<size_t>(batch.row_begin[static_cast<size_t>(row) + 1]) : first + 1;
    const size_t kept_before = out.sample_ids.size();
    for (size_t i = first; i < last; ++i) {
      const int64_t id = batch.sample_ids[i];
      if (excluded.count(id)) continue;
      out.sample_ids.push_back(id);
      out.real_tokens += lengths[static_cast<size_t>(id)];
    }
    // A packed row keeps its remaining samples; a row left empty is dropped.
    if (batch.packed() && out.sample_ids.size() > kept_before) {
      if (out.row_begin.empty()) out.row_begin.push_back(0);
      out.row_begin.push_back(static_cast<int64_t>(out.sample_ids.size()));
    }
  }
  out.padded_tokens = out.rows() * out.padded_length;
  return out;
}

}  // namespace dflow::data
