#pragma once
// The declared pipeline drawn as inline SVG, top to bottom: one
// <g class="node" data-node=NAME> per node, one <g class="edge" data-edge=NAME>
// per declared edge (token edges dashed, routed to the left). The numbers on
// them (occupancy, blocked and busy shares) are filled in by the page's
// script from the analysis, so that the live page can update them.
#include <string>
#include <string_view>

#include "report/pipeline_model.hpp"

namespace dflow::report {

std::string pipeline_svg(const PipelineModel& pipeline);

// &, <, >, " and ' as entities: safe in text and in attribute values.
std::string escape_html(std::string_view text);

}  // namespace dflow::report
