// `dflow launch -n N CONFIG [train options]`: N `dflow train` processes (or,
// with --run cache-features, N `dflow cache-features`) on
// this machine with the launcher environment torchrun would set (RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, a free MASTER_PORT).
// Forwards SIGINT/SIGTERM to them; when one fails, the others get
// distributed.timeout_s to notice and exit, then are terminated; exits 1
// naming the rank that failed first and, when that rank's error names another
// as lost or stuck, that one as the cause (exit 2 when the first refused its
// config). A rank that is stopped (SIGSTOP: hung as far as the others can
// tell) is named as the cause when the others then fail, and is killed once
// they have (a stopped process notices nothing).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <thread>

#include "config/config.hpp"
#include "config/errors.hpp"
#include "graph/description.hpp"
#include "nodes/drafter_kind_choice.hpp"
#include "nodes/registry.hpp"
#include "tools/cli.hpp"
#include "tools/exec_self.hpp"
#include "train/launch_env.hpp"

namespace dflow::cli {

namespace {

std::atomic<int> g_forward_signal{0};
extern "C" void remember_signal(int signal) { g_forward_signal = signal; }

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + ::strsignal(WTERMSIG(status));
  return "ended";
}

struct Rank {
  pid_t pid = -1;
  bool running = true;
  int status = 0;
  bool stopped = false;  // by a signal, now
  int stop_signal = 0;   // the signal that stopped it last (0: never stopped)
  std::chrono::steady_clock::time_point stopped_at{};
  bool hung_killed = false;  // killed here for staying stopped too long
};

namespace fs = std::filesystem;

// Where a rank leaves its error line (main() writes it), so that the final
// line can say which rank the first failure blamed.
fs::path error_file(const fs::path& dir, int rank) { return dir / ("rank-" + std::to_string(rank) + ".error"); }

std::string read_error(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line.size() > 400 ? line.substr(0, 400) + "..." : line;
}

// The rank another rank's error names as lost, stuck or failed before it, or -1.
int rank_blamed_by(const std::string& error, int own_rank) {
  static const std::regex named("lost rank ([0-9]+)|rank ([0-9]+) is alive but never reached it|rank ([0-9]+) failed: ");
  for (auto it = std::sregex_iterator(error.begin(), error.end(), named); it != std::sregex_iterator(); ++it)
    for (size_t g = 1; g < it->size(); ++g)
      if ((*it)[g].matched && std::stoi((*it)[g].str()) != own_rank) return std::stoi((*it)[g].str());
  return -1;
}

pid_t spawn_rank(int rank, int world_size, int port, const std::vector<std::string>& args, const fs::path& errors) {
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("dflow launch: fork failed for rank " + std::to_string(rank));
  if (pid > 0) return pid;
  ::setenv("DFLOW_LAUNCH_ERROR_FILE", error_file(errors, rank).c_str(), 1);
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(world_size).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(world_size).c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  exec_self(args, "dflow launch");
}

int launch(int world_size, const std::vector<std::string>& train_args, double timeout_s) {
  const int port = train::free_loopback_port();
  struct sigaction action{};
  action.sa_handler = remember_signal;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  const fs::path errors = fs::temp_directory_path() / ("dflow-launch-" + std::to_string(::getpid()));
  fs::create_directories(errors);
  std::vector<Rank> ranks(world_size);
  for (int r = 0; r < world_size; ++r) ranks[r].pid = spawn_rank(r, world_size, port, train_args, errors);
  std::cerr << "[launch] " << world_size << " ranks on 127.0.0.1:" << port << "\n";

  using clock = std::chrono::steady_clock;
  int first_failed = -1;
  clock::time_point failed_at{};
  bool terminated = false, killed = false;
  std::string hung;  // "rank 1 hung (...); " for ranks stopped when the first failed
  auto signal_all = [&](int signal) {
    for (auto& r : ranks)
      if (r.running) {
        ::kill(r.pid, signal);
        if (r.stopped && signal != SIGKILL) ::kill(r.pid, SIGCONT);  // else the signal waits until it continues
      }
  };
  for (int running = world_size; running > 0;) {
    if (int s = g_forward_signal.exchange(0)) signal_all(s);
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED);
    if (pid > 0) {
      for (int r = 0; r < world_size; ++r) {
        if (ranks[r].pid != pid) continue;
        if (WIFSTOPPED(status)) {
          ranks[r].stopped = true, ranks[r].stop_signal = WSTOPSIG(status), ranks[r].stopped_at = clock::now();
          std::cerr << "[launch] rank " << r << " was stopped by signal SIG" << sigabbrev_np(WSTOPSIG(status))
                    << ": the others will fail after distributed.timeout_s (" << timeout_s << " s) unless it continues\n";
          continue;
        }
        if (WIFCONTINUED(status)) {
          ranks[r].stopped = false;
          continue;
        }
        ranks[r].running = false, ranks[r].stopped = false, ranks[r].status = status, --running;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && first_failed < 0) {
          first_failed = r, failed_at = clock::now();
          // A rank stopped at that moment is what the others waited for.
          for (int h = 0; h < world_size; ++h)
            if (ranks[h].running && ranks[h].stopped)
              hung += "rank " + std::to_string(h) + " hung (stopped by signal SIG" + sigabbrev_np(ranks[h].stop_signal) +
                      " " + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(failed_at - ranks[h].stopped_at).count()) +
                      " s before rank " + std::to_string(r) + " failed, and never continued; killed); ";
        }
      }
      continue;
    }
    // A stopped rank cannot notice that another failed: it goes at once.
    if (first_failed >= 0)
      for (auto& r : ranks)
        if (r.running && r.stopped) ::kill(r.pid, SIGKILL);
    // One stopped longer than the timeout (plus a margin) is hung: the others
    // may be unable to tell (rank 0 serves the rendezvous store, and a store
    // that never answers blocks them), so it is failed here.
    if (first_failed < 0)
      for (int h = 0; h < world_size; ++h) {
        auto& r = ranks[h];
        if (!r.running || !r.stopped || r.hung_killed ||
            std::chrono::duration<double>(clock::now() - r.stopped_at).count() <= timeout_s + 5)
          continue;
        hung += "rank " + std::to_string(h) + " hung (stopped by signal SIG" + sigabbrev_np(r.stop_signal) +
                " for more than distributed.timeout_s + 5 s; killed); ";
        std::cerr << "[launch] rank " << h << " has been stopped for more than distributed.timeout_s + 5 s: killing it\n";
        r.hung_killed = true;
        ::kill(r.pid, SIGKILL);
      }
    // After a failure, the others have the collective timeout to notice.
    const double since_failure = first_failed < 0 ? 0 : std::chrono::duration<double>(clock::now() - failed_at).count();
    if (first_failed >= 0 && !terminated && since_failure > timeout_s + 10) signal_all(SIGTERM), terminated = true;
    if (first_failed >= 0 && !killed && since_failure > timeout_s + 20) signal_all(SIGKILL), killed = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string error = first_failed < 0 ? "" : read_error(error_file(errors, first_failed));
  std::error_code ignored;
  fs::remove_all(errors, ignored);
  if (first_failed < 0) return 0;
  std::string others;
  for (int r = 0; r < world_size; ++r)
    if (r != first_failed) others += "; rank " + std::to_string(r) + " " + describe_status(ranks[r].status);
  // The first to exit is often the one that gave up waiting: its error says for whom.
  const int blamed = hung.empty() ? rank_blamed_by(error, first_failed) : -1;
  const std::string message = hung + (blamed >= 0 ? "rank " + std::to_string(blamed) + " held the run up: " : "") +
                              "rank " + std::to_string(first_failed) + " failed first: it " +
                              describe_status(ranks[first_failed].status) + (error.empty() ? "" : ": " + error) + others;
  const int status = ranks[first_failed].status;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 2) throw ConfigError(message);  // it refused the config or resume
  throw std::runtime_error(message);
}

}  // namespace

void add_launch_command(CLI::App& app, Common& common, Action& action) {
  auto* sub = app.add_subcommand(
      "launch", "run `dflow train` as N data-parallel ranks on this machine (as torchrun --nproc-per-node N would)");
  static int world_size = 2;
  static std::string file, resume;
  static bool overwrite = false;
  static std::string run = "train";
  sub->add_option("-n,--nproc", world_size, "number of ranks (processes)")->check(CLI::Range(1, 1024));
  sub->add_option("--run", run, "what each rank runs: train, or cache-features (each rank fills its share)")
      ->check(CLI::IsMember({"train", "cache-features"}))
      ->capture_default_str();
  sub->add_option("CONFIG", file, "YAML config file")->required()->check(CLI::ExistingFile);
  sub->add_option("--resume", resume, "continue from 'latest' or a checkpoint directory");
  sub->add_flag("--overwrite", overwrite, "start over in an out_dir that holds checkpoints (deletes them)");
  add_common_options(*sub, common);
  sub->callback([&action, &common] {
    action = [&common] {
      auto config = config::load_config(file, common.overrides);  // errors here, once, not N times
      (void)graph::describe(config.pipeline, nodes::default_registry());  // node params before any model loads
      (void)nodes::read_kind_config(config);                              // and the drafter kind's
      std::vector<std::string> args{run, file};
      for (const auto& o : common.overrides) args.insert(args.end(), {"--set", o});
      if (!common.log_level.empty()) args.insert(args.end(), {"--log-level", common.log_level});
      if (run == "cache-features" && (!resume.empty() || overwrite))
        throw ConfigError("launch --run cache-features: --resume and --overwrite are training options (a rerun of "
                          "cache-features continues by itself)");
      if (!resume.empty()) args.insert(args.end(), {"--resume", resume});
      if (overwrite) args.push_back("--overwrite");
      return launch(world_size, args, config.distributed.timeout_s);
    };
  });
}

}  // namespace dflow::cli
