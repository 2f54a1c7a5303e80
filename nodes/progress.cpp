#include "nodes/progress.hpp"

#include <stdexcept>

namespace dflow::nodes {

void Progress::complete_step(const StepPosition& position, int64_t batches_per_step) {
  completed_steps = position.global_step + 1;
  if (position.step_in_epoch + 1 >= position.steps_per_epoch)
    cursor = data::PlanCursor{position.epoch + 1, 0};
  else
    cursor = data::PlanCursor{position.epoch, (position.step_in_epoch + 1) * batches_per_step};
}

nlohmann::json Progress::to_json() const {
  return {{"global_step", completed_steps}, {"epoch", cursor.epoch}, {"next_batch", cursor.next_batch}};
}

Progress Progress::from_json(const nlohmann::json& json) {
  for (const char* key : {"global_step", "epoch", "next_batch"})
    if (!json.contains(key)) throw std::runtime_error(std::string("run state lacks '") + key + "'");
  Progress p;
  p.completed_steps = json.at("global_step").get<int64_t>();
  p.cursor = data::PlanCursor{json.at("epoch").get<int>(), json.at("next_batch").get<int64_t>()};
  return p;
}

}  // namespace dflow::nodes
