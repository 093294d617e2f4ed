#include "runtime/im2col/im2col_blis_backward.h"

#include <algorithm>
#include <string>

#include "blis.h"
#include "schedules/errors.h"

namespace convgen::bench {
namespace {

void check_descriptor(const ConvDescriptor& d, const char* what) {
  if (d.g < 1 || d.ic % d.g != 0 || d.oc % d.g != 0 || d.oh() < 1 || d.ow() < 1)
    throw Error(ExitCode::Usage, std::string(what) + ": invalid descriptor " + d.normalised());
}

rntm_t blis_runtime(int threads) {
  rntm_t rntm;
  bli_rntm_init(&rntm);
  bli_rntm_set_num_threads(threads, &rntm);
  return rntm;
}

void require_owned(Buffers buffers, const char* what) {
  if (buffers != Buffers::Owned)
    throw Error(ExitCode::Internal, std::string(what) + ": run() without a workspace on a peer without its own buffers");
}

// The column buffer of both backward peers: N*P*Q x C*R*S floats, none when direct.
int64_t column_bytes(const ConvDescriptor& d) { return Im2colBlisConv::workspace_bytes_for(d); }

}  // namespace

// ---------------------------------------------------------------------------------------
// Backward data

Im2colBlisBackwardData::Im2colBlisBackwardData(const ConvDescriptor& d, int threads, Buffers buffers)
    : d_(d), threads_(std::max(threads, 1)), buffers_(buffers) {
  check_descriptor(d, "im2col+BLIS backward-data");
  direct_ = Im2colBlisConv::is_direct(d);
  pixels_ = d.mb * d.oh() * d.ow();
  kdim_ = d.icg() * d.kh * d.kw;
  if (!direct_ && buffers_ == Buffers::Owned) col_.assign(static_cast<size_t>(pixels_ * kdim_ * d.g), 0.0f);
}

int64_t Im2colBlisBackwardData::workspace_bytes_for(const ConvDescriptor& d) { return column_bytes(d); }

void Im2colBlisBackwardData::run(const float* dy, const float* w, float* dx) {
  require_owned(buffers_, "im2col+BLIS backward-data");
  run(dy, w, dx, col_.data());
}

void Im2colBlisBackwardData::run(const float* dy, const float* w, float* dx, float* col) const {
  rntm_t rntm = blis_runtime(threads_);
  float alpha = 1.0f, beta = 0.0f;
  const int64_t ocg = d_.ocg(), icg = d_.icg();
  for (int64_t g = 0; g < d_.g; ++g) {
    // dY_g: rows = output pixels, K/g columns at offset g*K/g, leading dimension K.
    // W_g: group g's K/g rows of the OIHW weights, [K/g x C/g*R*S] row-major as stored.
    float* a = const_cast<float*>(dy) + g * ocg;
    float* b = const_cast<float*>(w) + g * ocg * kdim_;
    // Direct: each output pixel is its input pixel, so the product is dX_g itself
    // (leading dimension C, column offset g*C/g).
    float* c = direct_ ? dx + g * icg : col + g * pixels_ * kdim_;
    const inc_t rs_c = direct_ ? d_.ic : kdim_;
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, pixels_, kdim_, ocg, &alpha, a, d_.oc, 1, b,
                 kdim_, 1, &beta, c, rs_c, 1, nullptr, &rntm);
  }
  if (!direct_) col2im(col, dx);
}

void Im2colBlisBackwardData::col2im(const float* col, float* dx) const {
  const int64_t N = d_.mb, H = d_.ih, W = d_.iw, C = d_.ic;
  const int64_t P = d_.oh(), Q = d_.ow(), R = d_.kh, S = d_.kw, G = d_.g;
  const int64_t icg = d_.icg(), taps = R * S;
  const int64_t pixels = pixels_, kdim = kdim_;
  // One iteration owns one input row (n, h) and is its only writer: it zeroes the row,
  // then gathers every (output row, kernel row) pair whose tap reads it.
  for_blocks(threads_, N * H, [&](int64_t begin, int64_t end) {
    for (int64_t nh = begin; nh < end; ++nh) {
      const int64_t n = nh / H, h = nh % H;
      float* row = dx + nh * W * C;
      std::fill_n(row, W * C, 0.0f);
      for (int64_t r = 0; r < R; ++r) {
        // Output row p reads input row h through kernel row r when p*sh - pt + r*dh == h.
        const int64_t at = h + d_.pt - r * d_.dh;
        if (at < 0 || at % d_.sh != 0 || at / d_.sh >= P) continue;
        const int64_t p = at / d_.sh;
        for (int64_t q = 0; q < Q; ++q) {
          const int64_t pixel = (n * P + p) * Q + q;
          for (int64_t s = 0; s < S; ++s) {
            const int64_t w = q * d_.sw - d_.pl + s * d_.dw;
            if (w < 0 || w >= W) continue;  // a padding tap: nothing to give back
            const int64_t tap = r * S + s;
            for (int64_t g = 0; g < G; ++g) {
              // Column (c, r, s): this tap's C/g entries are `taps` apart.
              const float* from = col + (g * pixels + pixel) * kdim + tap;
              float* to = row + w * C + g * icg;
              for (int64_t c = 0; c < icg; ++c) to[c] += from[c * taps];
            }
          }
        }
      }
    }
  });
}

// ---------------------------------------------------------------------------------------
// Backward weights

Im2colBlisBackwardWeights::Im2colBlisBackwardWeights(const ConvDescriptor& d, int threads, Buffers buffers)
    : d_(d), threads_(std::max(threads, 1)), buffers_(buffers) {
  check_descriptor(d, "im2col+BLIS backward-weights");
  direct_ = Im2colBlisConv::is_direct(d);
  pixels_ = d.mb * d.oh() * d.ow();
  kdim_ = d.icg() * d.kh * d.kw;
  if (!direct_ && buffers_ == Buffers::Owned) col_.assign(static_cast<size_t>(pixels_ * kdim_ * d.g), 0.0f);
}

int64_t Im2colBlisBackwardWeights::workspace_bytes_for(const ConvDescriptor& d) { return column_bytes(d); }

void Im2colBlisBackwardWeights::im2col(const float* x, float* col) const {
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
        // Group-major, like the forward peer: each A_g is a dense row-major block. Within
        // a row, column (c, r, s), so this pixel's C/g values of one tap are `taps` apart.
        const int64_t pixel = np * Q + q;
        for (int64_t g = 0; g < G; ++g) {
          float* dst = col + (g * pixels + pixel) * kdim;
          for (int64_t t = 0; t < taps; ++t) {
            const float* from = src[t];
            if (from == nullptr) {
              for (int64_t c = 0; c < icg; ++c) dst[c * taps + t] = 0.0f;
            } else {
              from += g * icg;
              for (int64_t c = 0; c < icg; ++c) dst[c * taps + t] = from[c];
            }
          }
        }
      }
    }
  });
}

void Im2colBlisBackwardWeights::bias_gradient(const float* dy, float* db) const {
  const int64_t K = d_.oc;
  constexpr int64_t kBlock = 64;  // channels per OpenMP work item
  const int64_t blocks = (K + kBlock - 1) / kBlock;
  for_blocks(threads_, blocks, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t k0 = b * kBlock, width = std::min(kBlock, K - k0);
      // Double accumulators: the sum runs over N*P*Q values (up to ~1e5 at mb 8), where a
      // float running sum would lose about 1e-4 of relative accuracy.
      double sum[kBlock] = {};
      for (int64_t pix = 0; pix < pixels_; ++pix) {
        const float* row = dy + pix * K + k0;
        for (int64_t k = 0; k < width; ++k) sum[k] += row[k];
      }
      for (int64_t k = 0; k < width; ++k) db[k0 + k] = static_cast<float>(sum[k]);
    }
  });
}

void Im2colBlisBackwardWeights::run(const float* x, const float* dy, float* dw, float* db) {
  require_owned(buffers_, "im2col+BLIS backward-weights");
  run(x, dy, dw, db, col_.data());
}

void Im2colBlisBackwardWeights::run(const float* x, const float* dy, float* dw, float* db, float* col) const {
  rntm_t rntm = blis_runtime(threads_);
  float alpha = 1.0f, beta = 0.0f;
  const int64_t ocg = d_.ocg(), icg = d_.icg();
  if (!direct_) im2col(x, col);
  for (int64_t g = 0; g < d_.g; ++g) {
    // dY_g^T: dY_g stored [N*P*Q x K/g] (leading dimension K, column offset g*K/g),
    // transposed by BLIS. A_g: the im2col block, or for direct layers X itself (leading
    // dimension C, column offset g*C/g). dW_g: group g's rows of the OIHW dW.
    float* a = const_cast<float*>(dy) + g * ocg;
    float* b = direct_ ? const_cast<float*>(x) + g * icg : col + g * pixels_ * kdim_;
    const inc_t rs_b = direct_ ? d_.ic : kdim_;
    bli_sgemm_ex(BLIS_TRANSPOSE, BLIS_NO_TRANSPOSE, ocg, kdim_, pixels_, &alpha, a, d_.oc, 1, b,
                 rs_b, 1, &beta, dw + g * ocg * kdim_, kdim_, 1, nullptr, &rntm);
  }
  if (d_.bias) {
    if (db == nullptr) throw Error(ExitCode::Internal, "im2col+BLIS peer: bias gradient expected");
    bias_gradient(dy, db);
  }
}

}  // namespace convgen::bench
