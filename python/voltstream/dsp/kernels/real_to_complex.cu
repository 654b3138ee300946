// Real-sampled channels to complex baseband, straight from the packed bytes: the
// GPU twin of dsp/real.py RealToComplex (its NumPy oracle; see there for why).
// Per (chan, pol) pair, real input x at rate 2B (n its index on the stream's one
// time line, n = start + i for sample i of carry + chunk):
//
//   y_k = sum_j h[j] * x[2k + TAPS - 1 - j] * exp(-i pi (start + 2k + TAPS - 1 - j) / 2)
//
// complex output k at rate B, written time-major (k, cp) complex64 for the fold's
// float32 complex unpack (unpack.cu). The mixer exp(-i pi n / 2) is 1, -i, -1, i:
// with start even (the converter consumes inputs in pairs) and TAPS - 1 a multiple of
// 4, the even taps feed the real part and the odd taps the imaginary part, each with
// the sign of `signed_taps` (j % 4: 0 +, 1 +, 2 -, 3 -) times one sign per output,
// -1 where (start / 2 + k) is odd. The sums run over j in RealToComplex's order.
//
// Inputs: the carry (the last inputs of the previous chunk, decoded, channel-major
// (ncp, carry_cap) float32), then the chunk's packed values read through the
// Layout of packed_value.cuh (real: one value per sample); a lost input (mask 0)
// reads 0, as the file readers give it. An output whose filter span touched a lost
// input (out_valid 0, worked out on the host) is written as 0: the fold zeroes lost
// samples before its FFT.
//
// A thread block makes TILE_K outputs of TILE_CP pairs: it first reads the
// 2 TILE_K + TAPS - 1 inputs they need into shared memory (each input once), then
// each thread sums its outputs from there. `carry_tail` writes the next carry.
//
// Compile-time parameters (defaults let scripts/check_kernels.py compile this):
//   NBIT, ENCODING  as in unpack_packed.cu
//   TAPS            filter length, 4k + 1 (dsp/real.py TAPS)
//   TILE_CP         pairs per block: 4, 8, 16 or 32 (256 / TILE_CP rows of threads)

#ifndef TAPS
#define TAPS 65
#endif
#ifndef TILE_CP
#define TILE_CP 32
#endif

#if (TAPS - 1) % 4 != 0
#error "TAPS must be 4k + 1"
#endif

#define R2C_THREADS 256
#define ROWS (R2C_THREADS / TILE_CP)
#define TILE_K (2048 / TILE_CP)          // outputs per block and pair
#define SPAN (2 * TILE_K + TAPS - 1)      // inputs they need

#include "packed_value.cuh"

// Sample s (of carry + chunk) of pair cp, as a real value.
__device__ __forceinline__ float real_sample(const ChunkStream &S, const float *__restrict__ carry,
                                             long long s, int cp)
{
    const long long r = S.where(s);
    if (r == -1) return carry[(long long)cp * S.carry_cap + s];
    return r < 0 ? 0.0f : value_at(S.raw, S.offset(r, cp));
}

extern "C" __global__ void __launch_bounds__(R2C_THREADS)
real_to_complex(const unsigned char *__restrict__ raw, const float *__restrict__ carry,
                const unsigned char *__restrict__ valid, const float *__restrict__ signed_taps,
                float2 *__restrict__ out, const unsigned char *__restrict__ out_valid,
                long long s_blk, int spf, int s_t, int s_c, int s_p, int cpb, long long s_cb,
                int npol, int ncp, int carry_cap, int carry_len, long long nsamp_raw, int nout,
                int start_mod4)
{
    __shared__ float xs[TILE_CP][SPAN + 1];  // +1: rows start on different banks
    __shared__ float h[TAPS];
    const ChunkStream S = {raw, valid, {s_blk, spf, s_t, s_c, s_p, cpb, s_cb, npol},
                           carry_cap, carry_len, nsamp_raw};
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int k0 = blockIdx.x * TILE_K;
    const int cp = blockIdx.y * TILE_CP + tx;
    for (int j = ty * TILE_CP + tx; j < TAPS; j += R2C_THREADS) h[j] = signed_taps[j];
    for (int i = ty; i < SPAN; i += ROWS) {
        xs[tx][i] = cp < ncp ? real_sample(S, carry, 2LL * k0 + i, cp)
                             : 0.0f;
    }
    __syncthreads();
    if (cp >= ncp) return;
    for (int kk = ty; kk < TILE_K; kk += ROWS) {
        const int k = k0 + kk;
        if (k >= nout) break;
        float re = 0.0f, im = 0.0f;
        if (out_valid == nullptr || out_valid[k] != 0) {
            const float *x = &xs[tx][2 * kk + TAPS - 1];  // x[-j]: input 2k + TAPS - 1 - j
#pragma unroll
            for (int j = 0; j < TAPS; j += 2) re = fmaf(h[j], x[-j], re);
#pragma unroll
            for (int j = 1; j < TAPS; j += 2) im = fmaf(h[j], x[-j], im);
            if (((start_mod4 >> 1) + k) & 1) {  // mixer at output k: -1 there
                re = -re;
                im = -im;
            }
        }
        out[(long long)k * ncp + cp] = make_float2(re, im);
    }
}

// next[cp * carry_cap + i] = sample (cut + i) of carry + chunk, for i < new_len: the
// inputs the next chunk's first outputs need again.
extern "C" __global__ void carry_tail(const unsigned char *__restrict__ raw,
                                      const float *__restrict__ carry,
                                      const unsigned char *__restrict__ valid,
                                      float *__restrict__ next, long long s_blk, int spf, int s_t,
                                      int s_c, int s_p, int cpb, long long s_cb, int npol,
                                      int ncp, int carry_cap, int carry_len, long long nsamp_raw,
                                      long long cut, int new_len)
{
    const ChunkStream S = {raw, valid, {s_blk, spf, s_t, s_c, s_p, cpb, s_cb, npol},
                           carry_cap, carry_len, nsamp_raw};
    copy_carry(S, next, ncp, cut, new_len,
               [=](long long s, int cp) { return real_sample(S, carry, s, cp); });
}
