// Causal draft blocks: slot k of a block attends to slots 0 .. k of its own
// block (besides the context the plan gives it), as SpecForge's DSpine masks
// (causal_block) have it, instead of the whole block. A drafter kind asks
// for them (DrafterKind::causal_blocks); training and drafting alike apply
// them to the plan before add_sliding_window, whose masks derive from it.
#pragma once

#include "drafter/block_attention.hpp"

namespace dflow::drafter {

// Throws std::logic_error for a plan that already has sliding masks.
void make_blocks_causal(BlockAttentionPlan& plan);

}  // namespace dflow::drafter
