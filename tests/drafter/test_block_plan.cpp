// The sizes of block attention, planned without a model or tensors
// (drafter/block_plan.hpp): chunks, the context each reads, and groups.
#include <doctest/doctest.h>

#include <ostream>
#include <vector>

#include "drafter/block_plan.hpp"

using namespace dflow::drafter;

namespace dflow::drafter {
// For doctest's messages.
std::ostream& operator<<(std::ostream& os, const BlockRun& r) { return os << "{" << r.first_block << ", " << r.blocks << "}"; }
std::ostream& operator<<(std::ostream& os, const ChunkExtent& c) {
  return os << "{q " << c.first_query << "+" << c.num_queries << ", context " << c.context_first << "+" << c.context_length
            << "}";
}
}  // namespace dflow::drafter

TEST_CASE("BlockPlan.FixedRunsCoverTheBlocksInOrder") {
  CHECK(fixed_runs(10, 4) == std::vector<BlockRun>{{0, 4}, {4, 4}, {8, 2}});
  CHECK(fixed_runs(5, 0) == std::vector<BlockRun>{{0, 5}});  // <= 0: one chunk
  CHECK(fixed_runs(0, 4).empty());
}

TEST_CASE("BlockPlan.DocumentRunsCutWhereTheDocumentChangesAndByItsContext") {
  // Two documents in one packed row: blocks 0-2 start at 0, blocks 3-4 at 100.
  const std::vector<int64_t> anchors{10, 20, 30, 110, 150}, begins{0, 0, 0, 100, 100};
  const bool keep[] = {true, true, true, true, true};
  // Document 1 sees 30 context positions: at most ceil(30 / 16) = 2 blocks a
  // chunk, its 3 blocks in near-equal pieces 2 + 1. Document 2 sees 50: up to
  // 4 blocks, its 2 blocks stay together. No chunk spans both.
  CHECK(document_runs(anchors, keep, begins, 200, 16, 8) == std::vector<BlockRun>{{0, 2}, {2, 1}, {3, 2}});
  // blocks_per_chunk caps pieces too.
  CHECK(document_runs(anchors, keep, begins, 200, 16, 1) ==
        std::vector<BlockRun>{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}});
  // A document of padding blocks only sees nothing: not cut by context.
  const bool none[] = {false, false, false, false};
  const std::vector<int64_t> pad_anchors{0, 0, 0, 0}, pad_begins{7, 7, 7, 7};
  CHECK(document_runs(pad_anchors, none, pad_begins, 200, 16, 8) == std::vector<BlockRun>{{0, 4}});
}

TEST_CASE("BlockPlan.AChunkReadsContextUpToItsLatestKeptAnchorFromItsEarliestDocument") {
  // Unpacked, two rows: the latest kept anchor over both rows bounds the
  // context (block 1 of row 1 is padding and does not count).
  const std::vector<int64_t> anchors{5, 25, 12, 29};
  const bool keep[] = {true, true, true, false};
  CHECK(chunk_extent({0, 2}, anchors, keep, {}, 2, 2, 4, 30) == ChunkExtent{0, 8, 0, 25});
  CHECK(chunk_extent({1, 1}, anchors, keep, {}, 2, 2, 4, 20) == ChunkExtent{4, 4, 0, 20});  // clamped to the context
  // Packed: from the earliest document start of its kept blocks.
  const std::vector<int64_t> begins{3, 9, 0, 0};
  CHECK(chunk_extent({0, 2}, anchors, keep, begins, 2, 2, 4, 30) == ChunkExtent{0, 8, 0, 25});
  const std::vector<int64_t> one_row_anchors{14, 25}, one_row_begins{9, 9};
  const bool both[] = {true, true};
  CHECK(chunk_extent({0, 2}, one_row_anchors, both, one_row_begins, 1, 2, 4, 30) == ChunkExtent{0, 8, 9, 16});
}

TEST_CASE("BlockPlan.GroupsNeverPadShortChunksToALongOneAndKeepTheBudget") {
  // (first_query, queries, context_first, context): a long document and
  // three short ones.
  const std::vector<ChunkExtent> chunks{{0, 16, 0, 400}, {16, 16, 0, 40}, {32, 16, 0, 38}, {48, 32, 0, 36}};
  using Groups = std::vector<std::vector<size_t>>;
  // The long chunk would fill a short one's padded shape to 896 / 6656 < 3/4.
  CHECK(group_chunks(chunks, 0, 0.75) == Groups{{0}, {1, 2, 3}});
  // Three short chunks padded to 32 x (40 + 32) exceed a budget of 3000 scores.
  CHECK(group_chunks(chunks, 3000, 0.75) == Groups{{0}, {1, 2}, {3}});
  // Padding freely with no budget: one call.
  CHECK(group_chunks(chunks, 0, 0.0) == Groups{{0, 1, 2, 3}});
  // A chunk larger than the budget runs alone.
  CHECK(group_chunks(chunks, 100, 0.0) == Groups{{0}, {1}, {2}, {3}});
}
