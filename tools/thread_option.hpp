#pragma once
// One --threads for every command that computes with LibTorch (eval,
// regenerate, replay, make-tiny-target, inspect): LibTorch's own default, a
// thread per core, oversubscribes a machine that is busy with other work
// (regenerate ran 17x slower beside other jobs on 2 cores). Training reads
// the same setting from the config (run.torch_threads).
#include <CLI/CLI.hpp>

namespace dflow::cli {

inline void add_threads_option(CLI::App& sub, int& threads) {
  sub.add_option("--threads", threads, "LibTorch intra-op threads (as run.torch_threads for dflow train)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

}  // namespace dflow::cli
