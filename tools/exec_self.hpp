#pragma once
// Replaces a forked child by this same dflow binary with `args` (`dflow
// launch` starts its ranks and `dflow sweep` its runs this way); on failure
// says so under `who` and exits 127, as a shell does for a command it cannot run.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace dflow::cli {

[[noreturn]] inline void exec_self(const std::vector<std::string>& args, const char* who) {
  static std::string self = "/proc/self/exe";
  std::vector<char*> argv{self.data()};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(self.c_str(), argv.data());
  std::perror((std::string(who) + ": exec").c_str());
  ::_exit(127);
}

}  // namespace dflow::cli
