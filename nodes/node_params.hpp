#pragma once
// A node's `params:` declared as the run config's keys are (config/keys.hpp):
// each key once, with its type, default (the struct member's initialiser),
// check, one line of documentation and whether a resume may change it.
// Reading refuses unknown keys with a suggestion and checks every value;
// what a resume must keep is derived from the same declarations.
#include <string>

#include "config/keys.hpp"
#include "config/yaml_reader.hpp"

namespace dflow::nodes {

// Reads the declared keys of `params` over `out` (the defaults: a key left
// out keeps its value there) and checks them. Throws ConfigError naming
// pipeline.nodes[i].params.<key>.
template <class S>
S read_params(const config::KeySet<S>& keys, config::YamlSection& params, S out = {}) {
  keys.read(params, out);  // on a copy of the section: refuses unknown keys itself
  for (const auto& k : keys.keys()) params.raw(k.name());  // and the builder's section knows them read
  return out;
}

// "{objective: dpace, alpha: 0.5}": every key a resume must keep, in
// declaration order ("" when none is declared must_match).
template <class S>
std::string resume_text(const config::KeySet<S>& keys, const S& s) {
  std::string out;
  for (const auto& k : keys.keys()) {
    if (k.on_resume != config::OnResume::must_match) continue;
    out += (out.empty() ? "{" : ", ") + k.name() + ": " + keys.value_text(k, s);
  }
  return out.empty() ? out : out + "}";
}

}  // namespace dflow::nodes
