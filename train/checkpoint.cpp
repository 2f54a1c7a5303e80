#include "train/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "config/config_keys.hpp"
#include "config/errors.hpp"
#include "data/checksum.hpp"
#include "train/checkpoint_cleanup.hpp"
#include "train/checkpoint_files.hpp"
#include "formats/safetensors.hpp"
#include "train/checkpoint_manifest.hpp"
#include "train/trained_against.hpp"

namespace dflow::train {

namespace {

const char* kManifest = "manifest.json";
const int kFormatVersion = 1;
// Guard policy rollback's kept snapshots; only in checkpoints that have some
// (older ones never do, and load as keeping nothing).
const char* kRollbackFile = "rollback.safetensors";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("checkpoint: cannot read " + path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void fsync_path(const fs::path& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Written with write(2), so that a full disk says so (ENOSPC) instead of an
// unexplained stream failure.
void write_text(const fs::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("checkpoint: cannot create " + path.string() + ": " + std::strerror(errno));
  const char* bytes = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, bytes, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      throw std::runtime_error("checkpoint: cannot write " + path.string() + ": " + std::strerror(err));
    }
    bytes += n;
    left -= static_cast<size_t>(n);
  }
  if (::close(fd) != 0) throw std::runtime_error("checkpoint: cannot write " + path.string() + ": " + std::strerror(errno));
}

std::string checksum_hex(const std::string& bytes) {
  std::ostringstream os;
  os << std::hex << data::xxhash64(bytes.data(), bytes.size());
  return os.str();
}

int64_t step_of(const fs::path& dir) {
  static const std::regex pattern("step-([0-9]+)");
  std::smatch m;
  std::string name = dir.filename().string();
  return std::regex_match(name, m, pattern) ? std::stoll(m[1]) : -1;
}

void flatten(const YAML::Node& node, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (auto it = node.begin(); it != node.end(); ++it)
      flatten(it->second, prefix.empty() ? it->first.as<std::string>() : prefix + "." + it->first.as<std::string>(), out);
  } else {
    YAML::Emitter e;
    e << YAML::Flow << node;
    out[prefix] = e.c_str();
  }
}

}  // namespace

namespace {

fs::path write_checkpoint_files(const fs::path& checkpoints_dir, const fs::path& final_dir, const fs::path& tmp_dir,
                                const CheckpointState& state, const nlohmann::json& extra_manifest,
                                const std::function<void()>& mid_write);

// Removes a checkpoint directory so that no crash leaves a half-removed one
// that still looks complete: renamed out of the way first (atomic), then deleted.
void remove_checkpoint_directory(const fs::path& dir) {
  const fs::path doomed = dir.parent_path() / ("." + dir.filename().string() + ".del-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::rename(dir, doomed, ec);
  fs::remove_all(ec ? dir : doomed, ec);
}

// Writes checkpoints_dir/name atomically: a temporary directory, synced, then
// renamed. `extra_manifest` keys are merged into the manifest.
fs::path write_checkpoint_directory(const fs::path& checkpoints_dir, const std::string& name,
                                    const CheckpointState& state, const nlohmann::json& extra_manifest,
                                    const std::function<void()>& mid_write) {
  fs::create_directories(checkpoints_dir);
  const fs::path final_dir = checkpoints_dir / name;
  const fs::path tmp_dir = checkpoints_dir / ("." + name + ".tmp-" + std::to_string(::getpid()));
  remove_stale_temporaries(checkpoints_dir);
  try {
    return write_checkpoint_files(checkpoints_dir, final_dir, tmp_dir, state, extra_manifest, mid_write);
  } catch (const std::exception& e) {
    // A failed write (a full disk, say) leaves nothing behind: the temporary
    // directory goes (freeing its space), and the complete checkpoints and
    // the pointers are untouched.
    std::error_code ignored;
    fs::remove_all(tmp_dir, ignored);
    throw std::runtime_error("checkpoint " + name + " was not saved in " + checkpoints_dir.string() + ": " + e.what());
  }
}

fs::path write_checkpoint_files(const fs::path& checkpoints_dir, const fs::path& final_dir, const fs::path& tmp_dir,
                                const CheckpointState& state, const nlohmann::json& extra_manifest,
                                const std::function<void()>& mid_write) {
  fs::remove_all(tmp_dir);
  fs::create_directories(tmp_dir / "drafter");

  formats::write_safetensors(tmp_dir / "drafter" / "model.safetensors", state.drafter_tensors, {{"format", "pt"}});
  write_text(tmp_dir / "drafter" / "config.json", state.drafter_config.dump(2));
  if (mid_write) mid_write();
  formats::write_safetensors(tmp_dir / "optimizer.safetensors", state.optimizer_tensors);
  std::vector<std::string> files{"drafter/model.safetensors", "drafter/config.json", "optimizer.safetensors",
                                 "state.json", "config.yaml"};
  if (state.trained_against.is_object()) {
    write_text(tmp_dir / "drafter" / kTrainedAgainstFile, state.trained_against.dump(2) + "\n");
    files.push_back(std::string("drafter/") + kTrainedAgainstFile);
  }
  if (!state.rollback_tensors.empty()) {
    formats::write_safetensors(tmp_dir / kRollbackFile, state.rollback_tensors);
    files.push_back(kRollbackFile);
  }
  nlohmann::json run = state.run_state;
  run["global_step"] = state.global_step;
  run["optimizer_steps"] = state.optimizer_steps;
  run["format_version"] = kFormatVersion;
  write_text(tmp_dir / "state.json", run.dump(2));
  write_text(tmp_dir / "config.yaml", state.config_yaml);

  nlohmann::json manifest = extra_manifest.is_object() ? extra_manifest : nlohmann::json::object();
  manifest["format_version"] = kFormatVersion;
  manifest["global_step"] = state.global_step;
  for (const auto& file : files) {
    std::string bytes = read_file(tmp_dir / file);
    manifest["files"][file] = {{"bytes", bytes.size()}, {"xxhash64", checksum_hex(bytes)}};
    fsync_path(tmp_dir / file, false);
  }
  // The manifest is written last: a directory without it is incomplete.
  write_text(tmp_dir / kManifest, manifest.dump(2));
  fsync_path(tmp_dir / kManifest, false);
  fsync_path(tmp_dir / "drafter", true);
  fsync_path(tmp_dir, true);

  if (fs::exists(final_dir)) remove_checkpoint_directory(final_dir);
  fs::rename(tmp_dir, final_dir);
  fsync_path(checkpoints_dir, true);
  return final_dir;
}

// Points checkpoints_dir/pointer (latest, best) at `name`, atomically by rename.
void write_pointer(const fs::path& checkpoints_dir, const std::string& pointer, const std::string& name) {
  const fs::path tmp = checkpoints_dir / ("." + pointer + ".tmp");
  try {
    write_text(tmp, name + "\n");
    fsync_path(tmp, false);
    fs::rename(tmp, checkpoints_dir / pointer);
  } catch (const std::exception& e) {
    std::error_code ignored;
    fs::remove(tmp, ignored);  // the old pointer stays as it was
    throw std::runtime_error("checkpoint: '" + pointer + "' was not moved to " + name + ": " + e.what());
  }
  fsync_path(checkpoints_dir, true);
}

fs::path resolve_pointer(const fs::path& checkpoints_dir, const std::string& pointer) {
  const fs::path file = checkpoints_dir / pointer;
  // A run killed between renaming its newest checkpoint into place and
  // moving `latest` to it leaves no pointer yet (the first checkpoint) but a
  // complete checkpoint: that one is the latest.
  if (!fs::exists(file) && pointer == "latest")
    if (auto complete = list_checkpoints(checkpoints_dir); !complete.empty()) return complete.back();
  // Asked for a checkpoint that was never written: the request is wrong (exit 2).
  if (!fs::exists(file))
    throw ConfigError("checkpoint: no '" + pointer + "' in " + checkpoints_dir.string() +
                      (pointer == "latest" ? ": nothing to resume" : ": no evaluation has written one"));
  std::string name = read_file(file);
  name.erase(name.find_last_not_of(" \n\r\t") + 1);
  fs::path dir = checkpoints_dir / name;
  if (!fs::exists(dir / kManifest))
    throw std::runtime_error("checkpoint: '" + pointer + "' names " + dir.string() + ", which is not complete");
  return dir;
}

}  // namespace

void remove_stale_temporaries(const fs::path& checkpoints_dir) {
  static const std::regex pattern("\\..*\\.(tmp|del)-([0-9]+)");
  const std::string own = std::to_string(::getpid());
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(checkpoints_dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern) && m[2] != own) stale.push_back(entry.path());
  }
  for (const auto& dir : stale) fs::remove_all(dir, ec);
}

fs::path write_step_checkpoint(const fs::path& checkpoints_dir, const CheckpointState& state, int keep,
                               const std::function<void()>& mid_write) {
  const std::string name = "step-" + std::to_string(state.global_step);
  const fs::path final_dir = write_checkpoint_directory(checkpoints_dir, name, state, {}, mid_write);
  write_pointer(checkpoints_dir, "latest", name);
  auto all = list_checkpoints(checkpoints_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) remove_checkpoint_directory(all[i]);
  return final_dir;
}

fs::path write_best_checkpoint(const fs::path& checkpoints_dir, const CheckpointState& state,
                               const nlohmann::json& eval) {
  const std::string name = "best-step-" + std::to_string(state.global_step);
  const fs::path final_dir = write_checkpoint_directory(checkpoints_dir, name, state, {{"eval", eval}}, {});
  write_pointer(checkpoints_dir, "best", name);
  // Only the directory `best` names is kept.
  std::vector<fs::path> stale;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoints_dir, ec)) {
    const std::string other = entry.path().filename().string();
    if (other.rfind("best-step-", 0) == 0 && other != name) stale.push_back(entry.path());
  }
  for (const auto& dir : stale) remove_checkpoint_directory(dir);
  return final_dir;
}

std::optional<nlohmann::json> best_checkpoint_eval(const fs::path& checkpoints_dir) {
  if (!fs::exists(checkpoints_dir / "best")) return std::nullopt;
  const fs::path dir = resolve_pointer(checkpoints_dir, "best");
  const auto manifest = parse_checkpoint_manifest(read_file(dir / kManifest), dir / kManifest).json;
  if (!manifest.contains("eval")) return std::nullopt;
  return manifest["eval"];
}

std::vector<fs::path> list_checkpoints(const fs::path& checkpoints_dir) {
  std::vector<fs::path> out;
  if (!fs::is_directory(checkpoints_dir)) return out;
  for (const auto& entry : fs::directory_iterator(checkpoints_dir))
    if (entry.is_directory() && step_of(entry.path()) >= 0 && fs::exists(entry.path() / kManifest))
      out.push_back(entry.path());
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) { return step_of(a) < step_of(b); });
  return out;
}

fs::path resolve_checkpoint(const fs::path& checkpoints_dir, const std::string& which) {
  if (which == "latest" || which == "best") return resolve_pointer(checkpoints_dir, which);
  fs::path p(which);
  if (fs::exists(p / kManifest)) return p;
  // A pointer file given as a path: runs/demo/checkpoints/best.
  if (fs::is_regular_file(p) && (p.filename() == "latest" || p.filename() == "best"))
    return resolve_pointer(p.parent_path(), p.filename().string());
  if (fs::exists(p / "checkpoints" / "latest")) return resolve_pointer(p / "checkpoints", "latest");
  throw ConfigError("checkpoint: '" + which + "' is not a complete checkpoint (no " + kManifest + ")");
}

LoadedCheckpoint read_checkpoint(const fs::path& dir) {
  // The manifest is parsed and checked without torch (checkpoint_manifest.cpp, fuzzed on its own).
  const CheckpointManifest manifest = parse_checkpoint_manifest(read_file(dir / kManifest), dir / kManifest);
  for (const auto& file : manifest.files) {
    std::string bytes = read_file(dir / file.name);
    if (bytes.size() != file.bytes || checksum_hex(bytes) != file.xxhash64)
      throw std::runtime_error("checkpoint: " + (dir / file.name).string() + " does not match its checksum in the manifest");
  }
  LoadedCheckpoint out;
  out.dir = dir;
  out.run_state = nlohmann::json::parse(read_file(dir / "state.json"));
  out.global_step = out.run_state.at("global_step").get<int64_t>();
  out.optimizer_steps = out.run_state.at("optimizer_steps").get<int64_t>();
  out.config_yaml = read_file(dir / "config.yaml");
  out.drafter_config = nlohmann::json::parse(read_file(dir / "drafter" / "config.json"));
  auto clone_all = [](const formats::TensorMap& mapped) {
    std::map<std::string, torch::Tensor> owned;
    for (const auto& [k, v] : mapped) owned[k] = v.clone();  // detach from the file mapping
    return owned;
  };
  out.drafter_tensors = clone_all(formats::SafetensorsFile(dir / "drafter" / "model.safetensors").all_tensors());
  out.optimizer_tensors = clone_all(formats::SafetensorsFile(dir / "optimizer.safetensors").all_tensors());
  for (const auto& file : manifest.files)
    if (file.name == std::string("drafter/") + kTrainedAgainstFile)
      out.trained_against = nlohmann::json::parse(read_file(dir / file.name));
  for (const auto& file : manifest.files)
    if (file.name == kRollbackFile)
      out.rollback_tensors = clone_all(formats::SafetensorsFile(dir / kRollbackFile).all_tensors());
  return out;
}

std::vector<std::string> incompatible_config_keys(const std::string& saved_yaml, const std::string& current_yaml) {
  // Every declared key must match unless its declaration says a resume may
  // change it (config/config_keys.cpp); the drafter kind's own params are
  // the run's to compare. A key the saved config lacks (written
  // by an older dflow) counts as its default. The pipeline's batching node is
  // compared on its own (nodes/run_context.cpp); faults are drills.
  const auto& keys = config::config_keys();
  const config::Config defaults;
  std::map<std::string, std::string> saved, current;
  flatten(YAML::Load(saved_yaml), "", saved);
  flatten(YAML::Load(current_yaml), "", current);
  std::vector<std::string> paths;
  for (const auto& [k, _] : saved) paths.push_back(k);
  for (const auto& [k, _] : current)
    if (!saved.count(k)) paths.push_back(k);
  std::vector<std::string> out;
  for (const auto& path : paths) {
    if (path.rfind("pipeline.", 0) == 0 || path == "faults") continue;
    const auto* decl = keys.find(path);
    // The drafter kind's params: the kind says which a resume must keep
    // (nodes/drafter_kind_choice.hpp's kind_resume_text, compared by the run).
    if (!decl && path.rfind("model.drafter.", 0) == 0) continue;
    if (decl && decl->on_resume == config::OnResume::may_change) continue;
    auto value_in = [&](std::map<std::string, std::string>& flat) {
      if (flat.count(path)) return flat[path];
      return decl ? keys.value_text(*decl, defaults) : std::string("(absent)");
    };
    const std::string a = value_in(saved), b = value_in(current);
    if (a != b) out.push_back(path + ": " + a + " -> " + b);
  }
  return out;
}

}  // namespace dflow::train
