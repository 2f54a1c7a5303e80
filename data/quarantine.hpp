#pragma once
// The quarantine: samples the stability guard took out of training (policy
// quarantine: the samples of a skipped step; policy rollback: the samples of
// the steps a rollback undid). Kept in run.out_dir/quarantine.jsonl, one line
// per guard event, appended and fsynced before the run goes on:
//   {"global_step": 31, "reason": "loss 41.2 > spike threshold 9.7", "sample_ids": [803, 17, ...]}
// A line with "released_sample_ids" takes samples back out of it: those of
// a run of spikes that the guard later took as its metric's new level.
// A resumed run reads it and excludes those samples from every batch. The
// plan itself is unchanged (steps_per_epoch, cursors and the batch order stay
// a pure function of the seed and the data); only rows are dropped.
#include <cstdint>
#include <filesystem>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "data/plan.hpp"

namespace dflow::data {

using SampleSet = std::set<int64_t>;

// `start` with the lines of `path` applied in order (unchanged when the file
// does not exist): "sample_ids" join the set, "released_sample_ids" leave it.
// Throws DataError naming path:line for a malformed line. A final line
// without its newline that does not parse is a write torn by a crash and is
// ignored.
SampleSet read_quarantine(const std::filesystem::path& path, SampleSet start = {});

// Appends one line and fsyncs the file. Throws DataError naming the path.
void append_quarantine(const std::filesystem::path& path, int64_t global_step, const std::string& reason,
                       const std::vector<int64_t>& sample_ids);
// The same for samples released from the quarantine.
void append_release(const std::filesystem::path& path, int64_t global_step, const std::string& reason,
                    const std::vector<int64_t>& sample_ids);

// The batch without the rows of `excluded` (order kept): real and padded
// token counts recomputed, padded_length unchanged. May leave zero rows.
PlannedBatch without_samples(const PlannedBatch& batch, const SampleSet& excluded, std::span<const int32_t> lengths);

}  // namespace dflow::data
