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
  // The objective's parts (drafter::ObjectiveOutput): the main loss alone and
  // each of the drafter kind's extra terms, sum(w * .); per slot the
  // analytical acceptance rate and each term series' values (the kind's
  // record_terms that have one, series after series), summed over the
  // count_per_position slots.
  double main_loss_sum = 0;
  std::vector<double> term_loss_sums;            // [terms]
  std::vector<double> accept_rate_per_position;  // [block_size]
  std::vector<double> term_series_per_position;  // [series * block_size]
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
      &StepTotals::bucket_real_tokens, &StepTotals::main_loss_sum,   &StepTotals::term_loss_sums,
      &StepTotals::accept_rate_per_position, &StepTotals::term_series_per_position};

  // Zero sums with per-position, per-bucket and per-term vectors of their
  // full size (`terms` extra loss terms, `series` of them with a series).
  static StepTotals zeros(int64_t block_size, size_t buckets, size_t terms = 0, size_t series = 0);
  // Adds one micro-batch's extra terms (ObjectiveOutput::term_loss_sums and
  // term_series_per_position: per term, empty for one without a series).
  void add_terms(const std::vector<double>& term_sums, const std::vector<std::vector<double>>& series_per_term);

  void add(const StepTotals& other);
  // The summed fields as one flat vector (integers below 2^53 are exact), and back.
  void pack_into(std::vector<double>& out) const;
  size_t unpack_from(const std::vector<double>& in, size_t offset);  // returns the offset after them
};

}  // namespace dflow::nodes
