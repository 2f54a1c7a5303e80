// Fault drills: the faults a long run meets, inflicted on the real `dflow`
// binary, and what a user must still find afterwards.
//   Drill.Kill    SIGKILL at random moments (seeded), resumed each time:
//                 `latest` always loads, and the records and final weights
//                 equal an uninterrupted run's.
//   Drill.DiskFull  a checkpoint that does not fit (a small tmpfs on the
//                 checkpoints directory): a clear error, `latest` intact,
//                 nothing partial left; checkpoint.on_write_error halt and continue.
//   Drill.Rank    one of 2 ranks killed, or stopped (SIGSTOP, a hang): the
//                 launcher exits non-zero within distributed.timeout_s plus a
//                 margin, naming the rank.
//   Drill.Live    many clients on the live view while training: it answers,
//                 it is read-only, training completes with the same records;
//                 the throughput ratio is measured (asserted when strict).
// Sizes come from the environment; the defaults are the short CI version and
// tools/drills.sh runs the full one:
//   DFLOW_DRILL_TRIALS (3)   kill trials
//   DFLOW_DRILL_SEED         seed of the kill times (default: the clock; printed)
//   DFLOW_DRILL_LOAD_S (6)   seconds of client load per measured run
//   DFLOW_DRILL_CLIENTS (32) concurrent clients
//   DFLOW_DRILL_PAIRS (1)    alternating runs without / with clients
//   DFLOW_DRILL_STRICT (0)   1: assert throughput drops less than 5% under load
//   DFLOW_DRILL_FIGURES      a file to append each drill's figures to (JSON lines)
#include "test_paths.hpp"
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "../nodes/train_fixture.hpp"
#include "run_command.hpp"
#include "train/checkpoint.hpp"

using namespace dflow;
using testing::fresh_dir;
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// Appends one drill's figures to DFLOW_DRILL_FIGURES (tools/drills.sh reads them) and prints them.
void figures(nlohmann::json j) {
  MESSAGE(j.dump());
  if (const char* path = std::getenv("DFLOW_DRILL_FIGURES"); path && *path) std::ofstream(path, std::ios::app) << j.dump() << "\n";
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

fs::path write_config(const fs::path& dir, const std::vector<std::string>& overrides, const std::string& extra_yaml = "",
                      const std::string& name = "run.yaml") {
  auto path = dir / name;
  std::ofstream(path) << config::to_yaml(testing::small_run_config(dir, overrides)) << extra_yaml;
  return path;
}

// `dflow ARGS` in the background: its pid, then (in `exit`) its exit code.
struct Background {
  int pid = 0;
  fs::path exit_file, log;
  int exit_code() const {  // -1 while it runs
    int code = -1;
    std::ifstream(exit_file) >> code;
    return code;
  }
  // Waits at most `limit_s` for it to end; -1 if it has not.
  int wait(double limit_s) const {
    const auto start = clock_type::now();
    for (int code = exit_code();; code = exit_code()) {
      if (code >= 0 || seconds_since(start) > limit_s) return code;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  std::string output() const { return read_text(log); }
};

// A command line in the background (start_dflow: `dflow ARGS`).
Background start_background(const fs::path& dir, const std::string& command_line, const std::string& tag) {
  Background b;
  b.exit_file = dir / (tag + ".exit");
  b.log = dir / (tag + ".log");
  const fs::path pid_file = dir / (tag + ".pid");
  fs::remove(b.exit_file), fs::remove(pid_file);
  const std::string command = "(" + command_line + " > " + b.log.string() + " 2>&1 & echo $! > " +
                              pid_file.string() + "; wait $!; echo $? > " + b.exit_file.string() + ".part; mv " +
                              b.exit_file.string() + ".part " + b.exit_file.string() + ") &";
  REQUIRE(std::system(command.c_str()) == 0);
  for (int i = 0; i < 500 && b.pid <= 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream(pid_file) >> b.pid;
  }
  REQUIRE(b.pid > 0);
  return b;
}

Background start_dflow(const fs::path& dir, const std::string& args, const std::string& tag) {
  return start_background(dir, ::dflow::testing::dflow_binary() + " " + args, tag);
}

// The complete lines of metrics.jsonl (a run may be writing, or have been
// killed while writing, the last one).
std::vector<std::string> complete_lines(const fs::path& out_dir) {
  const std::string text = read_text(out_dir / "metrics.jsonl");
  std::vector<std::string> lines;
  for (size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos; at = end + 1) lines.push_back(text.substr(at, end - at));
  return lines;
}

size_t count_steps(const fs::path& out_dir) {
  size_t n = 0;
  for (const auto& line : complete_lines(out_dir)) n += line.find("\"kind\":\"step\"") != std::string::npos;
  return n;
}

// The last record of each step (a resumed run repeats the steps after its
// checkpoint), without the wall-clock and telemetry fields. Every complete line must parse.
std::map<int64_t, nlohmann::json> final_step_records(const fs::path& out_dir) {
  std::map<int64_t, nlohmann::json> out;
  int line_number = 0;
  for (const auto& line : complete_lines(out_dir)) {
    ++line_number;
    INFO("metrics.jsonl line " << line_number << ": " << line.substr(0, 200));
    nlohmann::json r;
    REQUIRE_NOTHROW(r = nlohmann::json::parse(line));
    if (r.value("kind", "") != "step") continue;
    r.erase("time");
    r.erase("telemetry");
    out[r["global_step"].get<int64_t>()] = r;
  }
  return out;
}

std::vector<double> step_seconds(const fs::path& out_dir) {
  std::vector<double> out;
  for (const auto& line : complete_lines(out_dir)) {
    auto r = nlohmann::json::parse(line);
    if (r.value("kind", "") == "step") out.push_back(r["time"]["step_s"].get<double>());
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Number of records that differ between two runs (by step), with the first difference described.
size_t differing_steps(const std::map<int64_t, nlohmann::json>& a, const std::map<int64_t, nlohmann::json>& b,
                       std::string& first) {
  size_t n = 0;
  for (const auto& [step, record] : a) {
    auto it = b.find(step);
    if (it != b.end() && it->second == record) continue;
    if (n++ == 0)
      first = "step " + std::to_string(step) + ": " + record.dump().substr(0, 300) + " vs " +
              (it == b.end() ? std::string("(missing)") : it->second.dump().substr(0, 300));
  }
  for (const auto& [step, record] : b)
    if (!a.count(step) && n++ == 0) first = "step " + std::to_string(step) + " only in the second run";
  return n;
}

bool same_weights(const fs::path& a, const fs::path& b) {
  auto x = train::read_checkpoint(a), y = train::read_checkpoint(b);
  if (x.drafter_tensors.size() != y.drafter_tensors.size()) return false;
  for (const auto& [name, t] : x.drafter_tensors)
    if (!y.drafter_tensors.count(name) || !torch::equal(t, y.drafter_tensors.at(name))) return false;
  for (const auto& [name, t] : x.optimizer_tensors)
    if (!y.optimizer_tensors.count(name) || !torch::equal(t, y.optimizer_tensors.at(name))) return false;
  return true;
}

// Every complete checkpoint loads, `latest` (when there is one) names one of
// them, and no temporary directory is among them. Returns latest's step (-1: none).
int64_t check_checkpoints_dir(const fs::path& dir) {
  const fs::path checkpoints = dir / "checkpoints";
  for (const auto& ckpt : train::list_checkpoints(checkpoints)) {
    INFO(ckpt.string());
    CHECK(ckpt.filename().string().find(".tmp") == std::string::npos);
    CHECK_NOTHROW(train::read_checkpoint(ckpt));
  }
  if (!fs::exists(checkpoints / "latest") && train::list_checkpoints(checkpoints).empty()) return -1;
  fs::path latest;
  REQUIRE_NOTHROW(latest = train::resolve_checkpoint(checkpoints, "latest"));
  train::LoadedCheckpoint loaded;
  REQUIRE_NOTHROW(loaded = train::read_checkpoint(latest));
  return loaded.global_step;
}

// ---- Drill.Kill -------------------------------------------------------------

constexpr int kKillSteps = 16;
const std::vector<std::string> kKillOverrides{"run.max_steps=" + std::to_string(kKillSteps), "checkpoint.every_steps=2",
                                              "checkpoint.keep=2", "run.threads=2", "run.torch_threads=1"};

// ---- Drill.Live: a minimal HTTP client ---------------------------------------

struct Reply {
  int status = 0;  // 0: no answer
  std::string body;
};

Reply http(int port, const std::string& method, const std::string& target, double timeout_s = 10) {
  Reply reply;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return reply;
  timeval tv{static_cast<time_t>(timeout_s), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return reply;
  }
  const std::string body = method == "GET" ? "" : "{\"kind\": \"step\", \"global_step\": 3, \"loss\": \"drill-post\"}";
  const std::string request = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                              (body.empty() ? "" : "Content-Type: application/json\r\nContent-Length: " +
                                                       std::to_string(body.size()) + "\r\n") +
                              "\r\n" + body;
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return reply;
  }
  std::string raw;
  char buffer[16384];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) raw.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  if (raw.rfind("HTTP/1.", 0) != 0 || raw.size() < 12) return reply;
  reply.status = std::atoi(raw.c_str() + 9);
  const size_t head_end = raw.find("\r\n\r\n");
  reply.body = head_end == std::string::npos ? "" : raw.substr(head_end + 4);
  return reply;
}

}  // namespace

TEST_CASE("Drill.Kill.sigkill_at_random_moments_then_resume_gives_the_uninterrupted_run") {
  const int trials = env_int("DFLOW_DRILL_TRIALS", 3);
  const uint64_t seed = std::getenv("DFLOW_DRILL_SEED")
                            ? std::strtoull(std::getenv("DFLOW_DRILL_SEED"), nullptr, 10)
                            : static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count() % 1000000);
  MESSAGE("kill drill: " << trials << " trials, seed " << seed << " (DFLOW_DRILL_SEED=" << seed << " repeats it)");
  std::mt19937_64 random(seed);

  // The uninterrupted run, and how long it takes (the window the kills fall in).
  auto ref = fresh_dir("drill-kill-ref");
  const auto ref_config = write_config(ref, kKillOverrides);  // (makes the shared assets, the first time)
  const auto started = clock_type::now();
  auto reference = start_dflow(ref, "train " + ref_config.string(), "train");
  REQUIRE(reference.wait(300) == 0);
  const double run_s = seconds_since(started);
  const auto expected = final_step_records(ref);
  REQUIRE(expected.size() == static_cast<size_t>(kKillSteps));
  const fs::path ref_final = ref / "checkpoints" / ("step-" + std::to_string(kKillSteps));

  int kills = 0, survived = 0, mid_checkpoint = 0, resumes = 0;
  for (int trial = 0; trial < trials; ++trial) {
    auto dir = fresh_dir("drill-kill-" + std::to_string(trial));
    const auto config = write_config(dir, kKillOverrides).string();
    // Up to 3 kills per trial, each at a random moment of the invocation it
    // interrupts (the start-up included); then the run goes to its end.
    const int kills_this_trial = 1 + static_cast<int>(random() % 3);
    int finished = -1;
    for (int attempt = 0; finished < 0; ++attempt) {
      const int64_t latest = check_checkpoints_dir(dir);
      const std::string resume = latest >= 0 ? " --resume latest" : "";
      resumes += latest >= 0;
      auto run = start_dflow(dir, "train " + config + resume, "train" + std::to_string(attempt));
      if (attempt >= kills_this_trial) {
        finished = run.wait(300);
        INFO(run.output());
        REQUIRE(finished == 0);
        break;
      }
      const double at_s = std::uniform_real_distribution<double>(0.2, 0.8 * run_s)(random);
      const int code = run.wait(at_s);
      if (code >= 0) {  // it finished before the kill
        INFO(run.output());
        REQUIRE(code == 0);
        finished = code;
        break;
      }
      bool writing = false;  // a checkpoint half written at the kill
      if (fs::exists(dir / "checkpoints"))
        for (const auto& e : fs::directory_iterator(dir / "checkpoints"))
          writing = writing || e.path().filename().string().find(".tmp") != std::string::npos;
      ::kill(run.pid, SIGKILL);
      REQUIRE(run.wait(30) >= 0);
      ++kills;
      mid_checkpoint += writing;
      INFO("trial " << trial << ", kill " << attempt + 1 << " at " << at_s << " s");
      const int64_t after = check_checkpoints_dir(dir);  // latest loads (if any was written)
      CHECK(after >= latest);                            // and nothing saved was lost
      survived += after >= latest;
    }
    INFO("trial " << trial);
    CHECK(read_text(dir / "metrics.jsonl").back() == '\n');  // no partial record left behind
    std::string first;
    const size_t differing = differing_steps(expected, final_step_records(dir), first);
    INFO(first);
    CHECK(differing == 0);
    CHECK(check_checkpoints_dir(dir) == kKillSteps);
    CHECK(same_weights(ref_final, dir / "checkpoints" / ("step-" + std::to_string(kKillSteps))));
    for (const auto& e : fs::directory_iterator(dir / "checkpoints"))
      CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
  }
  figures({{"drill", "kill"}, {"trials", trials}, {"seed", seed}, {"steps", kKillSteps}, {"kills", kills},
           {"kills_mid_checkpoint_write", mid_checkpoint}, {"resumes", resumes}, {"survived", survived},
           {"run_s", run_s}});
}

// ---- Drill.DiskFull -----------------------------------------------------------

namespace {

// A tmpfs of `bytes` mounted on `where` for the scope; unmounted (lazily, as
// a last resort) in every path out.
struct TmpfsMount {
  fs::path where;
  bool mounted = false;
  std::string why_not;
  TmpfsMount(const fs::path& at, uint64_t bytes) : where(at) {
    fs::create_directories(where);
    if (::geteuid() != 0) {
      why_not = "not root (mounting a tmpfs needs CAP_SYS_ADMIN)";
      return;
    }
    const std::string options = "size=" + std::to_string(bytes) + ",mode=0755";
    if (::mount("dflow-drill", where.c_str(), "tmpfs", 0, options.c_str()) != 0) {
      why_not = std::string("mount -t tmpfs failed: ") + std::strerror(errno);
      return;
    }
    mounted = true;
  }
  bool resize(uint64_t bytes) {
    const std::string options = "size=" + std::to_string(bytes) + ",mode=0755";
    return ::mount("dflow-drill", where.c_str(), "tmpfs", MS_REMOUNT, options.c_str()) == 0;
  }
  ~TmpfsMount() {
    if (mounted && ::umount2(where.c_str(), 0) != 0) ::umount2(where.c_str(), MNT_DETACH);
  }
};

// The space one checkpoint takes on a tmpfs (whole pages per file).
uint64_t checkpoint_bytes(const fs::path& checkpoint) {
  uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(checkpoint))
    if (e.is_regular_file()) total += (e.file_size() + 4095) / 4096 * 4096;
  return total;
}

const std::vector<std::string> kDiskOverrides{"run.max_steps=12", "checkpoint.every_steps=2", "checkpoint.keep=100",
                                              "run.threads=2", "run.torch_threads=1"};

// The uninterrupted run the disk drills compare with (made once).
const fs::path& disk_reference() {
  static const fs::path dir = [] {
    auto d = fresh_dir("drill-disk-ref");
    auto o = testing::run_command(::dflow::testing::dflow_binary() + " train " + write_config(d, kDiskOverrides).string(), 300);
    INFO(o.output);
    REQUIRE(o.exit_code == 0);
    return d;
  }();
  return dir;
}

bool no_temporaries(const fs::path& checkpoints) {
  for (const auto& e : fs::directory_iterator(checkpoints))
    if (e.path().filename().string().find(".tmp") != std::string::npos) return false;
  return true;
}

}  // namespace

TEST_CASE("Drill.DiskFull.a_checkpoint_that_does_not_fit") {
  const uint64_t one = checkpoint_bytes(disk_reference() / "checkpoints" / "step-2");
  REQUIRE(one > 0);
  // Room for two checkpoints and a half: step-2 and step-4 fit, step-6 does not.
  const uint64_t room = one * 5 / 2;
  const auto expected = final_step_records(disk_reference());

  SUBCASE("halt (the default): the run stops naming the file, latest intact, resumable once there is room") {
    auto dir = fresh_dir("drill-disk-halt");
    TmpfsMount mount(dir / "checkpoints", room);
    if (!mount.mounted) {
      MESSAGE("skipped: the disk-full drill needs a tmpfs on the checkpoints directory: " << mount.why_not);
      return;
    }
    auto o = testing::run_command(::dflow::testing::dflow_binary() + " train " + write_config(dir, kDiskOverrides).string(), 300);
    INFO(o.output);
    CHECK(o.exit_code == 1);
    CHECK(o.output.find("checkpoint step-6 was not saved") != std::string::npos);
    CHECK(o.output.find("No space left on device") != std::string::npos);
    CHECK(o.output.find(".safetensors") != std::string::npos);  // the file that did not fit
    CHECK(o.output.find("latest is step-4 (intact)") != std::string::npos);
    CHECK(o.output.find("checkpoint.on_write_error: halt") != std::string::npos);
    CHECK(check_checkpoints_dir(dir) == 4);
    CHECK(train::list_checkpoints(dir / "checkpoints").size() == 2);
    CHECK(no_temporaries(dir / "checkpoints"));
    // Nothing saved is lost: with room again (the user frees space), it resumes
    // to the end and the records are the uninterrupted run's. (The error
    // policy may change on resume.)
    REQUIRE(mount.resize(one * 20));
    auto resume_overrides = kDiskOverrides;
    resume_overrides.push_back("checkpoint.on_write_error=continue");
    auto resumed = testing::run_command(
        ::dflow::testing::dflow_binary() + " train " + write_config(dir, resume_overrides).string() + " --resume latest", 300);
    INFO(resumed.output);
    CHECK(resumed.exit_code == 0);
    std::string first;
    const size_t differing = differing_steps(expected, final_step_records(dir), first);
    INFO(first);
    CHECK(differing == 0);
    CHECK(same_weights(disk_reference() / "checkpoints" / "step-12", dir / "checkpoints" / "step-12"));
    figures({{"drill", "disk_full_halt"}, {"tmpfs_bytes", room}, {"checkpoint_bytes", one}, {"failed_at", "step-6"},
             {"exit_code", o.exit_code}, {"latest_after", "step-4"}, {"resumed_to_end", resumed.exit_code == 0}});
  }

  SUBCASE("continue: an alarm record, training goes on, the next checkpoint succeeds once there is room") {
    auto dir = fresh_dir("drill-disk-continue");
    TmpfsMount mount(dir / "checkpoints", room);
    if (!mount.mounted) {
      MESSAGE("skipped: the disk-full drill needs a tmpfs on the checkpoints directory: " << mount.why_not);
      return;
    }
    // Steps from 6 on are slowed (1 s each) so that the drill frees room
    // between the failed step-6 and the next checkpoint, step-8.
    auto config = write_config(dir, [] {
      auto o = kDiskOverrides;
      o.push_back("checkpoint.on_write_error=continue");
      return o;
    }(), "faults: [{kind: delay, node: drafter, step: 6, seconds: 1.0}]\n");
    auto run = start_dflow(dir, "train " + config.string(), "train");
    bool alarm = false;
    for (int i = 0; i < 1200 && !alarm && run.exit_code() < 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      alarm = read_text(dir / "metrics.jsonl").find("\"checkpoint_not_saved\"") != std::string::npos;
    }
    const bool freed = alarm && mount.resize(one * 20);
    const int code = run.wait(300);
    if (code < 0) ::kill(run.pid, SIGKILL);
    const std::string output = run.output();
    INFO(output);
    REQUIRE(alarm);
    CHECK(freed);
    CHECK(code == 0);
    CHECK(output.find("checkpoint step-6 was not saved") != std::string::npos);
    CHECK(output.find("No space left on device") != std::string::npos);
    CHECK(output.find("checkpoint.on_write_error: continue") != std::string::npos);
    // The alarm record names the step; training did not change (records equal
    // the uninterrupted run's), step-6 is missing and every other checkpoint is there.
    nlohmann::json alarm_record;
    std::ifstream in(dir / "metrics.jsonl");
    for (std::string line; std::getline(in, line);)
      if (auto r = nlohmann::json::parse(line); r.value("alarm", "") == "checkpoint_not_saved") alarm_record = r;
    CHECK(alarm_record["global_step"] == 6);
    std::string first;
    const size_t differing = differing_steps(expected, final_step_records(dir), first);
    INFO(first);
    CHECK(differing == 0);
    std::vector<std::string> names;
    for (const auto& c : train::list_checkpoints(dir / "checkpoints")) names.push_back(c.filename().string());
    CHECK(names == std::vector<std::string>{"step-2", "step-4", "step-8", "step-10", "step-12"});
    CHECK(check_checkpoints_dir(dir) == 12);
    CHECK(no_temporaries(dir / "checkpoints"));
    CHECK(same_weights(disk_reference() / "checkpoints" / "step-12", dir / "checkpoints" / "step-12"));
    figures({{"drill", "disk_full_continue"}, {"tmpfs_bytes", room}, {"failed_at", "step-6"}, {"exit_code", code},
             {"checkpoints_after", names}});
  }

  SUBCASE("continue, and the final checkpoint does not fit either: the run fails at the end saying so") {
    auto dir = fresh_dir("drill-disk-final");
    TmpfsMount mount(dir / "checkpoints", room);
    if (!mount.mounted) {
      MESSAGE("skipped: the disk-full drill needs a tmpfs on the checkpoints directory: " << mount.why_not);
      return;
    }
    auto config = write_config(dir, [] {
      auto o = kDiskOverrides;
      o.push_back("checkpoint.on_write_error=continue");
      return o;
    }());
    auto o = testing::run_command(::dflow::testing::dflow_binary() + " train " + config.string(), 300);
    INFO(o.output);
    CHECK(o.exit_code == 1);
    CHECK(o.output.find("trained to step 12 but its final checkpoint step-12 was not saved") != std::string::npos);
    CHECK(check_checkpoints_dir(dir) == 4);
    CHECK(no_temporaries(dir / "checkpoints"));
    std::string first;
    const size_t differing = differing_steps(expected, final_step_records(dir), first);
    INFO(first);
    CHECK(differing == 0);  // every step was recorded
  }
}

// ---- Drill.Rank ----------------------------------------------------------------

namespace {

// The pids of the launcher's children and their RANK.
std::map<int, int> ranks_of(int launcher) {
  std::map<int, int> out;
  std::ifstream children("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) + "/children");
  for (int pid; children >> pid;) {
    std::ifstream environ("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(environ)), std::istreambuf_iterator<char>());
    for (size_t at = 0; at < env.size(); at = env.find('\0', at) + 1) {
      if (env.compare(at, 5, "RANK=") == 0) out[std::atoi(env.c_str() + at + 5)] = pid;
      if (env.find('\0', at) == std::string::npos) break;
    }
  }
  return out;
}

constexpr double kRankTimeoutS = 6;

// A whole 2-rank epoch on one thread each, checkpoints agreed every 3 steps.
std::vector<std::string> rank_drill_overrides() {
  return {"run.threads=1", "run.torch_threads=1", "train.epochs=1", "train.grad_accum=1", "run.max_steps=0",
          "checkpoint.every_steps=3", "distributed.timeout_s=" + std::to_string(kRankTimeoutS)};
}

// Under `dflow launch`, or torchrun (--standalone: its agent serves the
// rendezvous store, so a stopped rank 0 does not take the store with it).
void rank_drill(const std::string& name, int victim, int signal, bool torchrun = false) {
  auto dir = fresh_dir("drill-rank-" + name);
  auto config = write_config(dir, rank_drill_overrides(),
                             "faults: [{kind: delay, node: drafter, step: 2, seconds: 0.5}]\n");
  auto launcher = torchrun ? start_background(dir, ::dflow::testing::torchrun() + " --standalone --nproc-per-node 2 --no-python " +
                                                      ::dflow::testing::dflow_binary() + " train " + config.string(), "torchrun")
                          : start_dflow(dir, "launch -n 2 " + config.string(), "launch");
  std::map<int, int> ranks;
  size_t records = 0;
  for (int i = 0; i < 900 && records < 4 && launcher.exit_code() < 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    records = count_steps(dir);
  }
  ranks = ranks_of(launcher.pid);
  auto cleanup = [&] {  // nothing survives the drill
    for (const auto& [rank, pid] : ranks) ::kill(pid, SIGKILL), ::kill(pid, SIGCONT);
    ::kill(launcher.pid, SIGKILL);
  };
  if (records < 4 || ranks.size() != 2 || !ranks.count(victim)) {
    cleanup();
    INFO(launcher.output());
    FAIL("the 2-rank run did not get going: " << records << " records, " << ranks.size() << " ranks found");
  }
  const auto hit = clock_type::now();
  ::kill(ranks[victim], signal);
  // The launcher (and the surviving rank) end on their own within the
  // timeout plus a margin (the diagnosis takes 1.5 s, the exit a few).
  // torchrun gives a rank that has not exited 30 s after another failed
  // before it kills it, so there it is the surviving rank's exit that counts.
  const double limit_s = kRankTimeoutS + 20;
  const int survivor_pid = ranks[1 - victim];
  double took_s = -1;
  int code = -1;
  for (; seconds_since(hit) < limit_s + 60; std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
    if (took_s < 0 && ranks_of(launcher.pid).count(1 - victim) == 0 && ::kill(survivor_pid, 0) != 0) took_s = seconds_since(hit);
    if ((code = launcher.exit_code()) >= 0) break;
  }
  if (!torchrun || took_s < 0) took_s = seconds_since(hit);
  cleanup();
  const std::string output = launcher.output();
  INFO(output);
  REQUIRE(code >= 0);
  CHECK(code == 1);
  CHECK(took_s < limit_s);
  const std::string who = "rank " + std::to_string(victim);
  const int survivor = 1 - victim;
  if (torchrun) {
  } else if (signal == SIGKILL) {
    CHECK(output.find(who + " failed first: it was killed by signal") != std::string::npos);
  } else {
    CHECK(output.find(who + " was stopped by signal SIGSTOP") != std::string::npos);
    CHECK(output.find(who + " hung (stopped by signal SIGSTOP") != std::string::npos);
  }
  // The surviving rank's own error names the lost one.
  if (victim == 1) CHECK(output.find("lost rank 1") != std::string::npos);
  else CHECK(output.find("lost rank 0") != std::string::npos);
  CHECK(output.find("rank " + std::to_string(survivor) + ": ") != std::string::npos);
  // The last agreed checkpoint is intact.
  CHECK(check_checkpoints_dir(dir) >= 3);
  figures({{"drill", "rank_" + name}, {"launcher", torchrun ? "torchrun" : "dflow launch"}, {"signal", signal == SIGKILL ? "SIGKILL" : "SIGSTOP"}, {"victim_rank", victim},
           {"timeout_s", kRankTimeoutS}, {"launcher_exit", code}, {"exit_after_s", took_s}});
}

}  // namespace

TEST_CASE("Drill.Rank.a_killed_rank_ends_the_run_within_the_timeout_naming_it") { rank_drill("killed", 1, SIGKILL); }

TEST_CASE("Drill.Rank.a_stopped_rank_ends_the_run_within_the_timeout_naming_it") { rank_drill("stopped", 1, SIGSTOP); }

TEST_CASE("Drill.Rank.torchrun_a_stopped_rank_0_is_named_by_rank_1" * doctest::skip(env_int("DFLOW_DRILL_FULL", 0) == 0)) {
  if (::dflow::testing::torchrun().empty() || !fs::exists(::dflow::testing::torchrun())) {
    MESSAGE("skipped: no torchrun beside the configured torch (tools/setup.sh installs it in the venv)");
    return;
  }
  rank_drill("torchrun-stopped-rank0", 0, SIGSTOP, /*torchrun=*/true);
}

TEST_CASE("Drill.Rank.a_rank_stuck_with_its_process_alive_is_named_by_the_others") {
  // Rank 1 stops making progress at step 4 (an hour-long delay in its
  // drafter node) while its process, and so its heartbeat, stays alive:
  // rank 0 times out in the step's collective and names rank 1 as the one
  // that never reached it; the launcher then ends rank 1.
  auto dir = fresh_dir("drill-rank-stuck");
  auto config = write_config(dir, rank_drill_overrides(),
                             "faults: [{kind: delay, node: drafter, step: 4, seconds: 3600, rank: 1}]\n");
  const auto started = clock_type::now();
  auto launcher = start_dflow(dir, "launch -n 2 " + config.string(), "launch");
  // Rank 0 notices after the timeout (+1.5 s of diagnosis); the launcher
  // gives rank 1 the timeout + 10 s to exit, then terminates it.
  const double limit_s = 3 * kRankTimeoutS + 60;
  const int code = launcher.wait(limit_s + 60);
  const double took_s = seconds_since(started);
  for (const auto& [rank, pid] : ranks_of(launcher.pid)) ::kill(pid, SIGKILL);
  ::kill(launcher.pid, SIGKILL);
  const std::string output = launcher.output();
  INFO(output);
  REQUIRE(code >= 0);
  CHECK(code == 1);
  CHECK(took_s < limit_s);
  CHECK(output.find("rank 0: ") != std::string::npos);
  CHECK(output.find("rank 1 is alive but never reached it (its last collective: ") != std::string::npos);
  CHECK(output.find("lost rank") == std::string::npos);  // it was not lost, and is not called so
  // The launcher's final line blames the rank that rank 0's error names, not rank 0 for exiting first.
  const size_t last = output.rfind("dflow: error: ");
  REQUIRE(last != std::string::npos);
  CHECK(output.substr(last, output.find('\n', last) - last).rfind("dflow: error: rank 1 held the run up: rank 0 failed first", 0) == 0);
  CHECK(check_checkpoints_dir(dir) >= 3);  // step-3, agreed before it got stuck
  figures({{"drill", "rank_stuck"}, {"victim_rank", 1}, {"timeout_s", kRankTimeoutS}, {"launcher_exit", code},
           {"exit_after_s", took_s}});
}

TEST_CASE("Drill.Rank.a_stopped_rank_0_store_server_ends_the_run_naming_it" * doctest::skip(env_int("DFLOW_DRILL_FULL", 0) == 0)) {
  rank_drill("stopped-rank0", 0, SIGSTOP);
}

// ---- Drill.Live ----------------------------------------------------------------

namespace {

struct LoadFigures {
  int64_t requests = 0, answered = 0, failed = 0;
};

// `clients` threads each polling /, /metrics, /graph.json and /records.json
// (as the page does: from its cursor on) every 50-100 ms until `stop`.
LoadFigures load(int port, int clients, const std::atomic<bool>& stop) {
  std::atomic<int64_t> requests{0}, answered{0}, failed{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      std::mt19937 random(c);
      int64_t cursor = 0;
      for (int i = c; !stop; ++i) {
        const std::string path = i % 4 == 0   ? "/"
                                 : i % 4 == 1 ? "/metrics"
                                 : i % 4 == 2 ? "/graph.json"
                                              : "/records.json?slim=1&since=" + std::to_string(cursor);
        auto reply = http(port, "GET", path);
        ++requests;
        (reply.status == 200 ? answered : failed)++;
        if (i % 4 == 3 && reply.status == 200)
          if (auto j = nlohmann::json::parse(reply.body, nullptr, false); !j.is_discarded()) cursor = j.value("next", cursor);
        std::this_thread::sleep_for(std::chrono::milliseconds(50 + random() % 51));
      }
    });
  for (auto& t : threads) t.join();
  return {requests.load(), answered.load(), failed.load()};
}

}  // namespace

TEST_CASE("Drill.Live.many_clients_during_training") {
  const int load_s = env_int("DFLOW_DRILL_LOAD_S", 6);
  const int clients = env_int("DFLOW_DRILL_CLIENTS", 32);
  const int pairs = env_int("DFLOW_DRILL_PAIRS", 1);
  const bool strict = env_int("DFLOW_DRILL_STRICT", 0) != 0;
  // A step of this run takes about 0.1-0.2 s on 2 cores: enough steps to
  // outlast the load window (the run is killed once the window is measured).
  const std::vector<std::string> overrides{"run.threads=2", "run.torch_threads=1", "run.max_steps=2000",
                                           "train.epochs=100", "checkpoint.every_steps=0"};
  std::vector<double> quiet_s, loaded_s;
  LoadFigures total;
  std::map<int64_t, nlohmann::json> quiet_records, loaded_records;
  for (int pair = 0; pair < pairs; ++pair) {
    for (const bool with_clients : {false, true}) {
      auto dir = fresh_dir("drill-live-" + std::to_string(pair) + (with_clients ? "-load" : "-quiet"));
      const int port = 20000 + (::getpid() * 7 + pair * 2 + with_clients) % 40000;
      auto run = start_dflow(dir, "train " + write_config(dir, overrides).string() + " --serve 127.0.0.1:" + std::to_string(port), "train");
      // Wait for the first steps (start-up excluded from the window).
      for (int i = 0; i < 600 && count_steps(dir) < 3 && run.exit_code() < 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const size_t first = count_steps(dir);
      std::atomic<bool> stop{false};
      LoadFigures figures_now;
      std::thread clients_thread;
      if (with_clients) clients_thread = std::thread([&] { figures_now = load(port, clients, stop); });
      std::this_thread::sleep_for(std::chrono::seconds(load_s));
      // Read-only, under load: other methods change nothing, no path leaves the routes.
      std::vector<Reply> writes, escapes;
      if (with_clients) {
        for (const char* method : {"POST", "PUT", "DELETE", "PATCH"})
          for (const char* target : {"/", "/metrics", "/records.json", "/graph.json"}) writes.push_back(http(port, method, target));
        for (const char* target : {"/../../../../etc/passwd", "/%2e%2e/%2e%2e/%2e%2e/etc/passwd", "/graph.json/../../etc/passwd",
                                   "//etc/passwd", "/metrics.jsonl", "/checkpoints/latest", "/run.yaml"})
          escapes.push_back(http(port, "GET", target));
      }
      stop = true;
      if (clients_thread.joinable()) clients_thread.join();
      const Reply metrics = http(port, "GET", "/metrics");
      const size_t last = count_steps(dir);
      ::kill(run.pid, SIGKILL);
      run.wait(30);
      INFO(run.output());
      REQUIRE(last > first + 2);  // training went on through the window
      auto seconds = step_seconds(dir);
      std::vector<double> window(seconds.begin() + static_cast<long>(first), seconds.begin() + static_cast<long>(last));
      (with_clients ? loaded_s : quiet_s).push_back(median(window));
      auto records = final_step_records(dir);
      (with_clients ? loaded_records : quiet_records) = records;
      CHECK(metrics.status == 200);
      CHECK(metrics.body.find("dflow_global_step") != std::string::npos);
      if (with_clients) {
        total.requests += figures_now.requests, total.answered += figures_now.answered, total.failed += figures_now.failed;
        CHECK(figures_now.answered > 0);
        CHECK(figures_now.failed == 0);
        for (const auto& w : writes) {
          CHECK(w.status >= 400);
          CHECK(w.status < 500);
        }
        for (const auto& e : escapes) {
          CHECK(e.status >= 400);
          CHECK(e.status < 500);
          CHECK(e.body.find("root:") == std::string::npos);
        }
        CHECK(read_text(dir / "metrics.jsonl").find("drill-post") == std::string::npos);  // the POSTed record went nowhere
      }
    }
    // The clients changed nothing in training: the steps both runs made are identical.
    size_t compared = 0;
    for (const auto& [step, record] : loaded_records)
      if (quiet_records.count(step)) {
        ++compared;
        CHECK(quiet_records.at(step) == record);
      }
    CHECK(compared > 0);
  }
  const double ratio = median(quiet_s) / median(loaded_s);  // throughput with clients / without
  figures({{"drill", "live_view_load"}, {"clients", clients}, {"load_s", load_s}, {"pairs", pairs},
           {"median_step_s_quiet", median(quiet_s)}, {"median_step_s_loaded", median(loaded_s)},
           {"throughput_ratio", ratio}, {"requests", total.requests}, {"answered", total.answered},
           {"failed", total.failed}, {"requests_per_s", static_cast<double>(total.requests) / (load_s * pairs)}});
  if (strict) CHECK(ratio > 0.95);
}
