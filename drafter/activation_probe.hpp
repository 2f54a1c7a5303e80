#pragma once
// The largest |value| the drafter's activations reach, per named point, while
// a probe is set on the calling thread: `dflow export --dtype float16` drafts
// the held-out prompts under one and refuses an export whose activations
// would overflow float16 (+-65504), naming the point. The points are the
// backbone's: the target's features it reads, fc and its norm, each layer's
// attention and MLP outputs (and the MLP's gated product) and residual
// stream, the final norm. Without a probe the forward pays one pointer test.
#include <torch/torch.h>

#include <map>
#include <string>

namespace dflow::drafter {

class ActivationProbe {
 public:
  ActivationProbe();   // the calling thread's probe until destroyed
  ~ActivationProbe();
  ActivationProbe(const ActivationProbe&) = delete;
  ActivationProbe& operator=(const ActivationProbe&) = delete;

  // The thread's probe, null when none is set.
  static ActivationProbe* current();
  // Keeps max(|x|) under `name` (a non-finite value is kept as such).
  void record(const std::string& name, const torch::Tensor& x);
  // Each point's largest |value| so far.
  const std::map<std::string, double>& maxima() const { return maxima_; }

 private:
  std::map<std::string, double> maxima_;
  ActivationProbe* previous_ = nullptr;
};

// probe->record(name, x) when a probe is set.
inline void probe_activation(const char* name, const torch::Tensor& x) {
  if (auto* probe = ActivationProbe::current()) probe->record(name, x);
}

}  // namespace dflow::drafter
