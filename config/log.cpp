#include "config/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>

#include "config/errors.hpp"

namespace dflow::log {

namespace {
std::atomic<int> g_level{static_cast<int>(Level::info)};

spdlog::logger& logger() {
  // One stderr sink for all areas: lines never interleave mid-line.
  static spdlog::logger instance = [] {
    spdlog::logger l("dflow", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    l.set_pattern("%H:%M:%S.%e %^%-5l%$ %v");
    l.set_level(spdlog::level::trace);  // filtering happens in write()
    return l;
  }();
  return instance;
}
}  // namespace

void set_level(const std::string& level) {
  static const char* names[] = {"trace", "debug", "info", "warn", "error", "off"};
  for (int i = 0; i < 6; ++i)
    if (level == names[i]) return g_level.store(i);
  throw ConfigError("unknown log level '" + level + "' (trace, debug, info, warn, error, off)");
}

bool enabled(Level level) { return static_cast<int>(level) >= g_level.load() && level != Level::off; }

void write(Level level, std::string_view area, std::string_view message) {
  if (!enabled(level)) return;
  auto spd = static_cast<spdlog::level::level_enum>(static_cast<int>(level));
  logger().log(spd, "[{}] {}", area, message);
}

}  // namespace dflow::log
