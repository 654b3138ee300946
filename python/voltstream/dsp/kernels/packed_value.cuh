// Where a packed value sits and what it decodes to: the part both packed kernels
// share (unpack_packed.cu, real_to_complex.cu; see unpack_packed.cu's header for
// the layout formula and the encodings). Inlined by the loader like frame_tile.cuh.
// NBIT and ENCODING: the including file's -D values, else VDIF's 2-bit levels.

#ifndef NBIT
#define NBIT 2
#endif
#ifndef ENCODING
#define ENCODING 2
#endif
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

// A (chan, pol) pair's stream across chunks: its first carry_len samples from the
// decoded carry the previous chunk left, the rest from this chunk's packed bytes; a
// sample whose packet was lost (valid[r] == 0) or that lies past the chunk reads as
// zero. unpack_packed.cu (complex) and real_to_complex.cu (real) read through it.
struct ChunkStream {
    const unsigned char *raw;
    const unsigned char *valid;
    Layout L;
    int carry_cap, carry_len;
    long long nsamp_raw;

    // -1: in the carry; -2: nowhere (zero); else r, the sample in the chunk.
    __device__ __forceinline__ long long where(long long s) const
    {
        if (s < carry_len) return -1;
        const long long r = s - carry_len;
        return (r >= nsamp_raw || (valid != nullptr && valid[r] == 0)) ? -2 : r;
    }
    // Value index of the chunk's sample r of pair cp (its first part).
    __device__ __forceinline__ long long offset(long long r, int cp) const
    {
        return packed_offset(L, r, cp / L.npol, cp % L.npol);
    }
};

// next[cp * carry_cap + i] = sample(cut + i, cp) for i < new_len, a thread per i and a
// block row per pair: the samples the next chunk's first outputs need again (each
// kernel file's carry_tail, ``sample`` its own reader of S).
template <typename T, typename Sample>
__device__ __forceinline__ void copy_carry(const ChunkStream &S, T *__restrict__ next, int ncp,
                                           long long cut, int new_len, Sample sample)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int cp = blockIdx.y;
    if (i >= new_len || cp >= ncp) return;
    next[(long long)cp * S.carry_cap + i] = sample(cut + i, cp);
}
