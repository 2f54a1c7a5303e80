// capture.load, target_forward.capture and capture.write: the capture graph's own
// kinds (nodes/capture_nodes.hpp). The target replicas and the writer run on
// separate graph threads: while the writer copies, encodes and writes one
// batch's features, the target computes the next; the edge between them
// bounds the features held in memory.
#include "nodes/capture_nodes.hpp"

#include <cstdio>

#include "config/log.hpp"
#include "graph/telemetry.hpp"
#include "nodes/feature_source.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_support.hpp"

namespace dflow::nodes {

namespace {

std::string duration_text(double seconds) {
  char text[32];
  const auto s = static_cast<long long>(seconds + 0.5);
  if (s >= 3600) std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s / 60 % 60);
  else if (s >= 60) std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(text, sizeof text, "%llds", s);
  return text;
}

// "batch 12 of epoch 0 (14 samples, first 803): <what>": the batch a failure names.
template <class Body>
void naming_batch(const data::PlannedBatch& plan, Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    throw std::runtime_error("batch " + std::to_string(plan.index_in_epoch) + " of epoch " + std::to_string(plan.epoch) +
                             " (" + std::to_string(plan.num_samples()) + " samples, first " +
                             (plan.sample_ids.empty() ? std::string("-") : std::to_string(plan.sample_ids.front())) +
                             "): " + e.what());
  }
}

class CaptureLoad final : public graph::SourceBody {
 public:
  CaptureLoad(const RunContext& run, RunJournal& journal, const CaptureJob& job)
      : journal_(journal), job_(job), steps_per_epoch_(run.plans().get(0)->steps_per_epoch()) {}

  bool next(graph::Emitter& out) override {
    if (next_ >= job_.todo.size()) {
      journal_.source_exhausted = true;
      return false;
    }
    LoadedBatch loaded;
    loaded.plan = *job_.todo[next_];
    // global_step: the batch's place in this capture (what faults and records count).
    loaded.position = StepPosition{0, loaded.plan.step_in_epoch, steps_per_epoch_, static_cast<int64_t>(next_), 0, 1};
    const auto cost = static_cast<uint64_t>(loaded.plan.padded_tokens);
    out.emit(graph::make_message(next_++, cost, std::move(loaded)));
    return true;
  }

 private:
  RunJournal& journal_;
  const CaptureJob& job_;
  int64_t steps_per_epoch_;
  size_t next_ = 0;
};

class CaptureTarget final : public graph::FunctionBody {
 public:
  CaptureTarget(const RunContext& run, std::string name, int replica)
      : run_(run), name_(std::move(name)), replica_(replica), target_(*run.targets.at(static_cast<size_t>(replica))) {}

  void process(graph::Inputs& in, graph::Emitter& out) override {
    auto message = in[0];
    auto& batch = graph::payload<PaddedBatch>(message);
    torch::Tensor features;  // [B, S, n*H] on the target's device, in its dtype
    naming_batch(batch.plan, [&] {
      inject_node_faults(run_, name_, batch.position.global_step);
      features = target_features(run_, target_, batch);
    });
    FeatureBatch result{std::move(batch), std::move(features), replica_};
    out.emit(graph::make_message(message.seq, message.cost, std::move(result)));
  }

 private:
  const RunContext& run_;
  std::string name_;
  int replica_;
  const model::TargetModel& target_;
};

class CaptureWrite final : public graph::FunctionBody {
 public:
  CaptureWrite(const RunContext& run, RunJournal& journal, CaptureJob& job, std::string name,
               const graph::TelemetryBoard* telemetry)
      : run_(run), journal_(journal), job_(job), name_(std::move(name)), telemetry_(telemetry),
        last_log_(job.started) {}

  void process(graph::Inputs& in, graph::Emitter&) override {
    auto& batch = in.get<FeatureBatch>(0);
    const auto& plan = batch.batch.plan;
    int64_t samples = 0;
    naming_batch(plan, [&] {
      inject_node_faults(run_, name_, batch.batch.position.global_step);
      samples = write_sample_features(*job_.writer, run_, batch.batch, batch.features, job_.dtype,
                                      [&](int64_t id) { return job_.missing.count(id) > 0; });
    });
    batch.features = torch::Tensor();  // the copy is written: let the device memory go
    const int64_t done = ++job_.batches_written, todo = static_cast<int64_t>(job_.todo.size());
    const int64_t tokens = job_.tokens_computed += plan.real_tokens;
    padded_tokens_ += plan.padded_tokens;
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - job_.started).count();
    const double tokens_per_s = static_cast<double>(tokens) / std::max(elapsed, 1e-9);
    const double eta = elapsed / static_cast<double>(done) * static_cast<double>(todo - done);
    journal_.write(record(done, todo, samples, tokens, elapsed, tokens_per_s, eta));
    if (done == todo || std::chrono::duration<double>(now - last_log_).count() >= job_.progress_every_s) {
      last_log_ = now;
      log::info("cache", log::str(job_.tag, done, "/", todo, " batches, ", static_cast<int64_t>(tokens_per_s),
                                  " tokens/s, ", data::format_bytes(job_.writer->bytes_written()), " written, ETA ",
                                  duration_text(eta)));
    }
  }

 private:
  // One batch written: the report reads it as a step (global_step: batches
  // written, the graph's telemetry as it was then).
  nlohmann::json record(int64_t done, int64_t todo, int64_t samples, int64_t tokens, double elapsed,
                        double tokens_per_s, double eta) const {
    nlohmann::json r = {{"kind", "step"},
                        {"capture", true},
                        {"epoch", 0},
                        {"global_step", done},
                        {"total_steps", todo},
                        {"run_progress", static_cast<double>(done) / static_cast<double>(todo)},
                        {"samples_written", samples},
                        {"samples_written_total", job_.writer->samples_written()},
                        {"bytes_written_total", job_.writer->bytes_written()},
                        {"shards_published", job_.writer->shards_published()},
                        {"real_tokens_total", tokens},
                        {"padded_tokens_total", padded_tokens_},
                        {"time", {{"elapsed_s", elapsed}, {"tokens_per_s", tokens_per_s}, {"eta_s", eta}}}};
    if (telemetry_) r["telemetry"] = graph::to_json(telemetry_->snapshot());
    return r;
  }

  const RunContext& run_;
  RunJournal& journal_;
  CaptureJob& job_;
  std::string name_;
  const graph::TelemetryBoard* telemetry_;
  std::chrono::steady_clock::time_point last_log_;
  int64_t padded_tokens_ = 0;
};

}  // namespace

void register_capture_nodes(graph::NodeRegistry& registry, CaptureJob& job) {
  graph::NodeSpec load;
  load.type = "capture.load";
  load.description = "source: epoch 0's batches of this rank that hold a sample the feature cache lacks";
  load.kind = graph::NodeKind::source;
  load.outputs = {{"out", "LoadedBatch"}};
  load.make = [&job](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    const auto& env = environment(context);
    return std::make_unique<CaptureLoad>(env.run, env.journal, job);
  };
  registry.add(std::move(load));

  graph::NodeSpec target;
  target.type = "target_forward.capture";
  target.description = "frozen target under no-grad: fused features in the target's dtype, as the cache stores them";
  target.inputs = {{"in", "PaddedBatch"}};
  target.outputs = {{"out", "FeatureBatch"}};
  target.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    const auto& run = environment(context).run;
    if (context.replicas != static_cast<int>(run.targets.size()))
      throw ConfigError(context.params.mark_of(""), "pipeline.nodes." + context.name + ".replicas",
                        "node '" + context.name + "' has " + std::to_string(context.replicas) +
                            " replicas but devices.target lists " + std::to_string(run.targets.size()) +
                            " devices: one replica per target device");
    return std::make_unique<CaptureTarget>(run, context.name, context.replica);
  };
  registry.add(std::move(target));

  graph::NodeSpec write;
  write.type = "capture.write";
  write.description = "sink: copies the features to the host, encodes and writes the samples the cache lacks";
  write.inputs = {{"in", "FeatureBatch"}};
  write.make = [&job](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    const auto& env = environment(context);
    return std::make_unique<CaptureWrite>(env.run, env.journal, job, context.name, context.telemetry);
  };
  registry.add(std::move(write));
}

}  // namespace dflow::nodes
