// Which record field becomes which TensorBoard tag. Scalars only where a
// number means something over steps; ids and per-sample lists stay in
// metrics.jsonl. Non-finite values ("nan", "inf" in the JSON) stay non-finite.
#include <cmath>
#include <limits>
#include <sstream>

#include "report/tensorboard_sink.hpp"

namespace dflow::report {

namespace {

using json = nlohmann::json;

// A record number: JSON numbers, and the "nan"/"inf"/"-inf" strings records use.
bool number_of(const json& v, double& out) {
  if (v.is_number()) return out = v.get<double>(), true;
  if (!v.is_string()) return false;
  const auto& s = v.get_ref<const std::string&>();
  if (s == "nan") return out = std::numeric_limits<double>::quiet_NaN(), true;
  if (s == "inf") return out = std::numeric_limits<double>::infinity(), true;
  if (s == "-inf") return out = -std::numeric_limits<double>::infinity(), true;
  return false;
}

class Points {
 public:
  void scalar(const std::string& tag, const json& object, const char* key) {
    double v;
    if (object.is_object() && object.contains(key) && number_of(object[key], v)) out.push_back({tag, v, {}, false});
  }
  void scalar(const std::string& tag, double v) { out.push_back({tag, v, {}, false}); }
  void per_position(const std::string& prefix, const json& list) {
    if (!list.is_array()) return;
    for (size_t i = 0; i < list.size(); ++i) {
      double v;
      if (number_of(list[i], v)) scalar(prefix + "@" + std::to_string(i + 1), v);
    }
  }
  void text(const std::string& tag, std::string markdown) { out.push_back({tag, 0, std::move(markdown), true}); }
  std::vector<TensorBoardPoint> out;
};

std::string plain(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

void step_points(const json& r, Points& p) {
  for (const char* key : {"loss", "grad_norm", "lr", "padding_efficiency", "real_tokens", "padded_tokens", "anchors",
                          "micro_batches", "excluded_samples"})
    p.scalar(std::string("train/") + key, r, key);
  p.per_position("train/accuracy", r.value("accuracy_per_position", json()));
  // Beside the measured tau (tau/measured, from the eval records) in one section.
  p.scalar("tau/expected", r, "expected_tau");
  if (r.contains("time"))
    for (const char* key : {"tokens_per_s", "step_s", "eta_s", "allreduce_s"})
      p.scalar(std::string("time/") + key, r["time"], key);
  for (const char* key : {"epoch", "epoch_progress", "run_progress"}) p.scalar(std::string("progress/") + key, r, key);
  if (r.contains("buckets") && r["buckets"].is_object())
    for (const auto& [length, bucket] : r["buckets"].items()) {
      p.scalar("bucket_loss/" + length, bucket, "loss");
      p.scalar("bucket_grad_norm/" + length, bucket, "grad_norm");
    }
}

void eval_points(const json& r, Points& p) {
  p.scalar("eval/mean_tau", r, "mean_tau");
  p.scalar("tau/measured", r, "mean_tau");
  p.scalar("eval/best_tau", r, "best_tau");
  p.per_position("eval/acceptance", r.value("acceptance_by_position", json()));
  if (r.contains("time")) p.scalar("eval/speculative_tokens_per_s", r["time"], "speculative_tokens_per_s");
}

void guard_text(const json& r, Points& p) {
  std::ostringstream md;
  md << "**" << plain(r.value("event", json("event"))) << "** at step " << plain(r.value("global_step", json(0)));
  if (r.contains("metric")) md << ": " << plain(r["metric"]) << " " << plain(r.value("value", json("?"))) << " (threshold "
                               << plain(r.value("threshold", json("?"))) << ")";
  md << "; action **" << plain(r.value("action", json("?"))) << "** (policy " << plain(r.value("policy", json("?"))) << ")";
  if (r.contains("reason")) md << "  \n" << plain(r["reason"]);
  if (r.contains("sample_ids")) md << "  \nsamples: " << r["sample_ids"].dump();
  p.text("guard", md.str());
}

}  // namespace

std::vector<TensorBoardPoint> TensorBoardTags::points(const json& record) {
  Points p;
  const std::string kind = record.value("kind", std::string());
  if (kind == "step") step_points(record, p);
  else if (kind == "eval") eval_points(record, p);
  else if (kind == "guard") guard_text(record, p);
  else if (kind == "alarm") p.text("alarm", plain(record.value("message", json(""))));
  if (kind != "step" || !record.contains("telemetry")) return std::move(p.out);

  // Graph telemetry: each edge's occupancy when the record arrived, and each
  // node's busy share since the previous record (summed over its replicas).
  const json& t = record["telemetry"];
  for (const auto& e : t.value("edges", json::array())) p.scalar("edge_occupancy/" + plain(e["name"]), e, "occupancy");
  std::map<std::string, std::pair<double, int>> busy;  // name -> (busy_s, replicas)
  for (const auto& n : t.value("nodes", json::array())) {
    auto& b = busy[plain(n["name"])];
    b.first += n.value("busy_s", 0.0);
    b.second = n.value("replicas", 1);
  }
  const double elapsed_s = t.value("elapsed_s", 0.0);
  if (elapsed_s < previous_elapsed_s_) previous_busy_s_.clear(), previous_elapsed_s_ = 0;  // a new graph
  const double interval_s = elapsed_s - previous_elapsed_s_;
  for (const auto& [name, b] : busy) {
    if (interval_s > 0) p.scalar("node_busy_share/" + name, (b.first - previous_busy_s_[name]) / (b.second * interval_s));
    previous_busy_s_[name] = b.first;
  }
  previous_elapsed_s_ = elapsed_s;
  return std::move(p.out);
}

}  // namespace dflow::report
