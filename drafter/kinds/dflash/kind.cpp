// DFlash: the backbone alone (docs/dflash.md), the kind every other kind
// adds to. It takes no params and adds no module, term or field.
#include "drafter/kinds/registry.hpp"

namespace dflow::drafter {

namespace {

class DFlashKind final : public DrafterKind {
 public:
  std::string name() const override { return "dflash"; }
  std::string summary() const override {
    return "the DFlash backbone alone: draft layers over the target's features, the target's LM head";
  }
};

}  // namespace

std::shared_ptr<const DrafterKind> dflash_kind() { return std::make_shared<DFlashKind>(); }

}  // namespace dflow::drafter
