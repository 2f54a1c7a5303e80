#include "text/split_regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

#include "config/errors.hpp"
#include "text/regex_classes.hpp"
#include "text/text_error.hpp"

namespace dflow::text {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// A JIT stack must not be shared by threads running matches at once: each
// thread has its own, with the match data (long whitespace or letter runs need
// more than PCRE2's default 32 KiB).
struct ThreadMatchState {
  pcre2_match_data* match = pcre2_match_data_create(4, nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatchState() { pcre2_jit_stack_assign(context, nullptr, jit_stack); }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(match);
  }
};

}  // namespace

struct SplitRegex::Impl {
  pcre2_code* code = nullptr;
};

SplitRegex::SplitRegex(const std::string& pattern, const std::string& source)
    : pattern_(pattern), impl_(std::make_unique<Impl>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const auto compile = [&](std::string_view text) {
    return pcre2_compile(reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), PCRE2_UTF | PCRE2_UCP, &error,
                         &offset, nullptr);
  };
  impl_->code = compile(with_tokenizers_classes(pattern));
  if (!impl_->code) {
    // The error and its offset in the pattern as the file writes it.
    if (pcre2_code* original = compile(pattern)) pcre2_code_free(original);
    throw ConfigError(fmt::format("{}: the split regex does not compile ({} at offset {}): {}", source,
                                  pcre2_message(error), offset, pattern));
  }
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // without JIT (unsupported CPU) matching still works
}

SplitRegex::~SplitRegex() {
  if (impl_->code) pcre2_code_free(impl_->code);
}

void SplitRegex::split(std::string_view text, std::vector<Piece>& out) const {
  thread_local ThreadMatchState state;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t gap_begin = 0;
  while (pos < text.size()) {
    int rc = pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, state.match, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      throw TextError(fmt::format("split regex failed at byte {}: {}", pos, pcre2_message(rc)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.match);
    const size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {  // an empty match splits nothing; step over one code point
      pos = begin + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (begin > gap_begin) out.push_back({gap_begin, begin});
    out.push_back({begin, end});
    pos = gap_begin = end;
  }
  if (gap_begin < text.size()) out.push_back({gap_begin, text.size()});
}

}  // namespace dflow::text
