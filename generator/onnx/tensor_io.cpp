#include "generator/onnx/tensor_io.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include "generator/onnx/lowering.h"
#include "schedules/durable_file.h"
#include "schedules/errors.h"

namespace convgen::model {

Value read_tensor_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ExitCode::Io, fmt::format("{}: cannot read", path));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  onnx::TensorProto t;
  if (!t.ParseFromString(bytes.str()))
    throw Error(ExitCode::BadData, fmt::format("{}: bad data: not an ONNX TensorProto", path));
  try {
    Value v = tensor_value(t, path);
    v.is_constant = true;
    return v;
  } catch (const Error& e) {
    throw Error(ExitCode::BadData, e.what());
  }
}

void write_tensor_file(const std::string& path, const std::string& name, const Tensor& t) {
  const Tensor dense = with_layout(t, false);
  onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(onnx::TensorProto_DataType_FLOAT);
  for (int64_t d : dense.shape) p.add_dims(d);
  p.set_raw_data(std::string(reinterpret_cast<const char*>(dense.data.data()), dense.data.size() * sizeof(float)));
  std::string bytes;
  if (!p.SerializeToString(&bytes)) throw Error(ExitCode::Internal, fmt::format("{}: the tensor could not be serialised", path));
  write_file_durably(path, bytes);
}

}  // namespace convgen::model
