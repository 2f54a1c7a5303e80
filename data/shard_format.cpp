#include "data/shard_format.hpp"

#include <cstdio>

namespace dflow::data::format {

std::string shard_file_name(uint64_t shard_number) {
  char name[32];
  std::snprintf(name, sizeof name, "shard-%05llu.bin", static_cast<unsigned long long>(shard_number));
  return name;
}

}  // namespace dflow::data::format
