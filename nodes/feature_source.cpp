#include "nodes/feature_source.hpp"

#include "data/collate.hpp"
#include "data/data_error.hpp"
#include "nodes/run_context.hpp"
#include "train/devices.hpp"
#include "train/feature_cache.hpp"

namespace dflow::nodes {

PaddedBatch collate_padded(const RunContext& run, const data::PlannedBatch& plan, const StepPosition& position,
                           int64_t excluded_samples, bool pin) {
  const int64_t rows = plan.rows(), length = plan.padded_length;
  auto options = torch::TensorOptions().pinned_memory(pin);
  PaddedBatch padded;
  padded.plan = plan;
  padded.position = position;
  padded.input_ids = torch::empty({rows, length}, options.dtype(torch::kInt64));
  padded.loss_mask = torch::empty({rows, length}, options.dtype(torch::kUInt8));
  padded.lengths = torch::empty({rows}, options.dtype(torch::kInt32));
  padded.excluded_samples = excluded_samples;
  if (plan.packed()) {
    padded.position_ids = torch::empty({rows, length}, options.dtype(torch::kInt64));
    padded.document_ids = torch::empty({rows, length}, options.dtype(torch::kInt32));
  }
  data::collate_into(run.dataset, plan, padded.input_ids.data_ptr<int64_t>(), padded.loss_mask.data_ptr<uint8_t>(),
                     padded.lengths.data_ptr<int32_t>(), run.pad_token_id,
                     padded.packed() ? padded.position_ids.data_ptr<int64_t>() : nullptr,
                     padded.packed() ? padded.document_ids.data_ptr<int32_t>() : nullptr);
  padded.lengths = padded.lengths.to(torch::kInt64);  // [B]: a few bytes
  return padded;
}

torch::Tensor target_features(const RunContext& run, const target::TargetModel& target, const PaddedBatch& batch) {
  return target_features(run, target, batch, run.needs_teacher());
}

torch::Tensor target_features(const RunContext& run, const target::TargetModel& target, const PaddedBatch& batch,
                              bool last_layer) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> layers = run.feature_layer_ids;
  // Layer N - 1 is the final norm's output (TargetModel::forward): the
  // teacher comes from the same forward as the features.
  if (last_layer) layers.push_back(target.num_layers() - 1);
  if (batch.input_ids.size(0) == 0) {  // every row quarantined: nothing to run
    const int64_t width = static_cast<int64_t>(layers.size()) * target.config().hidden_size;
    return torch::zeros({0, batch.input_ids.size(1), width},
                        torch::TensorOptions().device(target.device()).dtype(target.dtype()));
  }
  // From pinned host memory when the target is on CUDA (pad_bucket pins it).
  auto ids = batch.input_ids.to(target.device(), train::copy_may_be_non_blocking(target.device()));
  // Packed rows: each sample attends only to itself, at its own positions.
  return batch.packed() ? target.context_features(ids, batch.documents(), layers)
                        : target.context_features(ids, layers);
}

FeatureBatch drafter_batch(const RunContext& run, PaddedBatch batch, const torch::Tensor& rows, int worker) {
  FeatureBatch out{std::move(batch), torch::Tensor(), worker, torch::Tensor()};
  if (!rows.defined()) return out;
  const int64_t hidden = run.target_config.hidden_size;
  const int64_t width = static_cast<int64_t>(run.feature_layer_ids.size()) * hidden;
  const bool has_last = rows.size(-1) == width + hidden;
  if (!has_last && rows.size(-1) != width)
    throw std::logic_error("drafter_batch: rows of width " + std::to_string(rows.size(-1)) + " for " +
                           std::to_string(run.feature_layer_ids.size()) + " feature layers of " + std::to_string(hidden));
  if (run.needs_teacher() && !has_last)
    throw std::logic_error("drafter_batch: the run needs the target's last hidden state and the rows lack it");
  if (!has_last) {
    out.features = for_drafter(run, rows).contiguous();
    return out;
  }
  out.features = for_drafter(run, rows.narrow(-1, 0, width)).contiguous();
  if (run.needs_teacher()) out.teacher_hidden = for_drafter(run, rows.narrow(-1, width, hidden)).contiguous();
  return out;
}

torch::Tensor for_drafter(const RunContext& run, const torch::Tensor& features) {
  // The drafter's fc reads them in its dtype. A drafter on the CPU behind a
  // CUDA target gets a blocking copy: it reads the features as soon as they
  // are emitted.
  return features.to(run.drafter_device, run.drafter_dtype, train::copy_may_be_non_blocking(run.drafter_device));
}

std::vector<SamplePlace> sample_places(const data::PlannedBatch& plan, std::span<const int32_t> lengths) {
  std::vector<SamplePlace> places;
  places.reserve(plan.sample_ids.size());
  for (int64_t row = 0; row < plan.rows(); ++row) {
    const auto first = static_cast<size_t>(plan.packed() ? plan.row_begin[static_cast<size_t>(row)] : row);
    const auto last = plan.packed() ? static_cast<size_t>(plan.row_begin[static_cast<size_t>(row) + 1]) : first + 1;
    int64_t at = 0;
    for (size_t i = first; i < last; ++i) {
      const int64_t id = plan.sample_ids[i];
      const int64_t length = lengths[static_cast<size_t>(id)];
      places.push_back({id, row, at, length});
      at += length;
    }
  }
  return places;
}

uint64_t sample_tokens_hash(const RunContext& run, int64_t sample_id) {
  return data::tokens_hash(run.dataset.sample(sample_id).input_ids);
}

int64_t write_sample_features(data::FeatureCacheWriter& writer, const RunContext& run, const PaddedBatch& batch,
                              const torch::Tensor& features, data::FeatureDtype dtype,
                              const std::function<bool(int64_t sample_id)>& wanted, EncodedRecords* kept) {
  torch::Tensor cpu;  // copied once, for the first wanted sample
  std::vector<unsigned char> record;
  int64_t written = 0;
  for (const auto& place : sample_places(batch.plan, run.dataset.lengths())) {
    if (!wanted(place.sample_id)) continue;
    if (!cpu.defined()) cpu = features.to(torch::kCPU);
    record.clear();
    train::encode_feature_rows(cpu[place.row].narrow(0, place.first, place.length), dtype, record);
    writer.append(place.sample_id, sample_tokens_hash(run, place.sample_id), place.length, record);
    if (kept) (*kept)[place.sample_id] = record;
    ++written;
  }
  return written;
}

torch::Tensor cached_features(const RunContext& run, const data::FeatureCacheReader& cache, const PaddedBatch& batch,
                              bool verify, const EncodedRecords* fresh) {
  const auto& manifest = cache.manifest();
  // Decoded on the host in float32 (or straight into the drafter's dtype when
  // it is on the CPU), then one copy to the drafter's device.
  const bool host_drafter = run.drafter_device.is_cpu();
  auto options = torch::TensorOptions().dtype(host_drafter ? run.drafter_dtype : torch::kFloat32)
                     .pinned_memory(!host_drafter && run.drafter_device.is_cuda());
  auto features = torch::zeros({batch.input_ids.size(0), batch.input_ids.size(1), manifest.width()}, options);
  for (const auto& place : sample_places(batch.plan, run.dataset.lengths())) {
    auto rows = features[place.row].narrow(0, place.first, place.length);
    if (fresh) {
      if (const auto it = fresh->find(place.sample_id); it != fresh->end()) {
        train::decode_feature_rows(it->second, place.length, manifest.dtype, rows);
        continue;
      }
    }
    const auto record = cache.get(place.sample_id, verify);
    auto refuse = [&](const std::string& why) {
      return data::DataError("feature cache " + cache.shard_of(place.sample_id).string() + ": sample " +
                             std::to_string(place.sample_id) + " " + why +
                             ": the record was made from other data; delete "
                             "that shard and its .idx and fill the cache again");
    };
    if (record.rows != place.length)
      throw refuse("has " + std::to_string(record.rows) + " positions, the dataset's sample has " +
                   std::to_string(place.length) + " tokens");
    // The index's hash of the tokens the record was computed from: checked
    // at each read, so records published after start-up are checked too.
    if (record.tokens_hash != sample_tokens_hash(run, place.sample_id))
      throw refuse("holds the features of other tokens than the dataset's sample (tokens hash differs)");
    train::decode_feature_rows(record.bytes, record.rows, manifest.dtype, rows);
  }
  return host_drafter ? features : for_drafter(run, features);
}

}  // namespace dflow::nodes
