// `dflow tokenize --tokenizer DIR FILE.jsonl [--decode]`: the target's
// tokenizer from the command line, {"text"} lines to {"ids"} lines and back.
#include <fstream>
#include <iostream>

#include "config/errors.hpp"
#include "text/tokenize_jsonl.hpp"
#include "text/tokenizer.hpp"
#include "tools/cli.hpp"

namespace dflow::cli {

void add_tokenize_command(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("tokenize", "print {\"ids\": [...]} for each {\"text\": ...} line, with the "
                                             "target's tokenizer (--decode: the reverse)");
  static std::string tokenizer_path, input;
  static text::TokenizeJsonlOptions options;
  sub->add_option("FILE", input, "JSONL input ('-': standard input)")->required();
  sub->add_option("--tokenizer", tokenizer_path, "target directory (its tokenizer.json) or a tokenizer.json")
      ->required();
  sub->add_flag("--decode", options.decode, "read {\"ids\": [...]} lines and print {\"text\": ...}");
  sub->add_flag("--skip-special-tokens", options.skip_special_tokens, "--decode: leave out special tokens");
  sub->callback([&action] {
    action = [] {
      const auto tokenizer = text::Tokenizer::load(tokenizer_path);
      if (input == "-") {
        text::tokenize_jsonl(*tokenizer, std::cin, std::cout, "<stdin>", options);
        return 0;
      }
      std::ifstream in(input, std::ios::binary);
      if (!in) throw ConfigError(input + ": cannot open; check the path");
      text::tokenize_jsonl(*tokenizer, in, std::cout, input, options);
      return 0;
    };
  });
}

}  // namespace dflow::cli
