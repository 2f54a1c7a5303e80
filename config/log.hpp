#pragma once
// Logging with area tags: every line says which layer spoke ([config],
// [graph], [data], [model], [train], ...). spdlog does the writing, behind
// this small facade: LibTorch ships its own fmt, which clashes with the fmt
// that Debian's spdlog is built on, so translation units that include torch
// must not include spdlog. Build messages with dflow::log::str(...).
// The level comes from the config or --log-level, never from the environment.
#include <sstream>
#include <string>
#include <string_view>

namespace dflow::log {

enum class Level { trace, debug, info, warn, error, off };

// Sets the level for every area; throws ConfigError for an unknown name.
void set_level(const std::string& level);
bool enabled(Level level);
void write(Level level, std::string_view area, std::string_view message);

// Concatenates anything streamable: log::str("step ", step, " loss ", loss).
template <class... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

inline void trace(std::string_view area, std::string_view m) { write(Level::trace, area, m); }
inline void debug(std::string_view area, std::string_view m) { write(Level::debug, area, m); }
inline void info(std::string_view area, std::string_view m) { write(Level::info, area, m); }
inline void warn(std::string_view area, std::string_view m) { write(Level::warn, area, m); }
inline void error(std::string_view area, std::string_view m) { write(Level::error, area, m); }

}  // namespace dflow::log
