#pragma once
// See ../README.md: declarations only, for c10d's ProcessGroupGloo.hpp.
#include <gloo/context.h>
