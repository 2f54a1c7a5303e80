#include "train/distributed.hpp"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "config/log.hpp"
#include "train/c10d_backends.hpp"

namespace dflow::train {

namespace {

constexpr auto kHeartbeatInterval = std::chrono::milliseconds(250);
constexpr auto kLivenessWindow = std::chrono::milliseconds(1500);  // no heartbeat for this long: lost

std::string message_of(const std::exception& e) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

bool is_loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0; }

std::string text_of(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }

}  // namespace

Distributed::Distributed(const LaunchEnv& env, const DistributedOptions& options) : env_(env), options_(options) {
  const std::string where = env_.master_addr + ":" + std::to_string(env_.master_port);
  c10::intrusive_ptr<c10d::Store> tcp;
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(env_.master_port);
    store_options.isServer = env_.rank == 0 && !env_.agent_store;
    store_options.numWorkers = env_.agent_store ? std::nullopt : std::optional<size_t>(env_.world_size);
    store_options.waitWorkers = !env_.agent_store;
    store_options.timeout = options_.timeout;
    tcp = c10::make_intrusive<c10d::TCPStore>(env_.master_addr, store_options);
    hb_store_ = tcp->clone();
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(env_.rank) + " of " + std::to_string(env_.world_size) +
                             ": rendezvous at MASTER_ADDR:MASTER_PORT " + where + " failed within " +
                             std::to_string(options_.timeout.count() / 1000) + " s (distributed.timeout_s): " +
                             message_of(e));
  }
  const std::string attempt = "dflow/attempt-" + std::to_string(env_.restart_count) + "/";
  store_ = c10::make_intrusive<c10d::PrefixStore>(attempt, tcp);
  hb_store_ = c10::make_intrusive<c10d::PrefixStore>(attempt, hb_store_);
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
  try {
    const std::string host = is_loopback(env_.master_addr) ? "127.0.0.1" : "";
    auto gloo = [&](const std::string& name) {
      return make_gloo_backend(c10::make_intrusive<c10d::PrefixStore>(name + "/", store_), env_.rank, env_.world_size,
                               options_.timeout, host);
    };
    const bool on_cuda = options_.device.is_cuda();
    backend_name_ = options_.backend == "auto" ? (on_cuda ? "nccl" : "gloo") : options_.backend;
    if (backend_name_ == "nccl" && !on_cuda)
      throw std::runtime_error("distributed.backend is nccl but devices.drafter is " + options_.device.str() +
                               ": NCCL reduces GPU tensors; use gloo (or auto) for a CPU drafter");
    try {
      host_ = gloo("host");
      control_ = gloo("control");
      gradients_ = backend_name_ == "nccl" ? make_nccl_backend(c10::make_intrusive<c10d::PrefixStore>("gradients/", store_),
                                                               env_.rank, env_.world_size, options_.timeout)
                                           : host_;
    } catch (const std::exception& e) {
      fail("connecting the " + backend_name_ + " process groups", message_of(e), kTraining);
    }
    log::info("dist", log::str("rank ", env_.rank, " of ", env_.world_size, " (local rank ", env_.local_rank, ") joined ",
                               where, "; gradients over ", backend_name_, ", timeout ", options_.timeout.count() / 1000,
                               " s"));
  } catch (...) {
    // A constructor that throws runs no destructor: stop the thread here.
    {
      std::lock_guard lock(heartbeat_mutex_);
      stopping_ = true;
    }
    heartbeat_cv_.notify_all();
    heartbeat_.join();
    throw;
  }
}

Distributed::~Distributed() {
  {
    std::lock_guard lock(heartbeat_mutex_);
    stopping_ = true;
  }
  heartbeat_cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
}

std::string Distributed::key(const std::string& name, int rank) const { return name + "/" + std::to_string(rank); }

void Distributed::heartbeat_loop() {
  std::unique_lock lock(heartbeat_mutex_);
  while (!stopping_) {
    // "<training count>\n<control count>\n<training what>\n<control what>"
    std::string arrivals;
    if (arrivals_changed_) {
      for (const auto& a : arrivals_) arrivals += std::to_string(a.count) + "\n";
      for (const auto& a : arrivals_) arrivals += a.what + "\n";
      arrivals_changed_ = false;
    }
    lock.unlock();
    try {
      hb_store_->add(key("heartbeat", env_.rank), 1);
      if (!arrivals.empty()) hb_store_->set(key("arrived", env_.rank), arrivals);
    } catch (const std::exception&) {
      return;  // the store is gone (rank 0 ended or died); a collective will say so
    }
    lock.lock();
    heartbeat_cv_.wait_for(lock, kHeartbeatInterval, [this] { return stopping_; });
  }
}

void Distributed::arrive(Sequence sequence, const std::string& what) {
  std::lock_guard lock(heartbeat_mutex_);
  auto& arrival = arrivals_[sequence];
  arrival.count += 1;
  arrival.what = what;
  std::replace(arrival.what.begin(), arrival.what.end(), '\n', ' ');
  arrivals_changed_ = true;  // published with the next heartbeat
}

void Distributed::wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what, Sequence sequence) {
  try {
    work->wait(options_.timeout);
  } catch (const std::exception& e) {
    fail(what, message_of(e), sequence);
  }
}

void Distributed::fail(const std::string& what, const std::string& cause, Sequence sequence) {
  std::string first_line = cause.substr(0, cause.find('\n'));
  throw std::runtime_error("rank " + std::to_string(env_.rank) + ": " + what + " failed: " + diagnose(sequence) + " (" +
                           first_line + ")");
}

// Every rank is alive: those that never entered the collective this rank
// waits in (by their published count of the same sequence) held it up.
std::string Distributed::stragglers(Sequence sequence) {
  Arrival mine;
  {
    std::lock_guard lock(heartbeat_mutex_);
    mine = arrivals_[sequence];
  }
  std::string named;
  for (int r = 0; r < env_.world_size; ++r) {
    if (r == env_.rank) continue;
    Arrival theirs;
    if (hb_store_->check({key("arrived", r)})) {
      std::istringstream lines(text_of(hb_store_->get(key("arrived", r))));
      std::string count[2], what[2];
      for (auto& line : count) std::getline(lines, line);
      for (auto& line : what) std::getline(lines, line);
      theirs.count = std::atoll(count[sequence].c_str());
      theirs.what = what[sequence];
    }
    if (theirs.count >= mine.count) continue;
    named += std::string(named.empty() ? "" : "; ") + "rank " + std::to_string(r) + " is alive but never reached it (" +
             (theirs.count == 0 ? "no collective yet" : "its last collective: " + theirs.what) + ")";
  }
  if (named.empty()) return "";
  return named + ": stuck, or slower than distributed.timeout_s " + std::to_string(options_.timeout.count() / 1000) +
         " s";
}

// Who is gone: a rank that left a reason, else one whose heartbeat stopped;
// the store itself unreachable means rank 0 (which serves it) is gone.
std::string Distributed::diagnose(Sequence sequence) {
  auto read_counts = [&] {
    std::vector<int64_t> counts(env_.world_size, 0);
    for (int r = 0; r < env_.world_size; ++r) counts[r] = hb_store_->add(key("heartbeat", r), 0);
    return counts;
  };
  try {
    auto failed_reason = [&](int r) -> std::string {
      return hb_store_->check({key("failed", r)}) ? text_of(hb_store_->get(key("failed", r))) : "";
    };
    auto before = read_counts();
    std::vector<std::string> named;
    const auto deadline = std::chrono::steady_clock::now() + kLivenessWindow;
    while (std::chrono::steady_clock::now() < deadline) {
      for (int r = 0; r < env_.world_size; ++r)
        if (r != env_.rank)
          if (auto reason = failed_reason(r); !reason.empty()) return "rank " + std::to_string(r) + " failed: " + reason;
      std::this_thread::sleep_for(kHeartbeatInterval);
    }
    auto after = read_counts();
    for (int r = 0; r < env_.world_size; ++r)
      if (r != env_.rank && after[r] == before[r] && !hb_store_->check({key("done", r)})) named.push_back(std::to_string(r));
    if (named.empty()) {
      if (auto behind = stragglers(sequence); !behind.empty()) return behind;
      return "every rank is alive and entered it, so the collective itself did not complete within "
             "distributed.timeout_s " + std::to_string(options_.timeout.count() / 1000) + " s";
    }
    std::string list;
    for (const auto& r : named) list += (list.empty() ? "" : ", ") + r;
    return "lost rank " + list + " (no heartbeat for " + std::to_string(kLivenessWindow.count() / 1000.0).substr(0, 3) +
           " s: the process died or is stopped, or its machine is unreachable)";
  } catch (const std::exception&) {
    if (env_.agent_store) return "the rendezvous store at MASTER_ADDR:MASTER_PORT is unreachable (torchrun's agent ended)";
    return "lost rank 0 (it serves the rendezvous store at MASTER_ADDR:MASTER_PORT " + env_.master_addr + ":" +
           std::to_string(env_.master_port) + ", which is unreachable)";
  }
}

void Distributed::mark_failed(const std::string& reason) noexcept {
  try {
    hb_store_->set(key("failed", env_.rank), reason.substr(0, 2000));
  } catch (...) {
  }
}

void Distributed::mark_done() noexcept {
  try {
    hb_store_->set(key("done", env_.rank), std::string("1"));
  } catch (...) {
  }
}

void Distributed::allreduce_gradients(const std::vector<torch::Tensor>& parameters, const std::string& what) {
  torch::NoGradGuard no_grad;
  // A gradient no rank has stays undefined, as with one rank (AdamW skips it);
  // one that only some ranks have counts as zeros on the others.
  std::vector<double> defined(parameters.size(), 0.0);
  for (size_t i = 0; i < parameters.size(); ++i) defined[i] = parameters[i].grad().defined() ? 1.0 : 0.0;
  allreduce_sum(defined, what);
  // Buckets of consecutive parameters (same dtype and device), flattened.
  std::vector<std::vector<torch::Tensor>> buckets;
  int64_t bucket_bytes = 0;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (defined[i] == 0) continue;
    const auto& p = parameters[i];
    auto& grad = p.mutable_grad();
    if (!grad.defined()) grad = torch::zeros_like(p);
    const int64_t bytes = grad.numel() * grad.element_size();
    const bool fits = !buckets.empty() && bucket_bytes + bytes <= options_.bucket_bytes &&
                      buckets.back().front().scalar_type() == grad.scalar_type() &&
                      buckets.back().front().device() == grad.device();
    if (!fits) buckets.emplace_back(), bucket_bytes = 0;
    buckets.back().push_back(grad);
    bucket_bytes += bytes;
  }
  // Every bucket is in flight at once; each is copied back once it is summed.
  arrive(kTraining, what);
  std::vector<torch::Tensor> flats;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (const auto& bucket : buckets) {
    std::vector<torch::Tensor> views;
    for (const auto& g : bucket) views.push_back(g.reshape({-1}));
    std::vector<torch::Tensor> flat{torch::cat(views)};
    works.push_back(gradients_->allreduce(flat));
    flats.push_back(flat.front());
  }
  for (size_t b = 0; b < buckets.size(); ++b) {
    wait(works[b], what, kTraining);
    int64_t offset = 0;
    for (auto& g : buckets[b]) {
      g.copy_(flats[b].narrow(0, offset, g.numel()).view_as(g));
      offset += g.numel();
    }
  }
}

void Distributed::allreduce_sum(std::vector<double>& values, const std::string& what) {
  std::vector<torch::Tensor> tensors{torch::tensor(values, torch::kFloat64)};
  arrive(kTraining, what);
  wait(host_->allreduce(tensors), what, kTraining);
  auto summed = tensors.front().contiguous();
  std::copy(summed.data_ptr<double>(), summed.data_ptr<double>() + summed.numel(), values.begin());
}

bool Distributed::all_agree(bool ok, const std::string& what) {
  std::vector<torch::Tensor> tensors{torch::tensor({ok ? int64_t{1} : int64_t{0}})};
  c10d::AllreduceOptions min_options;
  min_options.reduceOp = c10d::ReduceOp::MIN;
  arrive(kControl, what);
  wait(control_->allreduce(tensors, min_options), what, kControl);
  return tensors.front().item<int64_t>() == 1;
}

void Distributed::broadcast(const std::vector<torch::Tensor>& tensors, const std::string& what) {
  torch::NoGradGuard no_grad;
  arrive(kTraining, what);
  for (const auto& t : tensors) {
    std::vector<torch::Tensor> one{t.is_contiguous() ? t : t.contiguous()};
    wait(gradients_->broadcast(one), what, kTraining);
    if (!t.is_contiguous()) t.copy_(one.front());
  }
}

void Distributed::require_same(uint64_t value, const std::string& what) {
  // One float64 slot per rank: a gather by summing (exact for 52-bit values).
  std::vector<double> slots(env_.world_size, 0.0);
  slots[env_.rank] = static_cast<double>(value >> 12);
  allreduce_sum(slots, what);
  std::string differing;
  for (int r = 0; r < env_.world_size; ++r)
    if (slots[r] != slots[0]) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  if (!differing.empty())
    throw std::runtime_error("rank " + std::to_string(env_.rank) + ": " + what + " differs between rank 0 and rank(s) " +
                             differing + "; every rank must run the same config on the same data");
}

void Distributed::barrier(const std::string& what) {
  std::vector<double> one{1.0};
  allreduce_sum(one, what);
}

}  // namespace dflow::train
