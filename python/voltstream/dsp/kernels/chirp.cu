// Multiply spectra (chan, pol, block, nfft) complex64 by the per-channel chirp
// (chan, nfft) in place.  The chirp already holds the 1/nfft of the unnormalised
// inverse cuFFT, so this pass is the only scaling the data sees.
//
// Two complex values per thread (one 16-byte load and store): the kernel is a
// pure stream, and wide accesses keep it at the memory roofline.  The chirp
// table (nchan * nfft * 8 bytes, at most a few MB) stays in L2.

extern "C" __global__ void
chirp_multiply(float4 *__restrict__ spec,         // (nchan, npol, nblock, nfft/2) pairs
               const float4 *__restrict__ chirp,  // (nchan, nfft/2) pairs
               int half_nfft, long long rows_per_chan, long long npairs)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < npairs; i += stride) {
        const long long row = i / half_nfft;
        const int k = (int)(i - row * half_nfft);
        const long long c = row / rows_per_chan;
        const float4 h = __ldg(&chirp[c * half_nfft + k]);
        const float4 x = spec[i];
        float4 y;
        y.x = x.x * h.x - x.y * h.y;
        y.y = x.x * h.y + x.y * h.x;
        y.z = x.z * h.z - x.w * h.w;
        y.w = x.z * h.w + x.w * h.z;
        spec[i] = y;
    }
}
