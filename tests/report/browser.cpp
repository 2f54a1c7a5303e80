#include "browser.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace dflow::report::test {

std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}) {
    const std::string probe = std::string("command -v ") + name + " >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return name;
  }
  return "";
}

std::string run_chromium(const std::string& args, const std::string& url, const std::filesystem::path& log) {
  const std::filesystem::path profile = log.parent_path() / (log.stem().string() + "-profile");
  std::filesystem::remove_all(profile);
  // A private profile keeps parallel runs apart; a timeout keeps a hung browser from hanging the test.
  const std::string command = "timeout 120 " + find_chromium() +
                              " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run"
                              " --user-data-dir='" + profile.string() + "' " + args + " '" + url + "' 2>'" + log.string() + "'";
  std::string out;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[65536];
    for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
    pclose(pipe);
  }
  std::filesystem::remove_all(profile);
  return out;
}

}  // namespace dflow::report::test
