// Tokenizer benchmark (not a test): dflow's tokenizer against Hugging Face
// `tokenizers`, one thread each, on the same texts in one run, in MB/s of
// UTF-8 input. Two corpora: the tokenizer test's generated multilingual texts
// (English, Chinese, Japanese, Arabic, emoji, code, whitespace and digit
// runs) and this repository's own sources and docs (English and C++).
// Each is encoded twice: cold (empty BPE cache), then warm.
// Usage: bench_tokenizer [FIXTURE_DIR] [PYTHON]; run `ctest -R text` first
// (it makes the fixture: the Qwen vocabulary with Qwen2's split regex).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "text/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::vector<std::string> generated_texts(const fs::path& fixture) {
  std::vector<std::string> texts;
  std::ifstream in(fixture / "cases.jsonl");
  for (std::string line; std::getline(in, line);) texts.push_back(json::parse(line)["text"]);
  return texts;
}

// The repository's sources and docs, 40 lines per text.
std::vector<std::string> source_texts(const fs::path& root) {
  std::vector<std::string> texts;
  for (const char* folder : {"text", "data", "graph", "config", "report", "model", "train", "nodes", "tools"}) {
    for (const auto& entry : fs::directory_iterator(root / folder)) {
      const auto ext = entry.path().extension();
      if (ext != ".cpp" && ext != ".hpp") continue;
      std::ifstream in(entry.path());
      std::string chunk, line;
      for (int n = 1; std::getline(in, line); ++n) {
        chunk += line + "\n";
        if (n % 40 == 0) texts.push_back(std::move(chunk)), chunk.clear();
      }
      if (!chunk.empty()) texts.push_back(chunk);
    }
  }
  std::ifstream readme(root / "README.md");
  std::stringstream all;
  all << readme.rdbuf();
  texts.push_back(all.str());
  return texts;
}

struct Timing {
  double cold_s = 0, warm_s = 0;
  int64_t tokens = 0;
};

Timing time_dflow(const dflow::text::Tokenizer& tokenizer, const std::vector<std::string>& texts) {
  Timing t;
  for (int pass = 0; pass < 2; ++pass) {
    int64_t tokens = 0;
    const auto start = Clock::now();
    for (const auto& text : texts) tokens += static_cast<int64_t>(tokenizer.encode(text).size());
    (pass == 0 ? t.cold_s : t.warm_s) = seconds_since(start);
    t.tokens = tokens;
  }
  return t;
}

Timing time_hf(const std::string& python, const fs::path& tokenizer_json, const std::vector<std::string>& texts) {
  const fs::path corpus = fs::temp_directory_path() / "dflow-bench-tokenizer-corpus.json";
  std::ofstream(corpus) << json(texts).dump();
  const std::string command = "RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false " + python + " " +
                              std::string(DFLOW_SOURCE_DIR) + "/bench/hf_tokenizer_speed.py " +
                              tokenizer_json.string() + " " + corpus.string();
  FILE* pipe = ::popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  ::pclose(pipe);
  fs::remove(corpus);
  const json result = json::parse(output);
  return {result["cold_s"], result["warm_s"], result["tokens"]};
}

void report(const char* name, const std::vector<std::string>& texts, const dflow::text::Tokenizer& tokenizer,
            const std::string& python, const fs::path& tokenizer_json) {
  double bytes = 0;
  for (const auto& text : texts) bytes += static_cast<double>(text.size());
  const double mb = bytes / 1e6;
  const Timing ours = time_dflow(tokenizer, texts);
  const Timing hf = time_hf(python, tokenizer_json, texts);
  std::printf("| %s | %.1f MB, %zu texts | %.1f / %.1f | %.1f / %.1f | %s |\n", name, mb, texts.size(),
              mb / ours.cold_s, mb / ours.warm_s, mb / hf.cold_s, mb / hf.warm_s,
              ours.tokens == hf.tokens ? "equal" : "DIFFERENT");
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path fixture = argc > 1 ? argv[1] : DFLOW_TEXT_FIXTURE_DIR;
  const std::string python = argc > 2 ? argv[2] : DFLOW_PYTHON;
  const fs::path tokenizer_json = fixture / "qwen2" / "tokenizer.json";
  const auto load_start = Clock::now();
  const auto tokenizer = dflow::text::Tokenizer::load(tokenizer_json);
  std::printf("dflow loads %s in %.2f s\n\n", tokenizer_json.string().c_str(), seconds_since(load_start));
  std::printf("| corpus | size | dflow MB/s cold / warm | HF tokenizers MB/s cold / warm | token counts |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  report("generated multilingual", generated_texts(fixture), *tokenizer, python, tokenizer_json);
  report("repository sources + README", source_texts(DFLOW_SOURCE_DIR), *tokenizer, python, tokenizer_json);
  return 0;
}
