// The drafter's objectives (the drafter node's `loss:`): each loss in its
// own file (drafter/losses/<name>.cpp), registered by name, declaring what it
// needs (the data's labels, the target's distribution, a temperature) and
// its params. A loss is computed a chunk of rows at a time by
// chunked_draft_loss (drafter/chunked_cross_entropy.hpp), which builds each
// chunk's draft logits (and the teacher's, for a loss that needs them) and
// hands them here: no [rows, vocabulary] float32 matrix is held beyond one
// chunk. Weighted mixes (`loss: {ce: 0.1, kl: 0.9}`) are composed in one
// place, mixed_chunk below.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>


namespace dflow::drafter {

// The least temperature a loss takes (kl_temperature). Below it both
// softmaxes are nearly one-hot (a logit gap of 1 becomes e^10 : 1) and a
// distillation loss's gradient, which grows as 1/T, dwarfs the
// cross-entropy's; far below, the float32 logits divided by T overflow and
// every loss is NaN.
inline constexpr double kMinLossTemperature = 0.1;

// One chunk of c rows.
struct LossChunk {
  torch::Tensor logits;   // [c, V] the draft's logits (bias included), reduction dtype; the loss may overwrite it
  torch::Tensor labels;   // [c, 1] int64: the data's tokens
  torch::Tensor teacher;  // [c, V] the target's logits (needs_teacher), reduction dtype; may be overwritten
  torch::Tensor weights;  // [c] the rows' weights, reduction dtype
  double temperature = 1.0;
  bool stats = true;      // give loss and accept_rate
  bool gradient = false;  // give grad_logits
};

struct LossChunkResult {
  torch::Tensor loss;         // [c] each row's loss (stats)
  torch::Tensor accept_rate;  // [c] stats: 1 - TV(p, q) at temperature 1, p the teacher's (one-hot of the label without one)
  torch::Tensor grad_logits;  // [c, V] gradient: d(sum w * loss)/d logits
  // [c] stats, LossMix::expected_acceptance with no term reading the
  // teacher: sum min(p, q) under the teacher's p; the terms' accept_rate
  // stays theirs (a kind's terms train on it).
  torch::Tensor expected_accept_rate;
};

class DraftLoss {
 public:
  virtual ~DraftLoss() = default;
  virtual std::string name() const = 0;
  virtual std::string summary() const = 0;  // one line, for the catalog
  // The target's own distribution at every trained slot (its last hidden
  // state through its final norm and LM head): the feature source must give it.
  virtual bool needs_teacher() const { return false; }
  // Reads the temperature (kl_temperature), for the catalog and the refusals.
  virtual bool uses_temperature() const { return false; }
  virtual LossChunkResult chunk(LossChunk& c) const = 0;
  // The most [c, V] buffers of the reduction dtype that chunk() holds at
  // once, the draft's logits and the teacher's it is handed included (a
  // boolean [c, V] mask counts a quarter): the memory model's count for the
  // loss (tests/drafter/test_loss_memory.cpp measures it).
  virtual double chunk_buffers(double temperature) const = 0;
};

// The registered losses (drafter/losses/registry.cpp's, and any added since).
const DraftLoss& draft_loss(const std::string& name);  // unknown: std::invalid_argument naming the known ones
const DraftLoss* find_draft_loss(const std::string& name);
std::vector<std::string> draft_loss_names();  // sorted
void register_draft_loss(std::shared_ptr<const DraftLoss> loss);  // a name taken twice: std::logic_error

// The drafter node's `loss:`: one loss, or a weighted mix.
struct LossMix {
  std::vector<std::pair<std::string, double>> terms{{"ce", 1.0}};
  // Stats: the acceptance rate under the teacher's distribution (sum
  // min(p, q) at temperature 1) even when no term reads the teacher
  // (ObjectiveOptions::expected_acceptance); the chunk then has the teacher.
  bool expected_acceptance = false;

  static LossMix single(const std::string& name) { return LossMix{{{name, 1.0}}}; }
  bool needs_teacher() const;
  bool uses_temperature() const;
  // The mix's chunk_buffers as mixed_chunk computes it.
  double chunk_buffers(double temperature) const;
  bool is(const std::string& name) const { return terms.size() == 1 && terms.front().first == name; }
  // "ce", "kl" or "{ce: 0.1, kl: 0.9}".
  std::string text() const;
  // Throws std::invalid_argument: an unknown loss (naming the known ones),
  // no term, or a weight that is not > 0.
  void validate() const;
  bool operator==(const LossMix&) const = default;
};

// The mix's chunk: each term's loss and gradient weighed by its weight (a
// single term is the loss itself, computed in place; in a mix each term but
// the last on its own copy of the logits, the last in place); the acceptance
// rate from the first term that reads the teacher, else the first.
LossChunkResult mixed_chunk(const LossMix& mix, LossChunk& c);

}  // namespace dflow::drafter
