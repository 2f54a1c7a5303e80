#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "config/errors.hpp"
#include "text/chat_encode.hpp"
#include "text/chat_template.hpp"
#include "text/conversation.hpp"
#include "text/text_error.hpp"
#include "text/tokenizer.hpp"
#include "text_fixtures.hpp"

namespace {

using namespace dflow::text;
using namespace dflow::text::test;
using nlohmann::json;
using nlohmann::ordered_json;  // key order kept, as Python keeps it: tool-call arguments are rendered in it

struct ChatCase {
  std::string template_name;
  ordered_json messages, tools, kwargs;
  RenderOptions options;
  std::string text;   // what jinja2 rendered from the model's own template
  std::string error;  // what it raised instead (gpt-oss's raises on some conversations)
};

std::vector<ChatCase> read_chat_cases() {
  const auto path = fixture_dir() / "chat_cases.jsonl";
  if (!std::filesystem::exists(path)) FAIL("no " << path.string() << ": run `ctest -R text` (fixture step)");
  std::ifstream in(path);
  std::vector<ChatCase> cases;
  for (std::string line; std::getline(in, line);) {
    const ordered_json j = ordered_json::parse(line);
    ChatCase c;
    c.template_name = j["template"].get<std::string>();
    c.messages = j["messages"];
    c.tools = j.value("tools", ordered_json());
    c.kwargs = j.value("chat_template_kwargs", ordered_json());
    c.text = j.value("text", "");
    c.error = j.value("error", "");
    c.options.add_generation_prompt = j["add_generation_prompt"];
    c.options.current_date = j.value("current_date", "");
    c.options.enable_thinking = !(j["enable_thinking"].is_boolean() && !j["enable_thinking"].get<bool>());
    cases.push_back(std::move(c));
  }
  return cases;
}

Conversation conversation_of(const ordered_json& messages, const ordered_json& tools = nullptr,
                             const ordered_json& kwargs = nullptr) {
  Conversation c;
  ordered_json line{{"messages", messages}};
  if (!tools.is_null()) line["tools"] = tools;
  if (!kwargs.is_null()) line["chat_template_kwargs"] = kwargs;
  const auto problem = read_conversation(line, c);
  REQUIRE_MESSAGE(!problem, problem->detail);
  return c;
}

json msg(const std::string& role, const std::string& content) { return {{"role", role}, {"content", content}}; }

// The text of the tokens whose mask is 1, in order.
std::string learned_text(const Tokenizer& tokenizer, const ChatSample& sample) {
  std::vector<int32_t> learned;
  for (size_t i = 0; i < sample.input_ids.size(); ++i) {
    if (sample.loss_mask[i]) learned.push_back(sample.input_ids[i]);
  }
  return tokenizer.decode(learned);
}

std::shared_ptr<const Tokenizer> tokenizer_for(const std::string& template_name) {
  static auto qwen = Tokenizer::load(real_tokenizer("qwen2"));
  static auto llama = Tokenizer::load(real_tokenizer("llama3"));
  static auto gptoss = Tokenizer::load(real_tokenizer("gptoss"));
  static auto qwen35 = Tokenizer::load(real_tokenizer("qwen3.5"));
  if (template_name == "harmony") return gptoss;
  if (template_name == "qwen3.5") return qwen35;
  return template_name == "llama3" ? llama : qwen;
}

}  // namespace

TEST_CASE("ChatTemplate.RendersExactlyAsTheModelsJinjaTemplate") {
  const auto cases = read_chat_cases();
  REQUIRE(cases.size() >= 50);
  int wrong = 0, with_tools = 0, harmony = 0, qwen35 = 0, refused = 0;
  for (const auto& c : cases) {
    with_tools += c.messages.dump().find("\"tool_calls\"") != std::string::npos || !c.tools.is_null();
    harmony += c.template_name == "harmony";
    qwen35 += c.template_name == "qwen3.5";
    const auto conversation = conversation_of(c.messages, c.tools, c.kwargs);
    if (!c.error.empty()) {  // jinja2 raised: dflow refuses too
      CHECK_THROWS_AS(chat_template(c.template_name).render(conversation, c.options), ChatTemplateError);
      ++refused;
      continue;
    }
    const std::string text = join_segments(chat_template(c.template_name).render(conversation, c.options));
    if (text != c.text && ++wrong <= 3) {
      MESSAGE(c.template_name << " on " << c.messages.dump() << "\n  dflow  " << json(text).dump() << "\n  jinja2 "
                              << json(c.text).dump());
    }
  }
  CHECK(with_tools >= 20);  // tool calls and tools lists, with both Qwen templates
  CHECK(harmony >= 40);
  CHECK(qwen35 >= 70);  // thinking on and off, tool calls, multi-turn
  CHECK(refused >= 20);
  CHECK(wrong == 0);
}

TEST_CASE("ChatTemplate.ChatmlIsQwen25AndUnknownNamesListTheKnownOnes") {
  const auto messages = conversation_of(json::array({msg("user", "Hi"), msg("assistant", "Hello")}));
  CHECK(join_segments(chat_template("chatml").render(messages, {})) ==
        join_segments(chat_template("qwen2.5").render(messages, {})));
  try {
    chat_template("qwen4");
    FAIL("no error");
  } catch (const dflow::ConfigError& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.find("unknown chat template 'qwen4'; known: qwen3, qwen2.5, chatml, llama3, harmony, gpt-oss, qwen3.5") !=
                      std::string::npos,
                  message);
  }
}

TEST_CASE("ChatEncode.TokenizingPerMessageEqualsTokenizingTheWholeText") {
  int wrong = 0;
  for (const auto& c : read_chat_cases()) {
    if (!c.error.empty()) continue;
    const auto tokenizer = tokenizer_for(c.template_name);
    ChatEncodeOptions options;
    options.render = c.options;
    const auto sample =
        encode_chat(*tokenizer, chat_template(c.template_name), conversation_of(c.messages, c.tools, c.kwargs), options);
    if (sample.input_ids != tokenizer->encode(c.text) && ++wrong <= 3) MESSAGE("differs: " << json(c.text).dump());
    CHECK(sample.loss_mask.size() == sample.input_ids.size());
  }
  CHECK(wrong == 0);
}

TEST_CASE("ChatEncode.MaskIsOneOnAssistantContentAndEndOfTurnOnly") {
  const auto qwen = tokenizer_for("qwen3");
  const auto two_turns = conversation_of(json::array({msg("system", "Be brief."), msg("user", "Q1"),
                                                      msg("assistant", "First answer"), msg("user", "Q2"),
                                                      msg("assistant", "Second answer")}));
  SUBCASE("qwen3: the empty think block is template text") {
    const auto sample = encode_chat(*qwen, chat_template("qwen3"), two_turns);
    CHECK(learned_text(*qwen, sample) == "First answer<|im_end|>Second answer<|im_end|>");
    CHECK(qwen->decode(sample.input_ids).find("<think>\n\n</think>\n\nSecond answer") != std::string::npos);
  }
  SUBCASE("qwen3: a thinking turn learns its reasoning") {
    json thinking = msg("assistant", "42.");
    thinking["reasoning_content"] = "Six times seven.";
    const auto sample =
        encode_chat(*qwen, chat_template("qwen3"), conversation_of(json::array({msg("user", "Why?"), thinking})));
    CHECK(learned_text(*qwen, sample) == "<think>\nSix times seven.\n</think>\n\n42.<|im_end|>");
  }
  SUBCASE("last_turn_only") {
    ChatEncodeOptions options;
    options.last_turn_only = true;
    const auto sample = encode_chat(*qwen, chat_template("qwen2.5"), two_turns, options);
    CHECK(learned_text(*qwen, sample) == "Second answer<|im_end|>");
  }
  SUBCASE("tool results and user turns are never learned") {
    const auto sample = encode_chat(
        *qwen, chat_template("qwen2.5"),
        conversation_of(json::array({msg("user", "Weather?"), msg("assistant", "Checking."), msg("tool", "sunny"),
                                     msg("assistant", "Sunny.")})));
    CHECK(learned_text(*qwen, sample) == "Checking.<|im_end|>Sunny.<|im_end|>");
  }
  SUBCASE("llama3: content is trimmed as the template does; <|eot_id|> is learned") {
    const auto llama = tokenizer_for("llama3");
    const auto sample = encode_chat(*llama, chat_template("llama3"),
                                    conversation_of(json::array({msg("user", "Hi"), msg("assistant", " Hello! \n")})));
    CHECK(learned_text(*llama, sample) == "Hello!<|eot_id|>");
    CHECK(sample.input_ids.front() == llama->require_token_id("<|begin_of_text|>"));
  }
}

TEST_CASE("ChatEncode.PromptEndsAtTheLastUserTurnWithTheGenerationPrompt") {
  const auto qwen = tokenizer_for("qwen3");
  const auto c = conversation_of(json::array({msg("user", "Q1"), msg("assistant", "A1"), msg("user", "Q2"),
                                              msg("assistant", "old answer")}));
  const auto prompt = encode_prompt(*qwen, chat_template("qwen3"), c, /*enable_thinking=*/false);
  CHECK(qwen->decode(prompt) ==
        "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST_CASE("Conversation.ShareGptAndOpenAiFormsAndTheirErrors") {
  Conversation c;
  CHECK_FALSE(read_conversation(json::parse(R"({"conversations": [{"from": "human", "value": "Hi"},
                                                                   {"from": "gpt", "value": "Hello"}]})"),
                                c));
  REQUIRE(c.messages.size() == 2);
  CHECK(c.messages[0].role == Role::User);
  CHECK(c.messages[1].role == Role::Assistant);
  CHECK(c.messages[1].content == "Hello");

  auto problem = read_conversation(json::parse(R"({"messages": [{"role": "narrator", "content": "x"}]})"), c);
  REQUIRE(problem);
  CHECK(problem->reason == "unknown_role");
  CHECK(problem->detail.find("messages[0].role is 'narrator'") != std::string::npos);
  problem = read_conversation(json::parse(R"({"messages": [{"role": "user", "content": 5}]})"), c);
  REQUIRE(problem);
  CHECK(problem->reason == "wrong_type");
  problem = read_conversation(json::parse(R"({"text": "x"})"), c);
  REQUIRE(problem);
  CHECK(problem->reason == "missing_key");
}

namespace {

ordered_json tool_call_message(const std::string& content, const ordered_json& arguments) {
  ordered_json m = msg("assistant", content);
  const ordered_json function = {{"name", "f"}, {"arguments", arguments}};
  m["tool_calls"] = ordered_json::array({{{"type", "function"}, {"function", function}}});
  return m;
}

}  // namespace

TEST_CASE("ChatEncode.ToolCallsAreLearnedAsTheModelWritesThem") {
  const auto qwen = tokenizer_for("qwen3");
  const ordered_json arguments = ordered_json::parse(R"({"b": 1, "a": "x"})");  // kept in this order
  const std::string call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"b\": 1, \"a\": \"x\"}}\n</tool_call>";
  for (const std::string name : {"qwen3", "qwen2.5"}) {
    CAPTURE(name);
    const auto without_content = conversation_of(ordered_json::array(
        {msg("user", "Q"), tool_call_message("", arguments), msg("tool", "42"), msg("assistant", "Done.")}));
    CHECK(learned_text(*qwen, encode_chat(*qwen, chat_template(name), without_content)) ==
          call + "<|im_end|>Done.<|im_end|>");
    const auto with_content = conversation_of(ordered_json::array(
        {msg("user", "Q"), tool_call_message("Checking.", arguments), msg("tool", "42"), msg("assistant", "Done.")}));
    CHECK(learned_text(*qwen, encode_chat(*qwen, chat_template(name), with_content)) ==
          "Checking.\n" + call + "<|im_end|>Done.<|im_end|>");
  }
  // Arguments given as a string: Qwen3 writes it as it is, Qwen2.5 as a JSON string (its template's tojson).
  const auto as_string = conversation_of(
      ordered_json::array({msg("user", "Q"), tool_call_message("", R"({"b": 1})"), msg("tool", "42")}));
  CHECK(learned_text(*qwen, encode_chat(*qwen, chat_template("qwen3"), as_string)) ==
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"b\": 1}}\n</tool_call><|im_end|>");
  CHECK(learned_text(*qwen, encode_chat(*qwen, chat_template("qwen2.5"), as_string)) ==
        "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"b\\\": 1}\"}\n</tool_call><|im_end|>");
}

TEST_CASE("ChatTemplate.Llama3RefusesToolCallsAndToolsItCannotWrite") {
  const auto llama = tokenizer_for("llama3");
  const auto calls = conversation_of(ordered_json::array({msg("user", "Q"), tool_call_message("", {{"k", 1}})}));
  std::string message;
  try {
    encode_chat(*llama, chat_template("llama3"), calls);
  } catch (const TextError& e) {
    message = e.what();
  }
  CHECK_MESSAGE(message.find("messages[1].tool_calls") != std::string::npos, message);
  CHECK_MESSAGE(message.find("llama3") != std::string::npos, message);
  const auto tools = conversation_of(ordered_json::array({msg("user", "Q"), msg("assistant", "A")}),
                                     ordered_json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}}));
  message.clear();
  try {
    encode_chat(*llama, chat_template("llama3"), tools);
  } catch (const TextError& e) {
    message = e.what();
  }
  CHECK_MESSAGE(message.starts_with("tools:"), message);
}

TEST_CASE("Conversation.MalformedToolCallsAreNamed") {
  Conversation c;
  for (const auto& [line, where] : std::vector<std::pair<std::string, std::string>>{
           {R"({"messages": [{"role": "assistant", "content": "", "tool_calls": {"name": "f"}}]})",
            "messages[0].tool_calls is not an array"},
           {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]})",
            "messages[0].tool_calls[0]"},
           {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}]})",
            "messages[0].tool_calls[0]"},
           {R"({"messages": [{"role": "assistant", "tool_calls": [7]}]})", "messages[0].tool_calls[0]"},
           {R"({"tools": {"type": "function"}, "messages": [{"role": "user", "content": "x"}]})", "tools"}}) {
    CAPTURE(line);
    const auto problem = read_conversation(json::parse(line), c);
    REQUIRE(problem);
    CHECK(problem->reason == "wrong_type");
    CHECK_MESSAGE(problem->detail.find(where) != std::string::npos, problem->detail);
  }
}

namespace {

ordered_json thinking_answer(const std::string& content, const std::string& reasoning) {
  ordered_json m = msg("assistant", content);
  m["reasoning_content"] = reasoning;
  return m;
}

// The prompt regenerate would give the target is a prefix of the sample, and
// the mask turns on at the first token after it.
void check_learning_starts_after_the_prompt(const Tokenizer& tokenizer, const Conversation& c, bool enable_thinking) {
  const auto sample = encode_chat(tokenizer, chat_template("qwen3.5"), c);
  const auto prompt = encode_prompt(tokenizer, chat_template("qwen3.5"), c, enable_thinking);
  REQUIRE(prompt.size() < sample.input_ids.size());
  CHECK(std::equal(prompt.begin(), prompt.end(), sample.input_ids.begin()));
  CHECK(sample.loss_mask[prompt.size() - 1] == 0);
  CHECK(sample.loss_mask[prompt.size()] == 1);
}

std::string render_error(const Conversation& c) {
  try {
    chat_template("qwen3.5").render(c, {});
  } catch (const ChatTemplateError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// Qwen3.5's generation prompt ends "<think>\n" (thinking on) or with an empty
// think block (off): what the model writes after it is what it learns.
// SpecForge's qwen3.5 template (assistant header "<|im_start|>assistant\n<think>\n",
// end of turn "<|im_end|>\n") supervises the same span of a thinking turn, and
// the newline after <|im_end|>, which dflow leaves to the template as for qwen3.
TEST_CASE("ChatEncode.Qwen35LearnsWhatTheModelWritesAfterItsPrompt") {
  const auto tok = tokenizer_for("qwen3.5");
  const auto& qwen35 = chat_template("qwen3.5");
  SUBCASE("thinking on: the reasoning, its close, the answer and <|im_end|>") {
    const auto c =
        conversation_of(ordered_json::array({msg("user", "Why?"), thinking_answer("  42.  ", "\nSix times seven.\n")}));
    CHECK(learned_text(*tok, encode_chat(*tok, qwen35, c)) == "Six times seven.\n</think>\n\n42.<|im_end|>");
    check_learning_starts_after_the_prompt(*tok, c, /*enable_thinking=*/true);
  }
  SUBCASE("thinking off: the empty think block is the prompt's") {
    const auto c = conversation_of(ordered_json::array({msg("user", "Q"), msg("assistant", "Answer")}));
    const auto sample = encode_chat(*tok, qwen35, c);
    CHECK(learned_text(*tok, sample) == "Answer<|im_end|>");
    CHECK(tok->decode(sample.input_ids).ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\nAnswer<|im_end|>\n"));
    check_learning_starts_after_the_prompt(*tok, c, /*enable_thinking=*/false);
  }
  SUBCASE("multi-turn: a turn before the last query loses its reasoning, every answer is learned") {
    const auto c = conversation_of(ordered_json::array({msg("user", "Q1"), thinking_answer("A1", "r1"),
                                                        msg("user", "Q2"), thinking_answer("A2", "r2")}));
    const auto sample = encode_chat(*tok, qwen35, c);
    CHECK(learned_text(*tok, sample) == "A1<|im_end|>r2\n</think>\n\nA2<|im_end|>");
    CHECK(tok->decode(sample.input_ids).find("<|im_start|>assistant\nA1<|im_end|>") != std::string::npos);
    ChatEncodeOptions last;
    last.last_turn_only = true;
    CHECK(learned_text(*tok, encode_chat(*tok, qwen35, c, last)) == "r2\n</think>\n\nA2<|im_end|>");
  }
  SUBCASE("tool calls: each argument a <parameter> block, learned; tool results are not") {
    const std::string learned =
        "Need it.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n2\n</parameter>\n<parameter=hourly>\nTrue\n</parameter>\n</function>\n</tool_call>"
        "<|im_end|>Sunny.<|im_end|>";
    // Arguments as an object, or as the JSON string OpenAI-style data holds (vLLM parses it before rendering).
    for (const ordered_json& arguments : {ordered_json::parse(R"({"city": "Paris", "days": 2, "hourly": true})"),
                                          ordered_json(R"({"city": "Paris", "days": 2, "hourly": true})")}) {
      CAPTURE(arguments.dump());
      ordered_json calling = thinking_answer("", "Need it.");
      calling["tool_calls"] = ordered_json::array(
          {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", arguments}}}}});
      const auto c = conversation_of(ordered_json::array(
          {msg("user", "Weather?"), calling, msg("tool", "sunny"), msg("assistant", "Sunny.")}));
      const auto sample = encode_chat(*tok, qwen35, c);
      CHECK(learned_text(*tok, sample) == learned);
      const std::string result = "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>";
      CHECK(tok->decode(sample.input_ids).find(result) != std::string::npos);
    }
  }
  SUBCASE("what the template refuses is named") {
    CHECK_MESSAGE(render_error(conversation_of(ordered_json::array({msg("user", "Q"), msg("assistant", "A"),
                                                                     msg("system", "late")})))
                      .starts_with("messages[2].role is 'system'"),
                  "a system message after the first");
    CHECK(render_error(conversation_of(ordered_json::array({msg("user", "<tool_response>\nx\n</tool_response>"),
                                                             msg("assistant", "A")})))
              .starts_with("messages: no user message that is a query"));
    CHECK(render_error(conversation_of(ordered_json::array({msg("developer", "D"), msg("user", "Q")})))
              .starts_with("messages[0].role is 'developer'"));
    const std::string message = render_error(conversation_of(ordered_json::array(
        {msg("user", "Q"), tool_call_message("", "not json"), msg("tool", "r")})));
    CHECK_MESSAGE(message.starts_with("messages[1].tool_calls[0].arguments is a string that is not JSON"), message);
  }
}
