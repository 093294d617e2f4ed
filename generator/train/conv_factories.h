// Where `convgen train` and `convgen compile --train` get the trainer's convolutions
// (runtime/train/train_conv.h): convgen's generated kernels JIT-compiled, or the
// explicit im2col + BLIS baseline; and the schedule every generated training kernel uses.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/train/train_conv.h"
#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"
#include "schedules/schedule_selection.h"

namespace convgen::model {

// The schedule of a generated training kernel for `pass` (fwd, bwd_data, bwd_weights):
// records or the analytic default, always the parallel variant chosen by the layer alone
// (Images with at least 8 images, else Pixels), so the bits never depend on the thread
// count. The in-process trainer's JIT kernels and `convgen compile --train`'s
// ahead-of-time kernels both use it, so they compute the same bits.
// `source` says where the schedule came from ("analytic default", "record ...").
SelectedSchedule training_schedule(const ConvDescriptor& d, const std::string& pass, const TargetInfo& t,
                                   const std::string& records, std::vector<std::string>* why);

// convgen's generated kernels (JIT-compiled; schedules from records or the analytic default).
std::unique_ptr<TrainConv> make_generated_conv(const TrainConvRequest& r, std::vector<std::string>* why);

// The honest baseline (`--conv-impl im2col-blis`, generator/train/im2col_conv.cpp): explicit im2col
// + BLIS SGEMM through convgen-bench's peers (runtime/im2col/im2col_blis*.h; link convgen_im2col).
// The forward pass re-packs the OIHW weights on every call (part of its cost, as in a
// framework over BLIS); with a fused ReLU the backward passes first mask dY by y > 0 into
// a temporary. BLIS is single-threaded and the im2col / col2im / bias loops run on the
// calling thread (no OpenMP region), so layers run inside the trainer's batch-parallel
// region. r.intra_kernel is ignored: every call runs on one thread (describe() says so).
// Workspace: one buffer per calling thread, shared by all layers of the process and grown
// to the largest layer's need (im2col matrix + packed weights or masked dY), so peak
// memory is about T x the largest im2col. r.records and r.target are not used; `why`
// gets nothing.
std::unique_ptr<TrainConv> make_im2col_blis_conv(const TrainConvRequest& r, std::vector<std::string>* why);

}  // namespace convgen::model
