#include "train/launch_env.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

namespace dflow::train {

namespace {

int parse_int(const EnvLookup& lookup, const std::string& name, int min_value, int max_value) {
  auto text = lookup(name);
  if (!text) throw std::invalid_argument(name + " is not set (launch with torchrun or `dflow launch -n N`, which set it)");
  size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(*text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text->size())
    throw std::invalid_argument(name + "='" + *text + "' is not an integer");
  if (value < min_value || value > max_value)
    throw std::invalid_argument(name + "=" + *text + " must lie in [" + std::to_string(min_value) + ", " +
                                std::to_string(max_value) + "]");
  return value;
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

std::optional<LaunchEnv> read_launch_env(const EnvLookup& lookup) {
  if (!lookup("WORLD_SIZE")) {
    if (lookup("RANK"))
      throw std::invalid_argument("RANK is set but WORLD_SIZE is not; set both (torchrun and `dflow launch` do)");
    return std::nullopt;
  }
  LaunchEnv env;
  env.world_size = parse_int(lookup, "WORLD_SIZE", 1, 1 << 20);
  env.rank = parse_int(lookup, "RANK", 0, 1 << 20);
  if (env.rank >= env.world_size)
    throw std::invalid_argument("RANK=" + std::to_string(env.rank) + " is not below WORLD_SIZE=" +
                                std::to_string(env.world_size) + " (ranks count from 0)");
  env.local_rank = lookup("LOCAL_RANK") ? parse_int(lookup, "LOCAL_RANK", 0, 1 << 20) : 0;
  if (env.world_size == 1) return env;  // one rank needs no rendezvous
  auto addr = lookup("MASTER_ADDR");
  if (!addr || addr->empty())
    throw std::invalid_argument("WORLD_SIZE=" + std::to_string(env.world_size) +
                                " but MASTER_ADDR is not set: name the host of rank 0 (e.g. 127.0.0.1 on one machine)");
  env.master_addr = *addr;
  if (!lookup("MASTER_PORT"))
    throw std::invalid_argument("WORLD_SIZE=" + std::to_string(env.world_size) +
                                " but MASTER_PORT is not set: a free TCP port on MASTER_ADDR");
  env.master_port = parse_int(lookup, "MASTER_PORT", 1, 65535);
  auto agent = lookup("TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
  if (lookup("TORCHELASTIC_RESTART_COUNT")) env.restart_count = parse_int(lookup, "TORCHELASTIC_RESTART_COUNT", 0, 1 << 20);
  return env;
}

int free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("cannot find a free TCP port on 127.0.0.1");
  return ntohs(address.sin_port);
}

}  // namespace dflow::train
