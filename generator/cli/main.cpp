// convgen: the command-line driver. Every failure is a one-line message on stderr and a
// stable exit code (docs/exit-codes.md); nothing here aborts on bad input.
#include <cctype>
#include <cstdio>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "generator/cli/cli.h"
#include "generator/kernel_cache/kernel_cache.h"
#include "schedules/build_info.h"
#include "schedules/errors.h"

namespace convgen::cli {

bool OptionReader::flag(const std::string& name) {
  if (done() || args_[pos_] != name) return false;
  ++pos_;
  return true;
}

bool OptionReader::value(const std::string& name, std::string* out) {
  if (done()) return false;
  const std::string& a = args_[pos_];
  if (a == name) {
    if (pos_ + 1 >= args_.size()) throw Error(ExitCode::Usage, fmt::format("{} needs a value", name));
    *out = args_[pos_ + 1];
    pos_ += 2;
    return true;
  }
  if (a.rfind(name + "=", 0) == 0) {
    *out = a.substr(name.size() + 1);
    ++pos_;
    return true;
  }
  return false;
}

bool OptionReader::help_or_version(const std::string& usage) {
  if (flag("--help") || flag("-h")) {
    fmt::print("{}", usage);
    return true;
  }
  if (flag("--version")) {
    print_version();
    return true;
  }
  return false;
}

std::string OptionReader::positional() {
  const std::string& a = args_[pos_];
  if (a.size() > 1 && a[0] == '-') throw Error(ExitCode::Usage, fmt::format("unknown option {}", a));
  ++pos_;
  return a;
}

const char* const kKernelCacheHelp =
    "  --cache-dir DIR      the kernel cache: kernels compiled once per machine, loaded by\n"
    "                       every process (default $CONVGEN_CACHE_DIR, else\n"
    "                       $XDG_CACHE_HOME/convgen, else ~/.cache/convgen; docs/kernel-cache.md)\n"
    "  --no-cache           JIT-compile every kernel in this process and store nothing\n"
    "                       (also CONVGEN_CACHE=off)\n";

bool kernel_cache_option(OptionReader& r) {
  std::string dir;
  if (r.value("--cache-dir", &dir)) {
    if (dir.empty()) throw Error(ExitCode::Usage, "--cache-dir: expected a directory");
    set_kernel_cache_dir(dir);
    return true;
  }
  if (r.flag("--no-cache")) {
    disable_kernel_cache();
    return true;
  }
  return false;
}

int64_t parse_count(const std::string& option, const std::string& text) {
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9' || value > (int64_t(1) << 40))
      throw Error(ExitCode::Usage, fmt::format("{} {}: expected a positive integer", option, text));
    value = value * 10 + (c - '0');
  }
  if (text.empty() || value < 1) throw Error(ExitCode::Usage, fmt::format("{} {}: expected a positive integer", option, text));
  return value;
}

bool is_c_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ExitCode::Io, fmt::format("{}: cannot read", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw Error(ExitCode::Io, fmt::format("{}: cannot write", path));
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
      continue;
    }
    out += c;
  }
  return out;
}

void print_version() {
  fmt::print("convgen {} (Halide {}, generator {})\n", CONVGEN_VERSION, CONVGEN_HALIDE_VERSION,
             std::string(CONVGEN_GENERATOR_HASH).substr(0, 12));
}

namespace {

const char* kUsage = R"(usage: convgen <command> [options]

Commands:
  compile-layer DESCRIPTOR -o DIR   generate one kernel (--pass fwd|bwd_data|bwd_weights) of a layer
  schedule DESCRIPTOR               print the schedule convgen would use, and why
  inspect MODEL.onnx                import an ONNX model and print the graph convgen sees
  compile MODEL.onnx [-o DIR]       generate the kernels of a model into one static library
  run MODEL.onnx --input F.pb ...   run a model in-process on ONNX tensor files
  check DIR                         run an ONNX test case (model.onnx + test_data_set_*)
  train MODEL.onnx --data SOURCE    train a model, batch-parallel (fashion-mnist, idx:, cifar10:, synthetic)
  tune INPUT... --records FILE      measure schedules on this CPU (models, layer sets, descriptors)
  cache [info|trim|clear]           the kernel cache every process shares: its size, keeping it small
  emit-runtime -o DIR               write the Halide runtime object kernels built with
                                    --no-runtime link against (convgen::runtime has it)

Options for every command: --help, --version, --verbose.
DESCRIPTOR is a layer in benchdnn-style form, e.g. mb8ic64ih56oc64oh56kh3ph1n"res2a",
or a quoted row of a layer-set TSV (docs/descriptor.md). Exit codes: docs/exit-codes.md.
Buffers of 2 MiB and more lie on transparent huge pages; CONVGEN_HUGE_PAGES=0 turns that
off (docs/architecture.md).
)";

int run(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    fmt::print("{}", kUsage);
    return args.empty() ? static_cast<int>(ExitCode::Usage) : 0;
  }
  if (args[0] == "--version") {
    print_version();
    return 0;
  }
  const Args rest(args.begin() + 1, args.end());
  if (args[0] == "compile-layer") return compile_layer(rest);
  if (args[0] == "schedule") return schedule(rest);
  if (args[0] == "emit-runtime") return emit_runtime(rest);
  if (args[0] == "inspect") return inspect(rest);
  if (args[0] == "compile") return compile_model(rest);
  if (args[0] == "run") return run_model(rest);
  if (args[0] == "check") return check_model(rest);
  if (args[0] == "train") return train_model(rest);
  if (args[0] == "tune") return tune(rest);
  if (args[0] == "cache") return cache(rest);
  throw Error(ExitCode::Usage, fmt::format("unknown command '{}' (see convgen --help)", args[0]));
}

}  // namespace
}  // namespace convgen::cli

int main(int argc, char** argv) {
  try {
    return convgen::cli::run(convgen::cli::Args(argv + 1, argv + argc));
  } catch (const convgen::Error& e) {
    std::fprintf(stderr, "convgen: %s\n", e.what());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "convgen: internal error: %s\n", e.what());
    return static_cast<int>(convgen::ExitCode::Internal);
  }
}
