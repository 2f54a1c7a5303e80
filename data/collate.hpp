#pragma once
// Collating a planned batch into right-padded rows, torch-free: the caller
// owns the memory (the pad node hands in pinned tensor storage), so the only
// copy is shard mapping -> that memory.
#include <cstdint>
#include <vector>

namespace dflow::data {

class Dataset;
struct PlannedBatch;

// Writes batch.rows() rows of batch.padded_length tokens; a packed row holds
// its samples one after another from token 0:
//   ids_out        [rows * padded_length]  input ids, pad_id after each row's end
//   loss_mask_out  [rows * padded_length]  1 on response tokens, 0 on prompt and padding
//   lengths_out    [rows]                  real tokens per row (may be null)
//   positions_out  [rows * padded_length]  position within the token's sample, from 0
//                                          (padding counts on as one more sample); may be null
//   documents_out  [rows * padded_length]  index of the token's sample within its row
//                                          (padding: the row's sample count); may be null
// Throws DataError when a row's samples are longer than the batch's padded
// length (a plan built for another dataset).
void collate_into(const Dataset& dataset, const PlannedBatch& batch, int64_t* ids_out, uint8_t* loss_mask_out,
                  int32_t* lengths_out, int64_t pad_id, int64_t* positions_out = nullptr,
                  int32_t* documents_out = nullptr);

struct CollatedBatch {
  int64_t rows = 0;
  int64_t padded_length = 0;
  std::vector<int64_t> input_ids;  // shape [rows, padded_length]
  std::vector<uint8_t> loss_mask;  // shape [rows, padded_length]
  std::vector<int32_t> lengths;    // shape [rows]
  std::vector<int64_t> position_ids;  // shape [rows, padded_length]
  std::vector<int32_t> document_ids;  // shape [rows, padded_length]
};

CollatedBatch collate(const Dataset& dataset, const PlannedBatch& batch, int64_t pad_id);

}  // namespace dflow::data
