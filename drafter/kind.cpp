// The drafter kinds' registry and what every kind shares: the backbone's
// own drafting (slots in parallel).
#include "drafter/kind.hpp"

#include <algorithm>
#include <stdexcept>

#include "drafter/kinds/registry.hpp"
#include "drafter/named_registry.hpp"

namespace dflow::drafter {

namespace {

NamedRegistry<DrafterKind>& registry() {
  static NamedRegistry<DrafterKind> r("drafter kind", builtin_drafter_kinds());
  return r;
}

std::vector<int64_t> to_vector(const torch::Tensor& values) {
  const torch::Tensor v = values.to(torch::kCPU, torch::kInt64).contiguous();
  return {v.data_ptr<int64_t>(), v.data_ptr<int64_t>() + v.numel()};
}

}  // namespace

const DrafterKind* find_drafter_kind(const std::string& name) { return registry().find(name); }
const DrafterKind& drafter_kind(const std::string& name) { return registry().get(name); }
std::vector<std::string> drafter_kind_names() { return registry().names(); }
void register_drafter_kind(std::shared_ptr<const DrafterKind> kind) { registry().add(std::move(kind)); }

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

}  // namespace dflow::drafter
