// The launcher environment: what torchrun and `dflow launch` set, and a clear
// error naming the variable for every incomplete or inconsistent set.
#include <doctest/doctest.h>

#include <map>

#include "train/launch_env.hpp"

using namespace dflow::train;

namespace {
EnvLookup env(std::map<std::string, std::string> values) {
  return [values](const std::string& name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

std::string error_of(std::map<std::string, std::string> values) {
  try {
    read_launch_env(env(std::move(values)));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("LaunchEnv.absent_means_one_process") { CHECK_FALSE(read_launch_env(env({})).has_value()); }

TEST_CASE("LaunchEnv.torchrun_set_is_read") {
  auto e = read_launch_env(env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"},
                                {"MASTER_PORT", "29500"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                {"TORCHELASTIC_RESTART_COUNT", "3"}}));
  REQUIRE(e.has_value());
  CHECK(e->rank == 1);
  CHECK(e->world_size == 2);
  CHECK(e->local_rank == 1);
  CHECK(e->master_addr == "127.0.0.1");
  CHECK(e->master_port == 29500);
  CHECK(e->agent_store);
  CHECK(e->restart_count == 3);
}

TEST_CASE("LaunchEnv.errors_name_the_variable") {
  CHECK(error_of({{"RANK", "0"}}).find("WORLD_SIZE is not") != std::string::npos);
  CHECK(error_of({{"WORLD_SIZE", "2"}}).find("RANK is not set") != std::string::npos);
  CHECK(error_of({{"WORLD_SIZE", "2"}, {"RANK", "2"}}).find("RANK=2 is not below WORLD_SIZE=2") != std::string::npos);
  CHECK(error_of({{"WORLD_SIZE", "two"}, {"RANK", "0"}}).find("WORLD_SIZE='two' is not an integer") != std::string::npos);
  CHECK(error_of({{"WORLD_SIZE", "2"}, {"RANK", "0"}}).find("MASTER_ADDR is not set") != std::string::npos);
  CHECK(error_of({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_ADDR", "h"}}).find("MASTER_PORT is not set") !=
        std::string::npos);
  CHECK(error_of({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}})
            .find("MASTER_PORT=70000 must lie in [1, 65535]") != std::string::npos);
  // One rank needs no rendezvous.
  CHECK(error_of({{"WORLD_SIZE", "1"}, {"RANK", "0"}}).empty());
}
