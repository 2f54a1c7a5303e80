// What a KeySet's declarations tell a reader (KeySet::docs): each key's type,
// its default, the values it takes when one_of fixes them, the condition it
// applies under and whether a resume may change it, as `dflow nodes` and
// `dflow config --reference` list them.
#include <doctest/doctest.h>

#include "config/keys.hpp"

using namespace dflow::config;

namespace {

struct Settings {
  std::string mode = "fast";
  std::vector<std::string> sinks{"jsonl"};
  double fraction = 0.25;
  std::string note;
};

const KeySet<Settings>& settings_keys() {
  static const KeySet<Settings> keys = [] {
    KeySet<Settings> k;
    k.add("mode", [](Settings& s) -> auto& { return s.mode; }, OnResume::must_match, "fast or exact",
          one_of({"fast", "exact"}));
    k.add("sinks", [](Settings& s) -> auto& { return s.sinks; }, OnResume::may_change, "where records go",
          each_one_of({"jsonl", "console"}));
    k.add("fraction", [](Settings& s) -> auto& { return s.fraction; }, OnResume::may_change, "how much is skipped",
          must<double>([](double v) { return v >= 0; }, "must be >= 0"))
        .only_when("mode: fast");
    k.add("note", [](Settings& s) -> auto& { return s.note; }, OnResume::may_change, "a remark");
    return k;
  }();
  return keys;
}

}  // namespace

TEST_CASE("Keys.docs_give_each_keys_type_default_allowed_values_and_condition") {
  const auto docs = settings_keys().docs();
  REQUIRE(docs.size() == 4);
  CHECK(docs[0].name == "mode");
  CHECK(docs[0].type == "string");
  CHECK(docs[0].default_text == "fast");
  CHECK(docs[0].allowed == std::vector<std::string>{"fast", "exact"});
  CHECK(docs[0].on_resume == OnResume::must_match);
  CHECK(docs[0].when.empty());
  CHECK(docs[1].type == "list of strings");
  CHECK(docs[1].default_text == "[jsonl]");
  CHECK(docs[1].allowed == std::vector<std::string>{"jsonl", "console"});
  CHECK(docs[2].default_text == "0.25");
  CHECK(docs[2].allowed.empty());
  CHECK(docs[2].when == "mode: fast");
  CHECK(docs[2].doc == "how much is skipped");
  CHECK(docs[2].on_resume == OnResume::may_change);
  CHECK(docs[3].default_text == "\"\"");  // an empty string, written so that it shows
  // Other defaults: a node whose params default to the run config's values.
  Settings exact;
  exact.mode = "exact";
  CHECK(settings_keys().docs(exact)[0].default_text == "exact");
}

TEST_CASE("Keys.a_fixed_set_still_refuses_another_value_with_a_suggestion") {
  Settings s;
  s.mode = "fats";
  const auto problem = settings_keys().find("mode")->check(s);
  REQUIRE(problem);
  CHECK(*problem == "'fats' is not one of: fast, exact, did you mean 'fast'?");
}
