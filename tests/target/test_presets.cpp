// Real shapes without downloads: Hugging Face's sharded layout (written and
// read back), head_dim apart from hidden / heads, tied embeddings, bf16, and
// the presets' shapes (the 8B one is never materialized here).
#include <doctest/doctest.h>

#include "formats/safetensors.hpp"
#include "formats/safetensors_sharded.hpp"
#include "target/model_fixtures.hpp"

using namespace dflow::target;
using testing::ScratchDir;

TEST_CASE("Model.Safetensors.ShardedWriteIsReadBackThroughTheIndex") {
  ScratchDir dir("sharded");
  torch::manual_seed(0);
  const std::vector<std::pair<std::string, torch::Tensor>> tensors{
      {"a", torch::randn({64})},                               // 256 bytes
      {"b", torch::randn({64}).to(torch::kBFloat16)},         // 128 bytes
      {"big", torch::randn({400})},                            // 1600 bytes: larger than a shard
      {"c", torch::arange(10, torch::kInt64)}};                // 80 bytes
  dflow::formats::write_sharded_safetensors(dir.path(), tensors, 512);
  const auto index = read_json_file(dir.path() / "model.safetensors.index.json");
  CHECK(index["metadata"]["total_size"] == 256 + 128 + 1600 + 80);
  CHECK(index["weight_map"]["a"] == "model-00001-of-00003.safetensors");
  CHECK(index["weight_map"]["b"] == "model-00001-of-00003.safetensors");
  CHECK(index["weight_map"]["big"] == "model-00002-of-00003.safetensors");
  CHECK(index["weight_map"]["c"] == "model-00003-of-00003.safetensors");
  const dflow::formats::TensorMap loaded = dflow::formats::load_checkpoint_dir(dir.path());
  REQUIRE(loaded.size() == tensors.size());
  for (const auto& [name, tensor] : tensors) {
    INFO(name);
    CHECK((loaded.at(name).scalar_type() == tensor.scalar_type()));
    CHECK(torch::equal(loaded.at(name), tensor));
  }
  // Shards are written as they fill (model-0000i.safetensors.part) and named at the end: none is left over.
  int64_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    CHECK(entry.path().extension() != ".part");
    ++files;
  }
  CHECK(files == 4);  // 3 shards + the index
}

TEST_CASE("Model.TinyTarget.ShardedBf16TiedWithOwnHeadDimLoadsAndRuns") {
  ScratchDir dir("sharded-target");
  TinyTargetOptions options;
  options.out_dir = dir.path();
  options.num_layers = 2;
  options.hidden_size = 32;
  options.num_heads = 4;
  options.num_kv_heads = 2;
  options.head_dim = 16;  // q width 64 != hidden 32, as in Qwen3-0.6B (16 x 128 vs 1024)
  options.vocab_size = 300;
  options.tie_word_embeddings = true;
  options.dtype = torch::kBFloat16;
  options.max_shard_bytes = 8 << 10;
  const HFConfig config = make_tiny_target(options);
  CHECK(config.head_dim == 16);
  CHECK(config.tie_word_embeddings);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "model.safetensors"));
  const auto index = read_json_file(dir.path() / "model.safetensors.index.json");
  CHECK_FALSE(index["weight_map"].contains("lm_head.weight"));
  const dflow::formats::SafetensorsFile first(dir.path() /
                                              index["weight_map"]["model.embed_tokens.weight"].get<std::string>());
  CHECK(first.entry("model.embed_tokens.weight").dtype_name == "BF16");

  const TargetModel target = TargetModel::load(dir.path(), torch::kCPU, torch::kFloat32);
  CHECK(target.lm_head_weight().data_ptr() == target.embedding_weight().data_ptr());  // tied
  const auto out = target.forward(torch::randint(0, 298, {2, 9}, torch::kInt64), {0, 1}, true);
  CHECK(out.logits.sizes() == torch::IntArrayRef({2, 9, 300}));
  CHECK(torch::isfinite(out.logits).all().item<bool>());
}

TEST_CASE("Model.TinyTarget.PresetsHaveTheRealShapes") {
  const auto small = preset_target_options("qwen3-0.6b");
  CHECK(small.num_layers == 28);
  CHECK(small.hidden_size == 1024);
  CHECK(small.num_heads == 16);
  CHECK(small.num_kv_heads == 8);
  CHECK(small.head_dim == 128);
  CHECK(small.intermediate_size == 3072);
  CHECK(small.vocab_size == 151936);
  CHECK(small.tie_word_embeddings);
  CHECK((small.dtype == torch::kBFloat16));
  CHECK(small.max_shard_bytes > 0);
  const auto large = preset_target_options("qwen3-8b");
  CHECK(large.num_layers == 36);
  CHECK(large.hidden_size == 4096);
  CHECK(large.num_heads == 32);
  CHECK(large.num_kv_heads == 8);
  CHECK(large.head_dim == 128);
  CHECK(large.intermediate_size == 12288);
  CHECK(large.vocab_size == 151936);
  CHECK_FALSE(large.tie_word_embeddings);
  CHECK(large.rope_theta == 1e6);
  CHECK(large.mask_token_id == 151669);
  // The recipe's feature layers follow from the preset's depth.
  CHECK(feature_layer_ids(large.num_layers, 5) == std::vector<int64_t>{1, 9, 17, 25, 33});
  CHECK_THROWS_WITH_AS(preset_target_options("qwen3-14b"), doctest::Contains("qwen3-0.6b, qwen3-8b"),
                       std::invalid_argument);
}
