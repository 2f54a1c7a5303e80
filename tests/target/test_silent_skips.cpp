// A test case that cannot run here (no GPU, no root, no torchrun) says so in
// the output before it returns: a bare early `return;` reports a pass for a
// check that never ran. Every suite's sources under tests/ are read; a
// `return;` in a TEST_CASE's body must follow a MESSAGE("skipped: <why>").
// (In the model suite because it is the one that had such a case.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_paths.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kSkipped = "MESSAGE(\"skipped: ";

// The source with comments blanked and string and character literals emptied
// (their quotes kept, lines kept): braces and `return;` inside them no
// longer count.
std::string code_only(const std::string& src) {
  std::string out = src;
  const auto blank = [&](size_t from, size_t to) {
    for (size_t k = from; k < to && k < out.size(); ++k) {
      if (out[k] != '\n') out[k] = ' ';
    }
  };
  for (size_t i = 0; i < src.size();) {
    if (src.compare(i, 2, "//") == 0) {
      const size_t end = src.find('\n', i);
      blank(i, end), i = end == std::string::npos ? src.size() : end;
    } else if (src.compare(i, 2, "/*") == 0) {
      const size_t end = src.find("*/", i + 2) + 2;
      blank(i, end), i = end;
    } else if (src.compare(i, 2, "R\"") == 0 && (i == 0 || !(std::isalnum(static_cast<unsigned char>(src[i - 1])) || src[i - 1] == '_'))) {
      const size_t open = src.find('(', i);
      std::string close(1, ')');  // )delimiter"
      close.append(src, i + 2, open - i - 2).push_back('"');
      const size_t end = src.find(close, open) + close.size();
      blank(i + 2, end - 1), i = end;
    } else if (src[i] == '"' || src[i] == '\'') {
      size_t j = i + 1;
      while (j < src.size() && src[j] != src[i]) j += src[j] == '\\' ? 2 : 1;
      blank(i + 1, j), i = j + 1;
    } else {
      ++i;
    }
  }
  return out;
}

// The index of the bracket closing the one at `open` (of `open`'s kind).
size_t matching(const std::string& code, size_t open) {
  const char opening = code[open], closing = opening == '(' ? ')' : '}';
  int depth = 0;
  for (size_t k = open; k < code.size(); ++k) {
    depth += code[k] == opening ? 1 : code[k] == closing ? -1 : 0;
    if (depth == 0) return k;
  }
  return code.size();
}

// "file:line" of each `return;` in a TEST_CASE body whose statement before
// it is not a MESSAGE("skipped: ...").
std::vector<std::string> silent_returns(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  const std::string src = text.str(), code = code_only(src);
  std::vector<std::string> found;
  for (size_t at = code.find("TEST_CASE("); at != std::string::npos; at = code.find("TEST_CASE(", at + 1)) {
    if (at > 0 && code[at - 1] != '\n') continue;  // a test case starts a line
    const size_t body = code.find('{', matching(code, at + 9)), end = matching(code, body);
    for (size_t r = code.find("return;", body); r < end; r = code.find("return;", r + 1)) {
      const size_t last = code.find_last_not_of(" \t\n", r - 1);
      const size_t statement = code.find_last_of(";{}", last - 1) + 1;
      const size_t first = code.find_first_not_of(" \t\n", statement);
      if (code[last] == ';' && src.compare(first, kSkipped.size(), kSkipped) == 0) continue;
      const auto line = std::count(src.begin(), src.begin() + static_cast<std::ptrdiff_t>(r), '\n') + 1;
      found.push_back(file.lexically_relative(::dflow::testing::source_dir()).string() + ":" + std::to_string(line));
    }
  }
  return found;
}

}  // namespace

TEST_CASE("Model.TestSuites.AnEarlyReturnFromATestCaseSaysItSkipped") {
  const fs::path tests = fs::path(::dflow::testing::source_dir()) / "tests";
  std::vector<std::string> silent;
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(tests)) {
    const std::string extension = entry.path().extension().string();
    if (extension != ".cpp" && extension != ".hpp") continue;
    ++files;
    for (const std::string& where : silent_returns(entry.path())) silent.push_back(where);
  }
  CHECK(files > 100);  // every suite was read
  std::string listed;
  for (const std::string& where : silent) listed += "\n  " + where;
  INFO("early returns that report a pass without saying why (add MESSAGE(\"skipped: <why>\") before each):" << listed);
  CHECK(silent.empty());
}
