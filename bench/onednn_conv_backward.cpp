#include "bench/onednn_conv_backward.h"

#include <omp.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

#include <dnnl.hpp>
#include <fmt/format.h>

#include "bench/onednn_util.h"
#include "schedules/errors.h"

namespace convgen::bench {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

memory::desc any_layout(const memory::dims& dims) { return memory::desc(dims, dt::f32, tag::any); }

// The forward_training primitive descriptor a framework would have created for the
// forward pass of this layer; oneDNN needs it as the hint of the backward primitives.
dnnl::convolution_forward::primitive_desc forward_hint(const ConvDescriptor& d,
                                                       const OnednnConvShapes& s,
                                                       const dnnl::engine& eng) {
  const auto prop = dnnl::prop_kind::forward_training;
  const auto alg = dnnl::algorithm::convolution_direct;
  const memory::desc src = any_layout(s.src_dims), wei = any_layout(s.wei_dims);
  const memory::desc dst = any_layout(s.dst_dims);
  auto desc = d.bias ? dnnl::convolution_forward::desc(prop, alg, src, wei, s.user_bias_md, dst,
                                                       s.strides, s.dilates, s.pad_l, s.pad_r)
                     : dnnl::convolution_forward::desc(prop, alg, src, wei, dst, s.strides,
                                                       s.dilates, s.pad_l, s.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, eng);
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Backward data

struct OnednnConvBackwardData::Impl {
  ConvDescriptor d;
  int threads = 1;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::convolution_backward_data::primitive_desc pd;
  dnnl::convolution_backward_data conv;

  OnednnBuffers buffers;  // before the memories on it
  memory::desc user_dy_md, user_wei_md, user_dx_md;
  memory dy_mem, wei_mem, dx_mem, scratch_mem;

  double in_ms = -1.0, out_ms = -1.0;

  void threads_on() const { omp_set_num_threads(threads); }
};

OnednnConvBackwardData::OnednnConvBackwardData(const ConvDescriptor& d, int threads)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.d = d;
  m.threads = std::max(threads, 1);
  m.threads_on();

  const OnednnConvShapes s = onednn_conv_shapes(d);
  m.user_dy_md = s.user_dst_md;
  m.user_wei_md = s.user_wei_md;
  m.user_dx_md = s.user_src_md;
  try {
    const auto hint = forward_hint(d, s, m.eng);
    const dnnl::convolution_backward_data::desc desc(
        dnnl::algorithm::convolution_direct, any_layout(s.src_dims), any_layout(s.wei_dims),
        any_layout(s.dst_dims), s.strides, s.dilates, s.pad_l, s.pad_r);
    m.pd = dnnl::convolution_backward_data::primitive_desc(desc, user_scratchpad(), m.eng, hint);
    m.conv = dnnl::convolution_backward_data(m.pd);
  } catch (const dnnl::error& e) {
    throw Error(ExitCode::Unsupported,
                fmt::format("oneDNN: no backward-data convolution for {}: {}", d.normalised(),
                            e.what()));
  }

  m.dy_mem = m.buffers.make(m.pd.diff_dst_desc(), m.eng);
  m.wei_mem = m.buffers.make(m.pd.weights_desc(), m.eng);
  m.dx_mem = m.buffers.make(m.pd.diff_src_desc(), m.eng);
  m.scratch_mem = m.buffers.make(m.pd.scratchpad_desc(), m.eng);
}

OnednnConvBackwardData::~OnednnConvBackwardData() = default;

void OnednnConvBackwardData::prepare(const float* dy, const float* w) {
  Impl& m = *impl_;
  m.threads_on();
  const bool measure = m.in_ms < 0.0;
  const double ms = onednn_import(m.strm, m.user_dy_md, dy, m.dy_mem, measure) +
                    onednn_import(m.strm, m.user_wei_md, w, m.wei_mem, measure);
  if (measure) {
    m.in_ms = ms;
    // Measure the way back once too (on whatever diff_src holds now).
    std::vector<float> staging(m.user_dx_md.get_size() / sizeof(float));
    m.out_ms = onednn_export(m.strm, m.dx_mem, m.user_dx_md, staging.data(), true);
  }
}

void OnednnConvBackwardData::run() {
  Impl& m = *impl_;
  m.threads_on();
  m.conv.execute(m.strm, {{DNNL_ARG_DIFF_DST, m.dy_mem},
                          {DNNL_ARG_WEIGHTS, m.wei_mem},
                          {DNNL_ARG_DIFF_SRC, m.dx_mem},
                          {DNNL_ARG_SCRATCHPAD, m.scratch_mem}});
  m.strm.wait();
}

void OnednnConvBackwardData::fetch(float* dx_nhwc) {
  Impl& m = *impl_;
  m.threads_on();
  onednn_export(m.strm, m.dx_mem, m.user_dx_md, dx_nhwc, false);
}

void OnednnConvBackwardData::run_and_fetch(const float* dy, const float* w, float* dx_nhwc) {
  prepare(dy, w);
  run();
  fetch(dx_nhwc);
}

std::string OnednnConvBackwardData::impl_name() const { return impl_->pd.impl_info_str(); }

int64_t OnednnConvBackwardData::workspace_bytes() const {
  return static_cast<int64_t>(impl_->pd.scratchpad_desc().get_size());
}

double OnednnConvBackwardData::reorder_in_ms() const { return std::max(impl_->in_ms, 0.0); }
double OnednnConvBackwardData::reorder_out_ms() const { return std::max(impl_->out_ms, 0.0); }
double OnednnConvBackwardData::reorder_ms() const { return reorder_in_ms() + reorder_out_ms(); }

std::string OnednnConvBackwardData::layouts() const {
  const Impl& m = *impl_;
  return fmt::format("diff_dst={} wei={} diff_src={}", onednn_layout_name(m.pd.diff_dst_desc()),
                     onednn_layout_name(m.pd.weights_desc()),
                     onednn_layout_name(m.pd.diff_src_desc()));
}

// ---------------------------------------------------------------------------------------
// Backward weights

struct OnednnConvBackwardWeights::Impl {
  ConvDescriptor d;
  int threads = 1;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::convolution_backward_weights::primitive_desc pd;
  dnnl::convolution_backward_weights conv;

  OnednnBuffers buffers;  // before the memories on it
  memory::desc user_x_md, user_dy_md, user_dw_md, user_db_md;
  memory x_mem, dy_mem, dw_mem, db_mem, scratch_mem;

  double in_ms = -1.0, out_ms = -1.0;

  void threads_on() const { omp_set_num_threads(threads); }
};

OnednnConvBackwardWeights::OnednnConvBackwardWeights(const ConvDescriptor& d, int threads)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.d = d;
  m.threads = std::max(threads, 1);
  m.threads_on();

  const OnednnConvShapes s = onednn_conv_shapes(d);
  m.user_x_md = s.user_src_md;
  m.user_dy_md = s.user_dst_md;
  m.user_dw_md = s.user_wei_md;
  m.user_db_md = s.user_bias_md;
  try {
    const auto hint = forward_hint(d, s, m.eng);
    const auto alg = dnnl::algorithm::convolution_direct;
    const memory::desc x = any_layout(s.src_dims), dw = any_layout(s.wei_dims);
    const memory::desc dy = any_layout(s.dst_dims);
    auto desc = d.bias ? dnnl::convolution_backward_weights::desc(alg, x, dw, s.user_bias_md, dy,
                                                                  s.strides, s.dilates, s.pad_l,
                                                                  s.pad_r)
                       : dnnl::convolution_backward_weights::desc(alg, x, dw, dy, s.strides,
                                                                  s.dilates, s.pad_l, s.pad_r);
    m.pd = dnnl::convolution_backward_weights::primitive_desc(desc, user_scratchpad(), m.eng, hint);
    m.conv = dnnl::convolution_backward_weights(m.pd);
  } catch (const dnnl::error& e) {
    throw Error(ExitCode::Unsupported,
                fmt::format("oneDNN: no backward-weights convolution for {}: {}", d.normalised(),
                            e.what()));
  }

  m.x_mem = m.buffers.make(m.pd.src_desc(), m.eng);
  m.dy_mem = m.buffers.make(m.pd.diff_dst_desc(), m.eng);
  m.dw_mem = m.buffers.make(m.pd.diff_weights_desc(), m.eng);
  if (d.bias) m.db_mem = m.buffers.make(m.pd.diff_bias_desc(), m.eng);
  m.scratch_mem = m.buffers.make(m.pd.scratchpad_desc(), m.eng);
}

OnednnConvBackwardWeights::~OnednnConvBackwardWeights() = default;

void OnednnConvBackwardWeights::prepare(const float* x, const float* dy) {
  Impl& m = *impl_;
  m.threads_on();
  const bool measure = m.in_ms < 0.0;
  const double ms = onednn_import(m.strm, m.user_x_md, x, m.x_mem, measure) +
                    onednn_import(m.strm, m.user_dy_md, dy, m.dy_mem, measure);
  if (measure) {
    m.in_ms = ms;
    // Measure the way back once too (on whatever the gradients hold now).
    std::vector<float> staging(m.user_dw_md.get_size() / sizeof(float));
    m.out_ms = onednn_export(m.strm, m.dw_mem, m.user_dw_md, staging.data(), true);
    if (m.d.bias) {
      staging.resize(m.user_db_md.get_size() / sizeof(float));
      m.out_ms += onednn_export(m.strm, m.db_mem, m.user_db_md, staging.data(), true);
    }
  }
}

void OnednnConvBackwardWeights::run() {
  Impl& m = *impl_;
  m.threads_on();
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, m.x_mem},
                                       {DNNL_ARG_DIFF_DST, m.dy_mem},
                                       {DNNL_ARG_DIFF_WEIGHTS, m.dw_mem},
                                       {DNNL_ARG_SCRATCHPAD, m.scratch_mem}};
  if (m.d.bias) args.emplace(DNNL_ARG_DIFF_BIAS, m.db_mem);
  m.conv.execute(m.strm, args);
  m.strm.wait();
}

void OnednnConvBackwardWeights::fetch(float* dw_oihw, float* db) {
  Impl& m = *impl_;
  m.threads_on();
  onednn_export(m.strm, m.dw_mem, m.user_dw_md, dw_oihw, false);
  if (m.d.bias) {
    if (db == nullptr) throw Error(ExitCode::Internal, "oneDNN peer: bias gradient expected");
    onednn_export(m.strm, m.db_mem, m.user_db_md, db, false);
  }
}

void OnednnConvBackwardWeights::run_and_fetch(const float* x, const float* dy, float* dw_oihw,
                                              float* db) {
  prepare(x, dy);
  run();
  fetch(dw_oihw, db);
}

std::string OnednnConvBackwardWeights::impl_name() const { return impl_->pd.impl_info_str(); }

int64_t OnednnConvBackwardWeights::workspace_bytes() const {
  return static_cast<int64_t>(impl_->pd.scratchpad_desc().get_size());
}

double OnednnConvBackwardWeights::reorder_in_ms() const { return std::max(impl_->in_ms, 0.0); }
double OnednnConvBackwardWeights::reorder_out_ms() const { return std::max(impl_->out_ms, 0.0); }
double OnednnConvBackwardWeights::reorder_ms() const {
  return reorder_in_ms() + reorder_out_ms();
}

std::string OnednnConvBackwardWeights::layouts() const {
  const Impl& m = *impl_;
  return fmt::format("src={} diff_dst={} diff_wei={}", onednn_layout_name(m.pd.src_desc()),
                     onednn_layout_name(m.pd.diff_dst_desc()),
                     onednn_layout_name(m.pd.diff_weights_desc()));
}

}  // namespace convgen::bench
