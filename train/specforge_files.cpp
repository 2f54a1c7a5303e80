// Reading a SpecForge offline capture record (train/specforge_files.hpp).
#include "train/specforge_files.hpp"

#include <torch/csrc/jit/serialization/pickle.h>

#include "data/data_error.hpp"

namespace dflow::train {

namespace {

data::DataError record_error(const std::filesystem::path& path, const std::string& what) {
  return data::DataError("SpecForge capture file " + path.string() + ": " + what);
}

std::string shape_text(const torch::Tensor& t) {
  std::string text = "[";
  for (int64_t i = 0; i < t.dim(); ++i) text += (i ? ", " : "") + std::to_string(t.size(i));
  return text + "]";
}

// LibTorch's messages run over several lines with a C++ backtrace: the first line says it.
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// [1, L, W] or [L, W] as [L, W]; [1, L] or [L] as [L].
torch::Tensor without_batch(const torch::Tensor& t, int64_t rank) {
  return t.dim() == rank + 1 && t.size(0) == 1 ? t.squeeze(0) : t;
}

}  // namespace

SpecForgeSample read_specforge_sample(const SpecForgeContainer& container) {
  const auto& path = container.path;
  c10::IValue record;
  try {
    record = torch::jit::pickle_load(container.archive);
  } catch (const std::exception& e) {
    throw record_error(path, "LibTorch cannot read it as a torch.save archive (" + first_line(e.what()) +
                                 "): damaged, or not written by torch.save; remove it or capture this sample again");
  }
  if (!record.isGenericDict())
    throw record_error(path, "holds a " + std::string(record.tagKind()) +
                                 ", not the dict of tensors SpecForge's prepare_hidden_states.py saves");
  const auto dict = record.toGenericDict();
  auto find = [&](const std::string& name) -> torch::Tensor {
    for (const auto& entry : dict) {
      if (!entry.key().isString() || entry.key().toStringRef() != name) continue;
      if (!entry.value().isTensor())
        throw record_error(path, "'" + name + "' is a " + std::string(entry.value().tagKind()) + ", not a tensor");
      return entry.value().toTensor();
    }
    return {};
  };
  const auto tokens = find("input_ids"), loss_mask = find("loss_mask"), hidden = find("hidden_states");
  const auto last = find("target_last_hidden_states");
  if (!tokens.defined() || !loss_mask.defined() || !hidden.defined())
    throw record_error(path, "needs the tensors input_ids, loss_mask and hidden_states (a DFlash, DSpark or Domino "
                             "capture: prepare_hidden_states.py --strategy dflash or dspark; an EAGLE3 capture holds "
                             "hidden_state and aux_hidden_state instead)");
  SpecForgeSample sample;
  sample.path = path;
  const auto ids = without_batch(tokens, 1), mask = without_batch(loss_mask, 1);
  if (ids.dim() != 1 || (ids.scalar_type() != torch::kInt64 && ids.scalar_type() != torch::kInt32))
    throw record_error(path, "input_ids must be int64 or int32 [L] or [1, L], got " +
                                 std::string(c10::toString(tokens.scalar_type())) + " " + shape_text(tokens));
  const int64_t positions = ids.size(0);
  if (mask.dim() != 1 || mask.size(0) != positions || mask.is_floating_point() || mask.is_complex())
    throw record_error(path, "loss_mask must be integer [" + std::to_string(positions) + "] like input_ids, got " +
                                 std::string(c10::toString(loss_mask.scalar_type())) + " " + shape_text(loss_mask));
  auto float_states = [&](const torch::Tensor& t, const std::string& name) {
    const auto states = without_batch(t, 2);
    const auto type = states.scalar_type();
    if (states.dim() != 2 || states.size(0) != positions ||
        (type != torch::kBFloat16 && type != torch::kFloat16 && type != torch::kFloat32))
      throw record_error(path, name + " must be bfloat16, float16 or float32 [1, " + std::to_string(positions) +
                                   ", width] with " + std::to_string(positions) + " positions as input_ids, got " +
                                   std::string(c10::toString(type)) + " " + shape_text(t));
    return states.contiguous();
  };
  sample.hidden_states = float_states(hidden, "hidden_states");
  if (last.defined()) sample.last_hidden = float_states(last, "target_last_hidden_states");
  const auto ids64 = ids.to(torch::kInt64).contiguous();
  sample.token_ids.assign(ids64.data_ptr<int64_t>(), ids64.data_ptr<int64_t>() + positions);
  const auto padding = (ids64 == 0).logical_and(mask.to(torch::kInt64) == 0).contiguous();
  sample.padding_from = positions;
  const auto* pad = padding.data_ptr<bool>();
  while (sample.padding_from > 0 && pad[sample.padding_from - 1]) --sample.padding_from;
  return sample;
}

}  // namespace dflow::train
