// DSpark's heads (model.drafter.kind: dspark and its params) and the drafter
// node's distillation params: each bad value is
// refused naming the key and the value; a resume that changes the heads or
// the loss is refused like any decisive key, and one that keeps them loads
// the heads' parameters; a kl run gets the target's last hidden state online
// and from a cache that stores it (the same records), and a cache without it
// is refused naming what it lacks.
#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <sstream>

#include "error_of.hpp"
#include "config/errors.hpp"
#include "data/checksum.hpp"
#include "data/feature_cache.hpp"
#include "nodes/cache_fill.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/registry.hpp"
#include "nodes/trainer.hpp"
#include "train/checkpoint.hpp"
#include "drafter_params.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using testing::check_refusals;
using testing::fresh_dir;
using testing::RefusalCase;
using testing::with_drafter;
using testing::with_kind;
using testing::small_run_config;
using testing::step_records;
using testing::stopped_after;
namespace fs = std::filesystem;

using dflow::testing::error_of;

namespace {

const std::vector<std::string> kShort{"train.epochs=1", "eval.every_steps=0"};


config::Config cached(config::Config config, const fs::path& dir) {
  for (auto& n : config.pipeline.nodes)
    if (n.name == "target") {
      n.type = "features.cached";
      n.params.reset(YAML::Load("{dir: " + dir.string() + "}"));
    }
  return config;
}

// The default kinds plus "target_forward.plain": target_forward's body and
// hooks, but registered as a feature source that does not say it gives the
// target's last hidden state (a new source that never learnt to).
const graph::NodeRegistry& kinds_with_a_source_without_teacher() {
  static const graph::NodeRegistry registry = [] {
    graph::NodeRegistry r;
    nodes::register_all_nodes(r);
    graph::NodeSpec spec = *r.find("target_forward");
    nodes::RunHooks hooks = *std::any_cast<nodes::RunHooks>(&spec.extension);
    REQUIRE(hooks.gives_teacher);
    hooks.gives_teacher = false;
    spec.type = "target_forward.plain";
    nodes::add_node_kind(r, std::move(spec), std::move(hooks));
    return r;
  }();
  return registry;
}

config::Config with_target_type(config::Config config, const std::string& type) {
  for (auto& n : config.pipeline.nodes)
    if (n.name == "target") n.type = type;
  return config;
}

}  // namespace

TEST_CASE("DSpark.Teacher.kl_refuses_a_feature_source_that_cannot_give_the_last_hidden_state") {
  nodes::RunOptions options;
  options.registry = &kinds_with_a_source_without_teacher();
  const auto dir = fresh_dir("kl-plain-source");
  const auto plain = with_target_type(small_run_config(dir, kShort), "target_forward.plain");
  // kl, and every other loss that reads the target's distribution, alone or in a mix.
  for (const std::string loss : {"kl", "tv", "{ce: 0.1, tv: 0.9}"}) {
    CAPTURE(loss);
    const std::string e =
        error_of([&] { nodes::run_training(with_drafter(plain, "{loss: " + loss + "}"), options); });
    CHECK_MESSAGE(e.find("node 'target' (target_forward.plain) makes the drafter's features but cannot give the "
                         "target's last hidden state") != std::string::npos, e);
    CHECK_MESSAGE(e.find("node 'drafter' (drafter_step) trains with loss: " + loss) != std::string::npos, e);
    CHECK_MESSAGE(e.find("use features.cached, features.engine or target_forward, or loss: ce") != std::string::npos, e);
    CHECK_FALSE(fs::exists(dir / "checkpoints"));
  }
  // ce with eval.expected_acceptance reads it too.
  config::Config expected = plain;
  expected.eval.expected_acceptance = true;
  const std::string e = error_of([&] { nodes::run_training(expected, options); });
  CHECK_MESSAGE(e.find("cannot give the target's last hidden state") != std::string::npos, e);
  CHECK_MESSAGE(e.find("eval.expected_acceptance records the acceptance under the target's distribution") !=
                    std::string::npos,
                e);
  CHECK_MESSAGE(e.find(", or eval.expected_acceptance: false") != std::string::npos, e);
  CHECK_FALSE(fs::exists(dir / "checkpoints"));
  // The same source serves a ce run.
  nodes::run_training(stopped_after(plain, 1), options);
  CHECK(step_records(dir).size() == 1);
}

TEST_CASE("DSpark.Params.bad_values_are_refused_naming_the_key_and_the_value") {
  const auto dir = fresh_dir("dspark-bad");
  const std::vector<RefusalCase> cases{
      {"{}", {"model.drafter.markov_rank", "must be >= 1", "got 0"}, "{kind: dspark, markov_rank: 0}"},
      {"{}", {"model.drafter.markov_head", "'lstm' is not one of: vanilla, gated, rnn"}, "{kind: dspark, markov_head: lstm}"},
      {"{}", {"model.drafter.confidence_alpha", "a confidence head without its loss weight", "got 0"},
       "{kind: dspark, confidence_alpha: 0}"},
      {"{}", {"model.drafter.confidence_alpha", "got -1"}, "{kind: dspark, confidence_alpha: -1}"},
      {"{}", {"model.drafter.confidence_alpha", "confidence_head is false"},
       "{kind: dspark, confidence_head: false, confidence_alpha: 0.5}"},
      {"{}", {"model.drafter.confidence_with_markov", "confidence_with_markov true", "confidence_head is false"},
       "{kind: dspark, confidence_head: false, confidence_with_markov: true}"},
      {"{}", {"model.drafter.confidence_detach", "confidence_detach true", "confidence_head is false"},
       "{kind: dspark, confidence_head: false, confidence_detach: true}"},
      {"{}", {"model.drafter.markov_rank", "must be at most 4096", "got 1000000000"},
       "{kind: dspark, markov_rank: 1000000000}"},
      {"{}", {"model.drafter.markov_rank", "is a param of kind dspark", "model.drafter.kind is dflash",
              "set model.drafter.kind: dspark"},
       "{markov_rank: 64}"},
      {"{}", {"model.drafter.kind", "'dspark2' is not one of: dflash, dflash2, dspark, dspine"}, "{kind: dspark2}"},
      {"{}", {"model.drafter.markov_rnak", "did you mean 'model.drafter.markov_rank'"}, "{kind: dspark, markov_rnak: 8}"},
      {"{}", {"model.drafter.num_layer", "did you mean 'model.drafter.num_layers'"}, "{num_layer: 2}"},
      // The spelling of an earlier dflow, on the drafter node: refused, naming the new keys and values.
      {"{head: dspark}", {"params.head", "set model.drafter.kind: dspark", "(node 'drafter', drafter_step)"}},
      {"{markov_rank: 16, loss: kl}",
       {"params.markov_rank", "a param of drafter kind dspark", "set model.drafter.kind: dspark and "
                                                                 "model.drafter.markov_rank: 16"}},
      {"{loss: kld}", {"params.loss", "'kld' is not one of: ce, js, kl, lk_hybrid, neg_log_acceptance, reverse_kl, tv"}},
      {"{loss: kl, kl_temperature: 0}", {"params.kl_temperature", "must be >= 0.1", "got 0"}},
      {"{loss: kl, kl_temperature: 1.0e-300}", {"params.kl_temperature", "must be >= 0.1", "got 1e-300"}},
      {"{kl_temperature: 2}", {"params.kl_temperature", "needs loss: kl"}},
      {"{loss: kl, objective: dpace}", {"params.loss", "loss: kl with objective: dpace"}},
  };
  check_refusals(dir, cases, kShort);
}

TEST_CASE("DSpark.Params.a_resume_keeps_the_heads_and_the_loss") {
  const auto split = fresh_dir("dspark-resume");
  const std::string dspark = "{kind: dspark, markov_rank: 16}";
  nodes::run_training(stopped_after(with_kind(with_drafter(small_run_config(split, kShort), "{loss: kl}"), dspark), 2),
                      {});
  nodes::RunOptions resume;
  resume.resume = "latest";
  // The keys at their defaults are left out (markov_head, the confidence head's, kl_temperature).
  struct Change {
    std::string drafter, node, says;
  };
  for (const auto& c : {Change{"{kind: dflash}", "{loss: kl}", "model.drafter.kind: dspark -> dflash"},
                        Change{"{kind: dspark, markov_rank: 32}", "{loss: kl}",
                               "model.drafter (kind dspark's params): {markov_rank: 16} -> {markov_rank: 32}"},
                        Change{dspark, "{}", "pipeline.nodes.drafter: drafter_step {loss: kl} -> drafter_step"}}) {
    CAPTURE(c.drafter);
    CAPTURE(c.node);
    const std::string e = error_of([&] {
      nodes::run_training(stopped_after(with_kind(with_drafter(small_run_config(split, kShort), c.node), c.drafter), 4),
                          resume);
    });
    CHECK_MESSAGE(e.find(c.says) != std::string::npos, e);
  }
  // The same params (markov_rank's default spelled out or not): the
  // checkpoint's heads load and training goes on.
  nodes::run_training(
      stopped_after(with_kind(with_drafter(small_run_config(split, kShort), "{loss: kl}"), dspark), 4),
      resume);
  const auto records = step_records(split);
  REQUIRE(records.size() == 4);
  for (const auto& r : records) {
    CHECK(r.contains("confidence_loss"));
    CHECK(r["confidence_per_position"].size() == r["accuracy_per_position"].size());
  }
}

// A checkpoint written by a dflow that chose the kind on the drafter node
// (`head: dspark` and markov_rank among its params) resumes under
// model.drafter's keys, and is held to them as a new one is.
TEST_CASE("DSpark.Params.a_checkpoint_with_the_kind_on_the_drafter_node_resumes_under_model_drafter") {
  const auto dir = fresh_dir("dspark-old-spelling");
  const std::string dspark = "{kind: dspark, markov_rank: 16}";
  nodes::run_training(stopped_after(with_kind(with_drafter(small_run_config(dir, kShort), "{loss: kl}"), dspark), 2), {});
  // Its config.yaml as the earlier dflow wrote it, the manifest's checksum with it.
  const fs::path checkpoint = train::resolve_checkpoint(dir / "checkpoints", "latest");
  YAML::Node saved = YAML::LoadFile((checkpoint / "config.yaml").string());
  REQUIRE(saved["model"]["drafter"]["kind"].as<std::string>() == "dspark");
  REQUIRE(saved["model"]["drafter"]["markov_rank"].as<int>() == 16);
  saved["model"]["drafter"].remove("kind");
  saved["model"]["drafter"].remove("markov_rank");
  for (auto node : saved["pipeline"]["nodes"])
    if (node["name"].as<std::string>() == "drafter") {
      node["params"]["head"] = "dspark";
      node["params"]["markov_rank"] = 16;
    }
  YAML::Emitter out;
  out << saved;
  const std::string text = std::string(out.c_str()) + "\n";
  std::ofstream(checkpoint / "config.yaml", std::ios::trunc) << text;
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(checkpoint / "manifest.json"));
  std::ostringstream hash;
  hash << std::hex << data::xxhash64(text.data(), text.size());
  manifest["files"]["config.yaml"] = {{"bytes", text.size()}, {"xxhash64", hash.str()}};
  std::ofstream(checkpoint / "manifest.json", std::ios::trunc) << manifest.dump(2);

  nodes::RunOptions resume;
  resume.resume = "latest";
  const std::string e = error_of([&] {
    nodes::run_training(
        stopped_after(with_kind(with_drafter(small_run_config(dir, kShort), "{loss: kl}"), "{kind: dspark}"), 4), resume);
  });
  CHECK_MESSAGE(e.find("model.drafter (kind dspark's params): {markov_rank: 16} -> (defaults)") != std::string::npos, e);
  nodes::run_training(stopped_after(with_kind(with_drafter(small_run_config(dir, kShort), "{loss: kl}"), dspark), 4),
                      resume);
  const auto records = step_records(dir);
  REQUIRE(records.size() == 4);
  for (const auto& r : records) CHECK(r.contains("confidence_loss"));
}

TEST_CASE("DSpark.Teacher.kl_trains_online_and_from_a_cache_with_the_last_layer_alike") {
  const auto online_dir = fresh_dir("kl-online"), cached_dir = fresh_dir("kl-cached"), cache = fresh_dir("kl-cache");
  const auto kl = with_drafter(small_run_config(online_dir, kShort), "{loss: kl}");
  nodes::run_training(stopped_after(kl, 3), {});
  const auto online = step_records(online_dir);
  REQUIRE(online.size() == 3);
  for (const auto& r : online) CHECK(std::isfinite(r["loss"].get<double>()));

  // cache-features from the kl config stores the last layer by itself.
  nodes::FillOptions fill;
  fill.params.dir = cache.string();
  fill.params.dtype = "float32";
  const auto report = nodes::fill_feature_cache(kl, fill);
  CHECK(report.cached_samples == report.dataset_samples);
  const auto manifest = data::read_manifest(cache);
  CHECK(manifest.last_layer);
  CHECK(manifest.width() == manifest.hidden_size * static_cast<int64_t>(manifest.layer_ids.size() + 1));
  nodes::run_training(stopped_after(cached(with_drafter(small_run_config(cached_dir, kShort), "{loss: kl}"), cache), 3),
                      {});
  CHECK(step_records(cached_dir) == online);  // float32 cache: the same features and teacher

  // The same cache serves a ce run (the last layer is not read).
  const auto ce_dir = fresh_dir("kl-cache-ce");
  nodes::run_training(stopped_after(cached(small_run_config(ce_dir, kShort), cache), 1), {});
  CHECK(step_records(ce_dir).size() == 1);
}

TEST_CASE("DSpark.Teacher.a_cache_without_the_last_layer_is_refused_for_kl") {
  const auto dir = fresh_dir("kl-refused"), cache = fresh_dir("kl-ce-cache");
  nodes::FillOptions fill;
  fill.params.dir = cache.string();
  fill.params.dtype = "bfloat16";
  nodes::fill_feature_cache(small_run_config(dir, kShort), fill);
  CHECK_FALSE(data::read_manifest(cache).last_layer);
  const std::string e = error_of([&] {
    nodes::run_training(cached(with_drafter(small_run_config(dir, kShort), "{loss: kl}"), cache), {});
  });
  CHECK_MESSAGE(e.find("node 'target' (features.cached)") != std::string::npos, e);
  CHECK_MESSAGE(e.find("the feature cache " + cache.string()) != std::string::npos, e);
  CHECK_MESSAGE(e.find("the target's last hidden state, layer N-1") != std::string::npos, e);
  CHECK_MESSAGE(e.find("the cache lacks it and holds only the feature layers [") != std::string::npos, e);
  CHECK_MESSAGE(e.find("trains with loss: kl") != std::string::npos, e);
  CHECK_MESSAGE(e.find("dflow cache-features") != std::string::npos, e);

  // --with-last-layer into another directory adds it for a ce config.
  const auto cache2 = fresh_dir("kl-ce-cache-last");
  fill.params.dir = cache2.string();
  fill.last_layer = true;
  nodes::fill_feature_cache(small_run_config(dir, kShort), fill);
  CHECK(data::read_manifest(cache2).last_layer);
}
