#include "drafter/block_plan.hpp"

#include <algorithm>
#include <numeric>

namespace dflow::drafter {

std::vector<BlockRun> fixed_runs(int64_t num_blocks, int64_t blocks_per_chunk) {
  if (blocks_per_chunk <= 0) blocks_per_chunk = std::max<int64_t>(1, num_blocks);
  std::vector<BlockRun> runs;
  for (int64_t start = 0; start < num_blocks; start += blocks_per_chunk)
    runs.push_back({start, std::min(blocks_per_chunk, num_blocks - start)});
  return runs;
}

std::vector<BlockRun> document_runs(std::span<const int64_t> anchors, std::span<const bool> keep,
                                    std::span<const int64_t> context_begin, int64_t context_length, int64_t block_size,
                                    int64_t blocks_per_chunk) {
  const auto num_blocks = static_cast<int64_t>(anchors.size());
  if (blocks_per_chunk <= 0) blocks_per_chunk = std::max<int64_t>(1, num_blocks);
  std::vector<BlockRun> runs;
  for (int64_t start = 0; start < num_blocks;) {
    int64_t end = start, reach = 0;  // the document's blocks [start, end); its context end
    while (end < num_blocks && context_begin[end] == context_begin[start]) {
      if (keep[end]) reach = std::max(reach, anchors[end]);
      ++end;
    }
    const int64_t context =
        std::clamp<int64_t>(reach, 0, context_length) - std::min(context_begin[start], context_length);
    const int64_t cap = context > 0 ? std::clamp<int64_t>((context + block_size - 1) / block_size, 1, blocks_per_chunk)
                                    : blocks_per_chunk;  // nothing visible: no reason to cut
    const int64_t blocks = end - start, pieces = (blocks + cap - 1) / cap;
    for (int64_t piece = 0, first = start; piece < pieces; ++piece) {
      const int64_t size = blocks / pieces + (piece < blocks % pieces ? 1 : 0);
      runs.push_back({first, size});
      first += size;
    }
    start = end;
  }
  return runs;
}

ChunkExtent chunk_extent(const BlockRun& run, std::span<const int64_t> anchors, std::span<const bool> keep,
                         std::span<const int64_t> context_begin, int64_t batch, int64_t num_blocks,
                         int64_t block_size, int64_t context_length) {
  const bool packed = !context_begin.empty();
  int64_t end = 0, first = context_length;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = run.first_block; j < run.first_block + run.blocks; ++j) {
      const auto at = static_cast<size_t>(b * num_blocks + j);
      if (!keep[at]) continue;
      end = std::max(end, anchors[at]);
      if (packed) first = std::min(first, context_begin[at]);
    }
  }
  end = std::clamp<int64_t>(end, 0, context_length);
  first = packed ? std::clamp<int64_t>(first, 0, end) : 0;
  return {run.first_block * block_size, run.blocks * block_size, first, end - first};
}

std::vector<std::vector<size_t>> group_chunks(std::span<const ChunkExtent> chunks, int64_t max_scores_per_group,
                                              double min_group_fill) {
  std::vector<size_t> order(chunks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return chunks[a].context_length != chunks[b].context_length ? chunks[a].context_length > chunks[b].context_length
                                                                : chunks[a].num_queries > chunks[b].num_queries;
  });
  std::vector<std::vector<size_t>> groups;
  int64_t max_q = 0, max_c = 0;  // the open group's padded shape
  for (const size_t c : order) {
    const int64_t own_q = chunks[c].num_queries, own_c = chunks[c].context_length;
    const int64_t q = std::max(max_q, own_q), k = std::max(max_c, own_c);
    const auto count = static_cast<int64_t>(groups.empty() ? 0 : groups.back().size() + 1);
    const bool within_budget = max_scores_per_group <= 0 || count * q * (k + q) <= max_scores_per_group;
    const bool fills = static_cast<double>(own_q * (own_c + own_q)) >= min_group_fill * static_cast<double>(q * (k + q));
    if (groups.empty() || !within_budget || !fills) {
      groups.emplace_back();
      max_q = own_q;
      max_c = own_c;
    } else {
      max_q = q;
      max_c = k;
    }
    groups.back().push_back(c);
  }
  return groups;
}

}  // namespace dflow::drafter
