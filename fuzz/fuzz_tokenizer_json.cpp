// tokenizer.json (text/tokenizer_json.cpp, text/tokenizer.cpp): the input is
// the file. A tokenizer that loads then encodes and decodes a fixed text.
// Only ConfigError (refused file) and TextError (text it cannot encode, an
// id it cannot decode) may come out.
#include <string>

#include "config/errors.hpp"
#include "fuzz/fuzz_common.hpp"
#include "text/text_error.hpp"
#include "text/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflow::text;
  const auto path = dflow::fuzz::scratch_dir() / "tokenizer.json";
  dflow::fuzz::write_file(path, data, size);
  std::shared_ptr<const Tokenizer> tokenizer;
  try {
    tokenizer = Tokenizer::load(path);
  } catch (const dflow::ConfigError&) {
    return 0;
  }
  static const std::string kText = "<|im_start|>user\nhello world, Ünïcode 123 \xe2\x80\x94 ok<|im_end|>\n  \t";
  try {
    const Encoding encoding = tokenizer->encode_with_offsets(kText);
    if (encoding.ids.size() != encoding.starts.size()) __builtin_trap();
    (void)tokenizer->decode(encoding.ids);
    (void)tokenizer->decode(encoding.ids, /*skip_special_tokens=*/true);
    (void)tokenizer->token_id("<|im_end|>");
  } catch (const TextError&) {
  }
  return 0;
}
