#include "nodes/step_totals.hpp"

#include <stdexcept>
#include <type_traits>

namespace dflow::nodes {

namespace {

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};

template <class F>
void for_each_summed(F&& f) {
  std::apply([&](auto... member) { (f(member), ...); }, StepTotals::kSummed);
}

}  // namespace

StepTotals StepTotals::zeros(int64_t block_size, size_t buckets, size_t terms, size_t series) {
  StepTotals t;
  t.correct_per_position.assign(static_cast<size_t>(block_size), 0.0);
  t.count_per_position.assign(static_cast<size_t>(block_size), 0.0);
  t.accept_rate_per_position.assign(static_cast<size_t>(block_size), 0.0);
  t.term_loss_sums.assign(terms, 0.0);
  t.term_series_per_position.assign(series * static_cast<size_t>(block_size), 0.0);
  t.batches_per_bucket.assign(buckets, 0);
  t.bucket_ce_sum.assign(buckets, 0.0);
  t.bucket_weight_sum.assign(buckets, 0.0);
  t.bucket_real_tokens.assign(buckets, 0);
  return t;
}

void StepTotals::add_terms(const std::vector<double>& term_sums,
                           const std::vector<std::vector<double>>& series_per_term) {
  if (term_loss_sums.size() < term_sums.size()) term_loss_sums.resize(term_sums.size(), 0.0);
  for (size_t i = 0; i < term_sums.size(); ++i) term_loss_sums[i] += term_sums[i];
  size_t at = 0;
  for (const auto& series : series_per_term) {
    if (term_series_per_position.size() < at + series.size()) term_series_per_position.resize(at + series.size(), 0.0);
    for (size_t k = 0; k < series.size(); ++k) term_series_per_position[at + k] += series[k];
    at += series.size();
  }
}

void StepTotals::add(const StepTotals& o) {
  for_each_summed([&](auto member) {
    auto& into = this->*member;
    const auto& from = o.*member;
    if constexpr (is_vector<std::decay_t<decltype(into)>>::value) {
      if (into.size() < from.size()) into.resize(from.size(), 0);
      for (size_t i = 0; i < from.size(); ++i) into[i] += from[i];
    } else {
      into += from;
    }
  });
  sample_ids.insert(sample_ids.end(), o.sample_ids.begin(), o.sample_ids.end());
  sample_lengths.insert(sample_lengths.end(), o.sample_lengths.begin(), o.sample_lengths.end());
}

void StepTotals::pack_into(std::vector<double>& out) const {
  for_each_summed([&](auto member) {
    const auto& field = this->*member;
    if constexpr (is_vector<std::decay_t<decltype(field)>>::value) {
      for (const auto v : field) out.push_back(static_cast<double>(v));
    } else {
      out.push_back(static_cast<double>(field));
    }
  });
}

size_t StepTotals::unpack_from(const std::vector<double>& in, size_t offset) {
  auto next = [&] {
    if (offset >= in.size()) throw std::logic_error("StepTotals::unpack_from: the packed vector is too short");
    return in[offset++];
  };
  for_each_summed([&](auto member) {
    auto& field = this->*member;
    using Field = std::decay_t<decltype(field)>;
    if constexpr (is_vector<Field>::value) {
      for (auto& v : field) v = static_cast<typename Field::value_type>(next());
    } else {
      field = static_cast<Field>(next());
    }
  });
  return offset;
}

}  // namespace dflow::nodes
