// `dflow inspect CKPT`: what a checkpoint (or an exported drafter) holds,
// what its drafter was trained against, and whether any weight or optimizer
// state is NaN or Inf.
#include <torch/torch.h>

#include <iomanip>
#include <iostream>

#include "tools/cli.hpp"
#include "tools/thread_option.hpp"
#include "formats/safetensors.hpp"
#include "train/checkpoint.hpp"
#include "train/trained_against.hpp"

namespace dflow::cli {

namespace {

// Prints one line per tensor; returns how many hold non-finite values.
int list_tensors(const std::string& title, const std::map<std::string, torch::Tensor>& tensors) {
  std::cout << title << " (" << tensors.size() << " tensors)\n";
  int bad = 0;
  for (const auto& [name, t] : tensors) {
    auto as_float = t.to(torch::kFloat64);
    int64_t nan = torch::isnan(as_float).sum().item<int64_t>();
    int64_t inf = torch::isinf(as_float).sum().item<int64_t>();
    std::cout << "  " << std::left << std::setw(48) << name << " " << std::setw(9) << c10::toString(t.scalar_type())
              << " " << t.sizes();
    if (nan || inf) {
      std::cout << "  NON-FINITE: " << nan << " NaN, " << inf << " Inf";
      ++bad;
    }
    std::cout << "\n";
  }
  return bad;
}

// The record of what the drafter was trained against, or a line saying there is none.
void print_trained_against(const nlohmann::json& record, const std::filesystem::path& file) {
  if (!record.is_object()) {
    std::cout << "trained against: not recorded (" << file.string() << " absent: written before dflow recorded it)\n";
    return;
  }
  std::cout << "trained against (" << file.string() << ")\n"
            << train::describe(train::TrainedAgainst::from_json(record, file.string()));
}

bool is_export(const std::filesystem::path& dir) {
  return std::filesystem::exists(dir / "config.json") && std::filesystem::exists(dir / "model.safetensors") &&
         !std::filesystem::exists(dir / "manifest.json");
}

}  // namespace

void add_inspect_command(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("inspect", "list a checkpoint's (or an exported drafter's) tensors and what its drafter "
                                             "was trained against, and report any NaN or Inf (exit 1 if found)");
  static std::string path;
  static int threads = 1;
  sub->add_option("CKPT", path,
                  "checkpoint directory (step-N), a run directory (its latest), or an exported drafter (dflow export)")
      ->required();
  add_threads_option(*sub, threads);
  sub->callback([&action] {
    action = [] {
      torch::set_num_threads(threads);
      if (is_export(path)) {
        const std::filesystem::path dir(path);
        std::cout << "exported drafter " << dir.string() << "\n";
        const auto record = train::read_trained_against(dir);
        print_trained_against(record ? record->to_json() : nlohmann::json(), dir / train::kTrainedAgainstFile);
        std::map<std::string, torch::Tensor> tensors;
        for (auto& [name, t] : formats::SafetensorsFile(dir / "model.safetensors").all_tensors()) tensors[name] = t;
        const int bad = list_tensors("weights", tensors);
        std::cout << (bad ? std::to_string(bad) + " tensor(s) hold NaN or Inf\n" : "all tensors finite\n");
        return bad ? 1 : 0;
      }
      auto dir = train::resolve_checkpoint(std::filesystem::path(path) / "checkpoints", path);
      auto ckpt = train::read_checkpoint(dir);
      const auto& s = ckpt.run_state;
      std::cout << "checkpoint " << dir.string() << " (checksums verified)\n"
                << "  global_step " << ckpt.global_step << " of " << s.value("total_steps", 0) << ", epoch "
                << s.value("epoch", 0) << ", cursor next_batch " << s.value("next_batch", 0) << ", world_size "
                << s.value("world_size", 1) << ", optimizer steps " << ckpt.optimizer_steps << "\n";
      print_trained_against(ckpt.trained_against, dir / "drafter" / train::kTrainedAgainstFile);
      int bad = list_tensors("drafter", ckpt.drafter_tensors) + list_tensors("optimizer", ckpt.optimizer_tensors);
      if (bad) {
        std::cout << bad << " tensor(s) hold NaN or Inf\n";
        return 1;
      }
      std::cout << "all tensors finite\n";
      return 0;
    };
  });
}

}  // namespace dflow::cli
