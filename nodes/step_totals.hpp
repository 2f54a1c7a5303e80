#pragma once
// A step's statistics as sums of numerators and denominators, so that
// micro-batches and ranks add up exactly. The summed fields are listed once
// (kSummed): accumulation, the all-reduce's packing and unpacking all walk
// that list, so a new statistic is one member plus one entry there.
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <vector>

namespace dflow::nodes {

struct StepTotals {
  double weighted_ce_sum = 0;  // sum(w * CE)
  double weight_sum = 0;       // sum(w)
  int64_t anchors = 0;
  int64_t real_tokens = 0;
  int64_t padded_tokens = 0;
  int64_t micro_batches = 0;
  int64_t excluded_samples = 0;               // planned samples dropped because they are quarantined
  std::vector<double> correct_per_position;   // [block_size] per block slot k
  std::vector<double> count_per_position;     // [block_size]
  // The objective's parts (model::ObjectiveOutput): the main loss alone
  // (CE or KL) and the confidence head's BCE, both sum(w * .); per slot the
  // analytical acceptance rate and the confidence head's prediction, summed
  // over the count_per_position slots.
  double main_loss_sum = 0;
  double confidence_loss_sum = 0;
  std::vector<double> accept_rate_per_position;  // [block_size]
  std::vector<double> confidence_per_position;   // [block_size]
  // Per bucket index (token_budget batching): the bucket's batches, its share
  // of the loss numerator and denominator, and its real tokens.
  std::vector<int64_t> batches_per_bucket;    // [buckets]
  std::vector<double> bucket_ce_sum;          // [buckets]
  std::vector<double> bucket_weight_sum;      // [buckets]
  std::vector<int64_t> bucket_real_tokens;    // [buckets]
  // Concatenated, not summed: the samples trained on (quarantined rows
  // already dropped), in plan order, and their lengths.
  std::vector<int64_t> sample_ids;
  std::vector<int64_t> sample_lengths;

  // Every summed field once. Vectors have the sizes zeros() gives on every rank.
  static constexpr auto kSummed = std::tuple{
      &StepTotals::weighted_ce_sum,  &StepTotals::weight_sum,         &StepTotals::anchors,
      &StepTotals::real_tokens,      &StepTotals::padded_tokens,      &StepTotals::micro_batches,
      &StepTotals::excluded_samples, &StepTotals::correct_per_position, &StepTotals::count_per_position,
      &StepTotals::batches_per_bucket, &StepTotals::bucket_ce_sum,    &StepTotals::bucket_weight_sum,
      &StepTotals::bucket_real_tokens, &StepTotals::main_loss_sum,   &StepTotals::confidence_loss_sum,
      &StepTotals::accept_rate_per_position, &StepTotals::confidence_per_position};

  // Zero sums with per-position and per-bucket vectors of their full size.
  static StepTotals zeros(int64_t block_size, size_t buckets);

  void add(const StepTotals& other);
  // The summed fields as one flat vector (integers below 2^53 are exact), and back.
  void pack_into(std::vector<double>& out) const;
  size_t unpack_from(const std::vector<double>& in, size_t offset);  // returns the offset after them
};

}  // namespace dflow::nodes
