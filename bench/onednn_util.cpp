#include "bench/onednn_util.h"

#include <algorithm>
#include <cstring>

#include "bench/bench_util.h"
#include "runtime/memory/page_allocation.h"

namespace convgen::bench {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

OnednnConvShapes onednn_conv_shapes(const ConvDescriptor& d) {
  const memory::dim N = d.mb, C = d.ic, H = d.ih, W = d.iw, K = d.oc, R = d.kh, S = d.kw;
  const memory::dim P = d.oh(), Q = d.ow(), G = d.g;
  OnednnConvShapes s;
  s.src_dims = {N, C, H, W};
  s.dst_dims = {N, K, P, Q};
  s.bias_dims = {K};
  s.wei_dims = G > 1 ? memory::dims{G, K / G, C / G, R, S} : memory::dims{K, C, R, S};
  s.strides = {d.sh, d.sw};
  s.dilates = {d.dh - 1, d.dw - 1};
  s.pad_l = {d.pt, d.pl};
  s.pad_r = {d.pb, d.pr};
  s.user_src_md = memory::desc(s.src_dims, dt::f32, tag::nhwc);
  s.user_dst_md = memory::desc(s.dst_dims, dt::f32, tag::nhwc);
  s.user_wei_md = memory::desc(s.wei_dims, dt::f32, G > 1 ? tag::goihw : tag::oihw);
  s.user_bias_md = memory::desc(s.bias_dims, dt::f32, tag::x);
  return s;
}

// oneDNN's own alignment for the buffers it allocates.
constexpr std::size_t kOnednnAlignment = 64;

OnednnBuffers::~OnednnBuffers() {
  for (const Block& b : blocks_) release_buffer(b.data, b.bytes, kOnednnAlignment);
}

memory OnednnBuffers::make(const memory::desc& md, const dnnl::engine& eng) {
  const std::size_t bytes = md.get_size();
  if (bytes == 0) return memory(md, eng);  // an empty scratchpad: nothing to place
  void* data = allocate_buffer(bytes, kOnednnAlignment);
  blocks_.push_back({data, bytes});
  return memory(md, eng, data);
}

std::string onednn_layout_name(const memory::desc& md) {
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

namespace {

// Runs the reorder once (the copy the caller needs), then, when asked, once more timed.
double run_reorder(dnnl::stream& strm, memory& from, memory& to, bool measure) {
  dnnl::reorder r(from, to);
  r.execute(strm, from, to);
  strm.wait();
  if (!measure) return 0.0;
  const Timer t;
  r.execute(strm, from, to);
  strm.wait();
  return t.millis();
}

}  // namespace

double onednn_import(dnnl::stream& strm, const memory::desc& user_md, const float* data,
                     memory& to, bool measure) {
  if (user_md == to.get_desc()) {
    std::memcpy(to.get_data_handle(), data, user_md.get_size());
    return 0.0;
  }
  memory from(user_md, to.get_engine(), const_cast<float*>(data));
  return run_reorder(strm, from, to, measure);
}

double onednn_export(dnnl::stream& strm, memory& from, const memory::desc& user_md, float* data,
                     bool measure) {
  if (user_md == from.get_desc()) {
    std::memcpy(data, from.get_data_handle(), user_md.get_size());
    return 0.0;
  }
  memory to(user_md, from.get_engine(), data);
  return run_reorder(strm, from, to, measure);
}

}  // namespace convgen::bench
