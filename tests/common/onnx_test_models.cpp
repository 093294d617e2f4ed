#include "tests/common/onnx_test_models.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <unistd.h>

namespace convgen::test {

OnnxModelBuilder::OnnxModelBuilder(int64_t opset) {
  model_.set_ir_version(opset >= 15 ? 8 : 7);
  model_.set_producer_name("convgen-tests");
  auto* o = model_.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  model_.mutable_graph()->set_name("test");
}

OnnxModelBuilder& OnnxModelBuilder::input(const std::string& name, const std::vector<int64_t>& shape, int elem_type) {
  auto* v = model_.mutable_graph()->add_input();
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  auto* s = t->mutable_shape();
  for (size_t i = 0; i < shape.size(); ++i) {
    auto* d = s->add_dim();
    if (shape[i] >= 0) d->set_dim_value(shape[i]);
    else d->set_dim_param(i == 0 ? "N" : "D" + std::to_string(i));
  }
  return *this;
}

OnnxModelBuilder& OnnxModelBuilder::output(const std::string& name, int rank, int elem_type) {
  auto* v = model_.mutable_graph()->add_output();
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  auto* s = t->mutable_shape();
  for (int i = 0; i < rank; ++i) s->add_dim()->set_dim_param(name + "_" + std::to_string(i));
  return *this;
}

OnnxModelBuilder& OnnxModelBuilder::weights(const std::string& name, const std::vector<int64_t>& shape) {
  auto* t = model_.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto_DataType_FLOAT);
  int64_t n = 1;
  for (int64_t d : shape) {
    t->add_dims(d);
    n *= d;
  }
  for (int64_t i = 0; i < n; ++i) t->add_float_data(0.01f * static_cast<float>(i % 100));
  return *this;
}

OnnxModelBuilder& OnnxModelBuilder::int64_initializer(const std::string& name, const std::vector<int64_t>& values) {
  auto* t = model_.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto_DataType_INT64);
  t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t->add_int64_data(v);
  return *this;
}

OnnxModelBuilder& OnnxModelBuilder::float_initializer(const std::string& name, const std::vector<float>& values) {
  auto* t = model_.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto_DataType_FLOAT);
  for (float v : values) t->add_float_data(v);
  return *this;
}

OnnxModelBuilder& OnnxModelBuilder::float_initializer(const std::string& name, const std::vector<int64_t>& shape,
                                                      const std::vector<float>& values) {
  float_initializer(name, values);
  for (int64_t d : shape) model_.mutable_graph()->mutable_initializer()->rbegin()->add_dims(d);
  return *this;
}

onnx::NodeProto& OnnxModelBuilder::node(const std::string& op, const std::vector<std::string>& inputs,
                                        const std::vector<std::string>& outputs, const std::string& name) {
  auto* n = model_.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : inputs) n->add_input(i);
  for (const auto& o : outputs) n->add_output(o);
  return *n;
}

std::string OnnxModelBuilder::bytes() const {
  std::string out;
  if (!model_.SerializeToString(&out)) throw std::runtime_error("cannot serialise the test model");
  return out;
}

std::string OnnxModelBuilder::write(const std::string& stem) const { return write_temp_file(stem, bytes()); }

void set_int(onnx::NodeProto& n, const std::string& key, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto_AttributeType_INT);
  a->set_i(v);
}

void set_float(onnx::NodeProto& n, const std::string& key, float v) {
  auto* a = n.add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto_AttributeType_FLOAT);
  a->set_f(v);
}

void set_string(onnx::NodeProto& n, const std::string& key, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto_AttributeType_STRING);
  a->set_s(v);
}

void set_ints(onnx::NodeProto& n, const std::string& key, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto_AttributeType_INTS);
  for (int64_t x : v) a->add_ints(x);
}

std::string write_temp_file(const std::string& stem, const std::string& bytes) {
  static std::atomic<int> counter{0};
  const auto dir = std::filesystem::temp_directory_path() / ("convgen-tests-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / (stem + "-" + std::to_string(counter++) + ".onnx");
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  if (!out) throw std::runtime_error("cannot write " + path.string());
  return path.string();
}

}  // namespace convgen::test
