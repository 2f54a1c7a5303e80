#pragma once
// The functions namespace of gpt-oss's developer message: a line's `tools`
// (each as tojson wrote it) as the TypeScript-like types its chat template writes.
#include <string>
#include <vector>

namespace dflow::text {

// "## functions\n\nnamespace functions {\n\n...} // namespace functions".
// Throws ChatTemplateError naming the tool and key the template could not write.
std::string harmony_functions_namespace(const std::vector<std::string>& tools);

}  // namespace dflow::text
