#pragma once
// Extraction in training order. A serving engine's extraction writes file k
// for the k-th row it reads; training reads samples in its shuffled plan
// order. When the extraction reads the samples in the order training first
// needs them, and the reader is told which sample each file holds, an
// extraction only somewhat faster than training never holds it up.
//   first_read_order     the samples in the order training first reads them
//   FileOrder            file k holds sample sample_ids[k] (the map
//                        `dflow extraction-order --map` writes and
//                        features.engine's params.file_order reads)
//   write_extraction_rows the JSONL rows the extraction reads, in that order
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "data/plan.hpp"

namespace dflow::data {

class Dataset;

// Every sample of `dataset` once, in the order training first reads it: the
// plans' batches of epochs 0, 1, ... in plan order (a step's batches are
// rank 0's, rank 1's, ... micro-batch by micro-batch), rows in order. Stops
// once every sample is listed; at most `epochs` epochs are walked, so a
// sample no plan of those reads is left out.
std::vector<int64_t> first_read_order(const Dataset& dataset, const std::function<PlanOptions(int epoch)>& options_of,
                                      int epochs);

// What of the plan's options decides the order ("seed 1234, world_size 2,
// grad_accum 1, token_budget, buckets [64, 128], tokens_per_batch 4096,
// max_length 128"): equal texts, equal orders over the same dataset.
std::string order_options_text(const PlanOptions& options);

struct FileOrder {
  uint64_t data_fingerprint = 0;    // of the dataset the order was written for
  int64_t dataset_samples = 0;
  std::string written_for;          // order_options_text of the plan it follows
  std::vector<int64_t> sample_ids;  // file k holds sample sample_ids[k]
};

void write_file_order(const std::filesystem::path& path, const FileOrder& order);
// Throws DataError naming the file and what is wrong with it.
FileOrder read_file_order(const std::filesystem::path& path);
// Throws DataError naming `path` (and the sample) when `order` was written
// for another dataset, or does not list each of its samples exactly once.
void check_file_order(const FileOrder& order, const Dataset& dataset, const std::filesystem::path& path);

// One {"input_ids": [...], "loss_mask": [...]} line per sample, in the order
// given: what an extraction reads (speculators' rows; dflow prepare's input).
void write_extraction_rows(const std::filesystem::path& path, const Dataset& dataset,
                           std::span<const int64_t> sample_ids);

}  // namespace dflow::data
