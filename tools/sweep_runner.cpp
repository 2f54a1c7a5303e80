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
#include "train/demo.hpp"

namespace dflow::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::atomic<int> g_stop_signal{0};
extern "C" void remember_stop(int signal) { g_stop_signal = signal; }

fs::path state_file(const fs::path& out_dir) { return out_dir / "sweep.json"; }

json definition_of(const SweepOptions& o) {
  json vary = json::array();
  for (const auto& a : o.axes) {
    std::string values;
    for (size_t i = 0; i < a.values.size(); ++i) {
      values += (values.empty() ? "" : ",") + a.values[i];
      if (!a.sets.empty())
        for (const auto& kv : a.sets[i]) values += " " + kv;
    }
    vary.push_back(a.key + "=" + values);
  }
  return {{"config", o.config_file.empty() ? "<default>" : o.config_file}, {"set", o.overrides}, {"vary", vary},
          {"seeds", o.seeds}};
}

json read_state(const fs::path& out_dir) {
  std::ifstream in(state_file(out_dir));
  if (!in) return json::object();
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw ConfigError(state_file(out_dir).string() + ": not a sweep state file (" + e.what() + "): choose another --out");
  }
}

void write_state(const fs::path& out_dir, const json& state) {
  const fs::path tmp = state_file(out_dir).string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << state.dump(2) << "\n";
    if (!out) throw std::runtime_error("cannot write " + tmp.string());
  }
  fs::rename(tmp, state_file(out_dir));
}

// The definition's first difference, as a person would say it.
std::string definition_difference(const json& saved, const json& now) {
  for (const char* key : {"config", "set", "vary", "seeds"})
    if (saved.value(key, json()) != now.value(key, json()))
      return std::string(key) + " was " + saved.value(key, json()).dump() + ", now " + now.value(key, json()).dump();
  return {};
}

struct Running {
  pid_t pid = -1;
  size_t variant = 0;
  std::chrono::steady_clock::time_point started;
};

pid_t spawn_train(const std::vector<std::string>& args, const fs::path& log_file) {
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("dflow sweep: fork failed");
  if (pid > 0) return pid;
  const int fd = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) ::dup2(fd, 1), ::dup2(fd, 2), ::close(fd);
  std::vector<char*> argv;
  static std::string self = "/proc/self/exe";
  argv.push_back(self.data());
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  std::perror("dflow sweep: exec");
  ::_exit(127);
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

// The `dflow train` arguments of one variant.
std::vector<std::string> train_args(const SweepOptions& o, const config::SweepVariant& v, const config::Config& config,
                                    const fs::path& run_dir) {
  std::vector<std::string> args{"train"};
  if (!o.config_file.empty()) args.push_back(o.config_file);
  auto set = [&](const std::string& kv) { args.insert(args.end(), {"--set", kv}); };
  for (const auto& s : o.overrides) set(s);
  for (const auto& s : v.overrides) set(s);
  set("run.out_dir=" + run_dir.string());
  set("run.name=" + v.name);
  if (o.parallel > 1) {
    // The machine's threads divided between the runs at a time.
    const int cores = std::max(1u, std::thread::hardware_concurrency());
    const int each = std::max(1, cores / o.parallel);
    set("run.threads=" + std::to_string(each));
    set("run.torch_threads=" + std::to_string(std::min(config.run.torch_threads, each)));
  }
  if (!o.log_level.empty()) args.insert(args.end(), {"--log-level", o.log_level});
  if (fs::exists(run_dir / "checkpoints" / "latest")) args.insert(args.end(), {"--resume", "latest"});
  else if (fs::exists(run_dir)) args.push_back("--overwrite");  // died before its first checkpoint: start it again
  return args;
}

}  // namespace

bool write_sweep_comparison(const fs::path& out_dir, const report::CompareOptions& options, bool print) {
  std::vector<fs::path> runs;
  const json state = read_state(out_dir);
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

int run_sweep(const SweepOptions& o) {
  const auto variants = config::sweep_variants(
      o.axes, o.seeds, config::load_config(o.config_file, o.overrides).run.seed);
  // Every variant's config, checked before anything runs.
  std::vector<config::Config> configs;
  for (const auto& v : variants) {
    std::vector<std::string> sets = o.overrides;
    sets.insert(sets.end(), v.overrides.begin(), v.overrides.end());
    sets.push_back("run.out_dir=" + (o.out_dir / v.name).string());
    try {
      configs.push_back(config::load_config(o.config_file, sets));
      (void)graph::describe(configs.back().pipeline, nodes::default_registry());
    } catch (const ConfigError& e) {
      throw ConfigError("sweep variant " + v.name + ": " + e.what());
    }
  }
  fs::create_directories(o.out_dir / "logs");
  json state = read_state(o.out_dir);
  const json definition = definition_of(o);
  if (state.contains("definition") && state["definition"] != definition)
    throw ConfigError(o.out_dir.string() + " holds another sweep (" + definition_difference(state["definition"], definition) +
                      "): rerun it as it was, or choose another --out");
  state["definition"] = definition;
  state["order"] = json::array();
  for (const auto& v : variants) state["order"].push_back(v.name);
  if (!state.contains("variants")) state["variants"] = json::object();
  write_state(o.out_dir, state);
  if (o.config_file.empty()) train::ensure_demo_assets(configs.front());  // once, before runs that share them

  std::vector<size_t> pending;
  for (size_t i = 0; i < variants.size(); ++i) {
    if (state["variants"].value(variants[i].name, json::object()).value("status", "") == "done") {
      std::cout << "[sweep] " << variants[i].name << ": finished earlier, skipped\n";
      continue;
    }
    pending.push_back(i);
  }
  std::cout << "[sweep] " << variants.size() << " variants (" << pending.size() << " to run, " << o.parallel
            << " at a time) in " << o.out_dir.string() << "\n" << std::flush;

  struct sigaction action {};
  action.sa_handler = remember_stop;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  std::vector<Running> running;
  std::vector<std::string> failed;
  size_t next = 0, finished = variants.size() - pending.size();
  bool stopping = false;
  while (next < pending.size() || !running.empty()) {
    if (const int s = g_stop_signal.exchange(0); s && !stopping) {
      stopping = true;
      std::cout << "[sweep] stopping: the running variants are stopped (each resumes from its latest checkpoint "
                   "when the same command runs again)\n" << std::flush;
      for (const auto& r : running) ::kill(r.pid, s);
    }
    while (!stopping && next < pending.size() && static_cast<int>(running.size()) < o.parallel) {
      const size_t i = pending[next++];
      const fs::path run_dir = o.out_dir / variants[i].name;
      const auto args = train_args(o, variants[i], configs[i], run_dir);
      const bool resumed = std::find(args.begin(), args.end(), "--resume") != args.end();
      const fs::path log_file = o.out_dir / "logs" / (variants[i].name + ".log");
      running.push_back({spawn_train(args, log_file), i, std::chrono::steady_clock::now()});
      state["variants"][variants[i].name] = {{"status", "running"}};
      write_state(o.out_dir, state);
      std::cout << "[sweep] start " << variants[i].name << (resumed ? " (resumes from its latest checkpoint)" : "")
                << ": log " << log_file.string() << "\n" << std::flush;
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    auto it = std::find_if(running.begin(), running.end(), [&](const Running& r) { return r.pid == pid; });
    if (it == running.end()) continue;
    const auto& v = variants[it->variant];
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - it->started).count();
    const fs::path log_file = o.out_dir / "logs" / (v.name + ".log");
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    const bool interrupted = stopping && !ok;
    state["variants"][v.name] = {{"status", ok ? "done" : interrupted ? "interrupted" : "failed"},
                                 {"exit", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)},
                                 {"seconds", seconds}};
    write_state(o.out_dir, state);
    running.erase(it);
    if (ok) {
      ++finished;
      std::cout << "[sweep] done " << finished << "/" << variants.size() << " " << v.name << " in " << seconds_text(seconds)
                << ": " << outcome_text(o.out_dir / v.name, o.compare) << "\n" << std::flush;
    } else if (interrupted) {
      std::cout << "[sweep] stopped " << v.name << "\n" << std::flush;
    } else {
      failed.push_back(v.name + " (" + last_error_line(log_file) + "; log " + log_file.string() + ")");
      std::cout << "[sweep] FAILED " << v.name << ": see " << log_file.string() << "\n" << std::flush;
    }
    write_sweep_comparison(o.out_dir, o.compare, false);  // current while the sweep runs
  }
  std::cout << "\n";
  const bool compared = write_sweep_comparison(o.out_dir, o.compare, true);
  if (compared)
    std::cout << "\n[sweep] comparison: " << (o.out_dir / "compare.html").string() << " and compare.txt\n";
  if (stopping) {
    std::cout << "[sweep] stopped; run the same command again to resume\n";
    return 130;
  }
  if (!failed.empty()) {
    std::string list;
    for (const auto& f : failed) list += (list.empty() ? " " : "; ") + f;
    throw std::runtime_error(std::to_string(failed.size()) + " of " + std::to_string(variants.size()) +
                             " sweep variants failed (a rerun of the same command retries them):" + list);
  }
  return 0;
}

}  // namespace dflow::cli
