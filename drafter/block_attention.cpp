#include "drafter/block_attention.hpp"

#include <algorithm>
#include <span>
#include <stdexcept>
#include <utility>

#include "drafter/block_plan.hpp"
#include "target/layers.hpp"

namespace dflow::drafter {

int64_t blocks_per_chunk_for_budget(int64_t batch_size, int64_t num_heads, int64_t context_length, int64_t block_size,
                                    int64_t max_scores_per_chunk) {
  // A chunk of G blocks scores B * heads * G*Bs * (S + G*Bs) pairs, of which
  // the G*Bs x G*Bs draft part is mostly masked (only the block diagonal is
  // visible). Capping G*Bs at S keeps that waste at most the useful context
  // part; within the cap, the budget decides.
  const int64_t scores_per_block = std::max<int64_t>(1, batch_size * num_heads * block_size * 2 * context_length);
  const int64_t by_budget = max_scores_per_chunk / scores_per_block;
  const int64_t by_context = (context_length + block_size - 1) / block_size;
  return std::max<int64_t>(1, std::min(by_budget, by_context));
}

namespace {

// A chunk of an unpacked batch (or of a packed batch of several rows): its
// masks. Context strictly before each block's anchor (and from its
// document's start when packed); its own block both ways.
void add_chunk_masks(BlockAttentionChunk& chunk, const BlockRun& run, const torch::Tensor& anchors,
                     const torch::Tensor& keep, const torch::Tensor& begins, int64_t block_size,
                     torch::Device device) {
  const auto long_options = torch::TensorOptions().device(device).dtype(torch::kInt64);
  const int64_t batch = anchors.size(0), queries = chunk.num_queries;
  const torch::Tensor slot_anchor = anchors.narrow(1, run.first_block, run.blocks).repeat_interleave(block_size, 1);  // [B, Q]
  const torch::Tensor slot_keep = keep.narrow(1, run.first_block, run.blocks).repeat_interleave(block_size, 1);
  const torch::Tensor context_position =
      torch::arange(chunk.context_first, chunk.context_first + chunk.context_length, long_options)
          .view({1, 1, chunk.context_length});
  torch::Tensor context_visible = (context_position < slot_anchor.unsqueeze(-1)) & slot_keep.unsqueeze(-1);  // [B, Q, C]
  if (begins.defined()) {
    const torch::Tensor slot_begin = begins.narrow(1, run.first_block, run.blocks).repeat_interleave(block_size, 1);
    context_visible = context_visible & (context_position >= slot_begin.unsqueeze(-1));
  }
  const torch::Tensor slot_block = torch::arange(queries, long_options).floor_divide(block_size);  // [Q]
  // Padding rows keep their own block too so that softmax stays finite;
  // their outputs are zeroed through row_has_keys.
  const torch::Tensor own_block =
      (slot_block.unsqueeze(1) == slot_block.unsqueeze(0)).unsqueeze(0).expand({batch, queries, queries});
  chunk.visible = torch::cat({context_visible, own_block}, -1).unsqueeze(1);  // [B, 1, Q, C + Q]
  chunk.row_has_keys = slot_keep.view({batch, 1, queries, 1});
}

// The padded gather indices of one group, built on the CPU: padded queries
// repeat the chunk's first slot, padded keys its first context position (its
// own document either way).
struct GroupIndex {
  torch::Tensor query_index, query_real;      // [G, Qmax] int64, bool
  torch::Tensor context_index, key_real;      // [G, Cmax] int64, bool
};

GroupIndex group_index(const std::vector<BlockAttentionChunk>& chunks, const std::vector<size_t>& members,
                       int64_t queries, int64_t context, int64_t context_length) {
  const auto count = static_cast<int64_t>(members.size());
  GroupIndex out{torch::empty({count, queries}, torch::kInt64), torch::empty({count, queries}, torch::kBool),
                 torch::empty({count, context}, torch::kInt64), torch::empty({count, context}, torch::kBool)};
  auto qi = out.query_index.accessor<int64_t, 2>();
  auto qr = out.query_real.accessor<bool, 2>();
  auto ci = out.context_index.accessor<int64_t, 2>();
  auto kr = out.key_real.accessor<bool, 2>();
  const int64_t last_position = std::max<int64_t>(context_length - 1, 0);
  for (int64_t g = 0; g < count; ++g) {
    const BlockAttentionChunk& chunk = chunks[members[static_cast<size_t>(g)]];
    for (int64_t q = 0; q < queries; ++q) {
      qr[g][q] = q < chunk.num_queries;
      qi[g][q] = chunk.first_query + (qr[g][q] ? q : 0);
    }
    for (int64_t k = 0; k < context; ++k) {
      kr[g][k] = k < chunk.context_length;
      ci[g][k] = std::min(chunk.context_first + (kr[g][k] ? k : 0), last_position);
    }
  }
  return out;
}

// A packed row's groups (see BlockAttentionGroup): their masks and the
// plan's gather indices. anchors, keep and begins are the row's [N] per-block
// tensors on the device.
void add_group_tensors(BlockAttentionPlan& plan, const std::vector<std::vector<size_t>>& groups,
                       const torch::Tensor& anchors, const torch::Tensor& keep, const torch::Tensor& begins,
                       int64_t context_length, torch::Device device) {
  const int64_t block_size = plan.block_size;
  const auto long_options = torch::TensorOptions().device(device).dtype(torch::kInt64);
  const torch::Tensor slot_anchor = anchors.repeat_interleave(block_size);  // [N * Bs]
  const torch::Tensor slot_keep = keep.repeat_interleave(block_size);
  const torch::Tensor slot_begin = begins.repeat_interleave(block_size);
  std::vector<torch::Tensor> slots_in_order;  // per group: the draft slot of each real row
  std::vector<torch::Tensor> rows_in_order;   // per group: that row among all groups' padded rows
  std::vector<torch::Tensor> query_indices, context_indices;  // per group, see BlockAttentionPlan
  int64_t padded_rows = 0;
  for (const auto& members : groups) {
    const auto count = static_cast<int64_t>(members.size());
    int64_t queries = 0, context = 0;
    for (const size_t c : members) {
      queries = std::max(queries, plan.chunks[c].num_queries);
      context = std::max(context, plan.chunks[c].context_length);
    }
    const GroupIndex index = group_index(plan.chunks, members, queries, context, context_length);
    const torch::Tensor real_rows = index.query_real.reshape({-1}).nonzero().squeeze(1);
    slots_in_order.push_back(index.query_index.reshape({-1}).index_select(0, real_rows));
    rows_in_order.push_back(real_rows + padded_rows);
    padded_rows += count * queries;
    const torch::Tensor group_query_index = index.query_index.reshape({-1}).to(device);
    const torch::Tensor group_context_index = index.context_index.reshape({-1}).to(device);
    query_indices.push_back(group_query_index);
    context_indices.push_back(group_context_index);

    // Masks on the device, as for one chunk.
    const torch::Tensor q_keep = slot_keep.index_select(0, group_query_index).view({count, queries}) &
                                 index.query_real.to(device);  // [G, Q]
    const torch::Tensor key_position = group_context_index.view({count, 1, context});
    const torch::Tensor context_visible =
        index.key_real.to(device).unsqueeze(1) &
        (key_position < slot_anchor.index_select(0, group_query_index).view({count, queries, 1})) &
        (key_position >= slot_begin.index_select(0, group_query_index).view({count, queries, 1})) &
        q_keep.unsqueeze(-1);  // [G, Q, C]
    const torch::Tensor slot_block = torch::arange(queries, long_options).floor_divide(block_size);
    // Padded queries keep their own block too (finite softmax); they are dropped.
    const torch::Tensor own_block =
        (slot_block.unsqueeze(1) == slot_block.unsqueeze(0)).unsqueeze(0).expand({count, queries, queries});
    BlockAttentionGroup group;
    group.members = members;
    group.num_chunks = count;
    group.max_queries = queries;
    group.max_context = context;
    group.visible = torch::cat({context_visible, own_block}, -1).unsqueeze(1);  // [G, 1, Q, C + Q]
    group.row_has_keys = q_keep.view({count, 1, queries, 1});
    plan.groups.push_back(std::move(group));
  }
  // Each slot belongs to exactly one chunk: invert (group, chunk, query) order.
  const torch::Tensor slots = torch::cat(slots_in_order);
  plan.slot_rows = torch::empty_like(slots).index_put_({slots}, torch::cat(rows_in_order)).to(device);
  plan.group_query_index = torch::cat(query_indices);
  plan.group_context_index = torch::cat(context_indices);
}

// The earliest kept anchor among a run's blocks over the batch (`none` when none is kept).
int64_t earliest_kept_anchor(const BlockRun& run, std::span<const int64_t> anchors, std::span<const bool> keep,
                             int64_t batch, int64_t num_blocks, int64_t none) {
  int64_t earliest = none;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = run.first_block; j < run.first_block + run.blocks; ++j) {
      const auto at = static_cast<size_t>(b * num_blocks + j);
      if (keep[at]) earliest = std::min(earliest, anchors[at]);
    }
  return earliest;
}

template <class T>
std::span<const T> span_of(const torch::Tensor& contiguous) {
  return contiguous.defined() ? std::span<const T>(contiguous.data_ptr<T>(), static_cast<size_t>(contiguous.numel()))
                              : std::span<const T>();
}

}  // namespace

BlockAttentionPlan plan_block_attention(const torch::Tensor& anchor_positions, const torch::Tensor& block_keep,
                                        int64_t context_length, int64_t block_size, int64_t blocks_per_chunk,
                                        torch::Device device, const torch::Tensor& context_begin,
                                        int64_t max_scores_per_group, double min_group_fill) {
  if (anchor_positions.dim() != 2 || anchor_positions.sizes() != block_keep.sizes()) {
    throw std::invalid_argument("plan_block_attention: anchor_positions and block_keep must both be [B, N], got " +
                                c10::str(anchor_positions.sizes()) + " and " + c10::str(block_keep.sizes()));
  }
  if (context_begin.defined() && context_begin.sizes() != anchor_positions.sizes()) {
    throw std::invalid_argument("plan_block_attention: context_begin must be [B, N] like the anchors, got " +
                                c10::str(context_begin.sizes()));
  }
  if (block_size < 1) throw std::invalid_argument("plan_block_attention: block_size must be >= 1");
  const int64_t batch = anchor_positions.size(0), num_blocks = anchor_positions.size(1);
  BlockAttentionPlan plan;
  plan.block_size = block_size;
  plan.num_blocks = num_blocks;

  // Sizes first, on CPU copies (pure functions, drafter/block_plan.hpp).
  const bool packed = context_begin.defined();
  const torch::Tensor anchors_cpu = anchor_positions.to(torch::kCPU, torch::kInt64).contiguous();
  const torch::Tensor keep_cpu = block_keep.to(torch::kCPU, torch::kBool).contiguous();
  const torch::Tensor begin_cpu = packed ? context_begin.to(torch::kCPU, torch::kInt64).contiguous() : torch::Tensor();
  const auto anchors = span_of<int64_t>(anchors_cpu);
  const auto keep = span_of<bool>(keep_cpu);
  const auto begins = span_of<int64_t>(begin_cpu);
  // A packed single row (the end-to-end layout of packed batches) is cut
  // where the blocks' document changes, and its chunks run batched in groups.
  const bool one_packed_row = packed && batch == 1;
  const std::vector<BlockRun> runs =
      one_packed_row ? document_runs(anchors, keep, begins, context_length, block_size, blocks_per_chunk)
                     : fixed_runs(num_blocks, blocks_per_chunk);
  std::vector<ChunkExtent> extents;
  extents.reserve(runs.size());
  for (const BlockRun& run : runs) {
    extents.push_back(chunk_extent(run, anchors, keep, begins, batch, num_blocks, block_size, context_length));
    BlockAttentionChunk chunk;
    chunk.first_query = extents.back().first_query;
    chunk.num_queries = extents.back().num_queries;
    chunk.context_first = extents.back().context_first;
    chunk.context_length = extents.back().context_length;
    chunk.earliest_anchor = earliest_kept_anchor(run, anchors, keep, batch, num_blocks, chunk.context_first + chunk.context_length);
    plan.chunks.push_back(std::move(chunk));
  }

  // Then the tensors, on the device.
  const torch::Tensor anchors_device = anchor_positions.to(device, torch::kInt64);
  const torch::Tensor keep_device = block_keep.to(device, torch::kBool);
  const torch::Tensor begin_device = packed ? context_begin.to(device, torch::kInt64) : torch::Tensor();
  if (one_packed_row) {
    add_group_tensors(plan, group_chunks(extents, max_scores_per_group, min_group_fill), anchors_device[0],
                      keep_device[0], begin_device[0], context_length, device);
  } else {
    for (size_t i = 0; i < runs.size(); ++i)
      add_chunk_masks(plan.chunks[i], runs[i], anchors_device, keep_device, begin_device, block_size, device);
  }
  return plan;
}

torch::Tensor block_attention(const torch::Tensor& q, const torch::Tensor& draft_k, const torch::Tensor& draft_v,
                              const torch::Tensor& context_k, const torch::Tensor& context_v,
                              const BlockAttentionPlan& plan, int64_t sliding_window) {
  if (q.size(2) != plan.num_blocks * plan.block_size) {
    throw std::invalid_argument("block_attention: " + std::to_string(q.size(2)) + " draft queries but the plan has " +
                                std::to_string(plan.num_blocks) + " blocks of " + std::to_string(plan.block_size));
  }
  if (sliding_window > 0 && plan.sliding_window != sliding_window) {
    throw std::invalid_argument("block_attention: a sliding layer of window " + std::to_string(sliding_window) +
                                " needs a plan with that window (add_sliding_window), the plan has " +
                                (plan.sliding_window > 0 ? std::to_string(plan.sliding_window) : std::string("none")));
  }
  const bool sliding = sliding_window > 0;
  if (plan.chunks.empty()) return torch::zeros_like(q);
  if (!plan.groups.empty()) {
    // One packed row: gather each group's chunks into a padded batch, attend
    // once per group, put the real rows back in slot order.
    const int64_t heads = q.size(1), head_dim = q.size(3);
    const torch::Tensor q_rows = q[0].transpose(0, 1);  // [T, H, D]
    const torch::Tensor dk_rows = draft_k[0].transpose(0, 1), dv_rows = draft_v[0].transpose(0, 1);  // [T, KVH, D]
    const torch::Tensor ck_rows = context_k[0].transpose(0, 1), cv_rows = context_v[0].transpose(0, 1);  // [S, KVH, D]
    // One gather per tensor for all groups, split per group (a gather per
    // group would scatter its gradient into a zeroed copy of the whole row).
    // A sliding layer reads each chunk's keys within its window only.
    auto context_of = [&](const BlockAttentionGroup& group) {
      return sliding ? group.max_sliding_context : group.max_context;
    };
    std::vector<int64_t> query_rows, context_rows;
    for (const BlockAttentionGroup& group : plan.groups) {
      query_rows.push_back(group.num_chunks * group.max_queries);
      context_rows.push_back(group.num_chunks * context_of(group));
    }
    auto gathered = [&](const torch::Tensor& x, const torch::Tensor& index, const std::vector<int64_t>& sizes) {
      return x.index_select(0, index).split_with_sizes(sizes);
    };
    const auto all_q = gathered(q_rows, plan.group_query_index, query_rows);
    const auto all_dk = gathered(dk_rows, plan.group_query_index, query_rows);
    const auto all_dv = gathered(dv_rows, plan.group_query_index, query_rows);
    const torch::Tensor& context_index = sliding ? plan.group_sliding_context_index : plan.group_context_index;
    const auto all_ck = gathered(ck_rows, context_index, context_rows);
    const auto all_cv = gathered(cv_rows, context_index, context_rows);
    std::vector<torch::Tensor> rows;
    rows.reserve(plan.groups.size());
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      const BlockAttentionGroup& group = plan.groups[g];
      const int64_t count = group.num_chunks, queries = group.max_queries, context = context_of(group);
      auto batched = [&](const torch::Tensor& x, int64_t length) {
        return x.view({count, length, x.size(1), head_dim}).transpose(1, 2);
      };
      const torch::Tensor group_q = batched(all_q[g], queries);
      const torch::Tensor group_k = torch::cat({batched(all_ck[g], context), batched(all_dk[g], queries)}, 2);
      const torch::Tensor group_v = torch::cat({batched(all_cv[g], context), batched(all_dv[g], queries)}, 2);
      const torch::Tensor attended =
          target::grouped_attention(group_q, group_k, group_v, sliding ? group.sliding_visible : group.visible,
                            /*causal=*/false)
              .masked_fill(group.row_has_keys.logical_not(), 0.0);  // [G, H, Q, D]
      rows.push_back(attended.transpose(1, 2).reshape({count * queries, heads, head_dim}));
    }
    const torch::Tensor all = rows.size() == 1 ? rows.front() : torch::cat(rows, 0);
    return all.index_select(0, plan.slot_rows).transpose(0, 1).unsqueeze(0);  // [1, H, T, D]
  }
  std::vector<torch::Tensor> outputs;
  outputs.reserve(plan.chunks.size());
  for (const BlockAttentionChunk& chunk : plan.chunks) {
    const torch::Tensor chunk_q = q.narrow(2, chunk.first_query, chunk.num_queries);
    const int64_t context_first = sliding ? chunk.sliding_context_first : chunk.context_first;
    const int64_t context_length = sliding ? chunk.sliding_context_length : chunk.context_length;
    const torch::Tensor chunk_k = torch::cat(
        {context_k.narrow(2, context_first, context_length), draft_k.narrow(2, chunk.first_query, chunk.num_queries)}, 2);
    const torch::Tensor chunk_v = torch::cat(
        {context_v.narrow(2, context_first, context_length), draft_v.narrow(2, chunk.first_query, chunk.num_queries)}, 2);
    const torch::Tensor attended = target::grouped_attention(
        chunk_q, chunk_k, chunk_v, sliding ? chunk.sliding_visible : chunk.visible, /*causal=*/false);
    outputs.push_back(attended.masked_fill(chunk.row_has_keys.logical_not(), 0.0));  // [B, H, Q, D]
  }
  return outputs.size() == 1 ? outputs.front() : torch::cat(outputs, 2);
}

}  // namespace dflow::drafter
