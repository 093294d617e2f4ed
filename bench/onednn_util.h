// Pieces shared by the oneDNN peers (onednn_conv.cpp, onednn_conv_backward.cpp): the
// memory descriptors of our plain tensors, layout names for the report and reorders
// between our tensors and the layouts a primitive chose. Included only by those .cpp
// files, so no other file of the bench sees dnnl.hpp.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <dnnl.hpp>

#include "schedules/conv_descriptor.h"

namespace convgen::bench {

// Shapes of one layer in oneDNN terms, and our plain layouts of its tensors: NHWC
// activations (src/diff_src, dst/diff_dst), ONNX OIHW weights (goihw when grouped: the
// same bytes with O split into (g, K/g)), [oc] bias.
struct OnednnConvShapes {
  dnnl::memory::dims src_dims, dst_dims, wei_dims, bias_dims;
  dnnl::memory::dims strides, dilates, pad_l, pad_r;  // dilates in oneDNN's convention: ONNX - 1
  dnnl::memory::desc user_src_md, user_dst_md, user_wei_md, user_bias_md;
};
OnednnConvShapes onednn_conv_shapes(const ConvDescriptor& d);

// The primitive's memories on buffers from convgen's own allocator
// (runtime/memory/page_allocation.h), so that every peer's tensors lie on the same kind
// of pages (huge pages for 2 MiB and more); oneDNN would otherwise allocate them itself
// on small pages. Declare it before the memories it makes: it frees their buffers.
class OnednnBuffers {
 public:
  OnednnBuffers() = default;
  OnednnBuffers(const OnednnBuffers&) = delete;
  OnednnBuffers& operator=(const OnednnBuffers&) = delete;
  ~OnednnBuffers();
  dnnl::memory make(const dnnl::memory::desc& md, const dnnl::engine& eng);

 private:
  struct Block {
    void* data;
    std::size_t bytes;
  };
  std::vector<Block> blocks_;
};

// Short name of a plain or blocked memory layout ("acdb", "aBcd8b", ...), from the
// strides and inner blocks of the descriptor; good enough to tell layouts apart.
std::string onednn_layout_name(const dnnl::memory::desc& md);

// Copies `data` (laid out as `user_md`) into `to`: a memcpy when the layouts are the
// same, else a reorder. With `measure`, the copy runs a second (warm) time and that
// time is returned in ms; otherwise 0.
double onednn_import(dnnl::stream& strm, const dnnl::memory::desc& user_md, const float* data,
                     dnnl::memory& to, bool measure);

// The way back: `from` into `data` laid out as `user_md`; same timing rule.
double onednn_export(dnnl::stream& strm, dnnl::memory& from, const dnnl::memory::desc& user_md,
                     float* data, bool measure);

}  // namespace convgen::bench
