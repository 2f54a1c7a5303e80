#pragma once
// Where the graph is backed up, from the telemetry in the step records:
// which node bounds throughput (the highest busy share, full edges in front
// of it, starved edges behind it) and which edges are draining now.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "report/drain_detector.hpp"
#include "report/pipeline_model.hpp"
#include "report/run_data.hpp"

namespace dflow::report {

struct NodeLoad {
  std::string name, type;
  int replicas = 1;
  std::optional<bool> compute;  // as its kind declares (PipelineNode::compute)
  std::string when_bound;       // as its kind declares (PipelineNode::when_bound)
  uint64_t calls = 0, errors = 0;
  double busy_s = 0;      // all replicas together
  double busy_share = 0;  // busy_s / (replicas x elapsed): 1 = every replica always busy
  double max_s = 0;       // longest single call
  std::vector<double> replica_busy_share;
  // A node that waits on a producer outside the graph (features.engine on an
  // extraction still running), else -1 and 0: all replicas together.
  int64_t ready_ahead = -1;       // items ready ahead of its consumers at the snapshot
  double outside_wait_s = 0;      // part of busy_s spent waiting outside
  double outside_wait_share = 0;  // outside_wait_s / (replicas x elapsed)
  bool waits_outside() const { return ready_ahead >= 0; }
};

struct EdgePieceLoad {  // one runtime edge: the declared one, or one replica's of a routed edge
  std::string name;
  int capacity = 0, occupancy = 0, high_water = 0;
  uint64_t items = 0;
  double mean_occupancy = 0;
  double producer_blocked_s = 0, consumer_starved_s = 0;
  double blocked_share = 0, starved_share = 0;  // of elapsed time
};

struct EdgeLoad {
  std::string name, from, to;  // declared name, node names
  bool token = false;
  int capacity = 0;             // all pieces together
  int high_water = 0;           // the largest piece's
  double mean_occupancy = 0;    // all pieces together
  double blocked_share = 0;     // mean over pieces: time its producer could not put
  double starved_share = 0;     // mean over pieces: time its consumer had nothing
  std::vector<EdgePieceLoad> pieces;
};

struct Bottleneck {
  std::string node, type;
  std::optional<bool> compute;  // the node's (NodeLoad::compute)
  std::string when_bound;
  double busy_share = 0;
  std::vector<std::string> full_inputs;       // edges in front of it that are full / producer-blocked
  std::vector<std::string> starved_outputs;   // edges after it whose consumers wait
};

struct AnalysisOptions {
  DrainOptions drain{};        // window for "draining now"
  double bound_share = 0.5;    // a node busier than this can bound throughput
  double full_share = 0.2;     // an input edge blocked this share of the time is "full"
  double starved_share = 0.3;  // an output edge empty this share of the time is "starved"
  double outside_share = 0.1;  // a node waiting outside this share of the time: its outside producer bounds the run
};

struct Analysis {
  int64_t global_step = 0;  // of the snapshot analysed
  int64_t total_steps = 0;
  double elapsed_s = 0;
  bool has_telemetry = false;
  std::vector<NodeLoad> nodes;  // pipeline order
  std::vector<EdgeLoad> edges;
  std::optional<Bottleneck> bottleneck;
  std::vector<DrainAlarm> draining;  // falling now (last window), with the step where each will be empty
  std::vector<std::string> summary;  // the findings in words, most important first
  // {"nodes": [...], "edges": [...], "bottleneck": ..., "draining": [...], "summary": [...]}: what the page shows.
  nlohmann::json to_json() const;
};

Analysis analyze(const PipelineModel& pipeline, const std::vector<nlohmann::json>& steps, const AnalysisOptions& options = {});
Analysis analyze(const RunData& run, const AnalysisOptions& options = {});

// The summary in words (report/analysis_text.cpp); analyze() fills Analysis::summary with it.
std::vector<std::string> describe_findings(const Analysis& analysis, const AnalysisOptions& options);

// One line per finding, for the console at the end of `dflow report`.
std::string bottleneck_summary(const Analysis& analysis);

}  // namespace dflow::report
