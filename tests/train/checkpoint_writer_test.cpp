// The run's one checkpoint writer: writes from several threads (the
// background writer, the eval node's best snapshot, the guard's halt) never
// overlap, and the halt's checkpoint stays the last one.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include "train/checkpoint.hpp"
#include "train/checkpoint_writer.hpp"

using namespace dflow;
namespace fs = std::filesystem;

namespace {

train::CheckpointState state_at(int64_t step, float value) {
  train::CheckpointState s;
  s.global_step = step;
  s.run_state = {{"cursor", step}};
  s.config_yaml = "run: {seed: 1}\n";
  s.drafter_tensors = {{"fc.weight", torch::full({64, 64}, value)}};
  s.drafter_config = {{"model_type", "qwen3"}};
  s.optimizer_tensors = {{"exp_avg.fc.weight", torch::full({64, 64}, value * 2)}};
  s.optimizer_steps = step;
  return s;
}

fs::path fresh(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("dflow-writer-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

// Names in the checkpoints directory that are neither checkpoints nor pointers.
std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().front() == '.') out.push_back(e.path().filename().string());
  return out;
}

float value_in(const fs::path& checkpoint) {
  return train::read_checkpoint(checkpoint).drafter_tensors.at("fc.weight")[0][0].item<float>();
}

}  // namespace

TEST_CASE("CheckpointWriter.the_same_step_written_from_two_threads_at_once_is_one_intact_checkpoint") {
  const fs::path dir = fresh("same-step");
  train::CheckpointWriter writer(dir, 3);
  // The first write stops half-way (its drafter file written) while the second
  // one starts: both use step-4's temporary name. The second starts once the
  // first says it is half-way, however late the scheduler runs it.
  std::promise<void> half_way;
  auto first_is_half_way = half_way.get_future();
  std::thread background([&] {
    writer.write(state_at(4, 1.0f), [&] {
      half_way.set_value();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    });
  });
  const bool reached = first_is_half_way.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  CHECK_MESSAGE(reached, "the first write never reached its half-way hook");
  CHECK_NOTHROW(writer.write_final(state_at(4, 2.0f)));
  background.join();
  const fs::path latest = train::resolve_checkpoint(dir, "latest");
  CHECK(latest.filename() == "step-4");
  CHECK(value_in(latest) == 2.0f);  // the final write came after the one in progress
  CHECK(leftovers(dir).empty());
}

TEST_CASE("CheckpointWriter.after_the_final_checkpoint_no_write_moves_latest_or_best") {
  const fs::path dir = fresh("final");
  train::CheckpointWriter writer(dir, 3);
  REQUIRE(writer.write(state_at(5, 1.0f)));
  REQUIRE(writer.write_best(state_at(5, 1.0f), {{"mean_tau", 2.0}}));
  // A halt with rollback saves an older, good state as the last checkpoint.
  CHECK(writer.write_final(state_at(3, 3.0f)).filename() == "step-3");
  CHECK_FALSE(writer.write(state_at(6, 4.0f)));  // a snapshot still queued behind the halt
  CHECK_FALSE(writer.write_best(state_at(6, 4.0f), {{"mean_tau", 9.0}}));
  CHECK(train::resolve_checkpoint(dir, "latest").filename() == "step-3");
  CHECK(value_in(train::resolve_checkpoint(dir, "latest")) == 3.0f);
  CHECK(train::resolve_checkpoint(dir, "best").filename() == "best-step-5");
  CHECK_FALSE(fs::exists(dir / "step-6"));
}

TEST_CASE("CheckpointWriter.keeps_the_newest_and_never_prunes_best") {
  const fs::path dir = fresh("keep");
  train::CheckpointWriter writer(dir, 2);
  for (int64_t step = 1; step <= 5; ++step) {
    writer.write(state_at(step, static_cast<float>(step)));
    if (step == 2) writer.write_best(state_at(step, 2.0f), {{"mean_tau", 3.0}});
  }
  const auto kept = train::list_checkpoints(dir);
  REQUIRE(kept.size() == 2);
  CHECK(kept[0].filename() == "step-4");
  CHECK(kept[1].filename() == "step-5");
  CHECK(train::resolve_checkpoint(dir, "best").filename() == "best-step-2");
  CHECK(train::best_checkpoint_eval(dir)->at("mean_tau") == 3.0);
}
