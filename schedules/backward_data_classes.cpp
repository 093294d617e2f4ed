#include "schedules/backward_data_classes.h"

#include <numeric>

namespace convgen {

bool single_class(const std::vector<ResidueClass>& classes, const ConvDescriptor& d) {
  return classes.size() == 1 && !classes[0].zero() && classes[0].rows.count == d.ih && classes[0].cols.count == d.iw;
}

namespace {

int64_t floor_mod(int64_t a, int64_t m) { return ((a % m) + m) % m; }

}  // namespace

std::vector<ResidueAxis> residue_axes(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t dilation,
                                      int64_t pad_before) {
  std::vector<ResidueAxis> axes;
  const int64_t gcd = std::gcd(stride, dilation);
  for (int64_t a = 0; a < stride && a < in; ++a) {
    ResidueAxis x;
    x.residue = a;
    x.count = (in - a + stride - 1) / stride;
    x.tap_step = stride / gcd;
    x.dilation = dilation / gcd;
    // The class's taps: k*dil = a + pad (mod stride); take the largest first so the
    // dY offsets (a + pad - k*dil)/stride ascend.
    for (int64_t k = kernel - 1; k >= 0; --k) {
      if (floor_mod(a + pad_before - k * dilation, stride) != 0) continue;
      if (x.taps == 0) x.first_tap = k;
      ++x.taps;
    }
    if (x.taps > 0) {
      // Derived tap j reads dY index u + offset0 + j*dilation' for class index u.
      const int64_t offset0 = (a + pad_before - x.first_tap * dilation) / stride;  // exact
      x.shift = offset0 > 0 ? offset0 : 0;
      x.pad_before = x.shift - offset0;
      x.extent = out - x.shift;
      const int64_t span = x.dilation * (x.taps - 1) + 1;
      x.pad_after = x.count - 1 + span - x.extent - x.pad_before;
      if (x.pad_after < 0) {  // the last dY indices are never read: shrink the input
        x.extent += x.pad_after;
        x.pad_after = 0;
      }
    }
    axes.push_back(x);
  }
  return axes;
}

std::vector<ResidueClass> backward_data_classes(const ConvDescriptor& d) {
  const auto rows = residue_axes(d.ih, d.oh(), d.kh, d.sh, d.dh, d.pt);
  const auto cols = residue_axes(d.iw, d.ow(), d.kw, d.sw, d.dw, d.pl);
  std::vector<ResidueClass> classes;
  for (const ResidueAxis& r : rows) {
    for (const ResidueAxis& c : cols) {
      ResidueClass rc;
      rc.rows = r;
      rc.cols = c;
      if (!rc.zero()) {
        ConvDescriptor& f = rc.derived;
        f.name = d.name;
        f.mb = d.mb;
        f.ic = d.oc;
        f.oc = d.ic;
        f.g = d.g;
        f.ih = r.extent, f.iw = c.extent;
        f.kh = r.taps, f.kw = c.taps;
        f.sh = f.sw = 1;
        f.dh = r.dilation, f.dw = c.dilation;
        f.pt = r.pad_before, f.pb = r.pad_after;
        f.pl = c.pad_before, f.pr = c.pad_after;
      }
      classes.push_back(rc);
    }
  }
  return classes;
}

}  // namespace convgen
