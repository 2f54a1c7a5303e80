#pragma once
// Settings declared once. A key's declaration gives its path, type, default
// (the value in a default-built struct), validation, one line of
// documentation and whether a resume may change it; reading, validating,
// printing (`to_yaml`), "did you mean", the resume check and the generated
// configuration reference (docs/reference/config.md) all walk the same declarations. The run config's
// keys are declared in config/config_keys.cpp; a node declares its `params:`
// the same way (a KeySet of its own params struct).
#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "config/errors.hpp"
#include "config/yaml_reader.hpp"

namespace dflow::config {

// Whether `--resume` accepts a changed value. Keys that decide what a run
// computes must match; keys that change how it is watched, where it writes,
// how fast it runs or how long it goes may change.
enum class OnResume { must_match, may_change };

// A check of one value: nullopt when valid, else what is wrong ("must be >= 1").
template <class T>
using Check = std::function<std::optional<std::string>(const T&)>;

// A fixed set of values a key takes (one_of, each_one_of): a check that
// keeps the set, so that the key's documentation can list it.
struct OneOf {
  std::vector<std::string> allowed;
  std::optional<std::string> operator()(const std::string& value) const;  // "'x' is not one of: a, b, ..."
};
struct EachOneOf {
  std::vector<std::string> allowed;
  std::optional<std::string> operator()(const std::vector<std::string>& values) const;
};

// What a key's declaration says about it, for a reader: `dflow config
// --reference`, and the params of a node kind (graph::NodeSpec::params,
// which `dflow nodes` lists).
struct KeyDoc {
  std::string name;                  // the declared path ("batch_size"; "train.lr")
  std::string type;                  // "integer", "list of strings", ...
  std::string default_text;          // one line of YAML ("0.0006", "[64, 128]"; "\"\"" when empty)
  std::vector<std::string> allowed;  // the values it takes when the set is fixed (one_of); else empty
  std::string doc;                   // one line
  OnResume on_resume = OnResume::must_match;
  std::string when;                  // "on_mismatch: skip": it applies only then; "" always
};

template <class S>
struct KeyDecl {
  std::string path;  // dotted, within S: "train.lr" (a params key: "batch_size")
  std::string type;  // "integer", "number", "string", "boolean", "list of integers", ...
  std::string doc;   // one line
  OnResume on_resume = OnResume::must_match;
  std::vector<std::string> allowed;  // from a OneOf / EachOneOf check; else empty
  std::string when;                  // KeySet::only_when
  std::function<void(YamlSection&, S&)> read;                 // from the key's own section
  std::function<std::optional<std::string>(const S&)> check;  // per-key validation
  std::function<void(YAML::Emitter&, const S&)> emit;         // the value, as YAML
  std::string section() const { return path.substr(0, path.rfind('.') == std::string::npos ? 0 : path.rfind('.')); }
  std::string name() const { return path.substr(path.rfind('.') == std::string::npos ? 0 : path.rfind('.') + 1); }
};

// Value helpers shared by every KeySet.
std::string type_label(const bool*);
std::string type_label(const int*);
std::string type_label(const int64_t*);
std::string type_label(const uint64_t*);
std::string type_label(const double*);
std::string type_label(const std::string*);
template <class E>
std::string type_label(const std::vector<E>*) {
  return "list of " + type_label(static_cast<const E*>(nullptr)) + "s";
}
void emit_value(YAML::Emitter& out, bool v);
void emit_value(YAML::Emitter& out, int v);
void emit_value(YAML::Emitter& out, int64_t v);
void emit_value(YAML::Emitter& out, uint64_t v);
void emit_value(YAML::Emitter& out, double v);  // shortest text that reads back the same
void emit_value(YAML::Emitter& out, const std::string& v);
template <class E>
void emit_value(YAML::Emitter& out, const std::vector<E>& values) {
  out << YAML::Flow << YAML::BeginSeq;
  for (const auto& v : values) emit_value(out, v);
  out << YAML::EndSeq;
}

// The declared keys of a settings struct S, in declaration order (keys of one
// section together).
template <class S>
class KeySet {
 public:
  // `access` is a function S& -> T& naming the member.
  template <class Access>
  KeySet& add(std::string path, Access access, OnResume on_resume, std::string doc,
              Check<std::remove_cvref_t<std::invoke_result_t<Access, S&>>> check = {}) {
    using T = std::remove_cvref_t<std::invoke_result_t<Access, S&>>;
    KeyDecl<S> k;
    k.path = std::move(path);
    k.type = type_label(static_cast<const T*>(nullptr));
    k.doc = std::move(doc);
    k.on_resume = on_resume;
    if (const auto* set = check.template target<OneOf>()) k.allowed = set->allowed;
    if (const auto* set = check.template target<EachOneOf>()) k.allowed = set->allowed;
    const std::string name = k.name();
    k.read = [access, name](YamlSection& section, S& s) { section.read(name, access(s)); };
    k.check = [access, check](const S& s) -> std::optional<std::string> {
      return check ? check(access(const_cast<S&>(s))) : std::nullopt;
    };
    k.emit = [access](YAML::Emitter& out, const S& s) { emit_value(out, access(const_cast<S&>(s))); };
    keys_.push_back(std::move(k));
    return *this;
  }

  // The key added last applies only under another key's value
  // ("on_mismatch: skip"); its documentation says so.
  KeySet& only_when(std::string condition) {
    keys_.back().when = std::move(condition);
    return *this;
  }

  // A key that is no longer here: reading a config that has it fails naming
  // where it went ("data.batch_size" -> "the pad node's params.batch_size").
  KeySet& moved(std::string old_path, std::string new_place) {
    moved_.emplace_back(std::move(old_path), std::move(new_place));
    return *this;
  }

  // A section whose keys beyond the declared ones belong to another reader
  // (model.drafter: the drafter kind declares its params, outside config/):
  // reading calls `take` on the section after the declared keys (it keeps
  // what YamlSection::take_unread gives, rather than have them refused), and
  // emit writes `given`'s keys at the section's end.
  KeySet& open(std::string section, std::function<void(YamlSection&, S&)> take,
               std::function<YAML::Node(const S&)> given) {
    open_.push_back({std::move(section), std::move(take), std::move(given)});
    return *this;
  }
  // The open sections' paths.
  std::vector<std::string> open_sections() const {
    std::vector<std::string> out;
    for (const auto& o : open_) out.push_back(o.section);
    return out;
  }

  const std::vector<KeyDecl<S>>& keys() const { return keys_; }
  const KeyDecl<S>* find(const std::string& path) const {
    for (const auto& k : keys_)
      if (k.path == path) return &k;
    return nullptr;
  }

  // Reads every declared key below `root` into `out` (type errors name the
  // key), refuses unknown keys in every section and in `root` (mark keys read
  // elsewhere known first, with root.raw), then checks each value. Sections
  // are created along the dotted paths; `sections` receives them by path
  // ("" is root) for checks that span keys.
  void read(YamlSection root, S& out, std::map<std::string, YamlSection>* sections = nullptr) const {
    std::map<std::string, YamlSection> made;
    std::vector<std::string> order;
    made.emplace("", std::move(root));
    for (const auto& k : keys_) k.read(section_at(made, order, k.section()), out);
    for (const auto& [old_path, new_place] : moved_) {
      const auto dot = old_path.rfind('.');
      const auto it = made.find(dot == std::string::npos ? "" : old_path.substr(0, dot));
      const std::string name = old_path.substr(dot == std::string::npos ? 0 : dot + 1);
      if (it != made.end() && it->second.has(name))
        throw it->second.error(name, "has moved: it is now " + new_place);
    }
    for (const auto& o : open_) o.take(section_at(made, order, o.section), out);
    for (const auto& path : order) made.at(path).finish();
    made.at("").finish();
    for (const auto& k : keys_)
      if (auto problem = k.check(out)) throw made.at(k.section()).error(k.name(), *problem);
    if (sections) *sections = std::move(made);
  }

  // The keys' values as YAML mappings (sections nested), into an open map.
  void emit(YAML::Emitter& out, const S& s) const {
    std::vector<std::string> open;  // section names currently open
    for (const auto& k : keys_) {
      std::vector<std::string> want = split(k.section());
      size_t common = 0;
      while (common < open.size() && common < want.size() && open[common] == want[common]) ++common;
      for (size_t i = open.size(); i > common; --i) {
        emit_given(out, s, joined(open, i));
        out << YAML::EndMap;
      }
      open.resize(common);
      for (size_t i = common; i < want.size(); ++i) {
        out << YAML::Key << want[i] << YAML::Value << YAML::BeginMap;
        open.push_back(want[i]);
      }
      out << YAML::Key << k.name() << YAML::Value;
      k.emit(out, s);
    }
    for (size_t i = open.size(); i > 0; --i) {
      emit_given(out, s, joined(open, i));
      out << YAML::EndMap;
    }
  }

  // A key's value as one line of YAML ("[64, 128]", "0.0006").
  std::string value_text(const KeyDecl<S>& k, const S& s) const {
    YAML::Emitter out;
    out.SetDoublePrecision(17);
    out << YAML::Flow;
    k.emit(out, s);
    return out.c_str();
  }

  // Every key's documentation, with its value in `defaults` as the default.
  std::vector<KeyDoc> docs(const S& defaults = S{}) const {
    std::vector<KeyDoc> out;
    for (const auto& k : keys_) {
      std::string value = value_text(k, defaults);
      if (value.empty() || value == "~") value = "\"\"";
      out.push_back({k.path, k.type, value, k.allowed, k.doc, k.on_resume, k.when});
    }
    return out;
  }

 private:
  static std::vector<std::string> split(const std::string& path) {
    std::vector<std::string> parts;
    size_t start = 0;
    while (start < path.size()) {
      size_t dot = path.find('.', start);
      if (dot == std::string::npos) dot = path.size();
      parts.push_back(path.substr(start, dot - start));
      start = dot + 1;
    }
    return parts;
  }
  static YamlSection& section_at(std::map<std::string, YamlSection>& made, std::vector<std::string>& order,
                                 const std::string& path) {
    if (auto it = made.find(path); it != made.end()) return it->second;
    const auto dot = path.rfind('.');
    const std::string parent = dot == std::string::npos ? "" : path.substr(0, dot);
    YamlSection& up = section_at(made, order, parent);
    auto [it, _] = made.emplace(path, up.section(path.substr(dot == std::string::npos ? 0 : dot + 1)));
    order.push_back(path);
    return it->second;
  }
  struct OpenSection {
    std::string section;
    std::function<void(YamlSection&, S&)> take;
    std::function<YAML::Node(const S&)> given;
  };
  // Before `section`'s map closes in emit: the keys it holds as given.
  void emit_given(YAML::Emitter& out, const S& s, const std::string& section) const {
    for (const auto& o : open_) {
      if (o.section != section) continue;
      const YAML::Node given = o.given(s);
      if (!given || !given.IsMap()) continue;
      for (auto it = given.begin(); it != given.end(); ++it) out << YAML::Key << it->first << YAML::Value << it->second;
    }
  }
  static std::string joined(const std::vector<std::string>& parts, size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i) out += (i ? "." : "") + parts[i];
    return out;
  }
  std::vector<KeyDecl<S>> keys_;
  std::vector<std::pair<std::string, std::string>> moved_;
  std::vector<OpenSection> open_;
};

// Checks used by declarations: `ok(value)` or the message.
template <class T, class Ok>
Check<T> must(Ok ok, std::string message) {
  return [ok, message](const T& v) -> std::optional<std::string> {
    if (ok(v)) return std::nullopt;
    return message;
  };
}
// "'x' is not one of: a, b, did you mean 'a'?" (the set stays listed in the key's KeyDoc).
Check<std::string> one_of(std::vector<std::string> allowed);
Check<std::vector<std::string>> each_one_of(std::vector<std::string> allowed);

}  // namespace dflow::config
