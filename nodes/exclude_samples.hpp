#pragma once
// A feature batch without some of its samples: quarantined since the loader
// read it (drafter_step), or whose engine file holds other tokens
// (features.engine with on_mismatch: skip). Either way the samples are
// counted in excluded_samples and never trained on.
#include "data/quarantine.hpp"
#include "nodes/messages.hpp"

namespace dflow::nodes {

class RunContext;

// Unpacked rows of excluded samples are dropped; in a packed row the other
// samples stay and the excluded ones stay as documents of their own (nothing
// else attends to them) without a loss, and the batch keeps the plan its
// rows were collated from (PaddedBatch::collated) to pair the loss's
// per-sample figures with their samples.
FeatureBatch without_samples(const RunContext& run, const FeatureBatch& in, const data::SampleSet& excluded);

}  // namespace dflow::nodes
