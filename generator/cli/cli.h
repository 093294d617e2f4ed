// The convgen command line: one function per subcommand, each parsing its own options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace convgen::cli {

using Args = std::vector<std::string>;

// Each returns the process exit code (docs/exit-codes.md) or throws convgen::Error.
int compile_layer(const Args& args);
int schedule(const Args& args);
int emit_runtime(const Args& args);
int inspect(const Args& args);
int compile_model(const Args& args);
int run_model(const Args& args);
int check_model(const Args& args);
int train_model(const Args& args);
int tune(const Args& args);
int cache(const Args& args);

// Shared option helpers: "--key value" or "--key=value".
struct OptionReader {
  explicit OptionReader(const Args& args) : args_(args) {}
  bool done() const { return pos_ >= args_.size(); }
  const std::string& peek() const { return args_[pos_]; }
  // True (and advances) if the current argument is `flag`.
  bool flag(const std::string& name);
  // True (and stores the value, advancing) if the current argument is `name` with a value.
  bool value(const std::string& name, std::string* out);
  std::string positional();
  // True (and advances) after printing `usage` for --help / -h, or the version for
  // --version: the command then exits 0.
  bool help_or_version(const std::string& usage);

 private:
  const Args& args_;
  size_t pos_ = 0;
};

void print_version();

// True for a C identifier (a kernel or model name): [A-Za-z_][A-Za-z0-9_]*.
bool is_c_identifier(const std::string& s);

// Whole-file I/O with convgen::Error (Io) on failure, and JSON string escaping.
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& text);
std::string json_escape(const std::string& s);

// --cache-dir DIR / --no-cache: the kernel cache of the commands that run kernels
// in-process (generator/kernel_cache). True (and applies it, advancing) if the current
// argument is one of them.
bool kernel_cache_option(OptionReader& r);
// Their --help lines.
extern const char* const kKernelCacheHelp;

// A positive integer option value ("--batch 32"); Usage error otherwise.
int64_t parse_count(const std::string& option, const std::string& text);

}  // namespace convgen::cli
