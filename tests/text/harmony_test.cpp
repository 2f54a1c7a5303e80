// gpt-oss's harmony format: what a user preparing gpt-oss data sees — which
// tokens are learned, the prompt regeneration answers, where generation stops,
// and the conversations it refuses, naming the message. (Rendering exactly as
// gpt-oss's own Jinja template is chat_template_test.cpp's, on the jinja2 cases.)
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "text/chat_encode.hpp"
#include "text/chat_template.hpp"
#include "text/chat_template_harmony.hpp"
#include "text/conversation.hpp"
#include "text/tokenizer.hpp"
#include "text_fixtures.hpp"

namespace {

using namespace dflow::text;
using namespace dflow::text::test;
using nlohmann::ordered_json;

std::shared_ptr<const Tokenizer> gptoss() {
  static auto tokenizer = Tokenizer::load(real_tokenizer("gptoss"));
  return tokenizer;
}

Conversation conversation(const ordered_json& line) {
  Conversation c;
  const auto problem = read_conversation(line, c);
  REQUIRE_MESSAGE(!problem, problem->detail);
  return c;
}

ordered_json msg(const std::string& role, const std::string& content) { return {{"role", role}, {"content", content}}; }

ordered_json thought(const std::string& content, const std::string& thinking) {
  ordered_json m = msg("assistant", content);
  m["thinking"] = thinking;
  return m;
}

ordered_json call(const std::string& name, const ordered_json& arguments, const std::string& thinking = "") {
  ordered_json m = msg("assistant", "");
  if (!thinking.empty()) m["thinking"] = thinking;
  m["tool_calls"] = ordered_json::array({{{"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}}});
  return m;
}

// The learned tokens' text, with " | " between runs of learned tokens.
std::string learned(const ChatSample& sample) {
  std::string text;
  std::vector<int32_t> run;
  for (size_t i = 0; i <= sample.input_ids.size(); ++i) {
    if (i < sample.input_ids.size() && sample.loss_mask[i]) {
      run.push_back(sample.input_ids[i]);
    } else if (!run.empty()) {
      text += (text.empty() ? "" : " | ") + gptoss()->decode(run);
      run.clear();
    }
  }
  return text;
}

std::string refusal(const Conversation& c, const std::string& name = "harmony") {
  try {
    chat_template(name).render(c, {});
  } catch (const ChatTemplateError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Harmony.LearnsWhatTheModelWritesAfterItsGenerationPrompt") {
  const auto& harmony = chat_template("harmony");
  SUBCASE("the last turn: its analysis, the final answer and <|return|>") {
    const auto c = conversation({{"messages", {msg("user", "2+2?"), thought("4.", "Simple arithmetic.")}}});
    CHECK(learned(encode_chat(*gptoss(), harmony, c)) ==
          "<|channel|>analysis<|message|>Simple arithmetic.<|end|><|start|>assistant<|channel|>final<|message|>4."
          "<|return|>");
  }
  SUBCASE("an earlier turn: its final answer, not the <|end|> history writes for <|return|>; its analysis dropped") {
    const auto c = conversation({{"messages",
                                  {msg("user", "Q1"), thought("A1", "dropped"), msg("user", "Q2"), thought("A2", "")}}});
    const auto sample = encode_chat(*gptoss(), harmony, c);
    CHECK(learned(sample) == "<|channel|>final<|message|>A1 | <|channel|>final<|message|>A2<|return|>");
    CHECK(gptoss()->decode(sample.input_ids).find("dropped") == std::string::npos);
    ChatEncodeOptions last_only;
    last_only.last_turn_only = true;
    CHECK(learned(encode_chat(*gptoss(), harmony, c, last_only)) == "<|channel|>final<|message|>A2<|return|>");
  }
  SUBCASE("a tool call: its recipient, arguments and <|call|>; the result is not learned") {
    const auto c = conversation({{"messages",
                                  {msg("user", "Weather?"), call("get_weather", {{"city", "Paris"}}, "Need weather."),
                                   msg("tool", "sunny"), msg("assistant", "Sunny.")}}});
    const auto sample = encode_chat(*gptoss(), harmony, c);
    // A final answer follows, so the analysis before the call is dropped, as the template drops it.
    CHECK(learned(sample) ==
          " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|> | "
          "<|channel|>final<|message|>Sunny.<|return|>");
    CHECK(gptoss()->decode(sample.input_ids).find("<|start|>functions.get_weather to=assistant<|channel|>commentary"
                                                  "<|message|>\"sunny\"<|end|>") != std::string::npos);
  }
}

TEST_CASE("Harmony.OfferedFunctionsAreWrittenInTheDeveloperMessage") {
  const ordered_json tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather now.", "parameters": {"type": "object", "required": ["city"],
      "properties": {"city": {"type": "string", "description": "A city"}, "days": {"type": "integer", "default": 1}}}}}])");
  const auto c = conversation({{"messages", {msg("user", "Weather?")}}, {"tools", tools}});
  RenderOptions options;
  options.current_date = "2026-05-14";
  const std::string text = join_segments(chat_template("harmony").render(c, options));
  CHECK_MESSAGE(text.find("Channel must be included for every message.\nCalls to these tools must go to the "
                          "commentary channel: 'functions'.<|end|>") != std::string::npos, text);
  CHECK_MESSAGE(text.find("<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n"
                          "// Weather now.\ntype get_weather = (_: {\n// A city\ncity: string,\ndays?: number, "
                          "// default: 1,\n}) => any;\n\n} // namespace functions<|end|>") != std::string::npos,
                text);
}

TEST_CASE("Harmony.PromptEndsWithTheAssistantStartAndGenerationStopsAtReturnOrCall") {
  const auto& harmony = chat_template("gpt-oss");
  CHECK(harmony.end_of_turn() == "<|return|>");
  CHECK(harmony.stop_tokens() == std::vector<std::string_view>{"<|return|>", "<|call|>"});
  auto c = conversation({{"messages", {msg("system", "Be brief."), msg("user", "Q1"), thought("A1", "why"),
                                       msg("user", "Q2"), msg("assistant", "old")}},
                         {"chat_template_kwargs", {{"reasoning_effort", "high"}}}});
  const std::string prompt = gptoss()->decode(encode_prompt(*gptoss(), harmony, c, /*enable_thinking=*/false));
  const std::string today = today_local_date();
  CHECK(std::regex_match(today, std::regex(R"(\d{4}-\d{2}-\d{2})")));
  CHECK(prompt ==
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: "
        "2024-06\nCurrent date: " + today + "\n\nReasoning: high\n\n# Valid channels: analysis, commentary, final. "
        "Channel must be included for every message.<|end|><|start|>developer<|message|># Instructions\n\nBe brief."
        "\n\n<|end|><|start|>user<|message|>Q1<|end|><|start|>assistant<|channel|>final<|message|>A1<|end|>"
        "<|start|>user<|message|>Q2<|end|><|start|>assistant");
}

TEST_CASE("Harmony.RefusesWhatItsTemplateWouldDropOrCannotWriteNamingTheMessage") {
  const std::vector<std::pair<ordered_json, std::string>> refused{
      {{{"messages", {msg("user", "Q"), msg("system", "late"), msg("assistant", "A")}}}, "messages[1].role is 'system'"},
      {{{"messages", {msg("user", "Q"), {{"role", "assistant"}, {"content", "A"}, {"reasoning_content", "r"}}}}},
       "messages[1].reasoning_content"},
      {{{"messages", {msg("user", "Q"), msg("tool", "result")}}}, "messages[1] is a tool result"},
      {{{"messages", {msg("user", "Q"), msg("assistant", "<|channel|>final<|message|>x")}}}, "messages[1].content"},
      {{{"messages", {msg("user", "Q"), {{"role", "assistant"}, {"content", ""},
                                        {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", "{}"}}}},
                                                        {{"function", {{"name", "g"}, {"arguments", "{}"}}}}}}}}}},
       "messages[1].tool_calls has 2 calls"},
      {{{"messages", {msg("user", "Q")}}, {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}}},
       "tools[0].function.description: missing"},
      {{{"messages", {msg("user", "Q")}}, {"chat_template_kwargs", {{"builtin_tools", {"python"}}}}},
       "chat_template_kwargs.builtin_tools"},
  };
  for (const auto& [line, named] : refused) {
    CAPTURE(line.dump());
    const std::string message = refusal(conversation(line));
    CHECK_MESSAGE(message.find(named) != std::string::npos, message);
  }
  // Qwen's templates have no developer turn: refused there, named.
  const auto developer = conversation({{"messages", {msg("developer", "Be brief."), msg("user", "Q")}}});
  CHECK(refusal(developer).empty());
  CHECK_MESSAGE(refusal(developer, "qwen3").find("messages[0].role is 'developer'") != std::string::npos,
                refusal(developer, "qwen3"));
  // A reasoning effort the format does not know is refused when the line is read.
  Conversation c;
  const auto problem = read_conversation(
      ordered_json{{"messages", {msg("user", "Q")}}, {"chat_template_kwargs", {{"reasoning_effort", "max"}}}}, c);
  REQUIRE(problem);
  CHECK(problem->detail == "chat_template_kwargs.reasoning_effort is 'max'; known: low, medium, high");
}
