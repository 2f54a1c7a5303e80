#pragma once
// The drafter kinds dflow ships, one line each in registry.cpp; a kind of
// its own lives in drafter/kinds/<name>/ and adds its line there (or calls
// register_drafter_kind, as a test's kind does).
#include <memory>
#include <vector>

#include "drafter/kind.hpp"

namespace dflow::drafter {

std::vector<std::shared_ptr<const DrafterKind>> builtin_drafter_kinds();

std::shared_ptr<const DrafterKind> dflash_kind();
std::shared_ptr<const DrafterKind> dflash2_kind();
std::shared_ptr<const DrafterKind> dspark_kind();
std::shared_ptr<const DrafterKind> xpress_kind();
std::shared_ptr<const DrafterKind> dspine_kind();

}  // namespace dflow::drafter
