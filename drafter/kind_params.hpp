#pragma once
// A drafter kind's or an objective's params declared as a node's are (a
// config::KeySet of its own params struct P): the declarations give the
// catalog's lines, the reading with its refusals, the resume terms and the
// JSON the kind works from.
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "config/keys.hpp"
#include "drafter/kind.hpp"

namespace dflow::drafter {

template <class P>
class KeySetParams {
 public:
  using ToJson = std::function<nlohmann::json(const P&)>;
  // Checks across keys after each key's own: `section` says which were given.
  using CrossCheck = std::function<void(config::YamlSection& section, const P&)>;

  KeySetParams(config::KeySet<P> keys, ToJson to_json, CrossCheck cross_check = {})
      : keys_(std::move(keys)), to_json_(std::move(to_json)), cross_check_(std::move(cross_check)) {}

  std::vector<config::KeyDoc> params() const { return keys_.docs(); }

  // Reads every declared key of `section` (which holds only these) and checks them.
  nlohmann::json read(config::YamlSection& section) const {
    P p{};
    keys_.read(section, p);
    if (cross_check_) cross_check_(section, p);
    return to_json_(p);
  }

  // The must_match keys' values in `params` (read's JSON) as YAML text, in
  // declaration order, those at their defaults (as if left out, as a node's:
  // nodes/node_params.hpp's resume_terms) and those `skip` names left out.
  std::vector<std::pair<std::string, std::string>> resume_terms(
      const nlohmann::json& params, const std::function<bool(const std::string&)>& skip = {}) const {
    const nlohmann::json defaults = to_json_(P{});
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& k : keys_.keys()) {
      if (k.on_resume != config::OnResume::must_match || !params.contains(k.name())) continue;
      if (defaults.contains(k.name()) && defaults[k.name()] == params[k.name()]) continue;
      if (skip && skip(k.name())) continue;
      out.emplace_back(k.name(), value_text(params[k.name()]));
    }
    return out;
  }

  const config::KeySet<P>& keys() const { return keys_; }

  // A value as the run config prints it ("16", "1.0", "true", "vanilla").
  static std::string value_text(const nlohmann::json& v) {
    YAML::Emitter out;
    out.SetDoublePrecision(17);
    out << YAML::Flow;
    if (v.is_boolean()) config::emit_value(out, v.get<bool>());
    else if (v.is_number_integer()) config::emit_value(out, v.get<int64_t>());
    else if (v.is_number()) config::emit_value(out, v.get<double>());
    else if (v.is_string()) config::emit_value(out, v.get<std::string>());
    else return v.dump();
    return out.c_str();
  }

 private:
  config::KeySet<P> keys_;
  ToJson to_json_;
  CrossCheck cross_check_;
};

}  // namespace dflow::drafter
