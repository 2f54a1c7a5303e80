#include "tools/sweep_state.hpp"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "data/checksum.hpp"

namespace dflow::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path state_file(const fs::path& out_dir) { return out_dir / "sweep.json"; }

// The xxhash64 of the config's text (the embedded demo's without a file): a
// rerun must run the config the finished variants ran.
std::string config_digest(const SweepOptions& o) {
  std::string text = config::default_config_yaml();
  if (!o.config_file.empty()) {
    std::ifstream in(o.config_file, std::ios::binary);
    if (!in) throw ConfigError(o.config_file + ": cannot read the sweep's config");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(data::xxhash64(text.data(), text.size())));
  return hex;
}

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
  return {{"config", o.config_file.empty() ? "<default>" : o.config_file}, {"config_xxhash64", config_digest(o)},
          {"set", o.overrides}, {"vary", vary}, {"seeds", o.seeds}};
}

// The definition's first difference, as a person would say it.
std::string definition_difference(const json& saved, const json& now) {
  if (saved.value("config", json()) == now.value("config", json()) &&
      saved.value("config_xxhash64", json()) != now.value("config_xxhash64", json()))
    return "the config " + now.value("config", std::string()) + " is not the one its variants ran: its contents changed "
           "(xxhash64 " + saved.value("config_xxhash64", json()).dump() + ", now " + now["config_xxhash64"].dump() + ")";
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
