#pragma once
// Small node kinds and helpers for the graph tests. Every test body records
// into a Probe (NodeContext::user holds a Probe*), so tests can assert what a
// user would notice: counts, order, capacity, exclusive ownership.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "config/pipeline.hpp"
#include "graph/pipeline.hpp"
#include "graph/registry.hpp"

namespace dflow::graph::testing {

// How long a test waits for something that must happen (a body to arrive, an
// edge to fill) before it fails naming it. Generous: on a busy machine a
// thread may wait long to be scheduled, and only a broken graph waits this long.
std::chrono::milliseconds wait_limit();

// Polls `condition` until it holds (true) or wait_limit() passes (false).
bool wait_until(const std::function<bool()>& condition);

// Held shut until the test opens it: a gated body waits here, so that the test
// decides when it goes on instead of the scheduler.
class Gate {
 public:
  void open();
  // Throws "<who> waited ... for the test to open its gate" past wait_limit().
  void wait(const std::string& who);

 private:
  std::mutex mutex_;
  std::condition_variable opened_cv_;
  bool opened_ = false;
};

// A meeting of `expected` bodies: each waits until all have arrived, so that
// bodies which must be able to run at once provably did. Past wait_limit() it
// throws, naming who arrived and how many never did.
class Rendezvous {
 public:
  void arrive(const std::string& who, int expected);

 private:
  std::mutex mutex_;
  std::condition_variable arrived_cv_;
  std::set<std::string> arrived_;
};

struct Probe {
  std::atomic<int64_t> emitted{0};         // by sources, after emit
  std::atomic<int64_t> consumed{0};        // by sinks, first thing in the body
  std::atomic<int64_t> max_in_flight{0};   // emitted - consumed, seen by sinks
  std::atomic<int> running{0};             // bodies executing now
  std::atomic<int> max_running{0};
  std::atomic<int> holders{0};             // bodies holding the token now
  std::atomic<int> max_holders{0};
  std::atomic<int64_t> holds{0};           // token-holding calls in total
  std::mutex mutex;
  std::vector<uint64_t> sink_seqs;         // seq of each message the sink got, in arrival order
  std::map<std::string, std::vector<int>> calls;  // test.work calls by node name, then replica
  Gate gate;              // test.count and test.sink with `gated: true` wait on it
  Rendezvous rendezvous;  // test.work and test.hold with `meet: N`: each replica's first call waits for N
};

// A builtin + test node registry:
//   test.count    source  -> out: Number         params count, cost, delay_us, first_seq, gated (before its first item)
//   test.work     in: Number -> out: Number      params delay_us, random_delay_us, random_share, seed, fail_at, silent_at, fail_to_build, meet
//   test.sink     in: Number                     params delay_us, gated (after counting its first item)
//   test.pair     a: Number, b: Number          params delay_us (checks a and b carry the same value)
//   test.route    router in: Number -> out (routed)   params policy: least_loaded | round_robin
//   test.wide     in: Number -> o0..o9: Number (optional; only for describe())
//   test.hold     in: Number, token: Token -> out: Number, token: Token   params delay_us, meet
//   test.drafter  batch: Number, token: Token -> out: Number
//   test.accumulate  in: Number -> token: Token, step: Number   params every
//   test.optimizer   in: Number -> token: Token, record: Number
NodeRegistry test_registry();

// Parses the `pipeline:` section of `yaml` as if read from `file`.
config::PipelineConfig pipeline_from_yaml(const std::string& yaml, const std::string& file = "test.yaml");

std::unique_ptr<Pipeline> build(const std::string& yaml, Probe& probe, int threads);

// The error message of describe() on `yaml`, or "" when it is accepted.
std::string describe_error(const std::string& yaml);

}  // namespace dflow::graph::testing
