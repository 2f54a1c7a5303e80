#pragma once
// The bound dflow takes for DSpark's Markov head: model.drafter's params
// refuse a value outside it naming the bound, and the model holds to the
// same (a drafter's config.json).
#include <cstdint>

namespace dflow::drafter {

// speculators' default rank is 256; at Qwen3's vocabulary (151936) rank 4096
// already puts 1.2 billion parameters in the head's factors W1, W2
// [vocabulary, rank], more than the drafter's backbone.
inline constexpr int64_t kMaxMarkovRank = 4096;

}  // namespace dflow::drafter
