// write_file_durably: the one writer of every file a user keeps (checkpoints, records,
// saved models, weights, profiles).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "schedules/durable_file.h"
#include "schedules/errors.h"
#include "tests/common/temp_dir.h"

namespace convgen {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_CASE("write_file_durably writes, replaces and leaves no temporary", "[durable_file]") {
  test::TempDir dir;
  const std::string path = dir.file("out.bin");
  const std::string bytes("a\0b\nc", 5);  // binary-safe
  write_file_durably(path, bytes);
  CHECK(read_all(path) == bytes);
  write_file_durably(path, "shorter");
  CHECK(read_all(path) == "shorter");
  write_file_durably(path, "");
  CHECK(read_all(path).empty());
  CHECK(dir.entries() == std::vector<std::string>{"out.bin"});
}

TEST_CASE("write_file_durably: a relative path lands in the working directory", "[durable_file]") {
  test::TempDir dir;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path);
  write_file_durably("plain.txt", "x");
  std::filesystem::current_path(cwd);
  CHECK(read_all(dir.file("plain.txt")) == "x");
}

TEST_CASE("write_file_durably: a failure is an Io error naming the path, and the old file stays", "[durable_file]") {
  test::TempDir dir;
  const std::string missing = dir.file("no/such/dir/out.json");
  try {
    write_file_durably(missing, "x");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::Io);
    CHECK_THAT(e.what(), Catch::StartsWith(missing + ": cannot write"));
  }
  CHECK(dir.entries().empty());
  // A directory in the way of the rename: the old entry is untouched, no temporary left.
  std::filesystem::create_directory(dir.file("taken"));
  CHECK_THROWS_AS(write_file_durably(dir.file("taken"), "x"), Error);
  CHECK(std::filesystem::is_directory(dir.file("taken")));
  CHECK(dir.entries() == std::vector<std::string>{"taken"});
}

}  // namespace
}  // namespace convgen
