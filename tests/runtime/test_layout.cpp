#include <catch2/catch.hpp>

#include <vector>

#include "runtime/ops/layout.h"

TEST_CASE("NCHW <-> NHWC conversion places every element and round-trips", "[layout]") {
  const int64_t n = 2, c = 3, h = 4, w = 5;
  std::vector<float> nchw(n * c * h * w), nhwc(nchw.size()), back(nchw.size());
  for (size_t i = 0; i < nchw.size(); ++i) nchw[i] = float(i);
  convgen::nchw_to_nhwc(nchw.data(), nhwc.data(), n, c, h, w);
  for (int64_t in = 0; in < n; ++in)
    for (int64_t ic = 0; ic < c; ++ic)
      for (int64_t iy = 0; iy < h; ++iy)
        for (int64_t ix = 0; ix < w; ++ix)
          REQUIRE(nhwc[((in * h + iy) * w + ix) * c + ic] == nchw[((in * c + ic) * h + iy) * w + ix]);
  convgen::nhwc_to_nchw(nhwc.data(), back.data(), n, c, h, w);
  CHECK(back == nchw);
}
