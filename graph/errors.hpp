#pragma once
// Run-time failures of a pipeline (invariant 8: failure is clean and named).
// Declaration errors are dflow::ConfigError (config/errors.hpp).
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace dflow::graph {

// An exception in a node body: "node 'target' (replica 1) failed on message
// seq 17: <what>". The run was cancelled; no node body was left running.
class NodeError : public std::runtime_error {
 public:
  NodeError(std::string node, int replica, int replicas, std::optional<uint64_t> seq, std::string cause);
  const std::string& node() const { return node_; }
  int replica() const { return replica_; }
  std::optional<uint64_t> seq() const { return seq_; }  // empty for a source's own failure
  const std::string& cause() const { return cause_; }

 private:
  std::string node_;
  int replica_;
  std::optional<uint64_t> seq_;
  std::string cause_;
};

// The graph went idle with work left: no node could fire, yet a source was
// not exhausted or a data edge still held items (a token cycle without
// tokens, a node that never emits on a port another node waits for, ...).
class StallError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace dflow::graph
