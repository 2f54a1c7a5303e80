#pragma once
// A tiny blocking HTTP/1.1 GET for the live server tests (Connection: close).
#include <string>

namespace dflow::report::test {

struct HttpReply {
  int status = 0;  // 0: no connection
  std::string headers, body;
};

HttpReply http_get(int port, const std::string& path);

}  // namespace dflow::report::test
