#pragma once
// What the report page embeds: step records slimmed to what the plots draw,
// events to mark on every plot, and the analysis. The static report and the
// live server build it the same way, so both pages are one page.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dflow::report {

// A step record reduced to what the page plots (keys are short: the page may
// hold thousands). Cumulative fields let a thinned series stay exact: the
// page divides differences between the points it has.
//   s global_step, ep epoch, sie step_in_epoch, spe steps_per_epoch, tot total_steps,
//   loss, gn grad_norm, lr, acc accuracy_per_position, pe padding_efficiency,
//   tps tokens/s, t elapsed_s, eta eta_s, tc cumulative real tokens, bc cumulative batches per bucket,
//   g guard action and reason when not applied,
//   tel {t elapsed_s, e {edge: [occupancy, mean_occupancy, producer_blocked_s, consumer_starved_s, capacity, token]},
//        n {node or node[r]: busy_s}}
class RecordSlimmer {
 public:
  nlohmann::json slim(const nlohmann::json& step_record);

 private:
  std::vector<double> batches_per_bucket_;
  double real_tokens_ = 0;
};

// A non-step record (checkpoint, guard, alarm, ...) as a mark on the plots:
// {"s": step, "kind": ..., "label": ...}; null when it names no step.
nlohmann::json event_mark(const nlohmann::json& record);
// A step whose guard skipped or halted its update, as a mark; null otherwise.
nlohmann::json guard_mark(const nlohmann::json& step_record);

// Indices of at most max_points of count items, evenly spread, always the
// first and the last, plus every index `keep` says must stay.
std::vector<size_t> thin(size_t count, size_t max_points, const std::function<bool(size_t)>& keep);

// A JSON text safe inside <script type="application/json">.
std::string script_json(const nlohmann::json& value);

}  // namespace dflow::report
