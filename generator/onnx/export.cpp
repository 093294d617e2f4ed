#include "generator/onnx/export.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include "schedules/durable_file.h"
#include "schedules/errors.h"

namespace convgen::model {

namespace fs = std::filesystem;

void check_initializers(const std::string& source, const std::vector<std::string>& names) {
  std::ifstream in(source, std::ios::binary);
  onnx::ModelProto model;
  if (!in || !model.ParseFromIstream(&in))
    throw Error(ExitCode::BadModel, fmt::format("{}: bad model: not a valid ONNX protobuf", source));
  std::set<std::string> floats;
  for (const onnx::TensorProto& t : model.graph().initializer())
    if (t.data_type() == onnx::TensorProto::FLOAT) floats.insert(t.name());
  for (const std::string& name : names)
    if (!floats.count(name))
      throw Error(ExitCode::Unsupported,
                  fmt::format("{}: --save: the trained tensor '{}' is not a float32 initializer of the model (a folded "
                              "constant?), so it cannot be written back", source, name));
}

void save_onnx_with_initializers(const std::string& source, const std::map<std::string, std::vector<float>>& tensors,
                                 const std::string& destination) {
  std::ifstream in(source, std::ios::binary);
  if (!in) throw Error(ExitCode::Io, fmt::format("{}: cannot read", source));
  onnx::ModelProto model;
  if (!model.ParseFromIstream(&in))
    throw Error(ExitCode::BadModel, fmt::format("{}: bad model: not a valid ONNX protobuf", source));
  size_t replaced = 0;
  for (onnx::TensorProto& t : *model.mutable_graph()->mutable_initializer()) {
    auto it = tensors.find(t.name());
    if (it == tensors.end()) continue;
    int64_t elements = 1;
    for (int64_t d : t.dims()) elements *= d;
    if (t.data_type() != onnx::TensorProto::FLOAT || elements != static_cast<int64_t>(it->second.size()))
      throw Error(ExitCode::Unsupported,
                  fmt::format("{}: initializer '{}' is not a float32 tensor of {} elements", source, t.name(),
                              it->second.size()));
    t.clear_float_data();
    t.clear_data_location();
    t.clear_external_data();
    // raw_data is little-endian float32, the host's order on x86-64.
    t.set_raw_data(std::string(reinterpret_cast<const char*>(it->second.data()), it->second.size() * sizeof(float)));
    ++replaced;
  }
  if (replaced != tensors.size())
    throw Error(ExitCode::Unsupported,
                fmt::format("{}: {} of the {} trained tensors are not initializers of the model", source,
                            tensors.size() - replaced, tensors.size()));
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    throw Error(ExitCode::Internal, fmt::format("{}: the model could not be serialised", destination));
  write_file_durably(destination, bytes);
}

}  // namespace convgen::model
