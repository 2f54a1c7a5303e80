// DFlash block attention: draft blocks attend to the context strictly before
// their anchor and to their own block (bidirectionally), never to other
// blocks. Computed in chunks of blocks so memory stays linear in the number
// of anchors: a chunk's queries see [context prefix, its own blocks] only,
// never a dense [N*B, S + N*B] mask.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace dflow::drafter {

struct BlockAttentionChunk {
  int64_t first_query = 0;     // first draft slot of the chunk (block-aligned)
  int64_t num_queries = 0;     // draft slots in the chunk (whole blocks)
  int64_t context_first = 0;   // keys from context positions [context_first, context_first + context_length)
  int64_t context_length = 0;
  // The earliest kept anchor of the chunk's blocks (over the batch;
  // context_first + context_length when none is kept). A sliding layer's
  // window reaches no key before earliest_anchor - (window - 1).
  int64_t earliest_anchor = 0;
  // A sliding layer's keys (add_sliding_window): the context positions
  // [sliding_context_first, + sliding_context_length) within the window of
  // some query of the chunk, a tail of the full layer's range.
  int64_t sliding_context_first = 0, sliding_context_length = 0;
  // Undefined for a packed row's chunks, whose groups hold the masks:
  torch::Tensor visible;       // [B, 1, num_queries, context_length + num_queries] bool
  torch::Tensor row_has_keys;  // [B, 1, num_queries, 1] bool; false for padding blocks
  torch::Tensor sliding_visible;  // [B, 1, num_queries, sliding_context_length + num_queries] (add_sliding_window)
};

// Packed single rows: the chunks (each one document's run of blocks) do not
// run one attention call each. They are padded to a common shape and run as
// one batch of chunks per group, [chunks, heads, queries, keys], as many
// chunks per group as the score budget allows (chunks sorted by context
// length so that a group pads little). A chunk's padded keys are masked and
// point at its own document's positions, its padded queries are dropped.
struct BlockAttentionGroup {
  int64_t num_chunks = 0, max_queries = 0, max_context = 0;
  std::vector<size_t> members;  // the plan's chunks in this group, in padded order
  torch::Tensor visible;        // [G, 1, Qmax, Cmax + Qmax] bool
  torch::Tensor row_has_keys;   // [G, 1, Qmax, 1] bool; false for padding blocks and padded queries
  // A sliding layer's pass (add_sliding_window): each chunk's keys narrowed
  // to its window (its sliding_context_* range), padded to max_sliding_context.
  int64_t max_sliding_context = 0;
  torch::Tensor sliding_visible;  // [G, 1, Qmax, max_sliding_context + Qmax] bool
};

struct BlockAttentionPlan {
  int64_t block_size = 0;
  int64_t num_blocks = 0;  // per sample
  std::vector<BlockAttentionChunk> chunks;
  // Packed single rows only (else empty): how the chunks run.
  std::vector<BlockAttentionGroup> groups;
  torch::Tensor slot_rows;  // [N * Bs] int64: each draft slot's row among the groups' padded rows, concatenated
  // Per group, concatenated over the groups: [sum G * Qmax] the draft slot of
  // each (chunk, query), padding repeating a real slot of the chunk; [sum G *
  // Cmax] the context position of each (chunk, key).
  torch::Tensor group_query_index, group_context_index;
  // Like group_context_index for a sliding layer's narrowed keys, [sum G * max_sliding_context].
  torch::Tensor group_sliding_context_index;
  // > 0 once add_sliding_window gave every chunk (or group) its
  // sliding_visible mask for this window; 0: full attention only.
  int64_t sliding_window = 0;
};

// anchor_positions [B, N] int64 and block_keep [B, N] bool, any device (a CPU
// copy of the anchors sizes the chunks). A kept block j sees context c iff
// c < anchor_j and c < context_length. A padding block (keep false) sees
// nothing: its rows come out as exact zeros (no NaN forward or backward).
// blocks_per_chunk <= 0 puts all blocks in one chunk. Packed rows:
// context_begin [B, N] int64 is the first context position of each block's
// document; block j then sees context c iff context_begin_j <= c < anchor_j,
// and a chunk reads keys from its blocks' earliest document start on. A
// single packed row (B = 1) is also cut into chunks where the blocks'
// document changes, so a chunk reads exactly one document's context, and
// its chunks run batched in groups (BlockAttentionGroup) of at most
// max_scores_per_group query-key pairs per head (padding included; <= 0: no
// budget; a chunk larger than the budget runs alone), where each chunk's own
// pairs fill at least min_group_fill of the padded shape (longest context
// first; 0: pad freely). Within a document, a chunk holds at most
// ceil(its document's context / block_size) blocks, as an unpacked row's
// chunks hold at most S / block_size.
BlockAttentionPlan plan_block_attention(const torch::Tensor& anchor_positions, const torch::Tensor& block_keep,
                                        int64_t context_length, int64_t block_size, int64_t blocks_per_chunk,
                                        torch::Device device, const torch::Tensor& context_begin = {},
                                        int64_t max_scores_per_group = 0, double min_group_fill = 0.75);

// Adds the masks of sliding-window layers (the rule of SpecForge's DFlash
// masks and z-lab's dflash/model.py): the query at slot k of a block
// anchored at a, at position a + k, sees context c only if
// a + k - sliding_window < c, besides the plan's own rule (c < a, within its
// document); a window counts the query's own position. The own block stays
// whole: sliding_window must be >= block_size, so no public variant of the
// in-block window bites. anchor_positions [B, N] as given to
// plan_block_attention. Full-attention layers keep using `visible`.
//
// A sliding layer scores only the keys some query of a chunk can see: the
// anchors are sorted, so a chunk's keys start at its earliest anchor minus
// the window (block-sparse by chunk), not at the document's start. The
// result is that of masking the whole context (SlidingKeys::whole_context,
// kept as the reference), at a fraction of the scores once the context is
// longer than the window.
enum class SlidingKeys { within_window, whole_context };
void add_sliding_window(BlockAttentionPlan& plan, const torch::Tensor& anchor_positions, int64_t sliding_window,
                        SlidingKeys keys = SlidingKeys::within_window);

// Blocks per chunk: attention scores within max_scores_per_chunk elements,
// and at most S / Bs blocks so the mostly-masked draft-to-draft part never
// outweighs the context part (at least 1).
int64_t blocks_per_chunk_for_budget(int64_t batch_size, int64_t num_heads, int64_t context_length, int64_t block_size,
                                    int64_t max_scores_per_chunk);

// q [B, H, N*Bs, D]; draft_k/draft_v [B, KVH, N*Bs, D]; context_k/context_v
// [B, KVH, S, D] (S >= every chunk's context_length). Returns [B, H, N*Bs, D].
// sliding_window > 0: a sliding layer's pass, with the masks that
// add_sliding_window added for that same window (else it throws).
torch::Tensor block_attention(const torch::Tensor& q, const torch::Tensor& draft_k, const torch::Tensor& draft_v,
                              const torch::Tensor& context_k, const torch::Tensor& context_v,
                              const BlockAttentionPlan& plan, int64_t sliding_window = 0);

}  // namespace dflow::drafter
