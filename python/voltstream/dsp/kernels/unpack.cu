// Unpack time-major baseband (time, chan, pol, re/im) into overlap-save frames
// laid out (chan, pol, block, nfft) complex64, ready for one batched cuFFT.
//
// The transpose goes through a shared-memory tile so that both the read (time
// major) and the write (time fastest within a frame) are coalesced.  Framing is
// done here rather than by a separate copy: frame b, position j reads stream
// sample s = b * step + j, where the first `carry_len` stream samples are the
// tail of the previous chunk that is kept on the GPU (no re-copy over PCIe).
//
// Compile-time parameters (defaults let scripts/check_kernels.py compile this):
//   SAMPLE_KIND  0: int8 complex, 1: int16 complex, 2: float32 complex,
//                3: int8 real, 4: int16 real
//   TILE_T       time samples per tile (a multiple of 32)
//   TILE_CP      (chan, pol) pairs per tile

#ifndef SAMPLE_KIND
#define SAMPLE_KIND 0
#endif
#ifndef TILE_T
#define TILE_T 32
#endif
#ifndef TILE_CP
#define TILE_CP 32
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

extern "C" __global__ void __launch_bounds__(TILE_T * 8)
unpack_frame(const sample_t *__restrict__ raw,    // (nsamp_raw, ncp) this chunk
             const sample_t *__restrict__ carry,  // (carry_len, ncp) previous tail
             float2 *__restrict__ out,            // (ncp, nblock, nfft)
             int ncp, int nfft, int step, int nblock, int carry_len, long long nsamp_raw)
{
    // +1 column: the transposed read walks a column, which would otherwise hit
    // one bank per warp.
    __shared__ float2 tile[TILE_CP][TILE_T + 1];

    const int tiles_per_frame = (nfft + TILE_T - 1) / TILE_T;
    const int b = blockIdx.x / tiles_per_frame;
    const int j0 = (blockIdx.x % tiles_per_frame) * TILE_T;
    const int cp0 = blockIdx.y * TILE_CP;
    if (b >= nblock) return;

    const int tx = threadIdx.x % TILE_CP;  // cp within tile on the read side
    const int ty = threadIdx.x / TILE_CP;  // time row on the read side
    const int rows_per_pass = blockDim.x / TILE_CP;

    for (int t = ty; t < TILE_T; t += rows_per_pass) {
        const int j = j0 + t;
        const int cp = cp0 + tx;
        float2 v = make_float2(0.0f, 0.0f);
        if (j < nfft && cp < ncp) {
            const long long s = (long long)b * step + j;
            if (s < carry_len) {
                v = to_complex(carry[s * ncp + cp]);
            } else if (s - carry_len < nsamp_raw) {
                v = to_complex(raw[(s - carry_len) * ncp + cp]);
            }
        }
        tile[tx][t] = v;
    }
    __syncthreads();

    // Write side: a warp writes TILE_T consecutive samples of one (chan, pol).
    const int wt = threadIdx.x % TILE_T;
    const int wr = threadIdx.x / TILE_T;
    const int rows_w = blockDim.x / TILE_T;
    for (int c = wr; c < TILE_CP; c += rows_w) {
        const int cp = cp0 + c;
        const int j = j0 + wt;
        if (cp < ncp && j < nfft) {
            out[((long long)cp * nblock + b) * nfft + j] = tile[c][wt];
        }
    }
}
