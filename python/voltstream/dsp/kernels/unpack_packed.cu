// Unpack sub-byte (and offset-binary 8-bit) baseband straight from the bytes as
// they arrived, into overlap-save frames (chan, pol, block, nfft) complex64.
//
// Why a second unpack kernel: 2- and 4-bit data cross PCIe 4-16x smaller than
// the complex64 a host-side decode would send, and VDIF keeps each polarisation
// in frames of its own, so its byte order is not the (time, chan, pol) order of
// unpack.cu. Here a sample's place is given by strides, in units of values:
//
//   value(s, c, p, d) = (s / spf) * s_blk + (s % spf) * s_t + c * s_c + p * s_p + d
//
// where c * s_c is (c / cpb) * s_cb + (c % cpb) * s_c: channels in blocks of cpb, a
// block s_cb values from the next (a band in several streams, each stream's chunk
// part elsewhere in the buffer; cpb = nchan, s_cb = 0 for one block).
//
// with spf samples per frame (VDIF) or 1 (DADA, s_t unused). Value v occupies
// bits [v * NBIT, (v + 1) * NBIT) of the buffer, least significant bits first
// (VDIF's order; no value straddles a byte for NBIT = 2, 4, 8).
//
// The carry (stream samples kept from the previous chunk) is held already
// decoded, channel-major (cp, carry_cap) complex64, so that chunks need not
// start on a byte of their own: `carry_tail` writes the next carry from the
// current one and this chunk's bytes. Lost samples (a per-sample mask, or none)
// decode to 0: no 2-bit code means zero, so zeroing bytes would not do.
//
// Compile-time parameters (defaults let scripts/check_kernels.py compile this):
//   NBIT      2, 4 or 8 bits per value
//   ENCODING  0: two's complement, 1: offset binary (code - 2^(NBIT-1)),
//             2: VDIF 2-bit levels (-3.3359, -1, 1, 3.3359; io/vdif.py)
//   NDIM      1: real, 2: complex (re, im consecutive values)
//   TILE_T, TILE_CP as in unpack.cu

#ifndef NDIM
#define NDIM 2
#endif

#include "packed_value.cuh"

// Stream sample s of (chan, pol) pair cp: from the decoded carry or the raw bytes.
__device__ __forceinline__ float2 stream_sample(const ChunkStream &S,
                                                const float2 *__restrict__ carry, long long s,
                                                int cp)
{
    const long long r = S.where(s);
    if (r == -1) return carry[(long long)cp * S.carry_cap + s];
    if (r < 0) return make_float2(0.0f, 0.0f);
    const long long v = S.offset(r, cp);
#if NDIM == 2
    return make_float2(value_at(S.raw, v), value_at(S.raw, v + 1));
#else
    return make_float2(value_at(S.raw, v), 0.0f);
#endif
}

#include "frame_tile.cuh"

extern "C" __global__ void __launch_bounds__(TILE_T * 8)
unpack_packed_frame(const unsigned char *__restrict__ raw, const float2 *__restrict__ carry,
                    const unsigned char *__restrict__ valid, float2 *__restrict__ out,
                    long long s_blk, int spf, int s_t, int s_c, int s_p, int cpb,
                    long long s_cb, int npol, int ncp, int nfft, int step, int nblock,
                    int carry_cap, int carry_len, long long nsamp_raw)
{
    const ChunkStream S = {raw, valid, {s_blk, spf, s_t, s_c, s_p, cpb, s_cb, npol},
                           carry_cap, carry_len, nsamp_raw};
    frame_tile(out, ncp, nfft, step, nblock, [=](long long s, int cp) {
        return stream_sample(S, carry, s, cp);
    });
}

// next[cp * carry_cap + i] = stream sample (cut + i) of cp, for i < new_len: the
// samples the next chunk's first frames need again.
extern "C" __global__ void carry_tail(const unsigned char *__restrict__ raw,
                                      const float2 *__restrict__ carry,
                                      const unsigned char *__restrict__ valid,
                                      float2 *__restrict__ next, long long s_blk, int spf,
                                      int s_t, int s_c, int s_p, int cpb, long long s_cb,
                                      int npol, int ncp, int carry_cap, int carry_len,
                                      long long nsamp_raw, long long cut, int new_len)
{
    const ChunkStream S = {raw, valid, {s_blk, spf, s_t, s_c, s_p, cpb, s_cb, npol},
                           carry_cap, carry_len, nsamp_raw};
    copy_carry(S, next, ncp, cut, new_len,
               [=](long long s, int cp) { return stream_sample(S, carry, s, cp); });
}
