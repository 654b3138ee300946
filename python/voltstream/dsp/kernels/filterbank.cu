// The search filterbank's own kernels (search/gpu_filterbank.py); the unpack,
// chirp and FFTs before them are the fold's (unpack*.cu, chirp.cu, cuFFT).
//
// gather_stream: the engine's stream of complex samples per (chan, pol) pair cp is
// a carry (samples left over from the last chunk, fewer than one output sample's
// span) followed by this chunk's new samples, which sit in frames (cp, nblock,
// nfft) from `head` on, `step` per frame (the overlap-save's valid middle; without
// dedispersion one frame of the whole chunk, head 0). The first `nout` samples of
// carry + new go to `out` (cp, nout) contiguous, ready for the M-point FFTs; the
// rest to `next` (cp, cap), the next chunk's carry. `zero`: the new samples are a
// gap (no frames read, all zero), `nsrc` of them.
//
// detect_integrate: after the M-point FFTs of `spec` (cp, k * nint, M), output
// sample s, product q, channel c * M + j = the sum over nint spectra of the
// detected fine channel j, fftshifted (bin (j + M/2) % M) and scaled by 1/M (the
// reference's orthonormal FFT), written time-major (k, npol_out, nchan * M) as
// SIGPROC and PSRFITS store it. One thread per (s, c, j): reads along j coalesce.
//
// Compile-time parameters (defaults let scripts/check_kernels.py compile this):
//   NPOL  1 or 2 input polarisations
//   MODE  0: total intensity |A|^2 (+ |B|^2), 1: AABB, 2: IQUV (linear basis, as
//         dsp/detect.py: I = AA + BB, Q = AA - BB, U = 2 Re(A B*), V = -2 Im(A B*))

#ifndef NPOL
#define NPOL 2
#endif
#ifndef MODE
#define MODE 0
#endif

#if MODE != 0 && NPOL != 2
#error "AABB and IQUV need two polarisations"
#endif

extern "C" __global__ void gather_stream(const float2 *__restrict__ frames, int nfft, int head,
                                         int step, int nblock, int zero, long long nsrc,
                                         const float2 *__restrict__ carry, int carry_len,
                                         float2 *__restrict__ next, int cap,
                                         float2 *__restrict__ out, long long nout)
{
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int cp = blockIdx.y;
    if (j >= carry_len + nsrc) return;
    float2 v;
    if (j < carry_len) {
        v = carry[(long long)cp * cap + j];
    } else if (zero) {
        v = make_float2(0.0f, 0.0f);
    } else {
        const long long r = j - carry_len;
        const long long f = r / step;
        v = frames[((long long)cp * nblock + f) * nfft + head + (r - f * step)];
    }
    if (j < nout)
        out[(long long)cp * nout + j] = v;
    else
        next[(long long)cp * cap + (j - nout)] = v;
}

extern "C" __global__ void detect_integrate(const float2 *__restrict__ spec,
                                            float *__restrict__ out, int nchan, int m, int nint,
                                            int k, float scale)
{
    const int i = blockIdx.y * blockDim.x + threadIdx.x;  // output channel c * m + j
    const int s = blockIdx.x;  // x: k may exceed the 65535 blocks y allows
    if (i >= nchan * m || s >= k) return;
    const int c = i / m, j = i - c * m;
    const int bin = (j + m / 2) % m;
    const long long per_pair = (long long)k * nint * m;  // one (chan, pol)'s spectra
    const long long a0 = (long long)(c * NPOL) * per_pair + (long long)s * nint * m + bin;
    float p0 = 0.0f;
#if NPOL == 2
    float p1 = 0.0f;
#endif
#if MODE == 2
    float cr = 0.0f, ci = 0.0f;
#endif
    for (int t = 0; t < nint; ++t) {
        const float2 a = spec[a0 + (long long)t * m];
        p0 += a.x * a.x + a.y * a.y;
#if NPOL == 2
        const float2 b = spec[a0 + per_pair + (long long)t * m];
        p1 += b.x * b.x + b.y * b.y;
#if MODE == 2
        cr += a.x * b.x + a.y * b.y;  // Re(A B*)
        ci += a.y * b.x - a.x * b.y;  // Im(A B*)
#endif
#endif
    }
    const long long nout_chan = (long long)nchan * m;
    float *o = out + (long long)s * (MODE == 0 ? 1 : (MODE == 1 ? 2 : 4)) * nout_chan + i;
#if MODE == 0
#if NPOL == 2
    o[0] = scale * (p0 + p1);
#else
    o[0] = scale * p0;
#endif
#elif MODE == 1
    o[0] = scale * p0;
    o[nout_chan] = scale * p1;
#else
    o[0] = scale * (p0 + p1);
    o[nout_chan] = scale * (p0 - p1);
    o[2 * nout_chan] = 2.0f * scale * cr;
    o[3 * nout_chan] = -2.0f * scale * ci;
#endif
}
