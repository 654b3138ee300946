// Overlap discard + detection + folding, fused: reads the inverse-FFT output
// frames (chan, pol, block, nfft) complex64 once, keeps the valid middle of each
// frame, detects the polarisation products, finds each sample's pulse phase
// bin and sub-integration, and accumulates into float64 profiles that stay on
// the GPU for the whole observation.  Detected samples never touch memory.
//
// Time and phase follow fold/reference.py exactly: output sample o of this chunk is
// stream sample first + o at t = (first + o) * tsamp; channel c uses
// tc = t - delay[c] (float64, the same IEEE operations as NumPy, so the
// sub-integration floor(tc / tsub) and the tc >= 0 cut agree bit for bit).
// The pulse phase comes from the host, which evaluates the predictor (polyco
// or constant period) in float64 at knots every KNOT samples per channel, minus
// an integer number of turns; here it is interpolated linearly in float64.
// Over KNOT = 4096 samples (1 ms at 4 MHz) the curvature error is ~1e-10 turns
// even for a binary millisecond pulsar.
//
// Accumulation: each thread block owns one channel and a run of whole frames
// (about SPB samples; a frame longer than SPB is split into segments), and
// histograms them in shared memory (float32) for its home sub-integration,
// flushing once with float64 atomics; samples of another sub-integration (a
// block straddling a boundary) go straight to global atomics.  Neighbouring
// samples usually share a phase bin (a bin of a slow pulsar spans hundreds of
// samples), so a warp whose 32 samples all fall in one bin reduces them with
// shuffles first and lane 0 keeps a running sum in registers until the bin
// changes: without that, 32 lanes hitting one shared address serialise.
// Blocks that lie wholly inside one sub-integration and after the start skip
// the per-sample float64 division (floor(tc / tsub) is monotonic in o).
//
// Compile-time parameters:
//   NPOL   input polarisations (1 or 2)
//   MODE   0: AA+BB, 1: AABBCRCI, 2: IQUV linear basis, 3: IQUV circular basis
//   KNOT_LOG2  log2 of the knot spacing
//   MIN_BLOCKS resident blocks per SM asked of the compiler (register cap):
//              the kernel is latency bound (ncu: 62.5% occupancy at 46
//              registers, 40% of stalls waiting on loads), so more warps help

#ifndef NPOL
#define NPOL 2
#endif
#ifndef MODE
#define MODE 0
#endif
#ifndef KNOT_LOG2
#define KNOT_LOG2 12
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif

#if MODE == 0
#define NPOL_OUT 1
#else
#define NPOL_OUT 4
#if NPOL != 2
#error "AABBCRCI and IQUV need two polarisations"
#endif
#endif

__device__ __forceinline__ void detect(const float2 *v, float *d)
{
#if MODE == 0
    float s = v[0].x * v[0].x + v[0].y * v[0].y;
#if NPOL == 2
    s += v[1].x * v[1].x + v[1].y * v[1].y;
#endif
    d[0] = s;
#else
    const float aa = v[0].x * v[0].x + v[0].y * v[0].y;
    const float bb = v[1].x * v[1].x + v[1].y * v[1].y;
    // A B* = (ar + i ai)(br - i bi)
    const float cr = v[0].x * v[1].x + v[0].y * v[1].y;
    const float ci = v[0].y * v[1].x - v[0].x * v[1].y;
#if MODE == 1
    d[0] = aa; d[1] = bb; d[2] = cr; d[3] = ci;
#elif MODE == 2
    d[0] = aa + bb; d[1] = aa - bb; d[2] = 2.0f * cr; d[3] = -2.0f * ci;
#else
    d[0] = aa + bb; d[1] = 2.0f * cr; d[2] = 2.0f * ci; d[3] = bb - aa;
#endif
#endif
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s);
    return v;
}

extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS)
detect_fold(const float2 *__restrict__ ts,            // (nchan, NPOL, nblock, nfft)
            const unsigned char *__restrict__ valid,  // (nout,) or unused
            const double *__restrict__ knots,         // (nchan, nknot) turns
            const double *__restrict__ delay,         // (nchan,) s, relative to f_ref
            double *__restrict__ acc,                 // (nsub_cap, NPOL_OUT, nchan, nbin)
            unsigned int *__restrict__ hits,          // (nsub_cap, nchan, nbin)
            unsigned long long *__restrict__ offered, // (nsub_cap, nchan)
            int nchan, int nblock, int nfft, int head, int step, int nknot,
            int nbin, int nsub_cap, int has_valid, int spb,
            long long first, double tsamp, double tsub)
{
    extern __shared__ float smem[];
    float *hist = smem;                                            // (NPOL_OUT, nbin)
    unsigned int *cnt = (unsigned int *)(smem + NPOL_OUT * nbin);  // (nbin,)
    __shared__ unsigned int home_offered;

    const int c = blockIdx.y;
    // Work split: whole frames per block when a frame is short, else segments.
    const int fpb = step >= spb ? 1 : spb / step;
    const int segs = step >= spb ? (step + spb - 1) / spb : 1;
    int b_lo, b_hi, j_lo, j_hi;  // frames [b_lo, b_hi), within-frame [j_lo, j_hi)
    if (segs > 1) {
        b_lo = blockIdx.x / segs;
        b_hi = b_lo + 1;
        j_lo = (blockIdx.x % segs) * spb;
        j_hi = min(j_lo + spb, step);
    } else {
        b_lo = blockIdx.x * fpb;
        b_hi = min(b_lo + fpb, nblock);
        j_lo = 0;
        j_hi = step;
    }
    if (b_lo >= nblock) return;
    const long long o_first = (long long)b_lo * step + j_lo;
    const long long o_last = (long long)(b_hi - 1) * step + j_hi - 1;

    for (int i = threadIdx.x; i < NPOL_OUT * nbin; i += blockDim.x) hist[i] = 0.0f;
    for (int i = threadIdx.x; i < nbin; i += blockDim.x) cnt[i] = 0u;
    if (threadIdx.x == 0) home_offered = 0u;
    __syncthreads();

    const double dly = delay[c];
    const double tc_first = (double)(first + o_first) * tsamp - dly;
    const double tc_last = (double)(first + o_last) * tsamp - dly;
    const long long home = (long long)floor(tc_first / tsub);
    const bool simple = tc_first >= 0.0 && home == (long long)floor(tc_last / tsub) &&
                        home < nsub_cap;
    const double *kn = knots + (long long)c * nknot;
    const long long frame_stride = (long long)nblock * nfft;
    const float2 *chan_ts = ts + (long long)c * NPOL * frame_stride;
    const int lane = threadIdx.x & 31;

    // Lane 0's run: a warp-uniform bin and its running sums.
    int run_bin = -1;
    float run_d[NPOL_OUT];
#pragma unroll
    for (int q = 0; q < NPOL_OUT; ++q) run_d[q] = 0.0f;
    unsigned int run_n = 0u;

    for (int b = b_lo; b < b_hi; ++b) {
        const long long obase = (long long)b * step;
        const float2 *fr = chan_ts + (long long)b * nfft + head;
        // Whole warps iterate together so the shuffles below see every lane.
        for (int j0 = j_lo; j0 < j_hi; j0 += blockDim.x) {
            const int j = j0 + threadIdx.x;
            const long long o = obase + j;
            int bin = -1;
            float d[NPOL_OUT];
#pragma unroll
            for (int q = 0; q < NPOL_OUT; ++q) d[q] = 0.0f;
            // Loads first, so their latency overlaps the float64 time and phase
            // arithmetic below (each thread has one sample in flight otherwise).
            float2 v[NPOL];
            if (j < j_hi) {
#pragma unroll
                for (int p = 0; p < NPOL; ++p) v[p] = fr[p * frame_stride + j];
            }
            if (j < j_hi) {
                long long sub = home;
                bool inside = true;
                if (!simple) {
                    const double tc = (double)(first + o) * tsamp - dly;
                    inside = tc >= 0.0;
                    sub = inside ? (long long)floor(tc / tsub) : -1;
                    if (sub >= nsub_cap) inside = false;  // the host sizes nsub_cap to avoid this
                    if (inside) {
                        if (sub == home) atomicAdd(&home_offered, 1u);
                        else atomicAdd(&offered[sub * nchan + c], 1ull);
                    }
                }
                const bool use = inside && (!has_valid || valid[o]);
                if (use) {
                    detect(v, d);
                    const int k = (int)(o >> KNOT_LOG2);
                    const double f =
                        (double)(o & ((1 << KNOT_LOG2) - 1)) * (1.0 / (1 << KNOT_LOG2));
                    const double p0 = kn[k];
                    double ph = p0 + (kn[k + 1] - p0) * f;
                    ph -= floor(ph);
                    bin = (int)(ph * nbin);
                    bin = bin < nbin ? bin : nbin - 1;
                    if (sub != home) {
#pragma unroll
                        for (int q = 0; q < NPOL_OUT; ++q)
                            atomicAdd(&acc[((sub * NPOL_OUT + q) * nchan + c) * nbin + bin],
                                      (double)d[q]);
                        atomicAdd(&hits[(sub * nchan + c) * nbin + bin], 1u);
                        // Done here: keep it out of the warp sums below.
                        bin = -1;
#pragma unroll
                        for (int q = 0; q < NPOL_OUT; ++q) d[q] = 0.0f;
                    }
                }
            }
            // bin >= 0: a used sample of the home sub-integration.
            const int top = __reduce_max_sync(0xffffffffu, bin);
            const bool uniform = __all_sync(0xffffffffu, bin == top || bin < 0);
            if (top < 0) continue;
            if (uniform) {
                const unsigned int n = __popc(__ballot_sync(0xffffffffu, bin >= 0));
                float s[NPOL_OUT];
#pragma unroll
                for (int q = 0; q < NPOL_OUT; ++q) s[q] = warp_sum(d[q]);
                if (lane == 0) {
                    if (top != run_bin && run_n) {
#pragma unroll
                        for (int q = 0; q < NPOL_OUT; ++q)
                            atomicAdd(&hist[q * nbin + run_bin], run_d[q]);
                        atomicAdd(&cnt[run_bin], run_n);
                        run_n = 0u;
#pragma unroll
                        for (int q = 0; q < NPOL_OUT; ++q) run_d[q] = 0.0f;
                    }
                    run_bin = top;
#pragma unroll
                    for (int q = 0; q < NPOL_OUT; ++q) run_d[q] += s[q];
                    run_n += n;
                }
            } else if (bin >= 0) {
#pragma unroll
                for (int q = 0; q < NPOL_OUT; ++q) atomicAdd(&hist[q * nbin + bin], d[q]);
                atomicAdd(&cnt[bin], 1u);
            }
        }
    }
    if (lane == 0 && run_n) {
#pragma unroll
        for (int q = 0; q < NPOL_OUT; ++q) atomicAdd(&hist[q * nbin + run_bin], run_d[q]);
        atomicAdd(&cnt[run_bin], run_n);
    }
    __syncthreads();

    if (home < 0 || home >= nsub_cap) return;
    if (threadIdx.x == 0) {
        const unsigned long long n =
            simple ? (unsigned long long)(o_last - o_first + 1) : home_offered;
        if (n) atomicAdd(&offered[home * nchan + c], n);
    }
    for (int i = threadIdx.x; i < nbin; i += blockDim.x) {
        if (cnt[i] == 0u) continue;
#pragma unroll
        for (int q = 0; q < NPOL_OUT; ++q)
            atomicAdd(&acc[((home * NPOL_OUT + q) * nchan + c) * nbin + i],
                      (double)hist[q * nbin + i]);
        atomicAdd(&hits[(home * nchan + c) * nbin + i], cnt[i]);
    }
}
