#pragma once
// Runs a shell command line for the CLI tests: stdout and stderr together,
// and the exit code (-1 when it did not exit normally, as when killed).
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "test_paths.hpp"
#include "time_scale.hpp"

namespace dflow::testing {

struct Outcome {
  int exit_code = -1;
  std::string output;
};

// `limit_s` > 0: the command is killed (SIGKILL) after that many seconds, so
// a hang fails the test instead of stalling the suite (stretched by
// time_scale()).
inline Outcome run_command(const std::string& command, int limit_s = 0) {
  Outcome o;
  const std::string line =
      (limit_s > 0 ? "timeout -s KILL " + std::to_string(scaled(limit_s)) + " " : std::string()) + command + " 2>&1";
  FILE* pipe = ::popen(line.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) o.output.append(buffer, n);
  const int status = ::pclose(pipe);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  // Sanitizer builds: GCC's UndefinedBehaviorSanitizer inside AddressSanitizer
  // reports on stderr only (it ignores log_path), so a command's report is
  // passed on to the test's own output, where tools/sanitize.sh looks.
  if (o.output.find("runtime error: ") != std::string::npos) std::fprintf(stderr, "%s", o.output.c_str());
  return o;
}

// `dflow ARGS` with the build's binary, killed after `limit_s` seconds.
inline Outcome run_dflow(const std::string& args, int limit_s = 300) {
  return run_command(dflow_binary() + " " + args, limit_s);
}

// Whether a command's output holds `part`.
inline bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace dflow::testing
