#include "data/prepare.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <fstream>
#include <numeric>

#include "data/data_error.hpp"
#include "data/shard_writer.hpp"

namespace dflow::data {
namespace {

bool is_blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

void check_options(const PrepareOptions& options) {
  if (options.max_length < 1) {
    throw DataError(fmt::format("max_length is {}; it must be at least 1", options.max_length));
  }
  if (options.vocab_size < 0) {
    throw DataError(fmt::format("vocab_size is {}; use 0 to leave ids unchecked", options.vocab_size));
  }
}

}  // namespace

void count_written(PrepareReport& report, std::span<const int32_t> input_ids, std::span<const uint8_t> loss_mask,
                   bool truncated) {
  report.samples_written += 1;
  report.truncated += truncated ? 1 : 0;
  report.tokens_written += static_cast<int64_t>(input_ids.size());
  report.response_tokens_written += std::accumulate(loss_mask.begin(), loss_mask.end(), int64_t{0});
}

void for_each_sample_line(std::istream& input, const std::filesystem::path& path, PrepareReport& report,
                          const std::function<std::optional<Rejection>(const std::string&, int64_t)>& parse,
                          const std::function<void()>& accept) {
  std::string line;
  for (int64_t line_number = 1; std::getline(input, line); ++line_number) {
    if (is_blank(line)) {
      report.blank_lines += 1;
      continue;
    }
    report.lines_read += 1;
    if (auto rejection = parse(line, line_number)) {
      report.rejected_by_reason[static_cast<size_t>(rejection->reason)] += 1;
      report.rejections.push_back(std::move(*rejection));
      continue;
    }
    accept();
  }
  if (input.bad()) {
    throw DataError(fmt::format("{}: read error after {} lines", path.string(), report.lines_read + report.blank_lines));
  }
}

int64_t PrepareReport::rejected() const {
  return std::accumulate(rejected_by_reason.begin(), rejected_by_reason.end(), int64_t{0});
}

std::string PrepareReport::summary(size_t max_listed) const {
  std::string text = fmt::format("[data] prepare {} -> {}: {} lines read, {} samples written ({} tokens, {} response "
                                 "tokens, {} shards), {} truncated, {} rejected",
                                 input_path.string(), out_dir.string(), lines_read, samples_written, tokens_written,
                                 response_tokens_written, shards_written, truncated, rejected());
  std::vector<std::string> by_reason;
  for (size_t r = 0; r < kNumRejectReasons; ++r) {
    if (rejected_by_reason[r] > 0) {
      const auto reason = static_cast<RejectReason>(r);
      by_reason.push_back(fmt::format("{} {}", reject_reason_name(reason), rejected_by_reason[r]));
    }
  }
  if (!by_reason.empty()) text += fmt::format(" ({})", fmt::join(by_reason, ", "));
  for (size_t i = 0; i < std::min(max_listed, rejections.size()); ++i) {
    const Rejection& rejection = rejections[i];
    text += fmt::format("\n  {}:{}: {}: {}", input_path.string(), rejection.line_number,
                        reject_reason_name(rejection.reason), rejection.detail);
  }
  if (rejections.size() > max_listed) {
    text += fmt::format("\n  ... and {} more rejected lines", rejections.size() - max_listed);
  }
  return text;
}

PrepareReport prepare_jsonl(const PrepareOptions& options) {
  check_options(options);
  std::ifstream input(options.input_path, std::ios::binary);
  if (!input) {
    throw DataError(fmt::format("{}: cannot open the JSONL input; check the path", options.input_path.string()));
  }
  PrepareReport report;
  report.input_path = options.input_path;
  report.out_dir = options.out_dir;
  ShardWriter writer(options.out_dir, ShardWriterOptions{options.samples_per_shard, options.vocab_size,
                                                         options.overwrite});
  const SampleRules rules{options.max_length, options.too_long, options.vocab_size};
  ParsedSample sample;
  for_each_sample_line(
      input, options.input_path, report,
      [&](const std::string& line, int64_t line_number) { return parse_jsonl_sample(line, line_number, rules, sample); },
      [&] {
        writer.add(sample.input_ids, sample.loss_mask);
        count_written(report, sample.input_ids, sample.loss_mask, sample.truncated);
      });
  if (report.samples_written == 0) {
    throw DataError(fmt::format("{}: no sample accepted, nothing written to {}\n{}", options.input_path.string(),
                                options.out_dir.string(), report.summary()));
  }
  report.shards_written = writer.finish().num_shards;
  return report;
}

}  // namespace dflow::data
