#include "tools/sweep_state.hpp"

#include <fstream>
#include <stdexcept>

#include "config/errors.hpp"

namespace dflow::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path state_file(const fs::path& out_dir) { return out_dir / "sweep.json"; }

json definition_of(const SweepOptions& o) {
  json vary = json::array();
  for (const auto& a : o.axes) {
    std::string values;
    for (size_t i = 0; i < a.values.size(); ++i) {
      values += (values.empty() ? "" : ",") + a.values[i];
      if (!a.sets.empty())
        for (const auto& kv : a.sets[i]) values += " " + kv;
    }
    vary.push_back(a.key + "=" + values);
  }
  return {{"config", o.config_file.empty() ? "<default>" : o.config_file}, {"set", o.overrides}, {"vary", vary},
          {"seeds", o.seeds}};
}

// The definition's first difference, as a person would say it.
std::string definition_difference(const json& saved, const json& now) {
  for (const char* key : {"config", "set", "vary", "seeds"})
    if (saved.value(key, json()) != now.value(key, json()))
      return std::string(key) + " was " + saved.value(key, json()).dump() + ", now " + now.value(key, json()).dump();
  return {};
}

}  // namespace

json read_sweep_state(const fs::path& out_dir) {
  std::ifstream in(state_file(out_dir));
  if (!in) return json::object();
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw ConfigError(state_file(out_dir).string() + ": not a sweep state file (" + e.what() + "): choose another --out");
  }
}

void write_sweep_state(const fs::path& out_dir, const json& state) {
  const fs::path tmp = state_file(out_dir).string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << state.dump(2) << "\n";
    if (!out) throw std::runtime_error("cannot write " + tmp.string());
  }
  fs::rename(tmp, state_file(out_dir));
}

// The sweep's state in out_dir, made or checked to be this sweep's.
json open_sweep_state(const SweepOptions& o, const std::vector<config::SweepVariant>& variants) {
  fs::create_directories(o.out_dir / "logs");
  json state = read_sweep_state(o.out_dir);
  const json definition = definition_of(o);
  if (state.contains("definition") && state["definition"] != definition)
    throw ConfigError(o.out_dir.string() + " holds another sweep (" + definition_difference(state["definition"], definition) +
                      "): rerun it as it was, or choose another --out");
  state["definition"] = definition;
  state["order"] = json::array();
  for (const auto& v : variants) state["order"].push_back(v.name);
  if (!state.contains("variants")) state["variants"] = json::object();
  write_sweep_state(o.out_dir, state);
  return state;
}

}  // namespace dflow::cli
