#pragma once
// Where the tests find the checkout, the built dflow binary and the venv's
// tools. Defined in one generated file (tests/test_paths.cpp.in) rather than
// as compile definitions: test sources then carry no absolute path, so a
// fresh clone elsewhere (as CI makes) reuses their cached objects.
#include <string>

namespace dflow::testing {

std::string source_dir();        // the checkout's root
std::string dflow_binary();      // the built `dflow` executable
std::string python();            // the venv's Python ("" when there is none)
std::string torchrun();          // torchrun beside the venv's torch ("" when there is none)
std::string text_fixture_dir();  // tokenizer fixtures made by the text_fixture test

}  // namespace dflow::testing
