// The losses' registry and their weighted mixes.
#include "drafter/loss.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "drafter/losses/registry.hpp"
#include "drafter/named_registry.hpp"

namespace dflow::drafter {

namespace {

NamedRegistry<DraftLoss>& registry() {
  static NamedRegistry<DraftLoss> r("loss", builtin_draft_losses());
  return r;
}

}  // namespace

const DraftLoss* find_draft_loss(const std::string& name) { return registry().find(name); }
const DraftLoss& draft_loss(const std::string& name) { return registry().get(name); }
std::vector<std::string> draft_loss_names() { return registry().names(); }
void register_draft_loss(std::shared_ptr<const DraftLoss> loss) { registry().add(std::move(loss)); }

bool LossMix::needs_teacher() const {
  for (const auto& [name, weight] : terms)
    if (draft_loss(name).needs_teacher()) return true;
  return false;
}

bool LossMix::uses_temperature() const {
  for (const auto& [name, weight] : terms)
    if (draft_loss(name).uses_temperature()) return true;
  return false;
}

double LossMix::chunk_buffers(double temperature) const {
  // The expected acceptance is taken first: the logits, the teacher's in
  // place turned into p, q beside them and softmax's working copy; then the
  // terms run without the teacher.
  if (expected_acceptance && !needs_teacher()) {
    LossMix terms_only = *this;
    terms_only.expected_acceptance = false;
    return std::max(4.0, terms_only.chunk_buffers(temperature));
  }
  if (terms.size() == 1 && terms.front().second == 1.0) return draft_loss(terms.front().first).chunk_buffers(temperature);
  // Before the last term: the chunk's logits (and teacher) beside the term's
  // copies, and from the second term on the gradient summed so far; the
  // last term in place of the chunk's, beside that sum.
  const double inputs = needs_teacher() ? 2 : 1;
  double peak = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    const double term = draft_loss(terms[i].first).chunk_buffers(temperature), sum = i > 0 ? 1 : 0;
    peak = std::max(peak, i + 1 == terms.size() ? term + sum : inputs + term + sum);
  }
  return peak;
}

std::string LossMix::text() const {
  if (terms.size() == 1 && terms.front().second == 1.0) return terms.front().first;
  std::ostringstream out;
  out << "{";
  for (size_t i = 0; i < terms.size(); ++i) out << (i ? ", " : "") << terms[i].first << ": " << terms[i].second;
  out << "}";
  return out.str();
}

void LossMix::validate() const {
  if (terms.empty()) throw std::invalid_argument("the loss has no term");
  for (const auto& [name, weight] : terms) {
    draft_loss(name);
    if (!(weight > 0.0) || !std::isfinite(weight))
      throw std::invalid_argument("loss " + name + "'s weight must be > 0, got " + std::to_string(weight));
  }
}

namespace {

LossChunkResult mixed_terms(const LossMix& mix, LossChunk& c);

// sum_v min(p_v, q_v) at temperature 1, p = softmax(teacher) in place of the
// teacher's buffer, the logits left as they are.
torch::Tensor overlap_keeping_logits(const torch::Tensor& logits, torch::Tensor& teacher) {
  torch::Tensor q = torch::softmax(logits, 1);
  const torch::Tensor p = teacher.sub_(torch::logsumexp(teacher, 1, /*keepdim=*/true)).exp_();
  return q.clamp_max_(p).sum(1);
}

}  // namespace

LossChunkResult mixed_chunk(const LossMix& mix, LossChunk& c) {
  if (!(mix.expected_acceptance && c.stats && c.teacher.defined() && !mix.needs_teacher())) return mixed_terms(mix, c);
  // The acceptance under the teacher's distribution, before a term computes
  // in place of the logits; no term reads the teacher, so it goes first.
  const torch::Tensor expected = overlap_keeping_logits(c.logits, c.teacher);
  c.teacher = torch::Tensor();
  LossChunkResult out = mixed_terms(mix, c);
  out.expected_accept_rate = expected;
  return out;
}

namespace {

LossChunkResult mixed_terms(const LossMix& mix, LossChunk& c) {
  if (mix.terms.size() == 1 && mix.terms.front().second == 1.0) return draft_loss(mix.terms.front().first).chunk(c);
  LossChunkResult out;
  bool accept_from_teacher = false;
  for (size_t i = 0; i < mix.terms.size(); ++i) {
    const auto& [name, weight] = mix.terms[i];
    const DraftLoss& loss = draft_loss(name);
    // Each term but the last on its own copy of the logits (a loss computes in place).
    const bool last = i + 1 == mix.terms.size();
    const torch::Tensor teacher = !loss.needs_teacher() ? torch::Tensor() : last ? c.teacher : c.teacher.clone();
    LossChunk part{last ? c.logits : c.logits.clone(), c.labels, teacher, c.weights * weight, c.temperature, c.stats,
                   c.gradient};
    const LossChunkResult r = loss.chunk(part);
    if (c.stats) {
      out.loss = out.loss.defined() ? out.loss + weight * r.loss : weight * r.loss;
      if (!out.accept_rate.defined() || (loss.needs_teacher() && !accept_from_teacher)) {
        out.accept_rate = r.accept_rate;
        accept_from_teacher = loss.needs_teacher();
      }
    }
    if (c.gradient) out.grad_logits = out.grad_logits.defined() ? out.grad_logits.add_(r.grad_logits) : r.grad_logits;
  }
  return out;
}

}  // namespace

}  // namespace dflow::drafter
