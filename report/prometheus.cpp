#include "report/prometheus.hpp"

#include <charconv>
#include <cmath>
#include <sstream>
#include <utility>
#include <vector>

#include "report/run_data.hpp"

namespace dflow::report {

namespace {

struct Family {
  std::string name, type, help;
  std::vector<std::pair<std::string, double>> samples;  // label text ("" or {a="b"}), value
};

std::string escape_label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  return ec == std::errc() ? std::string(buffer, end) : "NaN";
}

class Exposition {
 public:
  Family& family(std::string name, std::string type, std::string help) {
    families_.push_back({std::move(name), std::move(type), std::move(help), {}});
    return families_.back();
  }
  // A gauge of one step-record field; absent fields are left out.
  void step_gauge(const nlohmann::json& record, const char* field, const char* name, const char* help) {
    if (record.is_object() && record.contains(field)) family(name, "gauge", help).samples.emplace_back("", number_or_nan(record[field]));
  }
  std::string text() const {
    std::ostringstream out;
    for (const auto& f : families_) {
      if (f.samples.empty()) continue;
      out << "# HELP " << f.name << " " << f.help << "\n# TYPE " << f.name << " " << f.type << "\n";
      for (const auto& [labels, value] : f.samples) out << f.name << labels << " " << format_value(value) << "\n";
    }
    return out.str();
  }

 private:
  std::vector<Family> families_;
};

std::string labels(std::initializer_list<std::pair<const char*, std::string>> pairs) {
  std::string out = "{";
  for (const auto& [key, value] : pairs) out.append(out.size() > 1 ? "," : "").append(key).append("=\"").append(escape_label(value)).append("\"");
  return out + "}";
}

void add_step(Exposition& x, const nlohmann::json& r) {
  x.step_gauge(r, "global_step", "dflow_global_step", "Completed optimizer steps (1-based count).");
  x.step_gauge(r, "total_steps", "dflow_total_steps", "Optimizer steps in the whole run.");
  x.step_gauge(r, "run_progress", "dflow_run_progress", "Share of the run's steps completed.");
  x.step_gauge(r, "epoch", "dflow_epoch", "Current epoch (0-based).");
  x.step_gauge(r, "step_in_epoch", "dflow_step_in_epoch", "Completed steps in the current epoch.");
  x.step_gauge(r, "steps_per_epoch", "dflow_steps_per_epoch", "Optimizer steps per epoch, exact from the plan.");
  x.step_gauge(r, "epoch_progress", "dflow_epoch_progress", "Share of the current epoch's steps completed.");
  x.step_gauge(r, "loss", "dflow_loss", "Training loss of the newest step.");
  x.step_gauge(r, "grad_norm", "dflow_grad_norm", "Global gradient norm of the newest step, before clipping.");
  x.step_gauge(r, "lr", "dflow_lr", "Learning rate of the newest step.");
  x.step_gauge(r, "real_tokens", "dflow_step_real_tokens", "Real (unpadded) tokens in the newest step.");
  x.step_gauge(r, "padded_tokens", "dflow_step_padded_tokens", "Padded tokens in the newest step.");
  x.step_gauge(r, "padding_efficiency", "dflow_padding_efficiency", "Real tokens / padded tokens of the newest step.");
  x.step_gauge(r, "micro_batches", "dflow_step_micro_batches", "Micro-batches in the newest step.");
  if (!r.is_object()) return;
  if (r.contains("accuracy_per_position") && r["accuracy_per_position"].is_array()) {
    auto& f = x.family("dflow_accuracy", "gauge", "Draft accuracy of the newest step per block position (position k = 1..B-1).");
    for (size_t k = 0; k < r["accuracy_per_position"].size(); ++k)
      f.samples.emplace_back(labels({{"position", std::to_string(k + 1)}}), number_or_nan(r["accuracy_per_position"][k]));
  }
  if (r.contains("batches_per_bucket") && r["batches_per_bucket"].is_array()) {
    auto& f = x.family("dflow_step_batches", "gauge", "Batches of the newest step per length bucket.");
    for (size_t b = 0; b < r["batches_per_bucket"].size(); ++b)
      f.samples.emplace_back(labels({{"bucket", std::to_string(b)}}), number_or_nan(r["batches_per_bucket"][b]));
  }
  if (r.contains("guard") && r["guard"].is_object())
    x.family("dflow_guard_applied", "gauge", "1 when the stability guard applied the newest step's update, 0 when it skipped or halted.")
        .samples.emplace_back("", r["guard"].value("action", "") == "applied" ? 1.0 : 0.0);
  if (r.contains("time") && r["time"].is_object()) {
    const auto& t = r["time"];
    x.step_gauge(t, "step_s", "dflow_step_seconds", "Wall time of the newest step.");
    x.step_gauge(t, "elapsed_s", "dflow_elapsed_seconds", "Wall time since the run started.");
    x.step_gauge(t, "tokens_per_s", "dflow_tokens_per_second", "Real tokens per second in the newest step.");
    x.step_gauge(t, "eta_s", "dflow_eta_seconds", "Estimated seconds to the end of the run.");
  }
}

void add_telemetry(Exposition& x, const nlohmann::json& t) {
  if (!t.is_object()) return;
  x.step_gauge(t, "elapsed_s", "dflow_telemetry_elapsed_seconds", "Seconds the graph's meters have been running.");
  struct Field {
    const char* key;
    const char* name;
    const char* type;
    const char* help;
  };
  static const Field edge_fields[] = {
      {"capacity", "dflow_edge_capacity", "gauge", "Items the edge can hold."},
      {"occupancy", "dflow_edge_occupancy", "gauge", "Items waiting in the edge now."},
      {"high_water", "dflow_edge_high_water", "gauge", "Most items ever waiting in the edge."},
      {"mean_occupancy", "dflow_edge_mean_occupancy", "gauge", "Time-weighted mean items waiting since the run started."},
      {"items_passed", "dflow_edge_items_total", "counter", "Items taken by the edge's consumer."},
      {"producer_blocked_s", "dflow_edge_producer_blocked_seconds_total", "counter", "Time the edge was full: its producer could not put."},
      {"consumer_starved_s", "dflow_edge_consumer_starved_seconds_total", "counter", "Time the edge was empty: its consumer had nothing."}};
  static const Field node_fields[] = {
      {"calls", "dflow_node_calls_total", "counter", "Calls of the node's body."},
      {"busy_s", "dflow_node_busy_seconds_total", "counter", "Time inside the node's body."},
      {"max_s", "dflow_node_max_seconds", "gauge", "Longest single call of the node's body."},
      {"errors", "dflow_node_errors_total", "counter", "Calls of the node's body that threw."},
      {"outside_wait_s", "dflow_node_outside_wait_seconds_total", "counter",
       "Time inside the node's body spent waiting on a producer outside the graph (an extraction's files)."},
      {"ready_ahead", "dflow_node_ready_ahead", "gauge",
       "Items the outside producer has ready ahead of training (engine files of the next samples)."}};
  const auto edges = t.value("edges", nlohmann::json::array());
  const auto nodes = t.value("nodes", nlohmann::json::array());
  for (const auto& field : edge_fields) {
    auto& f = x.family(field.name, field.type, field.help);
    for (const auto& e : edges)
      if (e.contains(field.key)) f.samples.emplace_back(labels({{"edge", e.value("name", "")}}), number_or_nan(e[field.key]));
  }
  for (const auto& field : node_fields) {
    auto& f = x.family(field.name, field.type, field.help);
    for (const auto& n : nodes)
      if (n.contains(field.key))
        f.samples.emplace_back(labels({{"node", n.value("name", "")}, {"replica", std::to_string(n.value("replica", 0))}}),
                               number_or_nan(n[field.key]));
  }
}

}  // namespace

std::string to_prometheus(const nlohmann::json& last_record, const nlohmann::json& telemetry) {
  Exposition x;
  add_step(x, last_record);
  add_telemetry(x, telemetry);
  return x.text();
}

}  // namespace dflow::report
