// Where a packed value sits and what it decodes to: the part both packed kernels
// share (unpack_packed.cu, real_to_complex.cu; see unpack_packed.cu's header for
// the layout formula and the encodings). Inlined by the loader like frame_tile.cuh.
// The including file defines NBIT and ENCODING first.

#if NBIT != 2 && NBIT != 4 && NBIT != 8
#error "NBIT must be 2, 4 or 8"
#endif
#if ENCODING == 2 && NBIT != 2
#error "the VDIF level table is for 2-bit data"
#endif

struct Layout {
    long long s_blk;  // values from one frame (block of spf samples) to the next
    int spf;          // samples per frame; 1 when s_t is unused
    int s_t;          // values from one sample to the next within a frame
    int s_c;          // values from one channel to the next
    int s_p;          // values from one polarisation to the next
    int cpb;          // channels per block
    long long s_cb;   // values from one block of channels to the next
    int npol;
};

__device__ __forceinline__ float decode(unsigned int code)
{
#if ENCODING == 0
    return (float)(((int)(code << (32 - NBIT))) >> (32 - NBIT));
#elif ENCODING == 1
    return (float)((int)code - (1 << (NBIT - 1)));
#else
    const float levels[4] = {-3.3359f, -1.0f, 1.0f, 3.3359f};
    return levels[code];
#endif
}

__device__ __forceinline__ float value_at(const unsigned char *__restrict__ raw, long long v)
{
    const long long bit = v * NBIT;
    const unsigned int byte = raw[bit >> 3];
    return decode((byte >> (bit & 7)) & ((1u << NBIT) - 1u));
}

// Value index of sample r (of this chunk) of channel c, polarisation p (first part).
__device__ __forceinline__ long long packed_offset(const Layout L, long long r, int c, int p)
{
    return (r / L.spf) * L.s_blk + (long long)(r % L.spf) * L.s_t +
           (long long)(c / L.cpb) * L.s_cb + (long long)(c % L.cpb) * L.s_c + (long long)p * L.s_p;
}
