#include "train/regenerate_chats.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string_view>

#include "config/errors.hpp"
#include "data/checksum.hpp"
#include "text/chat_encode.hpp"

namespace dflow::train {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// What this command writes first on every line: nlohmann::json dumps an
// object's keys in sorted order, so each line starts with its input_ids.
constexpr std::string_view kLineStart = R"({"input_ids":)";

// Whether `line` is one of this command's lines: {"input_ids", "line",
// "loss_mask"}; sets `line_number` and `hash` (the tokens hash its cached
// features must match).
bool own_line(const std::string& line, int64_t& line_number, uint64_t& hash) {
  try {
    const auto sample = json::parse(line);
    if (!sample.is_object() || sample.size() != 3 || !sample.contains("loss_mask")) return false;
    line_number = sample.at("line").get<int64_t>();
    hash = data::tokens_hash(sample.at("input_ids").get<std::vector<int32_t>>());
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

// The input line after which a previous run stopped (0: none), keeping only
// the complete lines of `out`: a last line without its newline that is the
// start of one of this command's lines (torn by a crash) is cut off. Any
// other line that is not this command's output is refused, naming it, and
// nothing is cut: `out` is somebody else's file (a training JSONL, say).
// `kept_hashes` gets the tokens hash of each kept line.
int64_t resume_point(const std::filesystem::path& out, std::vector<uint64_t>& kept_hashes) {
  kept_hashes.clear();
  if (!std::filesystem::exists(out)) return 0;
  std::ifstream in(out, std::ios::binary);
  std::string line;
  int64_t last_line = 0;
  std::streamoff good_bytes = 0;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    const bool torn = in.eof();  // no newline after it
    int64_t line_number = 0;
    uint64_t hash = 0;
    if (!torn && own_line(line, line_number, hash) && line_number > last_line) {
      last_line = line_number;
      kept_hashes.push_back(hash);
      good_bytes = in.tellg();
      continue;
    }
    const bool start_of_own = line.compare(0, kLineStart.size(), kLineStart) == 0 ||
                              std::string_view(kLineStart).substr(0, line.size()) == line;
    if (torn && start_of_own) break;
    throw ConfigError(out.string() + ":" + std::to_string(number) + ": --out holds a line that " +
                      (line_number > 0 && line_number <= last_line
                           ? "answers input line " + std::to_string(line_number) + " again, after line " +
                                 std::to_string(last_line)
                           : std::string("regenerate --chats did not write (it writes {\"input_ids\", \"line\", "
                                         "\"loss_mask\"} lines)")) +
                      "; a rerun continues only its own output: give --out a new file (nothing was changed)");
  }
  in.close();
  std::filesystem::resize_file(out, static_cast<uintmax_t>(good_bytes));
  return last_line;
}

// Of the lines an earlier run wrote (the first kept_hashes.size() of `out`),
// those whose record the cache lacks (a run without --features, or killed
// before it published) and how many positions they hold; those the cache
// holds for other tokens are counted: a record cannot be replaced in place
// (the reader keeps an id's first).
struct EarlierLines {
  std::vector<int64_t> lacking;  // sample ids = line indexes, ascending
  uint64_t positions = 0;
  int64_t mismatched = 0;
};
EarlierLines earlier_lines(const data::FeatureCacheReader& cache, const std::filesystem::path& out,
                           const std::vector<uint64_t>& kept_hashes) {
  EarlierLines result;
  std::ifstream in(out, std::ios::binary);
  std::string line;
  for (size_t i = 0; i < kept_hashes.size() && std::getline(in, line); ++i) {
    const auto id = static_cast<int64_t>(i);
    if (cache.contains(id)) {
      result.mismatched += cache.get(id, /*verify=*/false).tokens_hash != kept_hashes[i];
      continue;
    }
    result.lacking.push_back(id);
    result.positions += json::parse(line).at("input_ids").size();
  }
  return result;
}

// The lacking lines' records, from one forward pass over each line: the
// states at every position of prompt + response, the positions its
// generation computed.
void compute_earlier_features(const target::TargetModel& target, FeatureCapture& capture,
                              const std::filesystem::path& out, const std::vector<int64_t>& lacking) {
  std::ifstream in(out, std::ios::binary);
  std::string line;
  size_t next = 0;
  for (int64_t id = 0; next < lacking.size() && std::getline(in, line); ++id) {
    if (id != lacking[next]) continue;
    ++next;
    const auto ids = json::parse(line).at("input_ids").get<std::vector<int64_t>>();
    const auto input = torch::tensor(ids, torch::kInt64).unsqueeze(0).to(target.device());
    capture.append(id, ids, target.context_features(input, capture.layer_ids())[0]);
  }
}

int64_t count_lines(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  int64_t count = 0;
  for (std::string line; std::getline(in, line);) count += line.find_first_not_of(" \t\r") != std::string::npos;
  return count;
}

// (No fmt here: LibTorch's bundled fmt clashes with Debian's in torch code.)
std::string duration_text(double seconds) {
  const auto s = static_cast<long long>(seconds);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s % 3600 / 60);
  } else {
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  }
  return text;
}

std::string rejection(int64_t line_number, const std::string& reason, const std::string& detail) {
  return "line " + std::to_string(line_number) + ": " + reason + ": " + detail;
}

// The prompt of one conversation line (rendered with the generation
// prompt), or nullopt with `rejected` set when the line cannot be answered.
std::optional<std::vector<int64_t>> line_prompt(const std::string& line, int64_t line_number,
                                                const text::Tokenizer& tokenizer,
                                                const text::ChatTemplate& chat_template,
                                                const ChatRegenerateOptions& options, std::string& rejected) {
  text::Conversation conversation;
  std::optional<text::ConversationProblem> problem;
  try {
    problem = text::read_conversation(nlohmann::ordered_json::parse(line), conversation);
  } catch (const json::exception& e) {
    problem = text::ConversationProblem{"bad_json", e.what()};
  }
  const bool has_user = std::any_of(conversation.messages.begin(), conversation.messages.end(),
                                    [](const text::Message& m) { return m.role == text::Role::User; });
  if (!problem && !has_user) problem = text::ConversationProblem{"no_user_turn", "nothing to answer"};
  if (problem) {
    rejected = rejection(line_number, problem->reason, problem->detail);
    return std::nullopt;
  }
  std::vector<int32_t> prompt32;
  try {
    text::RenderOptions render;
    render.enable_thinking = options.enable_thinking;
    render.current_date = options.current_date;
    prompt32 = text::encode_prompt(tokenizer, chat_template, conversation, render);
  } catch (const text::ChatTemplateError& e) {  // the chosen template cannot write this data
    throw ConfigError(options.chats.string() + ":" + std::to_string(line_number) + ": " + e.what());
  }
  return std::vector<int64_t>(prompt32.begin(), prompt32.end());
}

// An upper bound on the positions this run's features take: each line still
// to answer, its prompt + max_new_tokens (a pass over the input that only
// tokenizes, cheap beside generation).
uint64_t projected_positions(const text::Tokenizer& tokenizer, const text::ChatTemplate& chat_template,
                             const ChatRegenerateOptions& options, int64_t resume_after) {
  std::ifstream in(options.chats, std::ios::binary);
  uint64_t positions = 0;
  std::string line, ignored;
  for (int64_t line_number = 1; std::getline(in, line); ++line_number) {
    if (line_number <= resume_after || line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (const auto prompt = line_prompt(line, line_number, tokenizer, chat_template, options, ignored))
      positions += prompt->size() + static_cast<uint64_t>(options.max_new_tokens);
  }
  return positions;
}

}  // namespace

ChatRegenerateReport regenerate_chats(const target::TargetModel& target, const text::Tokenizer& tokenizer,
                                      const ChatRegenerateOptions& options) {
  const auto& chat_template = text::chat_template(options.chat_template);
  std::ifstream in(options.chats, std::ios::binary);
  if (!in) throw std::runtime_error(options.chats.string() + ": cannot open the conversations JSONL");
  ChatRegenerateReport report;
  std::vector<uint64_t> kept_hashes;
  const int64_t resume_after = resume_point(options.out, kept_hashes);
  report.already_done = static_cast<int64_t>(kept_hashes.size());
  if (options.out.has_parent_path()) std::filesystem::create_directories(options.out.parent_path());
  std::ofstream out(options.out, std::ios::app | std::ios::binary);
  if (!out) throw std::runtime_error(options.out.string() + ": cannot write");
  std::vector<int64_t> stop = target.config().eos_token_ids;
  // harmony stops at <|return|> and <|call|>, not at the <|end|> of its analysis.
  for (const auto token : chat_template.stop_tokens()) {
    if (auto id = tokenizer.token_id(token)) stop.push_back(*id);
  }

  const int64_t total = count_lines(options.chats);
  std::unique_ptr<FeatureCapture> capture;
  if (options.features.enabled()) {
    if (options.max_new_tokens < 1) throw ConfigError("regenerate --features: --max-new-tokens must be at least 1");
    capture = std::make_unique<FeatureCapture>(target, options.features);
    const auto earlier = earlier_lines(capture->existing(), options.out, kept_hashes);
    capture->reserve(earlier.positions + projected_positions(tokenizer, chat_template, options, resume_after));
    compute_earlier_features(target, *capture, options.out, earlier.lacking);
    report.features_recomputed = static_cast<int64_t>(earlier.lacking.size());
    report.features_mismatched = earlier.mismatched;
  }
  const std::vector<int64_t> no_layers;
  const auto& layer_ids = capture ? capture->layer_ids() : no_layers;
  const auto start = Clock::now();
  int64_t done_now = 0, generated_tokens = 0, position = 0;
  std::string line;
  for (int64_t line_number = 1; std::getline(in, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++report.conversations;
    ++position;
    if (line_number <= resume_after) continue;
    std::string rejected;
    const auto prompt = line_prompt(line, line_number, tokenizer, chat_template, options, rejected);
    if (!prompt) {
      report.rejected.push_back(rejected);
      continue;
    }
    auto generation =
        target.generate_with_features(*prompt, options.max_new_tokens, options.temperature,
                                      data::hash_combine(options.seed, static_cast<uint64_t>(line_number)), stop,
                                      layer_ids);
    const auto& response = generation.tokens;
    if (response.empty()) {
      report.rejected.push_back(rejection(line_number, "empty_response", "the target ended its turn at once"));
      continue;
    }
    std::vector<int64_t> ids = *prompt;
    ids.insert(ids.end(), response.begin(), response.end());
    // Sample id = the line's index in `out`; asked before the line is
    // written, so that a refusal leaves the two agreeing.
    const int64_t sample_id = report.already_done + report.written;
    const bool new_record = capture && capture->needs(sample_id, ids);
    std::vector<int> mask(prompt->size(), 0);
    mask.resize(ids.size(), 1);
    out << json{{"line", line_number}, {"input_ids", ids}, {"loss_mask", mask}}.dump() << "\n";
    out.flush();  // a crash loses at most the conversation in progress
    if (!out) throw std::runtime_error(options.out.string() + ": write failed");
    if (new_record) capture->append(sample_id, ids, generation.features);
    ++report.written;
    ++done_now;
    generated_tokens += static_cast<int64_t>(response.size());
    if (options.progress) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      const double eta = elapsed / static_cast<double>(done_now) * static_cast<double>(total - position);
      char text[160];
      std::snprintf(text, sizeof text, "\r[regenerate] %lld/%lld conversations, %.1f tokens/s, ETA %s   ",
                    static_cast<long long>(position), static_cast<long long>(total),
                    static_cast<double>(generated_tokens) / std::max(elapsed, 1e-9), duration_text(eta).c_str());
      *options.progress << text << std::flush;
    }
  }
  if (options.progress && done_now > 0) *options.progress << "\n";
  if (capture) {
    capture->publish();
    report.features_written = capture->samples_written() + capture->samples_already_cached();
  }
  return report;
}

}  // namespace dflow::train
