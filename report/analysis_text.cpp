// The findings of analyze() in words: what a person reading the report (or
// the console at the end of a run) should look at first.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "report/analysis.hpp"

namespace dflow::report {

namespace {

std::string percent(double share) { return std::to_string(static_cast<int>(std::lround(100 * share))) + "%"; }

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value;
  return out.str();
}

const EdgeLoad* find_edge(const Analysis& a, const std::string& name) {
  for (const auto& e : a.edges)
    if (e.name == name) return &e;
  return nullptr;
}

std::string node_label(const NodeLoad& n) {
  std::string label = "`" + n.name + "`";
  if (!n.type.empty()) label += " (" + n.type + (n.replicas > 1 ? " x" + std::to_string(n.replicas) : "") + ")";
  else if (n.replicas > 1) label += " (x" + std::to_string(n.replicas) + ")";
  return label;
}

std::string bound_text(const Analysis& a, const Bottleneck& b) {
  const NodeLoad& node = *std::find_if(a.nodes.begin(), a.nodes.end(), [&](const NodeLoad& n) { return n.name == b.node; });
  std::string text = node_label(node) + " bounds throughput: busy " + percent(b.busy_share) + " of the run";
  if (node.replicas > 1) text += " (each of its " + std::to_string(node.replicas) + " replicas)";
  text += ", more than any other node.";
  std::vector<std::string> parts;
  for (const auto& name : b.full_inputs) {
    const EdgeLoad& e = *find_edge(a, name);
    parts.push_back("`" + name + "` is full " + percent(e.blocked_share) + " of the time (mean " + fixed(e.mean_occupancy, 1) +
                    " of " + std::to_string(e.capacity) + ")");
  }
  if (!parts.empty()) {
    text += " Work queues up in front of it: ";
    for (size_t i = 0; i < parts.size(); ++i) text += (i ? "; " : "") + parts[i];
    text += ", so its producers wait.";
  }
  parts.clear();
  for (const auto& name : b.starved_outputs)
    parts.push_back("`" + name + "` is empty " + percent(find_edge(a, name)->starved_share) + " of the time");
  if (!parts.empty()) {
    text += " Behind it the graph waits: ";
    for (size_t i = 0; i < parts.size(); ++i) text += (i ? "; " : "") + parts[i];
    text += ".";
  }
  return text;
}

// What the bound node's busy time is, as its kind declares (graph.json);
// nothing when the file does not say.
std::string compute_text(const Bottleneck& b) {
  if (!b.compute) return "";
  if (!b.when_bound.empty()) return b.when_bound;
  if (*b.compute) return "That is compute, as the performance model expects: the rest of the graph hides behind it.";
  return "That is not a compute node: the performance model expects the target's or the drafter's compute to bound a run, "
         "so `" + b.node + "` (" + b.type + ") is not hidden behind compute. Give it more time (replicas, capacity) or less work.";
}

// Whether the producer outside the graph (an extraction writing the files a
// features.engine node reads) or training bounds the run.
std::string outside_text(const NodeLoad& n, const AnalysisOptions& options) {
  const std::string waited = fixed(n.outside_wait_s, 1) + " s (" + percent(n.outside_wait_share) + " of the run)";
  const std::string ahead = std::to_string(n.ready_ahead) + " sample file(s) were ready ahead of training at the last step";
  if (n.outside_wait_share >= options.outside_share)
    return "The extraction bounds this run, not training: " + node_label(n) + " waited " + waited +
           " for files the engine had not written yet, and " + ahead +
           ". Training draws its samples in shuffled order: an extraction in dataset order must be ahead of it, "
           "not only as fast. Extract in training order (`dflow extraction-order`, then features.engine's "
           "params.file_order), give the extraction more throughput (GPUs, concurrency), or start training once "
           "more files are there.";
  return "Training bounds this run, not the extraction: " + node_label(n) + " waited only " + waited +
         " for the engine's files, and " + ahead + ".";
}

std::string drain_text(const Analysis& a, const DrainAlarm& d) {
  std::string text = "`" + d.edge + "` is draining: " + fixed(d.trend_items_per_step, 3) + " items/step (now " + fixed(d.occupancy, 1) +
         " of " + std::to_string(d.capacity) + ")";
  if (d.projected_empty_step <= d.global_step) return text + "; at this trend it is already empty: its consumer waits on its producer.";
  text += "; at this trend it is empty at step " + std::to_string(d.projected_empty_step);
  if (a.total_steps > 0 && d.projected_empty_step > a.total_steps)
    return text + ", after the run ends (step " + std::to_string(a.total_steps) + ").";
  return text + ", and from then on its consumer waits on its producer.";
}

}  // namespace

std::vector<std::string> describe_findings(const Analysis& a, const AnalysisOptions& options) {
  std::vector<std::string> out;
  if (!a.has_telemetry) return {"No graph telemetry in the step records: nothing to say about where the graph waits."};
  if (a.bottleneck) {
    out.push_back(bound_text(a, *a.bottleneck));
    if (auto c = compute_text(*a.bottleneck); !c.empty()) out.push_back(c);
    for (const auto& n : a.nodes)
      if (n.name != a.bottleneck->node && n.busy_share >= options.bound_share)
        out.push_back(node_label(n) + " is busy " + percent(n.busy_share) + " too: once `" + a.bottleneck->node +
                      "` is faster, it is the next bound.");
  } else if (!a.nodes.empty()) {
    const NodeLoad& busiest = *std::max_element(a.nodes.begin(), a.nodes.end(),
                                                [](const NodeLoad& x, const NodeLoad& y) { return x.busy_share < y.busy_share; });
    out.push_back("No node is busy even " + percent(options.bound_share) + " of the time (busiest: " + node_label(busiest) + ", " +
                  percent(busiest.busy_share) + "): the stages wait on each other more than they work.");
  }
  for (const auto& n : a.nodes)
    if (n.waits_outside()) out.insert(out.begin() + std::min<size_t>(out.size(), 2), outside_text(n, options));
  for (const auto& d : a.draining) out.push_back(drain_text(a, d));
  for (const auto& n : a.nodes)
    if (n.errors > 0) out.push_back("`" + n.name + "` failed " + std::to_string(n.errors) + " call(s).");
  if (out.empty()) out.push_back("Nothing stands out: no node bounds the run and no edge is draining.");
  return out;
}

std::string bottleneck_summary(const Analysis& a) {
  std::string out;
  for (const auto& line : a.summary) out += "- " + line + "\n";
  return out;
}

}  // namespace dflow::report
