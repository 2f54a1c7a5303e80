#pragma once
// dflow prepare: JSONL {"input_ids": [...], "loss_mask": [...]} to binary
// shards. Every refused line is reported with its number and reason; accepted
// samples keep their input order; the output directory appears only complete.
#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <istream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/jsonl_sample.hpp"

namespace dflow::data {

struct PrepareOptions {
  std::filesystem::path input_path;  // JSONL, one sample per line
  std::filesystem::path out_dir;     // must not exist unless overwrite
  int max_length = 512;              // tokens; longer samples follow too_long
  TooLongPolicy too_long = TooLongPolicy::Truncate;
  int64_t vocab_size = 0;            // 0: ids are not checked against a vocab
  int64_t samples_per_shard = 65536;
  bool overwrite = false;
};

struct PrepareReport {
  std::filesystem::path input_path;
  std::filesystem::path out_dir;
  int64_t lines_read = 0;       // non-blank lines
  int64_t blank_lines = 0;      // skipped silently (e.g. a trailing newline)
  int64_t samples_written = 0;
  int64_t truncated = 0;        // written after being cut to max_length
  int64_t tokens_written = 0;
  int64_t response_tokens_written = 0;  // loss_mask 1
  int64_t shards_written = 0;
  std::array<int64_t, kNumRejectReasons> rejected_by_reason{};
  std::vector<Rejection> rejections;  // every refused line, in line order

  int64_t rejected() const;
  int64_t rejected(RejectReason reason) const { return rejected_by_reason[static_cast<size_t>(reason)]; }
  // Counts on one line, then up to `max_listed` rejections, one per line.
  std::string summary(size_t max_listed = 20) const;
};

// The line loop every prepare shares (token ids here, conversations in
// text/): blank lines are counted and skipped; every other line goes to
// `parse`, which returns its rejection (recorded in the report) or nullopt,
// and then `accept` writes the sample. A read error throws naming `path`.
void for_each_sample_line(std::istream& input, const std::filesystem::path& path, PrepareReport& report,
                          const std::function<std::optional<Rejection>(const std::string& line, int64_t line_number)>& parse,
                          const std::function<void()>& accept);
// Counts one written sample into the report.
void count_written(PrepareReport& report, std::span<const int32_t> input_ids, std::span<const uint8_t> loss_mask,
                   bool truncated);

// Throws DataError when the input cannot be read, the output cannot be
// written, or no line is accepted (the message then carries the summary).
PrepareReport prepare_jsonl(const PrepareOptions& options);

}  // namespace dflow::data
