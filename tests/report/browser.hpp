#pragma once
// Headless Chromium for the report tests: the page must draw without script
// errors. Chromium is part of the test setup (tools/setup.sh installs it);
// when it is missing the test fails and says so, it never skips silently.
#include <filesystem>
#include <string>

namespace dflow::report::test {

// The chromium binary, or "" when none is installed.
std::string find_chromium();

// Runs `chromium --headless ... ARGS URL` with a timeout; returns its stdout.
std::string run_chromium(const std::string& args, const std::string& url, const std::filesystem::path& log);

}  // namespace dflow::report::test
