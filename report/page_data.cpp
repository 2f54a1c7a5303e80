#include "report/page_data.hpp"

#include <algorithm>

#include "report/run_data.hpp"

namespace dflow::report {

namespace {
const nlohmann::json& field(const nlohmann::json& object, const char* key) {
  static const nlohmann::json null;
  auto it = object.find(key);
  return it == object.end() ? null : *it;
}

nlohmann::json slim_telemetry(const nlohmann::json& t) {
  nlohmann::json edges = nlohmann::json::object(), nodes = nlohmann::json::object();
  for (const auto& e : t.value("edges", nlohmann::json::array()))
    edges[e.value("name", "")] = {e.value("occupancy", 0), e.value("mean_occupancy", 0.0), e.value("producer_blocked_s", 0.0),
                                 e.value("consumer_starved_s", 0.0), e.value("capacity", 0), e.value("token", false) ? 1 : 0};
  for (const auto& n : t.value("nodes", nlohmann::json::array())) {
    std::string name = n.value("name", "");
    if (n.value("replicas", 1) > 1) name.append("[").append(std::to_string(n.value("replica", 0))).append("]");
    nodes[name] = n.value("busy_s", 0.0);
  }
  return {{"t", t.value("elapsed_s", 0.0)}, {"e", edges}, {"n", nodes}};
}
}  // namespace

nlohmann::json RecordSlimmer::slim(const nlohmann::json& r) {
  const auto& buckets = field(r, "batches_per_bucket");
  if (buckets.is_array()) {
    if (batches_per_bucket_.size() < buckets.size()) batches_per_bucket_.resize(buckets.size(), 0.0);
    for (size_t b = 0; b < buckets.size(); ++b) batches_per_bucket_[b] += buckets[b].is_number() ? buckets[b].get<double>() : 0.0;
  }
  if (field(r, "real_tokens").is_number()) real_tokens_ += r["real_tokens"].get<double>();
  const auto& time = field(r, "time");
  nlohmann::json s = {{"s", field(r, "global_step")}, {"ep", field(r, "epoch")}, {"sie", field(r, "step_in_epoch")},
                      {"spe", field(r, "steps_per_epoch")}, {"tot", field(r, "total_steps")}, {"loss", field(r, "loss")},
                      {"gn", field(r, "grad_norm")}, {"lr", field(r, "lr")}, {"acc", field(r, "accuracy_per_position")},
                      {"pe", field(r, "padding_efficiency")}, {"tc", real_tokens_}, {"bc", batches_per_bucket_}};
  if (field(r, "expected_tau").is_number()) s["et"] = r["expected_tau"];
  if (time.is_object()) {
    s["t"] = field(time, "elapsed_s");
    s["tps"] = field(time, "tokens_per_s");
    s["eta"] = field(time, "eta_s");
  }
  // Per-bucket loss (and grad norm where the record has it), keyed by bucket length.
  if (const auto& per_bucket = field(r, "buckets"); per_bucket.is_object()) {
    nlohmann::json loss = nlohmann::json::object(), grad = nlohmann::json::object();
    for (const auto& [length, b] : per_bucket.items()) {
      if (!b.is_object() || b.value("batches", 0) <= 0) continue;
      if (field(b, "loss").is_number()) loss[length] = b["loss"];
      if (field(b, "grad_norm").is_number()) grad[length] = b["grad_norm"];
    }
    if (!loss.empty()) s["bl"] = loss;
    if (!grad.empty()) s["bg"] = grad;
  }
  if (auto g = guard_mark(r); !g.is_null()) s["g"] = g["label"];
  if (field(r, "telemetry").is_object()) s["tel"] = slim_telemetry(r["telemetry"]);
  return s;
}

nlohmann::json guard_mark(const nlohmann::json& r) {
  const auto& guard = field(r, "guard");
  if (!guard.is_object() || guard.value("action", "applied") == "applied") return nullptr;
  std::string label = "guard " + guard.value("action", "") + ": " + guard.value("reason", "");
  if (guard.contains("sample_ids") && guard["sample_ids"].is_array() && !guard["sample_ids"].empty())
    label += " (" + std::to_string(guard["sample_ids"].size()) + " samples)";
  // Rollback: where the weights went back to, and what was taken out.
  if (guard.contains("to_step") && guard["to_step"].is_number())
    label += "; back to the state after step " + std::to_string(guard["to_step"].get<int64_t>());
  if (guard.contains("excluded_sample_ids") && guard["excluded_sample_ids"].is_array())
    label += ", " + std::to_string(guard["excluded_sample_ids"].size()) + " samples excluded";
  if (guard.contains("quarantined_sample_ids") && guard["quarantined_sample_ids"].is_array())
    label += "; " + std::to_string(guard["quarantined_sample_ids"].size()) + " samples quarantined";
  return {{"s", field(r, "global_step")}, {"kind", "guard"}, {"label", label}};
}

nlohmann::json event_mark(const nlohmann::json& r) {
  const auto& step = field(r, "global_step");
  if (!step.is_number()) return nullptr;
  const std::string kind = r.value("kind", "event");
  std::string label;
  if (r.contains("message") && r["message"].is_string()) label = r["message"].get<std::string>();
  else if (kind == "checkpoint") {
    label = "checkpoint step-" + std::to_string(step.get<int64_t>());
    if (r.contains("path") && r["path"].is_string()) label.append(" ").append(r["path"].get<std::string>());
  }
  else if (kind == "eval" && field(r, "mean_tau").is_number()) {
    // An evaluation: plotted as the tau curve rather than marked on every plot.
    const double tau = r["mean_tau"].get<double>();
    std::string text = std::to_string(tau);
    label = "eval: tau " + text.substr(0, text.find('.') + 3) + (r.value("best", false) ? " (best)" : "");
    return {{"s", step}, {"kind", kind}, {"label", label}, {"tau", tau}};
  }
  else if (r.contains("reason") && r["reason"].is_string()) label = kind + ": " + r["reason"].get<std::string>();
  else if (r.contains("guard") && r["guard"].is_object()) label = kind + ": " + r["guard"].value("reason", "");
  else label = kind;
  return {{"s", step}, {"kind", kind}, {"label", label}};
}

std::vector<size_t> thin(size_t count, size_t max_points, const std::function<bool(size_t)>& keep) {
  std::vector<size_t> out;
  if (count == 0) return out;
  const size_t stride = max_points > 1 && count > max_points ? (count + max_points - 2) / (max_points - 1) : 1;
  for (size_t i = 0; i < count; ++i)
    if (i % stride == 0 || i + 1 == count || (keep && keep(i))) out.push_back(i);
  return out;
}

std::string script_json(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '<' && i + 1 < text.size() && (text[i + 1] == '/' || text[i + 1] == '!')) {
      out += "\\u003c";  // never "</script" nor "<!--" inside the script element
      continue;
    }
    out += text[i];
  }
  return out;
}

}  // namespace dflow::report
