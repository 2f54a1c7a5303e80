#include "tools/sweep_runner.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "config/log.hpp"
#include "graph/description.hpp"
#include "nodes/registry.hpp"
#include "report/command.hpp"
#include "report/compare_render.hpp"
#include "tools/exec_self.hpp"
#include "tools/sweep_state.hpp"
#include "train/demo.hpp"

namespace dflow::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::atomic<int> g_stop_signal{0};
extern "C" void remember_stop(int signal) { g_stop_signal = signal; }

struct Running {
  pid_t pid = -1;
  size_t variant = 0;
  std::chrono::steady_clock::time_point started;
};

pid_t spawn_train(const std::vector<std::string>& args, const fs::path& log_file) {
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("dflow sweep: fork failed");
  if (pid > 0) return pid;
  // Its own process group: a terminal's Ctrl-C reaches the sweep alone, which
  // stops the runs itself, so that no run ends from it unseen by the sweep.
  ::setpgid(0, 0);
  const int fd = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) ::dup2(fd, 1), ::dup2(fd, 2), ::close(fd);
  exec_self(args, "dflow sweep");
}

std::string last_error_line(const fs::path& log_file) {
  std::ifstream in(log_file);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find("error") != std::string::npos) last = line;
  return last.size() > 300 ? last.substr(0, 300) + "..." : last;
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, s >= 60 ? "%.0fm%02.0fs" : "%.1fs", s >= 60 ? std::floor(s / 60) : s, std::fmod(s, 60));
  return text;
}

std::string outcome_text(const fs::path& run_dir, const report::CompareOptions& options) {
  try {
    const auto run = report::read_run(run_dir, options);
    std::string out = "final loss " + report::format_number(run.final_loss);
    if (run.best_tau) out += ", best tau " + report::format_number(run.best_tau->tau, 3) + " at step " + std::to_string(run.best_tau->step);
    return out;
  } catch (const std::exception&) {
    return "no records";
  }
}

bool sets_key(const std::vector<std::string>& sets, const std::string& key) {
  return std::any_of(sets.begin(), sets.end(), [&](const std::string& kv) { return kv.substr(0, kv.find('=')) == key; });
}

// The --set overrides of one variant's run: the sweep's --set, the variant's
// own, where it writes and, with --parallel K, the machine's threads divided
// between the K runs at a time where neither --set nor the variant chose them.
std::vector<std::string> variant_sets(const SweepOptions& o, const config::SweepVariant& v) {
  std::vector<std::string> sets = o.overrides;
  sets.insert(sets.end(), v.overrides.begin(), v.overrides.end());
  sets.push_back("run.out_dir=" + (o.out_dir / v.name).string());
  sets.push_back("run.name=" + v.name);
  if (o.parallel > 1) {
    const bool threads_chosen = sets_key(sets, "run.threads"), torch_threads_chosen = sets_key(sets, "run.torch_threads");
    const int cores = std::max(1u, std::thread::hardware_concurrency());
    const int each = std::max(1, cores / o.parallel);
    if (!threads_chosen) sets.push_back("run.threads=" + std::to_string(each));
    if (!torch_threads_chosen) {
      const auto chosen = config::load_config(o.config_file, sets).run;  // the file's torch_threads, at most the run's threads
      sets.push_back("run.torch_threads=" + std::to_string(std::min(chosen.torch_threads, chosen.threads)));
    }
  }
  return sets;
}

// The `dflow train` arguments of one variant.
std::vector<std::string> train_args(const SweepOptions& o, const config::SweepVariant& v, const fs::path& run_dir) {
  std::vector<std::string> args{"train"};
  if (!o.config_file.empty()) args.push_back(o.config_file);
  for (const auto& kv : variant_sets(o, v)) args.insert(args.end(), {"--set", kv});
  if (!o.log_level.empty()) args.insert(args.end(), {"--log-level", o.log_level});
  if (fs::exists(run_dir / "checkpoints" / "latest")) args.insert(args.end(), {"--resume", "latest"});
  else if (fs::exists(run_dir)) args.push_back("--overwrite");  // died before its first checkpoint: start it again
  return args;
}

}  // namespace

namespace {
// A run whose records cannot be read (a crash in its first line, say) must
// not end the sweep of the others: the comparison waits for the next chance.
bool compare_or_warn(const SweepOptions& o, bool print) {
  try {
    return write_sweep_comparison(o.out_dir, o.compare, print);
  } catch (const std::exception& e) {
    std::cout << "[sweep] comparison not written: " << e.what() << "\n" << std::flush;
    return false;
  }
}
}  // namespace

bool write_sweep_comparison(const fs::path& out_dir, const report::CompareOptions& options, bool print) {
  std::vector<fs::path> runs;
  const json state = read_sweep_state(out_dir);
  for (const auto& name : state.value("order", json::array())) {
    const fs::path dir = out_dir / name.get<std::string>();
    if (fs::exists(dir / "metrics.jsonl")) runs.push_back(dir);
  }
  if (runs.size() < 2) return false;
  std::ostringstream table;
  report::compare_command(runs, out_dir / "compare.html", table, options);
  std::ofstream(out_dir / "compare.txt") << table.str();
  if (print) std::cout << table.str();
  return true;
}

namespace {

// The sweep keeps these in --out beside the variants' directories.
void refuse_reserved_names(const std::vector<config::SweepVariant>& variants) {
  for (const auto& v : variants)
    for (const char* own : {"logs", "sweep.json", "sweep.json.tmp", "compare.html", "compare.txt"})
      if (v.name == own)
        throw ConfigError("--variant " + v.name + ": the sweep writes its own " + std::string(own) +
                          " in --out: give the variant another name");
}

// Every variant's config, checked (config, node types and params) before anything runs.
std::vector<config::Config> checked_configs(const SweepOptions& o, const std::vector<config::SweepVariant>& variants) {
  std::vector<config::Config> configs;
  for (const auto& v : variants) {
    try {
      configs.push_back(config::load_config(o.config_file, variant_sets(o, v)));
      (void)graph::describe(configs.back().pipeline, nodes::default_registry());
    } catch (const ConfigError& e) {
      throw ConfigError("sweep variant " + v.name + ": " + e.what());
    }
  }
  return configs;
}

// The loop over the variants still to run: up to `parallel` processes, each
// outcome recorded in the state as it ends.
class SweepLoop {
 public:
  SweepLoop(const SweepOptions& o, std::vector<config::SweepVariant> variants, json state)
      : o_(o), variants_(std::move(variants)), state_(std::move(state)) {
    for (size_t i = 0; i < variants_.size(); ++i) {
      if (state_["variants"].value(variants_[i].name, json::object()).value("status", "") == "done") {
        std::cout << "[sweep] " << variants_[i].name << ": finished earlier, skipped\n";
        ++finished_;
      } else {
        pending_.push_back(i);
      }
    }
    std::cout << "[sweep] " << variants_.size() << " variants (" << pending_.size() << " to run, " << o_.parallel
              << " at a time) in " << o_.out_dir.string() << "\n" << std::flush;
  }

  void run() {
    while (next_ < pending_.size() || !running_.empty()) {
      take_stop_signal();
      while (!stopping_ && next_ < pending_.size() && static_cast<int>(running_.size()) < o_.parallel) start(pending_[next_++]);
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      // A stop that came while a run ended is taken before its outcome: the
      // run may have ended from that stop, and is then interrupted, not failed.
      take_stop_signal();
      if (pid > 0) ended(pid, status);
      else std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  bool stopped() const { return stopping_; }
  const std::vector<std::string>& failed() const { return failed_; }

 private:
  fs::path log_of(const config::SweepVariant& v) const { return o_.out_dir / "logs" / (v.name + ".log"); }

  void take_stop_signal() {
    if (const int s = g_stop_signal.exchange(0); s && !stopping_) stop(s);
  }

  void stop(int signal) {
    stopping_ = true;
    std::cout << "[sweep] stopping: the running variants are stopped (each resumes from its latest checkpoint "
                 "when the same command runs again)\n" << std::flush;
    // A hangup (the terminal closed) stops the runs as SIGTERM does: they are in process groups of their own.
    for (const auto& r : running_) ::kill(r.pid, signal == SIGHUP ? SIGTERM : signal);
  }

  void start(size_t i) {
    const auto& v = variants_[i];
    const auto args = train_args(o_, v, o_.out_dir / v.name);
    const bool resumed = std::find(args.begin(), args.end(), "--resume") != args.end();
    const pid_t pid = spawn_train(args, log_of(v));
    ::setpgid(pid, pid);  // also here: the group exists before any signal of the sweep's can be forwarded
    running_.push_back({pid, i, std::chrono::steady_clock::now()});
    state_["variants"][v.name] = {{"status", "running"}};
    write_sweep_state(o_.out_dir, state_);
    std::cout << "[sweep] start " << v.name << (resumed ? " (resumes from its latest checkpoint)" : "") << ": log "
              << log_of(v).string() << "\n" << std::flush;
  }

  void ended(pid_t pid, int status) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](const Running& r) { return r.pid == pid; });
    if (it == running_.end()) return;
    const auto& v = variants_[it->variant];
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - it->started).count();
    running_.erase(it);
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    const bool interrupted = stopping_ && !ok;
    state_["variants"][v.name] = {{"status", ok ? "done" : interrupted ? "interrupted" : "failed"},
                                  {"exit", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)},
                                  {"seconds", seconds}};
    write_sweep_state(o_.out_dir, state_);
    if (ok) {
      std::cout << "[sweep] done " << ++finished_ << "/" << variants_.size() << " " << v.name << " in " << seconds_text(seconds)
                << ": " << outcome_text(o_.out_dir / v.name, o_.compare) << "\n";
    } else if (interrupted) {
      std::cout << "[sweep] stopped " << v.name << "\n";
    } else {
      failed_.push_back(v.name + " (" + last_error_line(log_of(v)) + "; log " + log_of(v).string() + ")");
      std::cout << "[sweep] FAILED " << v.name << ": see " << log_of(v).string() << "\n";
    }
    std::cout << std::flush;
    compare_or_warn(o_, false);  // current while the sweep runs
  }

  const SweepOptions& o_;
  std::vector<config::SweepVariant> variants_;
  json state_;
  std::vector<size_t> pending_;  // indices into variants_, in grid order
  size_t next_ = 0, finished_ = 0;
  std::vector<Running> running_;
  std::vector<std::string> failed_;
  bool stopping_ = false;
};

}  // namespace

int run_sweep(const SweepOptions& o) {
  config::refuse_sweep_owned_sets(o.overrides);
  auto variants = config::sweep_variants(o.axes, o.seeds, config::load_config(o.config_file, o.overrides).run.seed);
  refuse_reserved_names(variants);
  auto configs = checked_configs(o, variants);
  json state = open_sweep_state(o, variants);
  if (o.config_file.empty()) {  // once, before the runs that share them
    std::cout << "[sweep] the demo's target, data and held-out prompts (made once when absent)\n" << std::flush;
    train::ensure_demo_assets(configs.front());
  }
  struct sigaction action {};
  action.sa_handler = remember_stop;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGHUP, &action, nullptr);
  const size_t count = variants.size();
  SweepLoop loop(o, std::move(variants), std::move(state));
  loop.run();
  std::cout << "\n";
  if (compare_or_warn(o, true))
    std::cout << "\n[sweep] comparison: " << (o.out_dir / "compare.html").string() << " and compare.txt\n";
  if (loop.stopped()) {
    std::cout << "[sweep] stopped; run the same command again to resume\n";
    return 130;
  }
  if (!loop.failed().empty()) {
    std::string list;
    for (const auto& f : loop.failed()) list += (list.empty() ? " " : "; ") + f;
    throw std::runtime_error(std::to_string(loop.failed().size()) + " of " + std::to_string(count) +
                             " sweep variants failed (a rerun of the same command retries them):" + list);
  }
  return 0;
}

}  // namespace dflow::cli
