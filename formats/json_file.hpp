// A JSON file (config.json) written whole or not at all: to a temporary
// beside it, then renamed over it, so a reader never sees half a file.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>

namespace dflow::formats {

// json.dump(2) and a newline; throws naming the file when it cannot be written.
void write_json_atomically(const std::filesystem::path& path, const nlohmann::json& json);

}  // namespace dflow::formats
