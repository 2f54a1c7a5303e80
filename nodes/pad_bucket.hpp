#pragma once
// The batching node's settings, read where the run context plans epochs
// (before the graph exists) and by the node kind's params check alike.
#include "config/yaml_reader.hpp"

namespace dflow::nodes {

// pad_bucket.fixed_batch params: {batch_size: rows per micro-batch}.
struct FixedBatchParams {
  int batch_size = 8;
};
FixedBatchParams read_fixed_batch_params(config::YamlSection& params);

// pad_bucket.pack params: {pack_window: samples packed together}.
struct PackParams {
  int pack_window = 4096;
};
PackParams read_pack_params(config::YamlSection& params);

}  // namespace dflow::nodes
