// The server and the client of a two-process perf tool (net_perf,
// plugin_perf) swap handles and results through files in one folder that both
// see, also from two network namespaces; a failure ends the process with the
// tool's name and role.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace signlion {
namespace perf {

inline double nowSec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct PairFiles {
  const char* tool;
  std::string dir;
  bool server = false;
  bool self = false;  // one process playing both ends (net_perf --role self)

  explicit PairFiles(const char* toolName) : tool(toolName) {}

  [[noreturn]] void die(const char* what) const {
    fprintf(stderr, "%s (%s): %s\n", tool, self ? "self" : server ? "server" : "client", what);
    exit(1);
  }
  // Written under a temporary name and renamed: the reader never sees part of it.
  void put(const std::string& name, const void* data, size_t size) const {
    std::string tmp = dir + "/" + name + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(static_cast<const char*>(data), size);
    if (rename(tmp.c_str(), (dir + "/" + name).c_str()) != 0) die("rename");
  }
  // Waits for the file, 60 s at most.
  void get(const std::string& name, void* data, size_t size) const {
    for (int i = 0; i < 60000; i++) {
      std::ifstream f(dir + "/" + name, std::ios::binary);
      if (f && f.read(static_cast<char*>(data), size)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    die(("no file " + name).c_str());
  }
};

}  // namespace perf
}  // namespace signlion
