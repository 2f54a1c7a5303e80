#include "nodes/exclude_samples.hpp"

#include "nodes/run_context.hpp"

namespace dflow::nodes {

FeatureBatch without_samples(const RunContext& run, const FeatureBatch& in, const data::SampleSet& excluded) {
  FeatureBatch out = in;
  const auto& ids = in.batch.plan.sample_ids;
  std::vector<int64_t> keep;
  for (size_t r = 0; r < ids.size(); ++r)
    if (!excluded.count(ids[r])) keep.push_back(static_cast<int64_t>(r));
  if (keep.size() == ids.size()) return out;
  out.batch.plan = data::without_samples(in.batch.plan, excluded, run.dataset.lengths());
  out.batch.excluded_samples += static_cast<int64_t>(ids.size() - keep.size());
  if (in.batch.packed()) {
    // The rows as collated (samples excluded before stay in them): their
    // documents are found by it, and the loss's per-sample figures pair with it.
    const auto& collated = in.batch.collated_plan();
    out.batch.collated = collated;
    out.batch.loss_mask = in.batch.loss_mask.clone();
    auto documents = in.batch.document_ids.to(torch::kInt64);
    for (int64_t row = 0; row < collated.rows(); ++row) {
      const auto first = collated.row_begin[static_cast<size_t>(row)];
      const auto last = collated.row_begin[static_cast<size_t>(row) + 1];
      for (auto i = first; i < last; ++i)
        if (excluded.count(collated.sample_ids[static_cast<size_t>(i)]))
          out.batch.loss_mask[row].masked_fill_(documents[row].eq(i - first), 0);
    }
    return out;
  }
  auto rows = torch::tensor(keep, torch::kInt64);
  out.batch.input_ids = in.batch.input_ids.index_select(0, rows);
  out.batch.loss_mask = in.batch.loss_mask.index_select(0, rows);
  out.batch.lengths = in.batch.lengths.index_select(0, rows);
  out.features = in.features.index_select(0, rows.to(in.features.device()));
  if (in.teacher_hidden.defined())
    out.teacher_hidden = in.teacher_hidden.index_select(0, rows.to(in.teacher_hidden.device()));
  return out;
}

}  // namespace dflow::nodes
