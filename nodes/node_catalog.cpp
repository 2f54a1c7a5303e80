#include "nodes/node_catalog.hpp"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "nodes/node_kind.hpp"

namespace dflow::nodes {

namespace {

// Params a hook is asked with: the defaults (setting ""), then each other
// value of a boolean or fixed-set param, one at a time ("loss: kl"). A
// string without a default (a directory) is one a node must be given: each
// probe gives it its own name.
struct Probe {
  std::string setting;
  YAML::Node params;
};

std::vector<Probe> probes(const std::vector<config::KeyDoc>& params) {
  auto given = [&] {
    YAML::Node node(YAML::NodeType::Map);
    for (const auto& p : params)
      if (p.type == "string" && p.default_text == "\"\"") node[p.name] = p.name;
    return node;
  };
  std::vector<Probe> out{{"", given()}};
  for (const auto& p : params) {
    if (p.type.starts_with("list")) continue;  // a fixed set of elements, not of values
    const auto values = p.type == "boolean" ? std::vector<std::string>{"true", "false"} : p.allowed;
    for (const auto& value : values) {
      if (value == p.default_text) continue;
      YAML::Node node = given();
      node[p.name] = YAML::Load(value);
      out.push_back({p.name + ": " + value, node});
    }
  }
  return out;
}

// The first probe's answer that says something, after the setting that gave
// it (" when loss: kl: answer"; ": runs the target in-process" with the
// defaults); where other values of the same param answer too, all of them,
// with the answer only if theirs is the same (" when loss: js, kl or tv");
// nullopt when none does.
std::optional<std::string> first_answer(const std::vector<Probe>& tried,
                                        const std::function<std::string(const YAML::Node& params)>& ask) {
  auto answer_of = [&](const Probe& probe) -> std::string {
    try {
      return ask(probe.params);
    } catch (const std::exception&) {
      return "";  // a setting that does not stand alone (a param that needs another one beside it)
    }
  };
  for (size_t i = 0; i < tried.size(); ++i) {
    const std::string answer = answer_of(tried[i]);
    if (answer.empty()) continue;
    if (tried[i].setting.empty()) return ": " + answer;
    const std::string key = tried[i].setting.substr(0, tried[i].setting.find(": ") + 2);
    std::vector<std::string> values{tried[i].setting.substr(key.size())};
    bool same = true;
    for (size_t j = i + 1; j < tried.size(); ++j) {
      if (!tried[j].setting.starts_with(key)) continue;
      const std::string other = answer_of(tried[j]);
      if (other.empty()) continue;
      values.push_back(tried[j].setting.substr(key.size()));
      same = same && other == answer;
    }
    std::string setting = key + values.front();
    for (size_t v = 1; v < values.size(); ++v) setting += (v + 1 == values.size() ? " or " : ", ") + values[v];
    return " when " + setting + (same ? ": " + answer : "");
  }
  return std::nullopt;
}

// first_answer for each param on its own, joined: " when objective: dpace: ...; or
// when loss: js or kl" (the defaults' answer alone when they give one).
std::optional<std::string> answer_per_param(const std::vector<Probe>& tried,
                                            const std::function<std::string(const YAML::Node& params)>& ask) {
  std::vector<std::string> keys;
  for (const auto& probe : tried) {
    const std::string key = probe.setting.substr(0, probe.setting.find(": "));
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  std::string out;
  for (const auto& key : keys) {
    std::vector<Probe> own;
    for (const auto& probe : tried)
      if (probe.setting.substr(0, probe.setting.find(": ")) == key) own.push_back(probe);
    const auto answer = first_answer(own, ask);
    if (!answer) continue;
    if (key.empty()) return answer;
    out += (out.empty() ? "" : "; or") + *answer;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

// What the kind needs of a run, each in words, from its hooks.
std::vector<std::string> needs_of(const graph::NodeSpec& spec) {
  std::vector<std::string> out;
  const RunHooks* hooks = run_hooks(spec);
  if (!hooks) return out;
  const auto tried = probes(spec.params);
  auto say = [&](const std::string& what, const std::optional<std::string>& answer) {
    out.push_back(what + (answer ? *answer : " in some runs, as their config decides"));
  };
  if (hooks->needs_target) {
    static const config::Config demo = config::load_config("");
    say("the whole target in-process", first_answer(tried, [&](const YAML::Node& params) {
          config::NodeDecl node;
          node.name = node.type = spec.type;
          node.params = params;
          return hooks->needs_target(demo, node);
        }));
  }
  if (hooks->teacher) {
    const std::string what = "the teacher (the target's last hidden state with every batch)";
    say(what, answer_per_param(tried, [&](const YAML::Node& params) {
          config::YamlSection section(params, "params", std::make_shared<config::Origins>());
          return hooks->teacher(section);
        }));
  }
  return out;
}

std::vector<std::string> gives_of(const graph::NodeSpec& spec) {
  const RunHooks* hooks = run_hooks(spec);
  if (hooks && hooks->gives_teacher) return {"the teacher (the target's last hidden state) when a run needs it"};
  return {};
}

std::string role_of(const graph::NodeSpec& spec) {
  return std::string("a ") + graph::kind_name(spec.kind) + " node" +
         (spec.compute ? "; its work is the compute that bounds a run (the report's performance model)" : "");
}

std::string joined(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

// "batch (FeatureBatch), snapshot (Snapshot, optional)"; `quote` wraps the name.
std::string ports_text(const std::vector<graph::PortSpec>& ports, const std::string& quote) {
  std::vector<std::string> items;
  for (const auto& p : ports) {
    std::vector<std::string> about{p.type == graph::kAnyType ? "any type" : p.type};
    if (p.ordered) about.push_back("ordered");
    if (p.routed) about.push_back("routed");
    if (p.optional) about.push_back("optional");
    items.push_back(quote + p.name + quote + " (" + joined(about, ", ") + ")");
  }
  return items.empty() ? "none" : joined(items, ", ");
}

// One line: "objective (string; default decay; one of: decay, dpace): position weights: ...".
std::string param_line(const config::KeyDoc& p) {
  std::vector<std::string> about{p.type, "default " + p.default_text};
  if (!p.allowed.empty()) about.push_back("one of: " + joined(p.allowed, ", "));
  if (!p.when.empty()) about.push_back("only with " + p.when);
  if (p.on_resume == config::OnResume::may_change) about.push_back("a resume may change it");
  return p.name + " (" + joined(about, "; ") + "): " + p.doc;
}

std::string text_of(const graph::NodeSpec& spec) {
  std::string out = spec.type + ": " + spec.description + "\n";
  out += "  " + role_of(spec) + "\n";
  out += "  inputs:  " + ports_text(spec.inputs, "") + "\n";
  out += "  outputs: " + ports_text(spec.outputs, "") + "\n";
  for (const auto& need : needs_of(spec)) out += "  needs:   " + need + "\n";
  for (const auto& gift : gives_of(spec)) out += "  gives:   " + gift + "\n";
  if (spec.params.empty()) return out + "  params:  none\n";
  out += "  params:\n";
  for (const auto& p : spec.params) out += "    " + param_line(p) + "\n";
  return out;
}

// Text as Markdown shows it: "hs_<i>.safetensors" is no HTML tag, and in a
// table cell a '|' would end the cell.
std::string prose(const std::string& text) {
  std::string out;
  for (const char c : text) out += c == '<' || c == '|' ? "\\" + std::string(1, c) : std::string(1, c);
  return out;
}

std::string markdown_of(const graph::NodeSpec& spec) {
  std::string out = "## `" + spec.type + "`\n\n" + prose(spec.description) + "\n\n";
  out += "- " + role_of(spec) + "\n";
  out += "- inputs: " + ports_text(spec.inputs, "`") + "\n";
  out += "- outputs: " + ports_text(spec.outputs, "`") + "\n";
  for (const auto& need : needs_of(spec)) out += "- needs " + prose(need) + "\n";
  for (const auto& gift : gives_of(spec)) out += "- gives " + gift + "\n";
  if (spec.params.empty()) return out + "\nNo params.\n";
  out += "\n| param | type | default | allowed | on `--resume` | what it sets |\n"
         "| --- | --- | --- | --- | --- | --- |\n";
  for (const auto& p : spec.params) {
    std::vector<std::string> allowed;
    for (const auto& a : p.allowed) allowed.push_back("`" + a + "`");
    out += "| `" + p.name + "` | " + p.type + " | `" + p.default_text + "` | " + joined(allowed, ", ") + " | " +
           (p.on_resume == config::OnResume::may_change ? "may change" : "must match") + " | " +
           (p.when.empty() ? "" : "only with `" + p.when + "`: ") + prose(p.doc) + " |\n";
  }
  return out;
}

}  // namespace

std::string node_catalog(const graph::NodeRegistry& registry, const std::vector<std::string>& types, bool markdown) {
  const auto known = registry.types();
  for (const auto& type : types)
    if (!registry.find(type)) {
      const std::string hint = did_you_mean(type, known);
      throw ConfigError("unknown node type '" + type + "'" + (hint.empty() ? "." : hint) +
                        " Known types: " + joined(known, ", "));
    }
  const auto& listed = types.empty() ? known : types;
  std::string out;
  if (markdown)
    out = "# Node kinds\n\nEvery node kind a pipeline may declare (`pipeline.nodes[].type`): its ports, its params "
          "(`params:` of the node) and what it needs of a run, generated from the kinds' registrations. `dflow nodes` "
          "prints the same, `dflow nodes TYPE` one kind.\n";
  for (const auto& type : listed)
    out += (out.empty() ? "" : "\n") + (markdown ? markdown_of : text_of)(*registry.find(type));
  return out;
}

}  // namespace dflow::nodes
