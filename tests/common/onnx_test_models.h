// Small ONNX models built in code for the import tests: a fluent builder over the ONNX
// protobuf classes, and helpers to write a model (or damaged bytes of it) to a file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace convgen::test {

class OnnxModelBuilder {
 public:
  explicit OnnxModelBuilder(int64_t opset = 13);

  // A float32 graph input; a dimension < 0 is dynamic (dim_param "N", or "D<i>").
  OnnxModelBuilder& input(const std::string& name, const std::vector<int64_t>& shape,
                          int elem_type = onnx::TensorProto_DataType_FLOAT);
  // A float32 graph output of the given rank; shape inference fills in its dimensions
  // (ONNX's checker wants a shape on every graph output).
  OnnxModelBuilder& output(const std::string& name, int rank, int elem_type = onnx::TensorProto_DataType_FLOAT);
  // A float32 initializer of the given shape, values 0.01 * i.
  OnnxModelBuilder& weights(const std::string& name, const std::vector<int64_t>& shape);
  OnnxModelBuilder& int64_initializer(const std::string& name, const std::vector<int64_t>& values);
  OnnxModelBuilder& float_initializer(const std::string& name, const std::vector<float>& values);
  // A float32 initializer of the given shape and values (row-major).
  OnnxModelBuilder& float_initializer(const std::string& name, const std::vector<int64_t>& shape,
                                      const std::vector<float>& values);
  // A node; returns it so the test can add attributes.
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = "");

  const onnx::ModelProto& model() const { return model_; }
  onnx::ModelProto& model() { return model_; }
  std::string bytes() const;
  // Writes the model to a fresh temporary file and returns its path.
  std::string write(const std::string& stem) const;

 private:
  onnx::ModelProto model_;
};

void set_int(onnx::NodeProto& n, const std::string& key, int64_t v);
void set_float(onnx::NodeProto& n, const std::string& key, float v);
void set_string(onnx::NodeProto& n, const std::string& key, const std::string& v);
void set_ints(onnx::NodeProto& n, const std::string& key, const std::vector<int64_t>& v);

// Writes raw bytes to a fresh temporary file and returns its path.
std::string write_temp_file(const std::string& stem, const std::string& bytes);

}  // namespace convgen::test
