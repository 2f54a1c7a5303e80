#include "data/collate.hpp"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <numeric>

#include "data/data_error.hpp"
#include "data/dataset.hpp"
#include "data/plan.hpp"

namespace dflow::data {

void collate_into(const Dataset& dataset, const PlannedBatch& batch, int64_t* ids_out, uint8_t* loss_mask_out,
                  int32_t* lengths_out, int64_t pad_id, int64_t* positions_out, int32_t* documents_out) {
  const auto padded_length = static_cast<size_t>(batch.padded_length);
  for (int64_t row = 0; row < batch.rows(); ++row) {
    const auto first = static_cast<size_t>(batch.packed() ? batch.row_begin[static_cast<size_t>(row)] : row);
    const auto last = batch.packed() ? static_cast<size_t>(batch.row_begin[static_cast<size_t>(row) + 1]) : first + 1;
    const size_t row_offset = static_cast<size_t>(row) * padded_length;
    int64_t* ids_row = ids_out + row_offset;
    uint8_t* mask_row = loss_mask_out + row_offset;
    size_t used = 0;  // tokens of this row written so far
    for (size_t i = first; i < last; ++i) {
      const int64_t sample_id = batch.sample_ids[i];
      const SampleView sample = dataset.sample(sample_id);
      const size_t length = sample.input_ids.size();
      if (used + length > padded_length) {
        throw DataError(fmt::format("sample {} has {} tokens but batch {} of epoch {} pads to {}{}; the plan was "
                                    "built for another dataset",
                                    sample_id, length, batch.index_in_epoch, batch.epoch, padded_length,
                                    used > 0 ? fmt::format(" with {} tokens of row {} before it", used, row) : ""));
      }
      std::copy(sample.input_ids.begin(), sample.input_ids.end(), ids_row + used);  // int32 -> int64, vectorized
      std::memcpy(mask_row + used, sample.loss_mask.data(), length);
      if (positions_out != nullptr) std::iota(positions_out + row_offset + used, positions_out + row_offset + used + length, int64_t{0});
      if (documents_out != nullptr) {
        std::fill(documents_out + row_offset + used, documents_out + row_offset + used + length,
                  static_cast<int32_t>(i - first));
      }
      used += length;
    }
    std::fill(ids_row + used, ids_row + padded_length, pad_id);
    std::memset(mask_row + used, 0, padded_length - used);
    // Padding is one more document, so that it never attends to (or is seen by) a real sample.
    if (positions_out != nullptr) std::iota(positions_out + row_offset + used, positions_out + row_offset + padded_length, int64_t{0});
    if (documents_out != nullptr) {
      std::fill(documents_out + row_offset + used, documents_out + row_offset + padded_length,
                static_cast<int32_t>(last - first));
    }
    if (lengths_out != nullptr) lengths_out[row] = static_cast<int32_t>(used);
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
  out.position_ids.resize(cells);
  out.document_ids.resize(cells);
  collate_into(dataset, batch, out.input_ids.data(), out.loss_mask.data(), out.lengths.data(), pad_id,
               out.position_ids.data(), out.document_ids.data());
  return out;
}

}  // namespace dflow::data
