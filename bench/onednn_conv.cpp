#include "bench/onednn_conv.h"

#include <omp.h>

#include <algorithm>
#include <unordered_map>

#include <dnnl.hpp>
#include <fmt/format.h>

#include "bench/onednn_util.h"
#include "schedules/errors.h"

namespace convgen::bench {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

struct OnednnConv::Impl {
  ConvDescriptor d;
  int threads = 1;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward conv;

  OnednnBuffers buffers;  // before the memories on it
  memory::desc user_src_md, user_wei_md, user_dst_md, user_bias_md;
  memory src_mem, wei_mem, dst_mem, bias_mem, scratch_mem;
  memory user_dst_mem;  // NHWC staging for fetch()

  double in_ms = -1.0, out_ms = -1.0;
  bool prepared = false;

  void threads_on() const { omp_set_num_threads(threads); }
};

OnednnConv::OnednnConv(const ConvDescriptor& d, int threads) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.d = d;
  m.threads = std::max(threads, 1);
  m.threads_on();

  const OnednnConvShapes shapes = onednn_conv_shapes(d);
  m.user_src_md = shapes.user_src_md;
  m.user_dst_md = shapes.user_dst_md;
  m.user_wei_md = shapes.user_wei_md;
  m.user_bias_md = shapes.user_bias_md;
  const memory::desc src_any(shapes.src_dims, dt::f32, tag::any);
  const memory::desc dst_any(shapes.dst_dims, dt::f32, tag::any);
  const memory::desc wei_any(shapes.wei_dims, dt::f32, tag::any);

  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (d.relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }

  try {
    const auto prop = dnnl::prop_kind::forward_training;
    const auto alg = dnnl::algorithm::convolution_direct;
    const OnednnConvShapes& s = shapes;
    auto desc = d.bias ? dnnl::convolution_forward::desc(prop, alg, src_any, wei_any,
                                                         m.user_bias_md, dst_any, s.strides,
                                                         s.dilates, s.pad_l, s.pad_r)
                       : dnnl::convolution_forward::desc(prop, alg, src_any, wei_any, dst_any,
                                                         s.strides, s.dilates, s.pad_l, s.pad_r);
    m.pd = dnnl::convolution_forward::primitive_desc(desc, attr, m.eng);
    m.conv = dnnl::convolution_forward(m.pd);
  } catch (const dnnl::error& e) {
    throw Error(ExitCode::Unsupported,
                fmt::format("oneDNN: no forward convolution for {}: {}", d.normalised(), e.what()));
  }

  m.src_mem = m.buffers.make(m.pd.src_desc(), m.eng);
  m.wei_mem = m.buffers.make(m.pd.weights_desc(), m.eng);
  m.dst_mem = m.buffers.make(m.pd.dst_desc(), m.eng);
  if (d.bias) m.bias_mem = m.buffers.make(m.pd.bias_desc(), m.eng);
  m.scratch_mem = m.buffers.make(m.pd.scratchpad_desc(), m.eng);
  m.user_dst_mem = m.buffers.make(m.user_dst_md, m.eng);
}

OnednnConv::~OnednnConv() = default;

void OnednnConv::prepare(const float* x, const float* w, const float* bias) {
  Impl& m = *impl_;
  m.threads_on();
  const bool measure = m.in_ms < 0.0;
  double ms = onednn_import(m.strm, m.user_src_md, x, m.src_mem, measure);
  ms += onednn_import(m.strm, m.user_wei_md, w, m.wei_mem, measure);
  if (m.d.bias) {
    if (bias == nullptr) throw Error(ExitCode::Internal, "oneDNN peer: bias expected");
    ms += onednn_import(m.strm, m.user_bias_md, bias, m.bias_mem, measure);
  }
  if (measure) {
    m.in_ms = ms;
    // Measure the way back once too (on whatever dst holds now).
    m.out_ms = onednn_export(m.strm, m.dst_mem, m.user_dst_md,
                             static_cast<float*>(m.user_dst_mem.get_data_handle()), true);
  }
  m.prepared = true;
}

void OnednnConv::run() {
  Impl& m = *impl_;
  m.threads_on();
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, m.src_mem},
                                       {DNNL_ARG_WEIGHTS, m.wei_mem},
                                       {DNNL_ARG_DST, m.dst_mem},
                                       {DNNL_ARG_SCRATCHPAD, m.scratch_mem}};
  if (m.d.bias) args.emplace(DNNL_ARG_BIAS, m.bias_mem);
  m.conv.execute(m.strm, args);
  m.strm.wait();
}

void OnednnConv::fetch(float* y_nhwc) {
  Impl& m = *impl_;
  m.threads_on();
  onednn_export(m.strm, m.dst_mem, m.user_dst_md, y_nhwc, false);
}

void OnednnConv::run_and_fetch(const float* x, const float* w, const float* bias, float* y) {
  prepare(x, w, bias);
  run();
  fetch(y);
}

std::string OnednnConv::impl_name() const { return impl_->pd.impl_info_str(); }

int64_t OnednnConv::workspace_bytes() const {
  return static_cast<int64_t>(impl_->pd.scratchpad_desc().get_size());
}

double OnednnConv::reorder_in_ms() const { return std::max(impl_->in_ms, 0.0); }
double OnednnConv::reorder_out_ms() const { return std::max(impl_->out_ms, 0.0); }
double OnednnConv::reorder_ms() const { return reorder_in_ms() + reorder_out_ms(); }

std::string OnednnConv::layouts() const {
  const Impl& m = *impl_;
  return fmt::format("src={} wei={} dst={}", onednn_layout_name(m.pd.src_desc()),
                     onednn_layout_name(m.pd.weights_desc()),
                     onednn_layout_name(m.pd.dst_desc()));
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl::version();
  return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
}

}  // namespace convgen::bench
