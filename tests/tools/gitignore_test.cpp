// A contributor's global git ignore often lists other ecosystems' build
// folders (target/ for Rust and Maven, bin/ and obj/ for .NET, out/, dist/,
// lib/); the project's own folders of those names (target/, tests/target/)
// must stay visible to git status, so .gitignore negates them.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "run_command.hpp"
#include "test_paths.hpp"

using namespace dflow;
namespace fs = std::filesystem;

TEST_CASE("Project.Gitignore.a_global_ignore_of_build_folders_hides_no_file_of_the_project") {
  const std::string source = testing::source_dir();
  if (testing::run_command("git -C '" + source + "' rev-parse --is-inside-work-tree").exit_code != 0) {
    MESSAGE("skipped: the source tree is not a git checkout");
    return;
  }
  const fs::path excludes = fs::temp_directory_path() / ("dflow-global-gitignore-" + std::to_string(::getpid()));
  std::ofstream(excludes) << "target/\nbin/\nobj/\nout/\ndist/\nbuild/\nlib/\n";
  // Every tracked path, plus a new file in target/ (what a contributor adds),
  // checked against the patterns alone (--no-index): git prints the ignored
  // ones with the pattern that hides them, and exits 1 when none is.
  const auto o = testing::run_command("cd '" + source + "' && { git ls-files; echo target/a_new_file.cpp; } | git -c "
                                      "core.excludesFile='" + excludes.string() +
                                      "' check-ignore --no-index --verbose --stdin");
  fs::remove(excludes);
  INFO("hidden by a global ignore (pattern, then path):\n" << o.output);
  CHECK(o.exit_code == 1);
  CHECK(o.output.empty());
}
