#include "data/collate.hpp"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

#include "data/data_error.hpp"
#include "data/dataset.hpp"
#include "data/plan.hpp"

namespace dflow::data {

void collate_into(const Dataset& dataset, const PlannedBatch& batch, int64_t* ids_out, uint8_t* loss_mask_out,
                  int32_t* lengths_out, int64_t pad_id) {
  const auto padded_length = static_cast<size_t>(batch.padded_length);
  for (size_t row = 0; row < batch.sample_ids.size(); ++row) {
    const int64_t sample_id = batch.sample_ids[row];
    const SampleView sample = dataset.sample(sample_id);
    const size_t length = sample.input_ids.size();
    if (length > padded_length) {
      throw DataError(fmt::format("sample {} has {} tokens but batch {} of epoch {} pads to {}; the plan was built "
                                  "for another dataset",
                                  sample_id, length, batch.index_in_epoch, batch.epoch, padded_length));
    }
    int64_t* ids_row = ids_out + row * padded_length;
    std::copy(sample.input_ids.begin(), sample.input_ids.end(), ids_row);  // int32 -> int64, vectorized
    std::fill(ids_row + length, ids_row + padded_length, pad_id);
    uint8_t* mask_row = loss_mask_out + row * padded_length;
    std::memcpy(mask_row, sample.loss_mask.data(), length);
    std::memset(mask_row + length, 0, padded_length - length);
    if (lengths_out != nullptr) lengths_out[row] = static_cast<int32_t>(length);
  }
}

CollatedBatch collate(const Dataset& dataset, const PlannedBatch& batch, int64_t pad_id) {
  CollatedBatch out;
  out.rows = batch.rows();
  out.padded_length = batch.padded_length;
  const auto cells = static_cast<size_t>(out.rows * out.padded_length);
  out.input_ids.resize(cells);
  out.loss_mask.resize(cells);
  out.lengths.resize(static_cast<size_t>(out.rows));
  collate_into(dataset, batch, out.input_ids.data(), out.loss_mask.data(), out.lengths.data(), pad_id);
  return out;
}

}  // namespace dflow::data
