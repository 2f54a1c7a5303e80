// The sizes of DFlash block attention, planned without tensors: which blocks
// form a chunk (drafter/block_attention.hpp), what context each chunk reads,
// and which chunks of a packed row run batched together. Pure functions of
// the blocks' anchors, keep flags and document starts, so each rule is
// tested on hand-made rows (tests/drafter/test_block_plan.cpp); the tensors
// (masks, gather indices) are built from their results.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dflow::drafter {

// A run of consecutive blocks that attends as one chunk.
struct BlockRun {
  int64_t first_block = 0;
  int64_t blocks = 0;
  bool operator==(const BlockRun&) const = default;
};

// An unpacked batch: runs of at most blocks_per_chunk blocks.
std::vector<BlockRun> fixed_runs(int64_t num_blocks, int64_t blocks_per_chunk);

// One packed row ([N] per block): cut wherever the blocks' document (their
// context_begin) changes, so a chunk reads exactly one document's context;
// within a document, pieces of near-equal size of at most
// ceil(context / block_size) blocks (and blocks_per_chunk), so that the mostly
// masked draft-to-draft scores never outweigh the context ones (as for an
// unpacked row, see blocks_per_chunk_for_budget). A document whose blocks see
// no context (padding blocks only) is not cut by context.
std::vector<BlockRun> document_runs(std::span<const int64_t> anchors, std::span<const bool> keep,
                                    std::span<const int64_t> context_begin, int64_t context_length, int64_t block_size,
                                    int64_t blocks_per_chunk);

// What a chunk reads: draft slots [first_query, first_query + num_queries),
// context positions [context_first, context_first + context_length).
struct ChunkExtent {
  int64_t first_query = 0, num_queries = 0;
  int64_t context_first = 0, context_length = 0;
  bool operator==(const ChunkExtent&) const = default;
};

// The context a run's blocks can see over a [batch, num_blocks] layout
// (row-major spans): up to the latest kept anchor (exclusive), from the
// earliest document start of its kept blocks (packed rows; context_begin
// empty: from 0), within [0, context_length).
ChunkExtent chunk_extent(const BlockRun& run, std::span<const int64_t> anchors, std::span<const bool> keep,
                         std::span<const int64_t> context_begin, int64_t batch, int64_t num_blocks,
                         int64_t block_size, int64_t context_length);

// Batches a packed row's chunks into groups that run as one padded call:
// longest context first; a chunk joins the open group only while the group's
// padded scores (chunks x Qmax x (Cmax + Qmax)) stay within
// max_scores_per_group (<= 0: no budget) and the chunk's own scores fill at
// least min_group_fill of the padded shape (0: pad freely), so one long
// document never pads a batch of short ones to its length. Returns chunk
// indices per group.
std::vector<std::vector<size_t>> group_chunks(std::span<const ChunkExtent> chunks, int64_t max_scores_per_group,
                                              double min_group_fill);

}  // namespace dflow::drafter
