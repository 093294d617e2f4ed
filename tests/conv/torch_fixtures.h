// Reader for the PyTorch reference fixtures of tests/conv/fixtures/torch/, written by
// scripts/make-torch-fixtures (format in its docstring). Tests read them without
// needing PyTorch.
#pragma once

#include <istream>
#include <map>
#include <string>
#include <vector>

#include "schedules/conv_descriptor.h"

namespace convgen::test {

struct TorchFixture {
  ConvDescriptor descriptor;
  // x NHWC, w OIHW, b, y NHWK, dy NHWK, dx NHWC, dw OIHW, db; b and db only with bias.
  std::map<std::string, std::vector<double>> arrays;

  // The named array; throws std::runtime_error naming it when it is absent.
  const std::vector<double>& array(const std::string& name) const;
};

// Parses a fixture. `where` names it in errors, which read "where:line: what". Checks
// the header, the descriptor, that every array the descriptor calls for is present
// exactly once with the element count it implies, and that every value is finite.
TorchFixture parse_torch_fixture(std::istream& in, const std::string& where);

// Reads and parses the file at `path`.
TorchFixture read_torch_fixture(const std::string& path);

// The values as float; throws when one is not exactly representable, since the
// fixtures' inputs are chosen to be exact in float32.
std::vector<float> exact_floats(const std::vector<double>& values, const std::string& what);

}  // namespace convgen::test
