#pragma once
// The bounds dflow takes for DSpark's Markov head and the kl loss: the
// drafter node's params refuse a value outside them naming the bound, and
// the model holds to the same (a drafter's config.json, dflash_loss).
#include <cstdint>

namespace dflow::model {

// speculators' default rank is 256; at Qwen3's vocabulary (151936) rank 4096
// already puts 1.2 billion parameters in the head's factors W1, W2
// [vocabulary, rank], more than the drafter's backbone.
inline constexpr int64_t kMaxMarkovRank = 4096;

// Below it both softmaxes are nearly one-hot (a logit gap of 1 becomes
// e^10 : 1) and the KL's gradient, which grows as 1/T, dwarfs the
// cross-entropy's; far below, the float32 logits divided by T overflow and
// every loss is NaN.
inline constexpr double kMinKlTemperature = 0.1;

}  // namespace dflow::model
