// What a resume must keep of a node's params comes from their declarations
// alone (nodes/node_params.hpp): each must_match key that is not at its
// default. A key at its default is as if left out, so a checkpoint whose
// config lacks a key (one written before the key existed) resumes while the
// key stays at its default; a value that changes is refused, naming the key.
#include <doctest/doctest.h>

#include <string>

#include "config/keys.hpp"
#include "engine_files.hpp"
#include "nodes/node_params.hpp"

using namespace dflow;

namespace {

struct ToyParams {
  double scale = 1.0;
  std::string mode = "plain";
  std::vector<int> layers;
  int every = 10;
};

const config::KeySet<ToyParams>& toy_keys() {
  static const config::KeySet<ToyParams> keys = [] {
    config::KeySet<ToyParams> k;
    k.add("scale", [](ToyParams& p) -> auto& { return p.scale; }, config::OnResume::must_match, "a factor");
    k.add("mode", [](ToyParams& p) -> auto& { return p.mode; }, config::OnResume::must_match, "a mode");
    k.add("layers", [](ToyParams& p) -> auto& { return p.layers; }, config::OnResume::must_match, "a list");
    k.add("every", [](ToyParams& p) -> auto& { return p.every; }, config::OnResume::may_change, "how often");
    return k;
  }();
  return keys;
}

std::string toy_signature(const std::string& params) {
  config::YamlSection section(YAML::Load(params), "params", std::make_shared<config::Origins>());
  return nodes::resume_text(toy_keys(), nodes::read_params(toy_keys(), section));
}

}  // namespace

TEST_CASE("NodeParams.ResumeText.a_must_match_key_at_its_default_is_left_out_and_one_set_otherwise_is_kept") {
  CHECK(toy_signature("{}") == "");
  // Spelled out at the default, or changed where a resume may change it: the same.
  CHECK(toy_signature("{scale: 1.0, mode: plain, layers: [], every: 3}") == "");
  CHECK(toy_signature("{mode: fancy}") == "{mode: fancy}");
  CHECK(toy_signature("{layers: [2, 4], scale: 0.5}") == "{scale: 0.5, layers: [2, 4]}");  // declaration order
}

TEST_CASE("NodeParams.ResumeText.features_engine_s_defaults_are_left_out_by_the_rule_and_others_kept") {
  const auto signature = testing::engine_resume_signature;
  const std::string plain = signature("{dir: files, engine_layer_ids: [2, 4]}");
  CHECK(plain == "{dir: files, engine_layer_ids: [2, 4]}");
  CHECK(signature("{dir: files, engine_layer_ids: [2, 4], format: vllm, file_order: '', dtype: bfloat16}") == plain);
  CHECK(signature("{dir: files, engine_layer_ids: [2, 4], dtype: float32}") ==
        "{dir: files, engine_layer_ids: [2, 4], dtype: float32}");
  CHECK(signature("{dir: files, engine_layer_ids: [1, 3], format: specforge, file_order: m.json}") ==
        "{dir: files, format: specforge, engine_layer_ids: [1, 3], file_order: m.json}");
}
