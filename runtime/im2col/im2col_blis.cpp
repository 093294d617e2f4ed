#include "runtime/im2col/im2col_blis.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "blis.h"
#include "schedules/errors.h"

namespace convgen::bench {

void for_blocks(int threads, int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  if (threads <= 1 || n == 1) {
    body(0, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (begin < end) body(begin, end);
  }
}

Im2colBlisConv::Im2colBlisConv(const ConvDescriptor& d, int threads, const float* w_oihw, Buffers buffers)
    : d_(d), threads_(std::max(threads, 1)), buffers_(buffers) {
  if (d.g < 1 || d.ic % d.g != 0 || d.oc % d.g != 0 || d.oh() < 1 || d.ow() < 1)
    throw Error(ExitCode::Usage, "im2col+BLIS: invalid descriptor " + d.normalised());
  direct_ = is_direct(d);
  pixels_ = d.mb * d.oh() * d.ow();
  kdim_ = d.kh * d.kw * d.icg();
  if (buffers_ == Buffers::CallerProvided) return;
  if (!direct_) col_.assign(static_cast<size_t>(pixels_ * kdim_ * d.g), 0.0f);
  packed_w_.resize(static_cast<size_t>(d.g * kdim_ * d.ocg()));
  if (w_oihw != nullptr) set_weights(w_oihw);
}

bool Im2colBlisConv::is_direct(const ConvDescriptor& d) {
  return d.kh == 1 && d.kw == 1 && d.sh == 1 && d.sw == 1 && d.pt == 0 && d.pb == 0 &&
         d.pl == 0 && d.pr == 0;
}

int64_t Im2colBlisConv::workspace_bytes_for(const ConvDescriptor& d) {
  if (is_direct(d)) return 0;
  return d.mb * d.oh() * d.ow() * d.kh * d.kw * d.ic * static_cast<int64_t>(sizeof(float));
}

int64_t Im2colBlisConv::packed_weights_bytes_for(const ConvDescriptor& d) {
  return d.oc * d.icg() * d.kh * d.kw * static_cast<int64_t>(sizeof(float));
}

void Im2colBlisConv::pack_weights(const ConvDescriptor& d, const float* w, float* packed) {
  const int64_t icg = d.icg(), ocg = d.ocg(), kh = d.kh, kw = d.kw, kdim = kh * kw * icg;
  for (int64_t g = 0; g < d.g; ++g)
    for (int64_t k = 0; k < ocg; ++k)
      for (int64_t c = 0; c < icg; ++c)
        for (int64_t r = 0; r < kh; ++r)
          for (int64_t s = 0; s < kw; ++s) {
            const float v = w[(((g * ocg + k) * icg + c) * kh + r) * kw + s];
            packed[(g * kdim + (r * kw + s) * icg + c) * ocg + k] = v;
          }
}

void Im2colBlisConv::set_weights(const float* w) {
  if (buffers_ != Buffers::Owned)
    throw Error(ExitCode::Internal, "im2col+BLIS: set_weights on a peer without its own buffers");
  pack_weights(d_, w, packed_w_.data());
}

void Im2colBlisConv::im2col(const float* x, float* col) const {
  const int64_t N = d_.mb, H = d_.ih, W = d_.iw, C = d_.ic;
  const int64_t P = d_.oh(), Q = d_.ow(), R = d_.kh, S = d_.kw, G = d_.g;
  const int64_t icg = d_.icg(), taps = R * S;
  const int64_t pixels = pixels_, kdim = kdim_;
  const int64_t rows = N * P;
  for_blocks(threads_, rows, [&](int64_t begin, int64_t end) {
    std::vector<const float*> src(static_cast<size_t>(taps));  // per tap: input pixel or null
    for (int64_t np = begin; np < end; ++np) {
      const int64_t n = np / P, p = np % P;
      for (int64_t q = 0; q < Q; ++q) {
        for (int64_t r = 0; r < R; ++r) {
          const int64_t h = p * d_.sh - d_.pt + r * d_.dh;
          for (int64_t s = 0; s < S; ++s) {
            const int64_t w = q * d_.sw - d_.pl + s * d_.dw;
            src[r * S + s] =
                h >= 0 && h < H && w >= 0 && w < W ? x + ((n * H + h) * W + w) * C : nullptr;
          }
        }
        // Group-major: group g's row of this pixel starts at (g*N*P*Q + pixel)*kdim_, so
        // each A_g is a dense block (the GEMM streams it) while the input is read once.
        const int64_t pixel = np * Q + q;
        for (int64_t g = 0; g < G; ++g) {
          float* dst = col + (g * pixels + pixel) * kdim;
          for (int64_t t = 0; t < taps; ++t, dst += icg) {
            const float* from = src[t];
            if (from == nullptr) {
              std::fill_n(dst, icg, 0.0f);
            } else if (icg == 1) {
              *dst = from[g];
            } else {
              std::memcpy(dst, from + g * icg, static_cast<size_t>(icg) * sizeof(float));
            }
          }
        }
      }
    }
  });
}

void Im2colBlisConv::bias_relu(const float* bias, float* y) const {
  const bool add_bias = d_.bias && bias != nullptr;
  if (!add_bias && !d_.relu) return;
  const int64_t K = d_.oc;
  const bool relu = d_.relu;
  for_blocks(threads_, pixels_, [&](int64_t begin, int64_t end) {
    for (int64_t pix = begin; pix < end; ++pix) {
      float* row = y + pix * K;
      if (add_bias && relu) {
        for (int64_t k = 0; k < K; ++k) row[k] = std::max(row[k] + bias[k], 0.0f);
      } else if (add_bias) {
        for (int64_t k = 0; k < K; ++k) row[k] += bias[k];
      } else {
        for (int64_t k = 0; k < K; ++k) row[k] = std::max(row[k], 0.0f);
      }
    }
  });
}

void Im2colBlisConv::run(const float* x, const float* bias, float* y) {
  if (buffers_ != Buffers::Owned)
    throw Error(ExitCode::Internal, "im2col+BLIS: run() without a workspace on a peer without its own buffers");
  run_packed(x, packed_w_.data(), bias, y, col_.data());
}

void Im2colBlisConv::run(const float* x, const float* w_oihw, const float* bias, float* y, float* workspace,
                         float* packed_w) const {
  pack_weights(d_, w_oihw, packed_w);
  run_packed(x, packed_w, bias, y, workspace);
}

void Im2colBlisConv::run_packed(const float* x, const float* packed_w, const float* bias, float* y,
                                float* col) const {
  rntm_t rntm;
  bli_rntm_init(&rntm);
  bli_rntm_set_num_threads(threads_, &rntm);
  float alpha = 1.0f, beta = 0.0f;
  const int64_t ocg = d_.ocg(), icg = d_.icg();
  if (!direct_) im2col(x, col);
  for (int64_t g = 0; g < d_.g; ++g) {
    // A_g: rows = output pixels, kdim_ columns, dense. Direct 1x1/stride 1/unpadded: the
    // NHWC input itself is that matrix (leading dimension C, column offset g*C/g).
    float* a = direct_ ? const_cast<float*>(x) + g * icg : col + g * pixels_ * kdim_;
    const inc_t rs_a = direct_ ? d_.ic : kdim_;
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, pixels_, ocg, kdim_, &alpha, a, rs_a, 1,
                 const_cast<float*>(packed_w) + g * kdim_ * ocg, ocg, 1, &beta, y + g * ocg, d_.oc, 1,
                 nullptr, &rntm);
  }
  bias_relu(bias, y);
}

std::string blis_version() { return bli_info_get_version_str(); }
// bli_init first: with BLIS_ARCH_TYPE set, an arch query before the contexts are
// registered aborts the process.
std::string blis_arch() {
  bli_init();
  return bli_arch_string(bli_arch_query_id());
}

}  // namespace convgen::bench
