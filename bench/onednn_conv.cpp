#include "onednn_conv.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_map>

#include <dnnl.hpp>
#include <fmt/format.h>

#include "errors.h"

namespace convgen::bench {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

double clock_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Short name of a plain or blocked memory layout ("acdb", "aBcd8b", ...), from the
// strides and inner blocks of the descriptor; good enough to tell layouts apart.
std::string layout_name(const memory::desc& md) {
  const dnnl_memory_desc_t& c = md.data;
  if (c.format_kind != dnnl_blocked) return "non-blocked";
  const int nd = c.ndims;
  const auto& blk = c.format_desc.blocking;
  // Outer order: dimensions by decreasing stride (ties: keep logical order).
  std::string order;
  int idx[DNNL_MAX_NDIMS];
  for (int i = 0; i < nd; ++i) idx[i] = i;
  std::stable_sort(idx, idx + nd, [&](int a, int b) { return blk.strides[a] > blk.strides[b]; });
  bool blocked[DNNL_MAX_NDIMS] = {};
  for (int i = 0; i < blk.inner_nblks; ++i) blocked[blk.inner_idxs[i]] = true;
  for (int i = 0; i < nd; ++i)
    order += static_cast<char>((blocked[idx[i]] ? 'A' : 'a') + idx[i]);
  for (int i = 0; i < blk.inner_nblks; ++i)
    order += std::to_string(blk.inner_blks[i]) + static_cast<char>('a' + blk.inner_idxs[i]);
  return order;
}

}  // namespace

struct OnednnConv::Impl {
  ConvDescriptor d;
  int threads = 1;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward conv;

  memory::desc user_src_md, user_wei_md, user_dst_md, user_bias_md;
  memory src_mem, wei_mem, dst_mem, bias_mem, scratch_mem;
  memory user_dst_mem;  // library-owned NHWC staging for fetch()

  double in_ms = -1.0, out_ms = -1.0;
  bool prepared = false;

  void threads_on() const { omp_set_num_threads(threads); }

  // Reorders from a user buffer (wrapped without copy) into `to`; returns the
  // execution time in ms of a second (warm) execution when `measure`, else 0.
  double reorder_in(const memory::desc& user_md, const float* data, memory& to, bool measure) {
    memory from(user_md, eng, const_cast<float*>(data));
    if (user_md == to.get_desc()) {
      std::memcpy(to.get_data_handle(), data, user_md.get_size());
      return 0.0;
    }
    dnnl::reorder r(from, to);
    r.execute(strm, from, to);
    strm.wait();
    if (!measure) return 0.0;
    const double t0 = clock_ms();
    r.execute(strm, from, to);
    strm.wait();
    return clock_ms() - t0;
  }
};

OnednnConv::OnednnConv(const ConvDescriptor& d, int threads) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.d = d;
  m.threads = std::max(threads, 1);
  m.threads_on();

  const memory::dim N = d.mb, C = d.ic, H = d.ih, W = d.iw, K = d.oc, R = d.kh, S = d.kw;
  const memory::dim P = d.oh(), Q = d.ow(), G = d.g;
  const memory::dims src_dims{N, C, H, W}, dst_dims{N, K, P, Q}, bias_dims{K};
  const memory::dims wei_dims =
      G > 1 ? memory::dims{G, K / G, C / G, R, S} : memory::dims{K, C, R, S};
  const memory::dims strides{d.sh, d.sw}, dilates{d.dh - 1, d.dw - 1};
  const memory::dims pad_l{d.pt, d.pl}, pad_r{d.pb, d.pr};

  m.user_src_md = memory::desc(src_dims, dt::f32, tag::nhwc);
  m.user_dst_md = memory::desc(dst_dims, dt::f32, tag::nhwc);
  // ONNX OIHW with O split into (g, K/g) is exactly goihw: same bytes.
  m.user_wei_md = memory::desc(wei_dims, dt::f32, G > 1 ? tag::goihw : tag::oihw);
  m.user_bias_md = memory::desc(bias_dims, dt::f32, tag::x);

  const memory::desc src_any(src_dims, dt::f32, tag::any), dst_any(dst_dims, dt::f32, tag::any);
  const memory::desc wei_any(wei_dims, dt::f32, tag::any);

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
    auto desc = d.bias ? dnnl::convolution_forward::desc(prop, alg, src_any, wei_any,
                                                         m.user_bias_md, dst_any, strides,
                                                         dilates, pad_l, pad_r)
                       : dnnl::convolution_forward::desc(prop, alg, src_any, wei_any, dst_any,
                                                         strides, dilates, pad_l, pad_r);
    m.pd = dnnl::convolution_forward::primitive_desc(desc, attr, m.eng);
    m.conv = dnnl::convolution_forward(m.pd);
  } catch (const dnnl::error& e) {
    throw Error(ExitCode::Unsupported,
                fmt::format("oneDNN: no forward convolution for {}: {}", d.normalised(), e.what()));
  }

  m.src_mem = memory(m.pd.src_desc(), m.eng);
  m.wei_mem = memory(m.pd.weights_desc(), m.eng);
  m.dst_mem = memory(m.pd.dst_desc(), m.eng);
  if (d.bias) m.bias_mem = memory(m.pd.bias_desc(), m.eng);
  m.scratch_mem = memory(m.pd.scratchpad_desc(), m.eng);
  m.user_dst_mem = memory(m.user_dst_md, m.eng);
}

OnednnConv::~OnednnConv() = default;

void OnednnConv::prepare(const float* x, const float* w, const float* bias) {
  Impl& m = *impl_;
  m.threads_on();
  const bool measure = m.in_ms < 0.0;
  double ms = m.reorder_in(m.user_src_md, x, m.src_mem, measure);
  ms += m.reorder_in(m.user_wei_md, w, m.wei_mem, measure);
  if (m.d.bias) {
    if (bias == nullptr) throw Error(ExitCode::Internal, "oneDNN peer: bias expected");
    ms += m.reorder_in(m.user_bias_md, bias, m.bias_mem, measure);
  }
  if (measure) {
    m.in_ms = ms;
    // Measure the way back once too (on whatever dst holds now).
    if (m.pd.dst_desc() == m.user_dst_md) {
      m.out_ms = 0.0;
    } else {
      dnnl::reorder back(m.dst_mem, m.user_dst_mem);
      back.execute(m.strm, m.dst_mem, m.user_dst_mem);
      m.strm.wait();
      const double t0 = clock_ms();
      back.execute(m.strm, m.dst_mem, m.user_dst_mem);
      m.strm.wait();
      m.out_ms = clock_ms() - t0;
    }
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
  memory to(m.user_dst_md, m.eng, y_nhwc);
  if (m.pd.dst_desc() == m.user_dst_md) {
    std::memcpy(y_nhwc, m.dst_mem.get_data_handle(), m.user_dst_md.get_size());
    return;
  }
  dnnl::reorder(m.dst_mem, to).execute(m.strm, m.dst_mem, to);
  m.strm.wait();
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
  return fmt::format("src={} wei={} dst={}", layout_name(m.pd.src_desc()),
                     layout_name(m.pd.weights_desc()), layout_name(m.pd.dst_desc()));
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl::version();
  return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
}

}  // namespace convgen::bench
