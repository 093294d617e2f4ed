// Backward-data: dX as one forward convolution per residue class of the strides.
#include <fmt/format.h>

#include "generator/conv/backward.h"
#include "generator/conv/schedule_pieces.h"
#include "schedules/backward_data_classes.h"
#include "schedules/errors.h"
#include "schedules/kernel_plan.h"

namespace convgen {

using namespace Halide;

namespace {

// Every extent and stride a constant; y only when the kernel reads it.
void pin_buffers(BackwardDataPipeline& p, const ConvDescriptor& d, const WeightPanels& panels) {
  const auto extents = forward_buffer_extents(d);
  pin_dense([&](int i) { return p.dy.dim(i); }, extents[3]);
  pin_dense([&](int i) { return p.weights.dim(i); },
            panels.empty() ? extents[1] : std::vector<int>{static_cast<int>(panels.floats)});
  if (d.relu) pin_dense([&](int i) { return p.y.dim(i); }, extents[3]);
  pin_dense([&](int i) { return p.dx.output_buffer().dim(i); }, {int(d.icg()), int(d.g), int(d.ih * d.iw), int(d.mb)});
}

}  // namespace

BackwardDataPipeline build_backward_data(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                                         std::vector<std::string>* why, const ForwardBuildOptions& options) {
  validate(d);
  if (!inference_only_flags(d).empty())
    throw Error(ExitCode::Usage, fmt::format("{}: the backward passes know bias and ReLU alone, not {}", d.normalised(),
                                             inference_only_flags(d)));
  validate(s, t);
  validate_forward_strategy(s);
  BackwardDataPipeline p;
  p.dy = ImageParam(Float(32), 4, "dy");
  // Prepacked: one panel per residue class with taps, in class order.
  const WeightPanels panels = backward_data_weight_panels(d, s, t);
  p.weights = ImageParam(Float(32), panels.empty() ? 5 : 1, "weights");
  p.y = ImageParam(Float(32), 4, "y");
  const int q_extent = int(d.ow()), iw = int(d.iw), vl = t.vector_floats;

  // dY in the forward input's 5-D view; the forward's ReLU mask applied as dY is packed.
  Var k("k"), grp("grp"), x("x"), y("y"), n("n"), s_tap("s_tap"), r_tap("r_tap"), kin("kin"), kout("kout");
  Func dy_masked("dy_masked");
  Expr value = p.dy(k, grp, y * q_extent + x, n);
  if (d.relu) value = select(p.y(k, grp, y * q_extent + x, n) > 0.0f, value, 0.0f);
  dy_masked(k, grp, x, y, n) = value;
  Func no_bias("no_bias");
  no_bias(k) = 0.0f;

  const std::vector<ResidueClass> classes = backward_data_classes(d);
  const bool direct = single_class(classes, d);
  if (computes_depthwise_dx_in_place(d, s)) {
    p.dx = define_depthwise_backward_data_in_place(d, s, t, dy_masked, p.weights, why);
    pin_buffers(p, d, panels);
    return p;
  }
  // With channel blocks outermost the classes pack weights per block: staged per image,
  // that packing would repeat for every image (1x1/2 1024->2048: 11 vs 62 GF/s), so each
  // class is staged for the whole minibatch instead (C*H*W/(sh*sw) floats per image).
  const bool stage_whole_batch = !direct && s.loop_order == LoopOrder::ChannelsOuter;
  explain(why, direct ? "backward-data: stride 1, one forward convolution over dY written straight into dX"
                      : fmt::format("backward-data: {} residue classes of the strides, each a stride-1 forward "
                                    "convolution over dY computed per {} and stored into its pixels of dX",
                                    classes.size(), stage_whole_batch ? "minibatch" : "image"));
  ConvSchedule class_schedule = s;
  if (!direct && !stage_whole_batch && s.parallel != Parallel::None)
    class_schedule.parallel = Parallel::None;  // images instead, below

  std::vector<Func> class_outputs;
  size_t next_panel = 0;
  for (size_t j = 0; j < classes.size(); ++j) {
    const ResidueClass& c = classes[j];
    if (c.zero()) {
      explain(why, fmt::format("class (row {}, col {}): no tap reaches it, exact zeros", c.rows.residue, c.cols.residue));
      class_outputs.emplace_back();
      continue;
    }
    Func in("class_dy"), w("class_weights");
    in(k, grp, x, y, n) = dy_masked(k, grp, x + int(c.cols.shift), y + int(c.rows.shift), n);
    ForwardBuildOptions class_options = options;
    if (!panels.empty()) {
      // The class's panel, packed by the caller from the same transposed, flipped view.
      class_options.weight_panel = panels.panels[next_panel++];
      w = p.weights;
    } else {
      // Channel-transposed (input and output channels swap roles) and flipped: derived
      // tap 0 is the class's largest kernel index.
      w(s_tap, r_tap, kin, kout, grp) =
          p.weights(int(c.cols.first_tap) - s_tap * int(c.cols.tap_step),
                    int(c.rows.first_tap) - r_tap * int(c.rows.tap_step), kout, kin, grp);
    }
    std::vector<std::string> class_why;
    class_options.output_is_staged = !direct;
    class_options.weights_transposed = true;
    Func out = define_scheduled_forward(c.derived, class_schedule, t, in, w, no_bias, Func(), why ? &class_why : nullptr,
                                        class_options);
    if (why) {
      explain(why, fmt::format("class (row {}, col {}): {}", c.rows.residue, c.cols.residue, c.derived.normalised()));
      if (j == 0 || direct)
        for (const std::string& line : class_why) explain(why, "  " + line);
    }
    class_outputs.push_back(out);
  }
  if (direct) {
    p.dx = class_outputs[0];
    pin_buffers(p, d, panels);
    return p;
  }

  // Each class's pixels of dX: no two classes share a pixel, and together they cover dX.
  Var c_var("c"), g_var("g"), pix("pix"), cgf("cgf");
  p.dx = Func("dx");
  p.dx(c_var, g_var, pix, n) = undef<float>();
  for (size_t j = 0; j < classes.size(); ++j) {
    const ResidueClass& c = classes[j];
    RDom rd(0, int(c.cols.count), 0, int(c.rows.count), fmt::format("class{}", j));
    Expr xi = int(c.cols.residue) + int(d.sw) * rd.x, yi = int(c.rows.residue) + int(d.sh) * rd.y;
    Expr v = c.zero() ? Expr(0.0f) : class_outputs[j](c_var, g_var, rd.y * int(c.cols.count) + rd.x, n);
    p.dx(c_var, g_var, yi * iw + xi, n) = v;
    Stage st = p.dx.update(int(j));
    st.reorder(c_var, g_var, rd.x, rd.y, n);
    if (d.icg() >= vl) {
      st.vectorize(c_var, vl, TailStrategy::GuardWithIf);
    } else if (d.ic >= vl) {
      st.fuse(c_var, g_var, cgf).vectorize(cgf, vl, TailStrategy::GuardWithIf);
    }
    if (s.parallel != Parallel::None) st.parallel(n);
    if (!c.zero()) {
      if (stage_whole_batch) {
        class_outputs[j].compute_root();
      } else {
        class_outputs[j].compute_at(p.dx, n);
      }
    }
  }
  pin_buffers(p, d, panels);
  return p;
}

}  // namespace convgen
