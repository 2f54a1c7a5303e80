#pragma once
// The standard launcher environment (what torchrun and `dflow launch` set):
// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. The only
// environment dflow reads; everything else comes from the config.
#include <functional>
#include <optional>
#include <string>

namespace dflow::train {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  bool agent_store = false;  // torchrun's agent already serves the store at MASTER_ADDR:MASTER_PORT
  int restart_count = 0;     // torchrun restarts: keys of an earlier attempt are not reused
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// Empty when WORLD_SIZE is unset (a single process). Throws std::invalid_argument
// naming the variable when the set is incomplete or inconsistent (RANK >=
// WORLD_SIZE, WORLD_SIZE set without MASTER_ADDR, a port that is no port).
std::optional<LaunchEnv> read_launch_env(const EnvLookup& lookup = process_env());

// A TCP port the kernel just handed out on 127.0.0.1 (free at this instant):
// a MASTER_PORT for ranks on one machine. Throws std::runtime_error when none is.
int free_loopback_port();

}  // namespace dflow::train
