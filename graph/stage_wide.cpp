// Join widths 6..10 (see stage.hpp).
#include "graph/stage_impl.hpp"

namespace dflow::graph {
DFLOW_STAGE_WIDTH(6)
DFLOW_STAGE_WIDTH(7)
DFLOW_STAGE_WIDTH(8)
DFLOW_STAGE_WIDTH(9)
DFLOW_STAGE_WIDTH(10)
}  // namespace dflow::graph
