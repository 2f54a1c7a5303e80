#include "drafter/kinds/registry.hpp"

namespace dflow::drafter {

std::vector<std::shared_ptr<const DrafterKind>> builtin_drafter_kinds() {
  return {dflash_kind(), dflash2_kind(), dspark_kind(), dspine_kind(), xpress_kind()};
}

}  // namespace dflow::drafter
