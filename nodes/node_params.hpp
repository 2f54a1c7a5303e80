#pragma once
// A node's `params:` declared as the run config's keys are (config/keys.hpp):
// each key once, with its type, default (the struct member's initialiser),
// check, one line of documentation and whether a resume may change it.
// Reading refuses unknown keys with a suggestion and checks every value;
// what a resume must keep is derived from the same declarations.
#include <string>
#include <utility>
#include <vector>

#include "config/keys.hpp"
#include "config/yaml_reader.hpp"

namespace dflow::nodes {

// "{a: 1, b: [2, 3]}" of (name, YAML value) terms; "" when there are none.
inline std::string terms_text(const std::vector<std::pair<std::string, std::string>>& terms) {
  std::string out;
  for (const auto& [name, value] : terms) out += (out.empty() ? "{" : ", ") + name + ": " + value;
  return out.empty() ? out : out + "}";
}

// Reads the declared keys of `params` over `out` (the defaults: a key left
// out keeps its value there) and checks them. Throws ConfigError naming
// pipeline.nodes[i].params.<key>.
template <class S>
S read_params(const config::KeySet<S>& keys, config::YamlSection& params, S out = {}) {
  keys.read(params, out);  // on a copy of the section: refuses unknown keys itself
  for (const auto& k : keys.keys()) params.raw(k.name());  // and the builder's section knows them read
  return out;
}

// What a resume must keep of `s` (config::OnResume::must_match): each
// must_match key whose value is not its value in `defaults`, as (name, one
// line of YAML), in declaration order. A key at its default is the same as
// one left out, for every node as for the run config (whose keys a saved
// config lacks count as their defaults, train::incompatible_config_keys): a
// checkpoint written before a key existed resumes while the key stays at its
// default, and a resume that changes it is refused naming it.
template <class S>
std::vector<std::pair<std::string, std::string>> resume_terms(const config::KeySet<S>& keys, const S& s,
                                                              const S& defaults = S{}) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& k : keys.keys()) {
    if (k.on_resume != config::OnResume::must_match) continue;
    std::string value = keys.value_text(k, s);
    if (value != keys.value_text(k, defaults)) out.emplace_back(k.name(), std::move(value));
  }
  return out;
}

// "{objective: dpace, alpha: 0.25}": resume_terms as the node's resume
// signature (RunHooks::resume_signature); "" when every key is at its default.
template <class S>
std::string resume_text(const config::KeySet<S>& keys, const S& s, const S& defaults = S{}) {
  return terms_text(resume_terms(keys, s, defaults));
}

}  // namespace dflow::nodes
