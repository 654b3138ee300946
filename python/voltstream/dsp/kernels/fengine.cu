// GPU F-engine: polyphase FIR straight from packed digitiser samples, and the
// post-FFT pass (fine delay, phase, gain, dither, quantise, transpose to heaps).
// The NumPy float64 references are voltstream.dsp.pfb.pfb_fir and
// voltstream.fengine.reference.postprocess; docs/fengine.md has the contract.
//
// Compile-time parameters (-D), with defaults so the file compiles alone:
//   IN_BITS   8, 10, 12 or 16: signed samples packed as one big-endian bit stream
//   TAPS      1..16: PFB taps
//   OUT_BITS  8 (int8 re, im) or 4 (one byte, real in the high nibble)

#ifndef IN_BITS
#define IN_BITS 10
#endif
#ifndef TAPS
#define TAPS 16
#endif
#ifndef OUT_BITS
#define OUT_BITS 8
#endif

// Sample i of a packed big-endian bit stream, sign-extended.  10- and 12-bit
// samples straddle bytes: three byte loads cover any of them (the buffer keeps
// 4 bytes of padding past the last sample).  Neighbouring threads read
// neighbouring bytes, so the loads coalesce and hit L1.
__device__ __forceinline__ float load_sample(const unsigned char *__restrict__ p, long long i)
{
#if IN_BITS == 8
    return (float)(signed char)__ldg(p + i);
#elif IN_BITS == 16
    const int hi = (signed char)__ldg(p + 2 * i);
    return (float)(hi * 256 + (int)__ldg(p + 2 * i + 1));
#else
    const long long bit = i * IN_BITS;
    const unsigned char *b = p + (bit >> 3);
    const unsigned int word = ((unsigned int)__ldg(b) << 24) | ((unsigned int)__ldg(b + 1) << 16) |
                              ((unsigned int)__ldg(b + 2) << 8);
    return (float)((int)(word << (bit & 7)) >> (32 - IN_BITS));
#endif
}

// Four consecutive samples from i, i % 4 == 0: then the group starts on a byte
// boundary for every width (4 x 10 bits = 5 bytes), so it is one 4- or 8-byte
// load for 8 and 16 bits and 5 or 6 byte loads for 10 and 12 bits.
__device__ __forceinline__ float4 load4_aligned(const unsigned char *__restrict__ p, long long i)
{
#if IN_BITS == 8
    const char4 c = __ldg(reinterpret_cast<const char4 *>(p + i));
    return make_float4(c.x, c.y, c.z, c.w);
#elif IN_BITS == 16
    const uint2 v = __ldg(reinterpret_cast<const uint2 *>(p + 2 * i));
    // Big-endian 16-bit words: swap the bytes of each half, then sign-extend.
    const unsigned int a = __byte_perm(v.x, 0, 0x2301), b = __byte_perm(v.y, 0, 0x2301);
    return make_float4((float)(short)(a & 0xffff), (float)(short)(a >> 16),
                       (float)(short)(b & 0xffff), (float)(short)(b >> 16));
#else
    const unsigned char *b = p + i * IN_BITS / 8;
    unsigned long long word = 0;
#pragma unroll
    for (int k = 0; k < IN_BITS / 2; ++k) word = (word << 8) | __ldg(b + k);
    word <<= 64 - 4 * IN_BITS;  // first sample in the top bits
    float4 r;
    r.x = (float)((long long)word >> (64 - IN_BITS));
    r.y = (float)((long long)(word << IN_BITS) >> (64 - IN_BITS));
    r.z = (float)((long long)(word << (2 * IN_BITS)) >> (64 - IN_BITS));
    r.w = (float)((long long)(word << (3 * IN_BITS)) >> (64 - IN_BITS));
    return r;
#endif
}

__device__ __forceinline__ float4 load4(const unsigned char *__restrict__ p, long long i)
{
    if ((i & 3) == 0) return load4_aligned(p, i);
    return make_float4(load_sample(p, i), load_sample(p, i + 1), load_sample(p, i + 2),
                       load_sample(p, i + 3));
}

__device__ __forceinline__ float4 fma4(float4 x, float4 w, float4 acc)
{
    return make_float4(fmaf(x.x, w.x, acc.x), fmaf(x.y, w.y, acc.y), fmaf(x.z, w.z, acc.z),
                       fmaf(x.w, w.w, acc.w));
}

// out[pol, s, t] = sum_j x_pol[starts[pol, s] + j*N + t] * w[j*N + t]
//
// One thread per four columns t..t+3 and run of `seg` spectra.  The TAPS sample
// groups of the window stay in registers and slide by one row per spectrum, so
// each packed sample is read once per run (plus TAPS-1 rows at the start of a
// run) and each weight once per thread; the output is one 16-byte store.  A
// start that does not follow on from the previous spectrum (a coarse-delay
// step) reloads the whole window; a start that is not a multiple of 4 (an odd
// coarse delay) reads sample by sample.  Needs N % 4 == 0 and 16-byte aligned
// rows (the host pads them).
extern "C" __global__ void __launch_bounds__(128)
pfb_fir(const unsigned char *__restrict__ raw,  // (pol, pol_stride bytes)
        long long pol_stride,
        const long long *__restrict__ starts,   // (pol, nspec) first sample of each window
        const float *__restrict__ weights,      // (TAPS * N)
        float *__restrict__ out,                // (pol, nspec, N)
        int n, int nspec, int seg)
{
    const int t = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (t >= n) return;
    const int pol = blockIdx.z;
    const int s0 = blockIdx.y * seg;
    const int s1 = min(s0 + seg, nspec);
    const unsigned char *p = raw + pol * pol_stride;
    const long long *st = starts + (long long)pol * nspec;
    float4 *o = reinterpret_cast<float4 *>(out + (long long)pol * nspec * n + t);

    float4 w[TAPS], win[TAPS];
#pragma unroll
    for (int j = 0; j < TAPS; ++j)
        w[j] = __ldg(reinterpret_cast<const float4 *>(weights + (long long)j * n + t));

    if (s0 >= s1) return;
    long long a = st[s0];
#pragma unroll
    for (int j = 0; j < TAPS; ++j) win[j] = load4(p, a + (long long)j * n + t);
    for (int s = s0; s < s1; ++s) {
        // The next spectrum's new row is loaded before this one's arithmetic and
        // store, so its memory latency overlaps them.
        const bool more = s + 1 < s1;
        const long long a_next = more ? st[s + 1] : a;
        const bool slide = more && a_next == a + n;
        const float4 nxt = slide ? load4(p, a_next + (long long)(TAPS - 1) * n + t) : win[0];
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int j = 0; j < TAPS; ++j) acc = fma4(win[j], w[j], acc);
        o[(long long)s * (n / 4)] = acc;
        if (slide) {
#pragma unroll
            for (int j = 0; j < TAPS - 1; ++j) win[j] = win[j + 1];
            win[TAPS - 1] = nxt;
        } else if (more) {
#pragma unroll
            for (int j = 0; j < TAPS; ++j) win[j] = load4(p, a_next + (long long)j * n + t);
        }
        a = a_next;
    }
}

// SplitMix64 finaliser: the dither hash of voltstream.dsp.quantize.slot_dither.
__device__ __forceinline__ unsigned long long splitmix64(unsigned long long z)
{
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

__device__ __forceinline__ float dither_value(unsigned long long key, unsigned long long e)
{
    return (float)(splitmix64(key + e) >> 40) * 5.9604644775390625e-8f - 0.5f;  // 2^-24
}

#if OUT_BITS == 8
#define QLIMIT 127.0f
typedef char4 packed_t;  // (re0, im0, re1, im1): pol 0 then pol 1
#else
#define QLIMIT 7.0f
typedef uchar2 packed_t;  // (pol0, pol1), each re << 4 | im
#endif

#define TILE 32
#define ROWS 8

// One (32 channels x 32 spectra) tile of one heap slot, both polarisations.
// Load phase: lanes along channels (coalesced reads of the FFT output); store
// phase: lanes along spectra (coalesced writes of the heap, whose innermost
// axes are spectrum, pol, re/im).  The tile goes through shared memory, padded
// against bank conflicts.  Saturated values are counted per warp and added to
// sat[slot, pol] with one atomic each.
extern "C" __global__ void __launch_bounds__(TILE * ROWS)
postprocess(const float2 *__restrict__ spec,  // (pol, nspec_total, nchan + 1): cuFFT R2C output
            const float2 *__restrict__ rot,   // (pol, nspec_total): phase, cycles/channel
            const float2 *__restrict__ gains, // (pol, nchan)
            const int *__restrict__ slots,    // (nsend) slot within this call, per output heap
            const long long *__restrict__ slot_ids,  // (nsend) absolute slot number (dither)
            packed_t *__restrict__ out,       // (nsend, nchan, sph)
            unsigned long long *__restrict__ sat,    // (nsend, pol)
            int nchan, int sph, long long nspec_total,
            unsigned long long dither_key, int dither_on)
{
    __shared__ packed_t tile[TILE][TILE + 1];  // [spectrum][channel]
    const int z = blockIdx.z;
    const int slot = slots[z];
    const int c0 = blockIdx.x * TILE, s0 = blockIdx.y * TILE;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = c0 + tx;
    unsigned int clipped[2] = {0u, 0u};
    unsigned long long key = 0;
    if (dither_on) key = splitmix64(dither_key + (unsigned long long)slot_ids[z]);

    for (int sl = ty; sl < TILE; sl += ROWS) {
        const int s = s0 + sl;
        if (c >= nchan || s >= sph) continue;
        const long long row = (long long)slot * sph + s;
        float q[2][2];
#pragma unroll
        for (int pol = 0; pol < 2; ++pol) {
            const float2 x = spec[((long long)pol * nspec_total + row) * (nchan + 1) + c];
            // Rotation phi - 2 pi f_c tau in cycles.  The host reduced phi to
            // [-0.5, 0.5) cycles in double and f_c tau is below 0.25 cycles, so
            // float32 keeps it to ~1e-7 cycles.
            const float2 pr = rot[pol * nspec_total + row];
            const float cyc = fmaf(-(float)c, pr.y, pr.x);
            float sn, cs;
            sincospif(2.0f * cyc, &sn, &cs);
            const float2 g = gains[pol * nchan + c];
            const float2 r = make_float2(x.x * cs - x.y * sn, x.x * sn + x.y * cs);
            float re = r.x * g.x - r.y * g.y;
            float im = r.x * g.y + r.y * g.x;
            if (dither_on) {
                const unsigned long long e = (((unsigned long long)pol * sph + s) * nchan + c) * 2;
                re += dither_value(key, e);
                im += dither_value(key, e + 1);
            }
            re = rintf(re);
            im = rintf(im);
            clipped[pol] += (fabsf(re) > QLIMIT || fabsf(im) > QLIMIT) ? 1u : 0u;
            q[pol][0] = fminf(fmaxf(re, -QLIMIT), QLIMIT);
            q[pol][1] = fminf(fmaxf(im, -QLIMIT), QLIMIT);
        }
#if OUT_BITS == 8
        tile[sl][tx] = make_char4((signed char)q[0][0], (signed char)q[0][1],
                                  (signed char)q[1][0], (signed char)q[1][1]);
#else
        tile[sl][tx] = make_uchar2(
            (unsigned char)((((int)q[0][0] & 15) << 4) | ((int)q[0][1] & 15)),
            (unsigned char)((((int)q[1][0] & 15) << 4) | ((int)q[1][1] & 15)));
#endif
    }
#pragma unroll
    for (int pol = 0; pol < 2; ++pol) {
        const unsigned int n = __reduce_add_sync(0xffffffffu, clipped[pol]);
        if (tx == 0 && n) atomicAdd(sat + 2 * z + pol, (unsigned long long)n);
    }
    __syncthreads();
    const int s = s0 + tx;
    for (int cl = ty; cl < TILE; cl += ROWS) {
        const int cc = c0 + cl;
        if (cc < nchan && s < sph) out[((long long)z * nchan + cc) * sph + s] = tile[tx][cl];
    }
}
