// `dflow inspect CKPT`: what a checkpoint holds, and whether any weight or
// optimizer state is NaN or Inf.
#include <torch/torch.h>

#include <iomanip>
#include <iostream>

#include "tools/cli.hpp"
#include "tools/thread_option.hpp"
#include "train/checkpoint.hpp"

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

}  // namespace

void add_inspect_command(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("inspect", "list a checkpoint's tensors and report any NaN or Inf (exit 1 if found)");
  static std::string path;
  static int threads = 1;
  sub->add_option("CKPT", path, "checkpoint directory (step-N), or a run directory (its latest)")->required();
  add_threads_option(*sub, threads);
  sub->callback([&action] {
    action = [] {
      torch::set_num_threads(threads);
      auto dir = train::resolve_checkpoint(std::filesystem::path(path) / "checkpoints", path);
      auto ckpt = train::read_checkpoint(dir);
      const auto& s = ckpt.run_state;
      std::cout << "checkpoint " << dir.string() << " (checksums verified)\n"
                << "  global_step " << ckpt.global_step << " of " << s.value("total_steps", 0) << ", epoch "
                << s.value("epoch", 0) << ", cursor next_batch " << s.value("next_batch", 0) << ", world_size "
                << s.value("world_size", 1) << ", optimizer steps " << ckpt.optimizer_steps << "\n";
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
