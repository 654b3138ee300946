// The single-pulse search's two GPU loops (search/gpu_single_pulse.py; the NumPy
// reference is search/single_pulse.py, docs/search.md "GPU search").
//
// dedisperse_tile: brute-force incoherent dedispersion,
//     out[d, t] = sum_c z[c, t + delay[d, c]]
// z channel-major (nchan, nsamp) float32, delays int32 (ndm, nchan) in global
// memory (4152 x 4096 of them for YNAO: 68 MB, far over the 64 kB of constant
// memory), out (ndm, nout) float32. One block computes DS_DMS consecutive trials
// over DS_TILE = DS_THREADS * DS_TPT consecutive output samples. The channel loop is
// inside: DS_CG channels at a time, each channel's samples t0 + delay[d0, c] ..
// + DS_TILE + span go to shared memory once (coalesced) and every trial of the
// block reads them there at its own offset (delay[d, c] - delay[d0, c], 0 ..
// span, since delays grow with DM): each sample loaded from global memory is
// used DS_DMS x DS_TPT times. The tile (128 threads x 8 samples x 16 trials, 16
// channels staged) was the fastest of 14 measured on an H200 for YNAO's band (2.1x
// the first 256 x 2 x 8: more sums per staged sample and per synchronisation; wider
// channel groups lose occupancy to shared memory; docs/search.md "GPU search"). `span` (the largest such offset over the blocks and
// channels) is computed by the host and sizes the dynamic shared memory.
// Threads read consecutive shared words (no bank conflicts); every thread of the
// block reads the same offset (a broadcast).
//
// select_hist / select_pick: the k-th smallest value of each row, exactly (a radix
// select on the float's order-preserving 32-bit key, 8 bits a pass, 4 passes),
// NaN values left out: the medians and MADs of the robust statistics without
// sorting. Row r is x[r * row_stride + col0 .. + ncols]; prefix[r] holds the key
// bits found so far, rank[r] the rank still sought within them. Each pass:
// select_hist counts the next 8 bits of the keys that match the prefix (a block
// per slice of a row, a shared histogram, then 256 atomics per block);
// select_pick (a thread per row) finds the digit holding the rank and moves the
// prefix and rank on. After the pass of shift 0, prefix[r] is the value's key and
// rank[r] how many equal values precede the sought one; the host also reads the
// count of that value (hist[r][digit], kept in `equal`).

#ifndef DS_THREADS
#define DS_THREADS 128
#endif
#ifndef DS_TPT
#define DS_TPT 8  // output samples per thread, DS_THREADS apart
#endif
#ifndef DS_DMS
#define DS_DMS 16  // DM trials per block
#endif
#ifndef DS_CG
#define DS_CG 16  // channels staged in shared memory at a time
#endif
#define DS_TILE (DS_THREADS * DS_TPT)

extern "C" __global__ void __launch_bounds__(DS_THREADS)
dedisperse_tile(const float *__restrict__ z,      // (nchan, nsamp)
                const int *__restrict__ delays,   // (ndm, nchan), >= 0, growing with d
                float *__restrict__ out,          // (ndm, nout)
                int nchan, long long nsamp, int ndm, long long nout, int span)
{
    extern __shared__ float smem[];
    const int width = DS_TILE + span;               // staged samples per channel
    float *seg = smem;                              // (DS_CG, width)
    int *rel = (int *)(smem + DS_CG * width);       // (DS_CG, DS_DMS) offsets
    int *base = rel + DS_CG * DS_DMS;               // (DS_CG) delay of trial d0

    const long long t0 = (long long)blockIdx.x * DS_TILE;
    const int d0 = blockIdx.y * DS_DMS;
    float acc[DS_DMS][DS_TPT];
#pragma unroll
    for (int j = 0; j < DS_DMS; ++j)
#pragma unroll
        for (int k = 0; k < DS_TPT; ++k)
            acc[j][k] = 0.0f;

    for (int c0 = 0; c0 < nchan; c0 += DS_CG) {
        const int ng = min(DS_CG, nchan - c0);
        if (threadIdx.x < ng)
            base[threadIdx.x] = delays[(long long)d0 * nchan + c0 + threadIdx.x];
        __syncthreads();
        for (int i = threadIdx.x; i < DS_CG * DS_DMS; i += DS_THREADS) {
            const int ch = i % DS_CG, j = i / DS_CG;
            const int d = min(d0 + j, ndm - 1);  // a last partial block repeats its last trial
            rel[i / DS_CG + ch * DS_DMS] =
                ch < ng ? delays[(long long)d * nchan + c0 + ch] - base[ch] : 0;
        }
        for (int ch = 0; ch < ng; ++ch) {
            const float *row = z + (long long)(c0 + ch) * nsamp;
            const long long s0 = t0 + base[ch];
            for (int i = threadIdx.x; i < width; i += DS_THREADS) {
                const long long s = s0 + i;
                seg[ch * width + i] = s < nsamp ? __ldg(row + s) : 0.0f;
            }
        }
        __syncthreads();
        for (int ch = 0; ch < ng; ++ch) {
            const float *sg = seg + ch * width + threadIdx.x;
#pragma unroll
            for (int j = 0; j < DS_DMS; ++j) {
                const int r = rel[ch * DS_DMS + j];
#pragma unroll
                for (int k = 0; k < DS_TPT; ++k)
                    acc[j][k] += sg[r + k * DS_THREADS];
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < DS_DMS; ++j) {
        if (d0 + j >= ndm)
            break;
#pragma unroll
        for (int k = 0; k < DS_TPT; ++k) {
            const long long t = t0 + threadIdx.x + k * DS_THREADS;
            if (t < nout)
                out[(long long)(d0 + j) * nout + t] = acc[j][k];
        }
    }
}

// ---- radix select --------------------------------------------------------------

#ifndef SEL_THREADS
#define SEL_THREADS 256
#endif
#ifndef SEL_ITEMS
#define SEL_ITEMS 16  // values per thread per block
#endif

// float -> unsigned with the same order (negatives flipped entirely, positives
// with the sign bit set).
__device__ __forceinline__ unsigned float_key(float v)
{
    const unsigned u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

extern "C" __global__ void __launch_bounds__(SEL_THREADS)
select_hist(const float *__restrict__ x, long long row_stride, long long col0,
            long long ncols, const unsigned *__restrict__ prefix, int shift,
            unsigned *__restrict__ hist)  // (nrows, 256), zeroed by the host
{
    __shared__ unsigned h[256];
    for (int i = threadIdx.x; i < 256; i += SEL_THREADS)
        h[i] = 0;
    __syncthreads();
    const int row = blockIdx.y;
    const unsigned want = prefix[row];
    const unsigned mask = shift >= 24 ? 0u : (0xffffffffu << (shift + 8));
    const float *p = x + (long long)row * row_stride + col0;
    const long long a = (long long)blockIdx.x * SEL_THREADS * SEL_ITEMS;
    const long long b = min(ncols, a + (long long)SEL_THREADS * SEL_ITEMS);
    for (long long i = a + threadIdx.x; i < b; i += SEL_THREADS) {
        const float v = p[i];
        if (v != v)
            continue;  // NaN: left out
        const unsigned key = float_key(v);
        if ((key & mask) == (want & mask))
            atomicAdd(&h[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += SEL_THREADS)
        if (h[i])
            atomicAdd(&hist[(long long)row * 256 + i], h[i]);
}

extern "C" __global__ void
select_pick(const unsigned *__restrict__ hist, int nrows, int shift,
            unsigned *__restrict__ prefix, long long *__restrict__ rank,
            long long *__restrict__ equal)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= nrows)
        return;
    const unsigned *h = hist + (long long)row * 256;
    long long k = rank[row];
    int digit = 255;
    for (int i = 0; i < 256; ++i) {
        if (k < (long long)h[i]) {
            digit = i;
            break;
        }
        k -= h[i];
    }
    prefix[row] |= (unsigned)digit << shift;
    rank[row] = k;
    equal[row] = h[digit];
}
