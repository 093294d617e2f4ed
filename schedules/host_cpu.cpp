#include "schedules/host_cpu.h"

#include <fstream>
#include <string>

namespace convgen {
namespace {

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return trimmed(line);
}

// "32K", "1024K", "32M" -> bytes; 0 if unreadable.
int64_t parse_size(const std::string& text) {
  if (text.empty()) return 0;
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    return 0;
  }
  const char unit = used < text.size() ? text[used] : ' ';
  return unit == 'K' ? value << 10 : unit == 'M' ? value << 20 : unit == 'G' ? value << 30 : value;
}

HostCpu read_host_cpu() {
  HostCpu cpu;
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) cpu.model = trimmed(line.substr(colon + 1));
      break;
    }
  }
  if (cpu.model.empty()) cpu.model = "unknown";
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    const std::string level = read_line(dir + "level"), type = read_line(dir + "type");
    if (level.empty()) break;
    const int64_t bytes = parse_size(read_line(dir + "size"));
    if (level == "1" && type == "Data") cpu.l1d_bytes = bytes;
    if (level == "2") cpu.l2_bytes = bytes;
    if (level == "3") cpu.l3_bytes = bytes;
  }
  return cpu;
}

}  // namespace

const HostCpu& host_cpu() {
  static const HostCpu cpu = read_host_cpu();
  return cpu;
}

}  // namespace convgen
