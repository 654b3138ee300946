// Low-latency hand-off (issue 14): the stand-in computation on a frame (sum and
// sum of squares of its bytes as u8, exact in u64) and the acknowledgement the
// host waits for. Layout and protocol: docs/research/low-latency-contract.md;
// python/voltstream/latency/reference.py holds the same constants (a CPU test
// compares them with the #defines below).
//
// Two kernels:
//   latency_sum_frame   mode copy: launched once per frame after the copy.
//   latency_persistent  modes persistent, persistent-flag and zerocopy: launched
//                       once, processes seq = 1, 2, 3, ... as the host publishes
//                       them in the trailers of the slots, until STOP, abort or
//                       the idle limit.
//
// Both spread the payload over every thread of every block (16-byte loads, a
// strided loop, so each thread issues few loads): in zerocopy every load is a
// PCIe round trip and only parallel loads hide it. A block reduces its share
// (warp shuffles, then shared memory), thread 0 adds it into the accumulator
// entry of the slot with atomics, and the block whose increment of done_blocks
// completes the count writes the ack.
//
// Memory ordering:
// - Ack: sums first, then seq with st.release.sys (a release orders every
//   earlier store of the thread before it, at system scope), so a host that sees
//   ack.seq == s (acquire) also sees the sums of s. LATENCY_ACK_FENCE 1 adds a
//   __threadfence_system() before the release (measured: it only adds time).
// - Persistent polling: thread 0 loads trailer.seq with ld.acquire.sys (or, in
//   the other blocks with LATENCY_RELAY, relay_seq with ld.acquire.gpu after
//   block 0's acquire and release), then a __syncthreads() orders the whole
//   block's loads of the payload and of the trailer's other fields after it; they
//   go out together, one round trip. They are read with ld.global.cv ("fetch
//   again") by default, so a line cached from the slot's previous frame is never
//   reused (LATENCY_LOAD).
// - Accumulators: one entry per slot. The last block reads and zeroes the
//   entry (atomicExch) *before* it writes the ack, and the host republishes a
//   slot only after seeing its ack; so no block can add frame s + nslots into
//   the entry before frame s's totals were taken and the entry was reset. Every
//   block counts in done_blocks for every frame, skipped and stop frames too:
//   an ack therefore means every block has read that slot's trailer, and no
//   block can be left waiting on a slot the host has already reused.
// Inline PTX (not <cuda/atomic>) keeps NVRTC free of libcu++ headers.
//
// LATENCY_LOAD picks the payload loads, measured by bench/latency.py (the pattern
// check counts any stale word as torn): 0 ld.global.cv (fetch again, the
// default), 1 plain ld.global (thread 0's ld.acquire.sys and the barrier order
// them), 2 ld.global.cg (L2 only), 3 ld.volatile.global.
#ifndef LATENCY_LOAD
#define LATENCY_LOAD 0
#endif

__device__ __forceinline__ uint4 load_payload(const uint4 *p)
{
#if LATENCY_LOAD == 1
    return *p;
#elif LATENCY_LOAD == 2
    return __ldcg(p);
#elif LATENCY_LOAD == 3
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
#else
    return __ldcv(p);
#endif
}

// Trailer at payload_cap within a slot (64 bytes).
#define TRAILER_FRAME 0
#define TRAILER_BYTES 8
#define TRAILER_KIND 12
#define TRAILER_T_SEND 16
#define TRAILER_SEQ 56
#define TRAILER_SIZE 64

// Ack entry (64 bytes) in GPU-mapped host memory.
#define ACK_SEQ 0
#define ACK_SUM 8
#define ACK_SUMSQ 16
#define ACK_STATUS 24
#define ACK_TORN 28
#define ACK_T_GPU 32
#define ACK_SIZE 64

#define KIND_WHOLE 1
#define KIND_INCOMPLETE 2
#define KIND_STOP 3

#define STATUS_OK 1
#define STATUS_SKIPPED 2
#define STATUS_STOPPED 3
#define STATUS_ABORTED 4

// Empty polls between two looks at the abort word and the idle clock.
#define ABORT_POLL_INTERVAL 1024

// Pattern mode: 8-byte word j of frame f's payload is f ^ (j * PATTERN_MULTIPLIER).
#define PATTERN_MULTIPLIER 0x9E3779B97F4A7C15ULL

// Accumulator entry (64 bytes, device memory), one per slot. With LATENCY_RELAY,
// relay_seq tells the other blocks "frame seq is published" (they start loading
// the payload), then relay_fields_seq that relay_frame/bytes/kind hold its
// trailer's fields, which block 0 alone reads (see below).
struct Accum {
    unsigned long long sum;
    unsigned long long sumsq;
    unsigned int done_blocks;
    unsigned int torn;
    unsigned long long reserved;
    unsigned long long relay_seq;
    unsigned long long relay_frame;
    unsigned int relay_bytes;
    unsigned int relay_kind;
    unsigned long long relay_fields_seq;
};
static_assert(sizeof(Accum) == 64, "the contract fixes accumulator entries at 64 bytes");

// LATENCY_RELAY 1: only block 0 polls the trailer's seq; it relays it to the
// other blocks through the slot's accumulator entry in device memory (a release
// store of relay_seq at GPU scope, polled by the others in L2).
// Measured for zerocopy (bench/latency.py): every block polling the trailer in
// host memory keeps PCIe busy with small reads while the other blocks read the
// payload, which multiplied the frame's read time by the number of blocks.
#ifndef LATENCY_RELAY
#define LATENCY_RELAY 0
#endif

// One block has nobody to relay to (and a release store costs a fence).
#define RELAYED (LATENCY_RELAY && gridDim.x > 1)

#ifndef LATENCY_ACK_FENCE
#define LATENCY_ACK_FENCE 0
#endif

__device__ __forceinline__ unsigned long long ld_acquire_sys_u64(const void *p)
{
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_release_sys_u64(void *p, unsigned long long v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long ld_acquire_gpu_u64(const void *p)
{
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_release_gpu_u64(void *p, unsigned long long v)
{
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned int ld_relaxed_sys_u32(const void *p)
{
    unsigned int v;
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned long long global_timer_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ unsigned long long pattern_word(unsigned long long frame,
                                                           unsigned long long j)
{
    return frame ^ (j * PATTERN_MULTIPLIER);
}

// Adds the four bytes of w (as u8) and their squares. At most 16 bytes go into
// one call sequence before the caller widens, so u32 cannot overflow here.
__device__ __forceinline__ void add_bytes(unsigned int w, unsigned int &s, unsigned int &q)
{
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const unsigned int b = (w >> (8 * k)) & 0xffu;
        s += b;
        q += b * b;
    }
}

// Sums (and, in pattern mode, checks) 16-byte unit u of a frame, loaded as w.
__device__ __forceinline__ void add_unit(const uint4 &w, unsigned long long u,
                                         unsigned long long frame, bool check_pattern,
                                         unsigned long long &sum, unsigned long long &sumsq,
                                         unsigned int &torn)
{
    unsigned int s = 0, q = 0;
    add_bytes(w.x, s, q);
    add_bytes(w.y, s, q);
    add_bytes(w.z, s, q);
    add_bytes(w.w, s, q);
    sum += s;
    sumsq += q;
    if (check_pattern) {
        const unsigned long long lo = ((unsigned long long)w.y << 32) | w.x;
        const unsigned long long hi = ((unsigned long long)w.w << 32) | w.z;
        torn += (lo != pattern_word(frame, 2 * u)) + (hi != pattern_word(frame, 2 * u + 1));
    }
}

// The < 16 bytes after the last whole unit, taken by the grid's last thread one by
// one; they touch 8-byte words 2*nvec and 2*nvec+1, a partial word is compared on
// the bytes it has.
__device__ void add_tail(const unsigned char *payload, unsigned int nbytes,
                         unsigned long long frame, bool check_pattern,
                         unsigned long long &sum, unsigned long long &sumsq,
                         unsigned int &torn)
{
    const unsigned long long nvec = nbytes / 16;
    unsigned int bad = 0;  // bit k: word 2*nvec + k has a wrong byte
    for (unsigned long long i = nvec * 16; i < nbytes; ++i) {
        const unsigned int b = __ldcv(payload + i);
        sum += b;
        sumsq += b * b;
        const unsigned long long expect = pattern_word(frame, i / 8) >> (8 * (i % 8));
        if (check_pattern && b != (unsigned int)(expect & 0xffu)) {
            bad |= 1u << (unsigned int)(i / 8 - 2 * nvec);
        }
    }
    torn += __popc(bad);
}

// This thread's share of payload[0, nbytes): 16-byte units strided over the whole
// grid (every thread few loads: in zerocopy each is a PCIe round trip and only
// parallel loads hide it), then the tail. The payload starts a slot, which is
// 128-byte aligned, so uint4 loads are aligned.
__device__ void reduce_share(const unsigned char *payload, unsigned int nbytes,
                             unsigned long long frame, bool check_pattern,
                             unsigned long long &sum, unsigned long long &sumsq,
                             unsigned int &torn)
{
    const unsigned long long nvec = nbytes / 16;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long g = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const uint4 *vec = reinterpret_cast<const uint4 *>(payload);
    for (unsigned long long u = g; u < nvec; u += stride) {
        add_unit(load_payload(vec + u), u, frame, check_pattern, sum, sumsq, torn);
    }
    if (g == stride - 1) {
        add_tail(payload, nbytes, frame, check_pattern, sum, sumsq, torn);
    }
}

// Block-wide sum of the three partials; the totals are valid in thread 0.
// blockDim.x must be a multiple of 32 (the host checks).
__device__ void reduce_block(unsigned long long &sum, unsigned long long &sumsq,
                             unsigned int &torn)
{
    __shared__ unsigned long long warp_sum[32];
    __shared__ unsigned long long warp_sumsq[32];
    __shared__ unsigned int warp_torn[32];
    const unsigned int lane = threadIdx.x & 31u;
    const unsigned int warp = threadIdx.x >> 5;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        sum += __shfl_down_sync(0xffffffffu, sum, off);
        sumsq += __shfl_down_sync(0xffffffffu, sumsq, off);
        torn += __shfl_down_sync(0xffffffffu, torn, off);
    }
    if (lane == 0) {
        warp_sum[warp] = sum;
        warp_sumsq[warp] = sumsq;
        warp_torn[warp] = torn;
    }
    __syncthreads();
    if (warp == 0) {
        const unsigned int nwarps = blockDim.x >> 5;
        sum = lane < nwarps ? warp_sum[lane] : 0;
        sumsq = lane < nwarps ? warp_sumsq[lane] : 0;
        torn = lane < nwarps ? warp_torn[lane] : 0;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            sum += __shfl_down_sync(0xffffffffu, sum, off);
            sumsq += __shfl_down_sync(0xffffffffu, sumsq, off);
            torn += __shfl_down_sync(0xffffffffu, torn, off);
        }
    }
    // The caller's next __syncthreads() (or the kernel's end) separates these
    // reads of warp_* from the next call's writes.
}

// Writes ack entry seq % nslots: the fields, a system fence, then seq last.
__device__ void write_ack(unsigned char *acks, unsigned int nslots, unsigned long long seq,
                          unsigned long long sum, unsigned long long sumsq,
                          unsigned int status, unsigned int torn)
{
    unsigned char *e = acks + (seq % nslots) * ACK_SIZE;
    *reinterpret_cast<volatile unsigned long long *>(e + ACK_SUM) = sum;
    *reinterpret_cast<volatile unsigned long long *>(e + ACK_SUMSQ) = sumsq;
    *reinterpret_cast<volatile unsigned int *>(e + ACK_STATUS) = status;
    *reinterpret_cast<volatile unsigned int *>(e + ACK_TORN) = torn;
    *reinterpret_cast<volatile unsigned long long *>(e + ACK_T_GPU) = global_timer_ns();
#if LATENCY_ACK_FENCE
    __threadfence_system();
#endif
    st_release_sys_u64(e + ACK_SEQ, seq);
}

// Thread 0 of each block, once per frame: adds the block's totals into the slot's
// accumulator; the block completing done_blocks takes the totals, resets the
// entry (before the ack: see the header) and acks.
__device__ void finish_frame(Accum *accum, unsigned char *acks, unsigned int nslots,
                             unsigned long long seq, unsigned int status,
                             unsigned long long sum, unsigned long long sumsq,
                             unsigned int torn)
{
    if (gridDim.x == 1) {
        // One block: its totals are the frame's; no accumulator round trip.
        write_ack(acks, nslots, seq, sum, sumsq, status, torn);
        return;
    }
    Accum *a = accum + seq % nslots;
    if (sum != 0) {
        atomicAdd(&a->sum, sum);
        atomicAdd(&a->sumsq, sumsq);
    }
    if (torn != 0) {
        atomicAdd(&a->torn, torn);
    }
    __threadfence();  // our adds before our count, as seen by the last block
    const unsigned int before = atomicAdd(&a->done_blocks, 1u);
    if (before != gridDim.x - 1) {
        return;
    }
    __threadfence();  // every block's adds are visible once its count is
    const unsigned long long total = atomicExch(&a->sum, 0ULL);
    const unsigned long long total_sq = atomicExch(&a->sumsq, 0ULL);
    const unsigned int total_torn = atomicExch(&a->torn, 0u);
    atomicExch(&a->done_blocks, 0u);
    write_ack(acks, nslots, seq, total, total_sq, status, total_torn);
}

__device__ __forceinline__ unsigned int status_of(unsigned int kind)
{
    if (kind == KIND_WHOLE) {
        return STATUS_OK;
    }
    return kind == KIND_STOP ? STATUS_STOPPED : STATUS_SKIPPED;  // unknown kinds are skipped
}

// Mode copy: one launch per frame, grid = B blocks x T threads (T a multiple of 32).
// The payload is slot[0, frame_bytes) in device memory, already copied.
extern "C" __global__ void __launch_bounds__(1024)
    latency_sum_frame(const unsigned char *slot, unsigned int frame_bytes,
                                             unsigned long long seq, unsigned long long frame,
                                             unsigned int kind, unsigned char *acks,
                                             unsigned int nslots, unsigned char *accum,
                                             unsigned int check_pattern)
{
    unsigned long long sum = 0, sumsq = 0;
    unsigned int torn = 0;
    if (kind == KIND_WHOLE) {
        reduce_share(slot, frame_bytes, frame, check_pattern != 0, sum, sumsq, torn);
    }
    reduce_block(sum, sumsq, torn);
    if (threadIdx.x == 0) {
        finish_frame(reinterpret_cast<Accum *>(accum), acks, nslots, seq, status_of(kind), sum,
                     sumsq, torn);
    }
}

// Thread 0: spins until the u64 at `flag` == seq (system scope: a trailer, in
// device or host memory; GPU scope: a relay entry). false on abort or idle limit.
template <bool SYSTEM>
__device__ bool wait_for_seq(const void *flag, unsigned long long seq,
                             const unsigned int *control, unsigned long long idle_limit_ns)
{
    const unsigned long long start = global_timer_ns();
    unsigned int polls = 0;
    while ((SYSTEM ? ld_acquire_sys_u64(flag) : ld_acquire_gpu_u64(flag)) != seq) {
        if (++polls < ABORT_POLL_INTERVAL) {
            continue;
        }
        polls = 0;
        if (ld_relaxed_sys_u32(control) != 0) {
            return false;
        }
        if (idle_limit_ns != 0 && global_timer_ns() - start > idle_limit_ns) {
            return false;
        }
    }
    return true;
}

// Thread 0: waits until frame seq is published. With LATENCY_RELAY, block 0 alone
// polls the trailer and relays seq to the others (see above). false on abort/idle.
__device__ bool wait_seq(const unsigned char *trailer, Accum *entry, unsigned long long seq,
                         const unsigned int *control, unsigned long long idle_limit_ns)
{
    if (RELAYED && blockIdx.x != 0) {
        return wait_for_seq<false>(&entry->relay_seq, seq, control, idle_limit_ns);
    }
    if (!wait_for_seq<true>(trailer + TRAILER_SEQ, seq, control, idle_limit_ns)) {
        return false;
    }
    if (RELAYED) {
        st_release_gpu_u64(&entry->relay_seq, seq);
    }
    return true;
}

// Units each thread loads before the trailer's fields are known (see below).
#define PREFETCH 4

// Modes persistent / persistent-flag (slots in device memory) and zerocopy (slots =
// device pointer of mapped host memory). Launched once with B blocks x T threads
// (T a multiple of 32); all B blocks must be resident at once (B <= SM count), since
// every block takes part in every frame.
// 1024 threads must fit (LatencySettings.shape_for uses one block of up to 1024 up to
// 64 KiB frames): the bound caps registers at 64 per thread.
extern "C" __global__ void __launch_bounds__(1024)
    latency_persistent(const unsigned char *slots,
                                              unsigned long long slot_stride,
                                              unsigned int payload_cap, unsigned int nslots,
                                              unsigned char *acks, unsigned char *accum,
                                              const unsigned int *control,
                                              unsigned long long idle_limit_ns,
                                              unsigned int check_pattern)
{
    __shared__ unsigned long long frame_no;
    __shared__ unsigned int frame_bytes;
    __shared__ unsigned int frame_kind;
    __shared__ bool go;
    Accum *acc = reinterpret_cast<Accum *>(accum);
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long g = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long cap_units = payload_cap / 16;

    for (unsigned long long seq = 1;; ++seq) {
        const unsigned char *slot = slots + (seq % nslots) * slot_stride;
        const unsigned char *trailer = slot + payload_cap;
        if (threadIdx.x == 0) {
            go = wait_seq(trailer, acc + seq % nslots, seq, control, idle_limit_ns);
        }
        __syncthreads();
        if (!go) {
            // Block 0 alone acks, at the slot it was waiting on: that ack cannot
            // race a real one, which needs block 0's count too.
            if (blockIdx.x == 0 && threadIdx.x == 0) {
                write_ack(acks, nslots, seq, 0, 0, STATUS_ABORTED, 0);
            }
            return;
        }
        // One round trip for the trailer's fields and the payload: every thread
        // loads its first units of the whole payload area before the fields are
        // known (a skipped or short frame's extra units are simply not used), and
        // thread 0 loads the fields meanwhile. In zerocopy each is a PCIe read;
        // reading the fields first would cost a second round trip per frame.
        const uint4 *vec = reinterpret_cast<const uint4 *>(slot);
        uint4 pre[PREFETCH];
#pragma unroll
        for (int i = 0; i < PREFETCH; ++i) {
            const unsigned long long u = g + i * stride;
            if (u < cap_units) {
                pre[i] = load_payload(vec + u);
            }
        }
        if (threadIdx.x == 0) {
            Accum *entry = acc + seq % nslots;
            unsigned int k, b;
            unsigned long long f;
            if (RELAYED && blockIdx.x != 0) {
                // Many SMs reading the trailer's host line at once was measured
                // slow: block 0 reads it and relays the fields through L2.
                // Bounded: block 0 has seen seq (it relayed it), and nothing
                // stops it between that and relaying the fields.
                while (ld_acquire_gpu_u64(&entry->relay_fields_seq) != seq) {
                }
                k = *reinterpret_cast<volatile unsigned int *>(&entry->relay_kind);
                f = *reinterpret_cast<volatile unsigned long long *>(&entry->relay_frame);
                b = *reinterpret_cast<volatile unsigned int *>(&entry->relay_bytes);
            } else {
                k = __ldcv(reinterpret_cast<const unsigned int *>(trailer + TRAILER_KIND));
                f = __ldcv(reinterpret_cast<const unsigned long long *>(trailer));
                b = __ldcv(reinterpret_cast<const unsigned int *>(trailer + TRAILER_BYTES));
                if (RELAYED) {
                    entry->relay_kind = k;
                    entry->relay_frame = f;
                    entry->relay_bytes = b;
                    st_release_gpu_u64(&entry->relay_fields_seq, seq);
                }
            }
            frame_kind = k;
            frame_no = f;
            frame_bytes = b < payload_cap ? b : payload_cap;  // never read past the slot
        }
        __syncthreads();
        const unsigned int kind = frame_kind;
        unsigned long long sum = 0, sumsq = 0;
        unsigned int torn = 0;
        if (kind == KIND_WHOLE) {
            const unsigned int nbytes = frame_bytes;
            const unsigned long long nvec = nbytes / 16;
            const bool check = check_pattern != 0;
#pragma unroll
            for (int i = 0; i < PREFETCH; ++i) {
                const unsigned long long u = g + i * stride;
                if (u < nvec) {
                    add_unit(pre[i], u, frame_no, check, sum, sumsq, torn);
                }
            }
            for (unsigned long long u = g + PREFETCH * stride; u < nvec; u += stride) {
                add_unit(load_payload(vec + u), u, frame_no, check, sum, sumsq, torn);
            }
            if (g == stride - 1) {
                add_tail(slot, nbytes, frame_no, check, sum, sumsq, torn);
            }
        }
        reduce_block(sum, sumsq, torn);
        if (threadIdx.x == 0) {
            finish_frame(acc, acks, nslots, seq, status_of(kind), sum, sumsq, torn);
        }
        if (kind == KIND_STOP) {
            return;
        }
        __syncthreads();  // everyone has read frame_*, go and warp_* before they change
    }
}
