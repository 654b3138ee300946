// Overlap-save framing through a shared-memory tile: the part both unpack
// kernels share (unpack.cu, unpack_packed.cu). Inlined into them by the loader
// (voltstream.dsp.cuda.kernel_source), so NVRTC needs no include path and a
// change here changes the source CuPy caches the build by.
//
// Frame b, position j is stream sample s = b * step + j of (chan, pol) pair cp,
// read by `sample(s, cp)`, the kernel's own decode. The transpose through the
// tile makes both the read (time major) and the write (time fastest within a
// frame) coalesced. A thread block makes TILE_T samples of TILE_CP pairs of one
// frame: grid ((nfft / TILE_T rounded up) * nblock, ncp / TILE_CP rounded up).

#ifndef TILE_T
#define TILE_T 32  // time samples per tile (a multiple of 32)
#endif
#ifndef TILE_CP
#define TILE_CP 32  // (chan, pol) pairs per tile
#endif

template <typename Sample>
__device__ __forceinline__ void frame_tile(float2 *__restrict__ out, int ncp, int nfft, int step,
                                           int nblock, Sample sample)
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
        if (j < nfft && cp < ncp) v = sample((long long)b * step + j, cp);
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
        if (cp < ncp && j < nfft) out[((long long)cp * nblock + b) * nfft + j] = tile[c][wt];
    }
}
