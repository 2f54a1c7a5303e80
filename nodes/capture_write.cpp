// capture.write: the capture graph's sink (nodes/capture_nodes.hpp). The
// device-to-host copy, encoding and shard write of the samples the cache
// lacks run here, on their own graph thread, while the target computes the
// next batch; the edge into it bounds the features held meanwhile. Also the
// progress log and one record a batch (with the graph's telemetry) for the
// report.
#include <cstdio>

#include "config/log.hpp"
#include "graph/telemetry.hpp"
#include "nodes/capture_nodes.hpp"
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
    naming_capture_batch(plan, [&] {
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

void register_capture_write(graph::NodeRegistry& registry, CaptureJob& job) {
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
