#pragma once
// The contents of a SpecForge offline capture file (the container:
// train/specforge_container.hpp): a torch.save dict, read with LibTorch's
// unpickler (torch::pickle_load, no Python). Its DFlash-family records hold
//   input_ids, loss_mask         [L] or [1, L] (integers)
//   hidden_states                [1, L, n_taps * H] or [L, n_taps * H]: the
//                                draft config's target_layer_ids, each the
//                                output of that decoder layer, concatenated
//                                in increasing layer order
//   target_last_hidden_states    [1, L, H] or [L, H], DSpark's captures only:
//                                the last layer's output after the final norm
// in the target's dtype. L is the length of the capture's batch: a sample
// shorter than its batch's longest is padded at its end with token 0 and
// loss_mask 0, and its states there are the padding's.
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "train/specforge_container.hpp"

namespace dflow::train {

struct SpecForgeSample {
  std::filesystem::path path;
  std::vector<int64_t> token_ids;  // [L], the file's input_ids
  int64_t padding_from = 0;        // positions from here on are the batch's padding (token 0, loss_mask 0)
  torch::Tensor hidden_states;     // [L, n_taps * H], as stored
  torch::Tensor last_hidden;       // [L, H] after the final norm, or undefined (not a DSpark capture)
};

// Reads a whole container's archive. Throws data::DataError naming the file
// (and the tensor) for bytes LibTorch cannot unpickle, a record that is not a
// dict of tensors, or a tensor missing or of another dtype or shape.
SpecForgeSample read_specforge_sample(const SpecForgeContainer& container);

}  // namespace dflow::train
