#pragma once
// What travels on every edge of the graph: a sequence number, a cost for
// routers, and a type-erased payload (payload structs live in nodes/, so that
// graph/ never sees LibTorch). Port types are checked when the graph is built;
// payload<T>() checks the C++ type again when a node reads a message.
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <typeindex>
#include <utility>

namespace dflow::graph {

struct Message {
  uint64_t seq = 0;   // position in the source's order (plan index); reorder restores it
  uint64_t cost = 0;  // e.g. padded tokens; routers balance outstanding cost
  std::shared_ptr<void> payload;
  std::type_index type = typeid(void);  // the C++ type behind `payload`
  // Runtime-owned: which bounded edge carried this message, so that its
  // consumer returns the credit to that edge (an input port may merge
  // several edges). Producers never set it; the edge stamps it on put.
  uint32_t edge_id = 0;
};

// The payload of a token placed on a token edge at start (`initial: N`).
struct Token {
  uint64_t index = 0;  // 0..initial-1
};

// "dflow::nodes::PaddedBatch" rather than a mangled name.
std::string type_name(std::type_index type);

[[noreturn]] void throw_payload_mismatch(const Message& message, std::type_index expected);

template <class T>
Message make_message(uint64_t seq, uint64_t cost, T&& value) {
  using V = std::decay_t<T>;
  return Message{seq, cost, std::make_shared<V>(std::forward<T>(value)), std::type_index(typeid(V)), 0};
}

// The payload as T; throws std::logic_error naming both types on a mismatch.
template <class T>
T& payload(Message& message) {
  if (message.type != std::type_index(typeid(T)) || !message.payload) throw_payload_mismatch(message, typeid(T));
  return *static_cast<T*>(message.payload.get());
}

template <class T>
const T& payload(const Message& message) {
  if (message.type != std::type_index(typeid(T)) || !message.payload) throw_payload_mismatch(message, typeid(T));
  return *static_cast<const T*>(message.payload.get());
}

}  // namespace dflow::graph
