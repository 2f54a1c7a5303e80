#include "test_nodes.hpp"

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "config/errors.hpp"
#include "graph/builtin_nodes.hpp"
#include "graph/description.hpp"
#include "time_scale.hpp"

namespace dflow::graph::testing {

std::chrono::milliseconds wait_limit() { return std::chrono::milliseconds(dflow::testing::scaled(30000)); }

bool wait_until(const std::function<bool()>& condition) {
  const auto give_up = std::chrono::steady_clock::now() + wait_limit();
  while (!condition()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

void Gate::open() {
  {
    std::lock_guard lock(mutex_);
    opened_ = true;
  }
  opened_cv_.notify_all();
}

void Gate::wait(const std::string& who) {
  std::unique_lock lock(mutex_);
  if (!opened_cv_.wait_for(lock, wait_limit(), [&] { return opened_; }))
    throw std::runtime_error(who + " waited " + std::to_string(wait_limit().count()) + " ms for the test to open its gate");
}

void Rendezvous::arrive(const std::string& who, int expected) {
  std::unique_lock lock(mutex_);
  arrived_.insert(who);
  arrived_cv_.notify_all();
  const auto all_here = [&] { return static_cast<int>(arrived_.size()) >= expected; };
  if (!arrived_cv_.wait_for(lock, wait_limit(), all_here)) {
    std::string here;
    for (const auto& name : arrived_) here += (here.empty() ? "" : ", ") + name;
    throw std::runtime_error(who + " waited " + std::to_string(wait_limit().count()) + " ms for " + std::to_string(expected) +
                             " bodies to run at once; only " + here + " arrived, " +
                             std::to_string(expected - static_cast<int>(arrived_.size())) + " never did");
  }
}

namespace {

// "work[1]" for a replica of a replicated node, "work" otherwise.
std::string replica_name(const NodeContext& c) {
  return c.replicas > 1 ? c.name + "[" + std::to_string(c.replica) + "]" : c.name;
}

template <class A, class V>
void raise_max(A& max, V value) {
  auto seen = max.load();
  while (value > seen && !max.compare_exchange_weak(seen, value)) {
  }
}

// Simulated work, stretched under sanitizers so that it still outweighs the
// runtime's own (instrumented) cost as it does in a normal build.
void sleep_us(int64_t us) {
  const auto stretched = static_cast<int64_t>(static_cast<double>(us) * dflow::testing::time_scale());
  if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(stretched));
}

// Counts a body as running for its whole call (checked after run() returns).
struct Running {
  explicit Running(Probe& p) : probe(p) { raise_max(probe.max_running, ++probe.running); }
  ~Running() { --probe.running; }
  Probe& probe;
};

// Counts a body as holding the exclusive token for its whole call.
struct Holding {
  explicit Holding(Probe& p) : probe(p) {
    raise_max(probe.max_holders, ++probe.holders);
    ++probe.holds;
  }
  ~Holding() { --probe.holders; }
  Probe& probe;
};

Probe& probe_of(NodeContext& c) { return *c.user_as<Probe*>(); }

class Count final : public SourceBody {
 public:
  explicit Count(NodeContext& c) : probe_(probe_of(c)), name_(c.name) {
    c.params.read("count", count_).read("cost", cost_).read("delay_us", delay_us_).read("first_seq", next_);
    c.params.read("gated", gated_);
    count_ += next_;
  }
  bool next(Emitter& out) override {
    if (next_ >= count_) return false;
    Running running(probe_);
    if (gated_) probe_.gate.wait("source '" + name_ + "'");
    sleep_us(delay_us_);
    out.emit(make_message(next_, cost_, next_));
    ++probe_.emitted;
    return ++next_ < count_;
  }

 private:
  Probe& probe_;
  std::string name_;
  uint64_t count_ = 0, cost_ = 1, next_ = 0;
  int64_t delay_us_ = 0;
  bool gated_ = false;
};

class Work final : public FunctionBody {
 public:
  explicit Work(NodeContext& c) : probe_(probe_of(c)), name_(c.name), replica_(c.replica), who_(replica_name(c)) {
    c.params.read("delay_us", delay_us_).read("random_delay_us", random_delay_us_).read("random_share", random_share_);
    c.params.read("seed", seed_).read("fail_at", fail_at_).read("silent_at", silent_at_).read("meet", meet_);
    bool fail_to_build = false;
    c.params.read("fail_to_build", fail_to_build);
    if (fail_to_build) throw std::runtime_error("cannot build (fail_to_build)");
  }
  void process(Inputs& in, Emitter& out) override {
    Running running(probe_);
    {
      std::lock_guard lock(probe_.mutex);
      auto& calls = probe_.calls[name_];
      calls.resize(std::max<size_t>(calls.size(), replica_ + 1));
      ++calls[replica_];
    }
    if (meet_ > 0 && !met_) probe_.rendezvous.arrive(who_, meet_);
    met_ = true;
    Message& m = in[0];
    if (static_cast<int64_t>(m.seq) == fail_at_) throw std::runtime_error("test failure at seq " + std::to_string(m.seq));
    sleep_us(delay_us_);
    // A seeded, seq-dependent subset gets a random extra delay.
    uint64_t h = (m.seq + seed_) * 0x9E3779B97F4A7C15ull;
    if (random_delay_us_ > 0 && static_cast<double>((h >> 33) % 1000) < random_share_ * 1000)
      sleep_us(static_cast<int64_t>((h >> 13) % static_cast<uint64_t>(random_delay_us_)));
    if (static_cast<int64_t>(m.seq) == silent_at_) return;
    out.emit(std::move(m));
  }

 private:
  Probe& probe_;
  std::string name_;
  int replica_;
  std::string who_;
  int64_t delay_us_ = 0, random_delay_us_ = 0, fail_at_ = -1, silent_at_ = -1;
  double random_share_ = 0;
  uint64_t seed_ = 1;
  int meet_ = 0;  // > 0: the first call waits until that many bodies have arrived
  bool met_ = false;
};

class Sink final : public FunctionBody {
 public:
  explicit Sink(NodeContext& c) : probe_(probe_of(c)), name_(c.name) { c.params.read("delay_us", delay_us_).read("gated", gated_); }
  void process(Inputs& in, Emitter&) override {
    Running running(probe_);
    raise_max(probe_.max_in_flight, probe_.emitted.load() - ++probe_.consumed);
    if (gated_) probe_.gate.wait("sink '" + name_ + "'");  // holds the item it took
    {
      std::lock_guard lock(probe_.mutex);
      probe_.sink_seqs.push_back(in[0].seq);
    }
    (void)payload<uint64_t>(in[0]);
    sleep_us(delay_us_);
  }

 private:
  Probe& probe_;
  std::string name_;
  int64_t delay_us_ = 0;
  bool gated_ = false;
};

// Needs one message on each of `a` and `b`; sleeps after taking them.
class Pair final : public FunctionBody {
 public:
  explicit Pair(NodeContext& c) : probe_(probe_of(c)) { c.params.read("delay_us", delay_us_); }
  void process(Inputs& in, Emitter&) override {
    Running running(probe_);
    ++probe_.consumed;
    if (payload<uint64_t>(in.at("a")) != payload<uint64_t>(in.at("b"))) throw std::runtime_error("pair out of step");
    sleep_us(delay_us_);
  }

 private:
  Probe& probe_;
  int64_t delay_us_ = 0;
};

class Route final : public RouterBody {
 public:
  explicit Route(NodeContext& c) { c.params.read("policy", policy_); }
  size_t choose(const Message&, std::span<const uint64_t> cost) override {
    if (policy_ == "round_robin") return next_++ % cost.size();
    size_t best = 0;
    for (size_t r = 1; r < cost.size(); ++r)
      if (cost[r] < cost[best]) best = r;
    return best;
  }

 private:
  std::string policy_ = "least_loaded";
  size_t next_ = 0;
};

// Token holders: each call owns the token for its whole duration.
class Hold final : public FunctionBody {
 public:
  Hold(NodeContext& c, std::string kind) : probe_(probe_of(c)), kind_(std::move(kind)), who_(replica_name(c)) {
    c.params.read("delay_us", delay_us_).read("every", every_).read("meet", meet_);
  }
  void process(Inputs& in, Emitter& out) override {
    Running running(probe_);
    Holding holding(probe_);
    if (meet_ > 0 && !met_) probe_.rendezvous.arrive(who_, meet_);
    met_ = true;
    sleep_us(delay_us_);
    if (kind_ == "hold") {
      out.emit("out", std::move(in.at("in")));
      out.emit("token", std::move(in.at("token")));
    } else if (kind_ == "drafter") {
      out.emit(std::move(in.at("batch")));  // the data now carries the token
    } else if (kind_ == "accumulate") {
      Message m = std::move(in[0]);
      if (++seen_ % every_ == 0)
        out.emit("step", std::move(m));
      else
        out.emit("token", make_message(m.seq, 0, Token{}));
    } else {  // optimizer
      out.emit("token", make_message(in[0].seq, 0, Token{}));
      out.emit("record", std::move(in[0]));
    }
  }

 private:
  Probe& probe_;
  std::string kind_;
  std::string who_;
  int64_t delay_us_ = 0, every_ = 2, seen_ = 0;
  int meet_ = 0;  // as test.work's
  bool met_ = false;
};

void read_keys(config::YamlSection& p, std::initializer_list<const char*> keys) {
  for (const char* k : keys) p.raw(k);
}

}  // namespace

NodeRegistry test_registry() {
  NodeRegistry r;
  register_graph_nodes(r);
  PortSpec number{.name = "in", .type = "Number"};
  auto port = [](std::string name, std::string type) { return PortSpec{.name = std::move(name), .type = std::move(type)}; };
  r.add({.type = "test.count", .description = "counts 0..count-1", .kind = NodeKind::source, .inputs = {},
         .outputs = {port("out", "Number")},
         .check_params = [](auto& p) { read_keys(p, {"count", "cost", "delay_us", "first_seq", "gated"}); },
         .make = [](NodeContext& c) { return std::make_unique<Count>(c); }});
  r.add({.type = "test.work", .description = "delays, fails or stays silent on request", .kind = NodeKind::function,
         .inputs = {number}, .outputs = {port("out", "Number")},
         .check_params = [](auto& p) { read_keys(p, {"delay_us", "random_delay_us", "random_share", "seed", "fail_at", "silent_at", "fail_to_build", "meet"}); },
         .make = [](NodeContext& c) { return std::make_unique<Work>(c); }});
  r.add({.type = "test.sink", .description = "records seqs", .kind = NodeKind::function, .inputs = {number}, .outputs = {},
         .check_params = [](auto& p) { read_keys(p, {"delay_us", "gated"}); },
         .make = [](NodeContext& c) { return std::make_unique<Sink>(c); }});
  r.add({.type = "test.pair", .description = "takes one from a and one from b", .kind = NodeKind::function,
         .inputs = {port("a", "Number"), port("b", "Number")}, .outputs = {},
         .check_params = [](auto& p) { read_keys(p, {"delay_us"}); },
         .make = [](NodeContext& c) { return std::make_unique<Pair>(c); }});
  r.add({.type = "test.route", .description = "least loaded or round robin", .kind = NodeKind::router, .inputs = {number},
         .outputs = {PortSpec{.name = "out", .type = "Number", .routed = true}},
         .check_params = [](auto& p) { read_keys(p, {"policy"}); },
         .make = [](NodeContext& c) { return std::make_unique<Route>(c); }});
  std::vector<PortSpec> wide_outputs;
  for (char digit = '0'; digit <= '9'; ++digit) wide_outputs.push_back({.name = {'o', digit}, .type = "Number", .optional = true});
  r.add({.type = "test.wide", .description = "ten optional outputs", .kind = NodeKind::function, .inputs = {number},
         .outputs = wide_outputs, .check_params = {}, .make = [](NodeContext& c) { return std::make_unique<Work>(c); }});
  auto hold = [&](std::string type, std::vector<PortSpec> in, std::vector<PortSpec> out) {
    std::string kind = type.substr(5);
    r.add({.type = type, .description = "holds the token while it runs", .kind = NodeKind::function, .inputs = std::move(in),
           .outputs = std::move(out), .check_params = [](auto& p) { read_keys(p, {"delay_us", "every", "meet"}); },
           .make = [kind](NodeContext& c) { return std::make_unique<Hold>(c, kind); }});
  };
  hold("test.hold", {number, port("token", "Token")}, {port("out", "Number"), port("token", "Token")});
  hold("test.drafter", {port("batch", "Number"), port("token", "Token")}, {port("out", "Number")});
  hold("test.accumulate", {number}, {port("token", "Token"), port("step", "Number")});
  hold("test.optimizer", {number}, {port("token", "Token"), port("record", "Number")});
  return r;
}

config::PipelineConfig pipeline_from_yaml(const std::string& yaml, const std::string& file) {
  auto origins = std::make_shared<config::Origins>();
  origins->file = file;
  config::YamlSection root(YAML::Load(yaml), "", origins);
  return config::parse_pipeline(root.section("pipeline"));
}

std::unique_ptr<Pipeline> build(const std::string& yaml, Probe& probe, int threads) {
  static const NodeRegistry registry = test_registry();
  return build_pipeline(pipeline_from_yaml(yaml), registry, {.threads = threads, .user_context = &probe});
}

std::string describe_error(const std::string& yaml) {
  static const NodeRegistry registry = test_registry();
  try {
    describe(pipeline_from_yaml(yaml), registry);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace dflow::graph::testing
