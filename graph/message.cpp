#include "graph/message.hpp"

#include <cxxabi.h>

#include <cstdlib>
#include <stdexcept>

namespace dflow::graph {

std::string type_name(std::type_index type) {
  if (type == std::type_index(typeid(void))) return "nothing";
  int status = 0;
  char* demangled = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : type.name();
  std::free(demangled);
  return name;
}

void throw_payload_mismatch(const Message& message, std::type_index expected) {
  std::string carried = message.payload ? type_name(message.type) : "no payload";
  throw std::logic_error("message seq " + std::to_string(message.seq) + " carries '" + carried + "' but '" +
                         type_name(expected) + "' was expected");
}

}  // namespace dflow::graph
