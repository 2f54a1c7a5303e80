// The comparison of a recorded target with a given one (what each kind of
// difference is called and whether drafting for it is refused), and the
// record's reading of bad input.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "config/errors.hpp"
#include "train/trained_against.hpp"

using namespace dflow;
using Verdict = train::TargetCheck::Verdict;

namespace {

train::TargetIdentity qwen3() {
  train::TargetIdentity t;
  t.path = "models/Qwen3-8B";
  t.config = {{"model_type", "qwen3"}, {"num_hidden_layers", 36}, {"hidden_size", 4096}, {"vocab_size", 151936}};
  t.embedding = "e1";
  t.lm_head = "h1";
  t.weights = "w1";
  t.checkpoint_dtype = "bfloat16";
  t.quantization = "none";
  t.tokenizer = "t1";
  return t;
}

std::string error_of(const nlohmann::json& json) {
  try {
    train::TrainedAgainst::from_json(json, "x/trained_against.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("TrainedAgainst.the_same_files_at_another_path_are_the_same_target") {
  auto given = qwen3();
  given.path = "/mnt/copy";
  const auto check = train::check_target(qwen3(), given);
  CHECK(check.verdict == Verdict::same);
  CHECK_FALSE(check.refused());
  CHECK(check.items.empty());
  CHECK(check.summary.find("same files, at /mnt/copy") != std::string::npos);
}

TEST_CASE("TrainedAgainst.a_quantized_copy_is_allowed_and_named") {
  auto given = qwen3();
  given.weights = "w-fp8";
  given.quantization = "fp8 (e4m3, block 128x128)";
  const auto check = train::check_target(qwen3(), given);
  CHECK(check.verdict == Verdict::same_model);
  CHECK_FALSE(check.refused());
  CHECK(check.summary.find("a quantized copy") == 0);
  REQUIRE(check.items.size() == 1);
  CHECK(check.items[0] == "quantization: trained none, given fp8 (e4m3, block 128x128)");
}

TEST_CASE("TrainedAgainst.other_layers_behind_the_same_head_are_refused") {
  auto given = qwen3();
  given.weights = "w2";
  const auto check = train::check_target(qwen3(), given);
  CHECK(check.verdict == Verdict::other_weights);
  CHECK(check.refused());
  REQUIRE(check.items.size() == 1);
  CHECK(check.items[0] == "weights: trained w1, given w2");
}

TEST_CASE("TrainedAgainst.another_model_is_refused_naming_each_field") {
  auto given = qwen3();
  given.config["num_hidden_layers"] = 28;
  given.config["tie_word_embeddings"] = true;
  given.tokenizer = "t2";
  given.weights = "w2";
  given.quantization = "fp8";  // a quantized copy of another model is still another model
  const auto check = train::check_target(qwen3(), given);
  CHECK(check.verdict == Verdict::other_target);
  CHECK(check.refused());
  const std::string text = check.describe();
  CHECK(text.find("config.json num_hidden_layers: trained 36, given 28") != std::string::npos);
  CHECK(text.find("config.json tie_word_embeddings: trained (absent), given true") != std::string::npos);
  CHECK(text.find("tokenizer: trained t1, given t2") != std::string::npos);
  CHECK(text.find("quantization: trained none, given fp8") != std::string::npos);
}

TEST_CASE("TrainedAgainst.how_a_copy_is_stored_is_not_part_of_the_model") {
  const nlohmann::json config = {{"model_type", "qwen3_5"},
                                 {"torch_dtype", "bfloat16"},
                                 {"transformers_version", "5.0"},
                                 {"quantization_config", {{"quant_method", "fp8"}}},
                                 {"text_config", {{"hidden_size", 2048}, {"dtype", "bfloat16"}}}};
  const auto kept = train::identity_config(config);
  CHECK(kept == nlohmann::json{{"model_type", "qwen3_5"}, {"text_config", {{"hidden_size", 2048}}}});
}

TEST_CASE("TrainedAgainst.a_record_round_trips_and_bad_records_name_the_field") {
  train::TrainedAgainst r;
  r.target = qwen3();
  r.compute_dtype = "bfloat16";
  r.data = {{"data/train", "f00d", "qwen3"}};
  r.target_layer_ids = {1, 17, 33};
  const auto json = r.to_json();
  CHECK(json["hidden_states_indices"] == nlohmann::json::array({2, 18, 34}));
  const auto back = train::TrainedAgainst::from_json(json, "x");
  CHECK(back.to_json() == json);
  CHECK(train::describe(back).find("from layers [1, 17, 33] (Hugging Face hidden_states [2, 18, 34])") !=
        std::string::npos);

  auto newer = json;
  newer["version"] = 2;
  CHECK(error_of(newer).find("x/trained_against.json: field 'version' is 2, written by a newer dflow") == 0);
  auto no_weights = json;
  no_weights["target"].erase("weights");
  CHECK(error_of(no_weights) == "x/trained_against.json target: field 'weights' is missing or not a string");
  auto bad_layers = json;
  bad_layers["target_layer_ids"] = "1,2";
  CHECK(error_of(bad_layers).find("field 'target_layer_ids'") != std::string::npos);
  CHECK(error_of(nlohmann::json::array()) == "x/trained_against.json: not a JSON object");

  const auto dir = std::filesystem::temp_directory_path() / ("dflow-trained-against-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  CHECK_FALSE(train::read_trained_against(dir).has_value());
  std::ofstream(dir / train::kTrainedAgainstFile) << "{not json";
  try {
    train::read_trained_against(dir);
    FAIL("an unreadable record was read");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find((dir / train::kTrainedAgainstFile).string() + ": unreadable") == 0);
  }
  std::filesystem::remove_all(dir);
}
