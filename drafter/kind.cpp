// The drafter kinds' registry and what every kind shares: the backbone's
// own drafting (slots in parallel).
#include "drafter/kind.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include "drafter/kinds/registry.hpp"

namespace dflow::model {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const DrafterKind>> kinds;
};

Registry& registry() {
  static Registry* r = [] {
    auto* made = new Registry;
    for (auto& kind : builtin_drafter_kinds()) made->kinds.emplace(kind->name(), std::move(kind));
    return made;
  }();
  return *r;
}

std::vector<int64_t> to_vector(const torch::Tensor& values) {
  const torch::Tensor v = values.to(torch::kCPU, torch::kInt64).contiguous();
  return {v.data_ptr<int64_t>(), v.data_ptr<int64_t>() + v.numel()};
}

}  // namespace

const DrafterKind* find_drafter_kind(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.kinds.find(name);
  return it == r.kinds.end() ? nullptr : it->second.get();
}

const DrafterKind& drafter_kind(const std::string& name) {
  if (const DrafterKind* kind = find_drafter_kind(name)) return *kind;
  std::string known;
  for (const auto& n : drafter_kind_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown drafter kind '" + name + "' (known: " + known + ")");
}

std::vector<std::string> drafter_kind_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, kind] : r.kinds) names.push_back(name);
  return names;
}

void register_drafter_kind(std::shared_ptr<const DrafterKind> kind) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const std::string name = kind->name();
  if (!r.kinds.emplace(name, std::move(kind)).second)
    throw std::logic_error("drafter kind '" + name + "' is registered twice");
}

std::vector<std::string> adamw_parameter_fragments() {
  std::vector<std::string> out;
  for (const auto& name : drafter_kind_names())
    for (const auto& fragment : drafter_kind(name).adamw_parameters())
      if (std::find(out.begin(), out.end(), fragment) == out.end()) out.push_back(fragment);
  return out;
}

std::pair<std::string, nlohmann::json> drafter_kind_of_config(const nlohmann::json& config, const std::string& source) {
  std::pair<std::string, nlohmann::json> found{"dflash", nlohmann::json::object()};
  for (const auto& name : drafter_kind_names()) {
    auto fields = drafter_kind(name).fields_from_config(config, source);
    if (!fields) continue;
    if (found.first != "dflash")
      throw std::runtime_error("drafter config '" + source + "': carries the fields of two drafter kinds, '" +
                               found.first + "' and '" + name + "'");
    found = {name, std::move(*fields)};
  }
  return found;
}

std::shared_ptr<KindModules> DrafterKind::add_modules(DFlashDrafterImpl&) const {
  return std::make_shared<KindModules>();
}

BlockDraft KindModules::draft_block(const BlockDraftInputs& in) {
  BlockDraft out;
  if (in.want_logits || in.sampler) out.logits = in.backbone_logits.to(torch::kCPU, torch::kFloat32);
  if (in.sampler) {
    out.probabilities = in.sampler->probabilities(out.logits);
    out.drafts = in.sampler->draw_rows(out.probabilities);
  } else {
    out.drafts = to_vector(in.backbone_logits.argmax(-1));
  }
  return out;
}

}  // namespace dflow::model
