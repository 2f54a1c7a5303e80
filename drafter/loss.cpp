// The losses' registry and their weighted mixes.
#include "drafter/loss.hpp"

#include <cmath>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "drafter/losses/registry.hpp"

namespace dflow::model {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const DraftLoss>> losses;
};

Registry& registry() {
  static Registry* r = [] {
    auto* made = new Registry;
    for (auto& loss : builtin_draft_losses()) made->losses.emplace(loss->name(), std::move(loss));
    return made;
  }();
  return *r;
}

}  // namespace

const DraftLoss* find_draft_loss(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.losses.find(name);
  return it == r.losses.end() ? nullptr : it->second.get();
}

const DraftLoss& draft_loss(const std::string& name) {
  if (const DraftLoss* loss = find_draft_loss(name)) return *loss;
  std::string known;
  for (const auto& n : draft_loss_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown loss '" + name + "' (known: " + known + ")");
}

std::vector<std::string> draft_loss_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, loss] : r.losses) names.push_back(name);
  return names;
}

void register_draft_loss(std::shared_ptr<const DraftLoss> loss) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const std::string name = loss->name();
  if (!r.losses.emplace(name, std::move(loss)).second)
    throw std::logic_error("loss '" + name + "' is registered twice");
}

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

LossChunkResult mixed_chunk(const LossMix& mix, LossChunk& c) {
  if (mix.terms.size() == 1 && mix.terms.front().second == 1.0) return draft_loss(mix.terms.front().first).chunk(c);
  LossChunkResult out;
  bool accept_from_teacher = false;
  for (const auto& [name, weight] : mix.terms) {
    const DraftLoss& loss = draft_loss(name);
    // Each term on its own copy of the logits (a loss computes in place).
    LossChunk part{c.logits.clone(), c.labels, loss.needs_teacher() ? c.teacher.clone() : torch::Tensor(),
                   c.weights * weight, c.temperature, c.stats, c.gradient};
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

}  // namespace dflow::model
