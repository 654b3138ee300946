// Unpack time-major baseband (time, chan, pol, re/im) into overlap-save frames
// laid out (chan, pol, block, nfft) complex64, ready for one batched cuFFT.
//
// Framing is done here rather than by a separate copy (frame_tile.cuh: frame b,
// position j reads stream sample s = b * step + j, through a transposing tile),
// where the first `carry_len` stream samples are the tail of the previous chunk
// that is kept on the GPU (no re-copy over PCIe).
//
// Compile-time parameters (defaults let scripts/check_kernels.py compile this):
//   SAMPLE_KIND  0: int8 complex, 1: int16 complex, 2: float32 complex,
//                3: int8 real, 4: int16 real
//   TILE_T       time samples per tile (a multiple of 32)
//   TILE_CP      (chan, pol) pairs per tile

#ifndef SAMPLE_KIND
#define SAMPLE_KIND 0
#endif

#if SAMPLE_KIND == 0
typedef char2 sample_t;
#elif SAMPLE_KIND == 1
typedef short2 sample_t;
#elif SAMPLE_KIND == 2
typedef float2 sample_t;
#elif SAMPLE_KIND == 3
typedef signed char sample_t;
#elif SAMPLE_KIND == 4
typedef short sample_t;
#else
#error "SAMPLE_KIND must be 0..4"
#endif

__device__ __forceinline__ float2 to_complex(sample_t v)
{
#if SAMPLE_KIND <= 2
    return make_float2((float)v.x, (float)v.y);
#else
    return make_float2((float)v, 0.0f);
#endif
}

#include "frame_tile.cuh"

extern "C" __global__ void __launch_bounds__(TILE_T * 8)
unpack_frame(const sample_t *__restrict__ raw,    // (nsamp_raw, ncp) this chunk
             const sample_t *__restrict__ carry,  // (carry_len, ncp) previous tail
             float2 *__restrict__ out,            // (ncp, nblock, nfft)
             int ncp, int nfft, int step, int nblock, int carry_len, long long nsamp_raw)
{
    frame_tile(out, ncp, nfft, step, nblock, [=](long long s, int cp) {
        if (s < carry_len) return to_complex(carry[s * ncp + cp]);
        if (s - carry_len < nsamp_raw) return to_complex(raw[(s - carry_len) * ncp + cp]);
        return make_float2(0.0f, 0.0f);
    });
}
