// Join widths 1..5 (see stage.hpp).
#include "graph/stage_impl.hpp"

namespace dflow::graph {
DFLOW_STAGE_WIDTH(1)
DFLOW_STAGE_WIDTH(2)
DFLOW_STAGE_WIDTH(3)
DFLOW_STAGE_WIDTH(4)
DFLOW_STAGE_WIDTH(5)
}  // namespace dflow::graph
