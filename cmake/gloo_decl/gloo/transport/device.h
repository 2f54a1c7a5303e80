#pragma once
// See ../../README.md: declarations only, for c10d's ProcessGroupGloo.hpp
// (held through shared_ptr/unique_ptr, never dereferenced by dflow).
namespace gloo::transport {

class Device;
class UnboundBuffer;

}  // namespace gloo::transport
