#include "formats/json_file.hpp"

#include <fstream>
#include <stdexcept>

namespace dflow::formats {

void write_json_atomically(const std::filesystem::path& path, const nlohmann::json& json) {
  auto temp_path = path;
  temp_path += ".tmp";
  {
    std::ofstream out(temp_path, std::ios::trunc);
    out << json.dump(2) << "\n";
    out.flush();
    if (!out) throw std::runtime_error("cannot write '" + temp_path.string() + "'");
  }
  std::filesystem::rename(temp_path, path);
}

}  // namespace dflow::formats
