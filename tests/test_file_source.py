"""The file source (pipeline/file_source.py) without a GPU: every block's bytes are decoded
with the layout formula alone (tests/packed_ref.py) and compared with the samples the
DADA and VDIF readers give; order, ids, the pool bound, release, errors and shutdown."""

from __future__ import annotations

import ctypes
import json
import os
import threading
import time

import numpy as np
import pytest

from bad_files import refuses
from packed_ref import decode_ref
from voltstream.errors import ConfigError, FormatError, TruncatedFileError
from voltstream.io import vdif
from voltstream.io.dada import DadaWriter, open_dada
from voltstream.observation import Observation
from voltstream.pipeline import file_source as fs
from voltstream.pipeline.file_source import FileSource, HostBlock, open_file_source
from voltstream.pipeline.gpu import HostRegistry
from voltstream.pipeline.gpu_file_fold import fold_source
from voltstream.sim.packetize import packetize_vdif

RNG = np.random.default_rng(20260611)
FPS = 1000


@pytest.fixture(autouse=True)
def no_reader_threads_left():
    yield
    deadline = time.monotonic() + 5
    while reader_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reader_threads() == [], "a test left file reader threads running"


def reader_threads():
    return [t for t in threading.enumerate() if t.name.startswith("voltstream-file-reader")]


def wait_for(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.002)


class CountingAlloc:
    def __init__(self):
        self.calls = []

    def __call__(self, nbytes):
        self.calls.append(nbytes)
        return np.full(nbytes, 0xAA, np.uint8)  # stale bytes, never zeros


def make_obs(nbit=8, ndim=2, nchan=4, npol=2, bw=-64.0) -> Observation:
    return Observation(nchan=nchan, npol=npol, freq_mhz=1382.5, bw_mhz=bw,
                       tsamp_s=abs(nchan / bw) * 1e-6 / (1 if ndim == 2 else 2),
                       start_mjd=60471, start_sec=45296.5, source="J1136+1551",
                       telescope="YNAO40m", nbit=nbit, ndim=ndim)  # fmt: skip


def write_dada(path, nsamp, *, nbit=8, ndim=2, nchan=4, npol=2, tail=b""):
    obs = make_obs(nbit, ndim, nchan, npol)
    dt = np.int8 if nbit == 8 else np.int16
    info = np.iinfo(dt)
    x = RNG.integers(info.min, info.max, (nsamp, nchan, npol, ndim), endpoint=True).astype(dt)
    with DadaWriter(path, obs) as w:
        w.write(x)
    if tail:
        with open(path, "ab") as f:
            f.write(tail)
    return x


def vdif_values(nbit, shape):
    if nbit == 2:
        return vdif.LEVELS_2BIT[RNG.integers(0, 4, shape)].astype(np.float64)
    h = 1 << (nbit - 1)
    return RNG.integers(-h, h - 1, shape, endpoint=True).astype(np.float64)


def vdif_frames(nbit=8, ndim=2, nchan=4, npol=2, nframes=24, spf=32, legacy=False):
    """(frames (nframes * npol, frame_len) uint8 in file order, samples)."""
    shape = (nframes * spf, nchan, npol)
    x = vdif_values(nbit, shape)
    if ndim == 2:
        x = x + 1j * vdif_values(nbit, shape)
    pk = packetize_vdif(x, frames_per_second=FPS, nbit=nbit, complex_data=ndim == 2,
                        samples_per_frame=spf, start_seconds=7, legacy=legacy)  # fmt: skip
    return pk, x


def write_vdif(path, frames):
    frames.tofile(path)
    h = vdif.decode_headers(frames[:1])
    meta = {"freq_mhz": 1400.0, "frames_per_second": FPS}
    path.with_name(path.name + ".json").write_text(json.dumps(meta))
    return int(h["nchan"][0])


def decode(block: HostBlock, layout) -> np.ndarray:
    """The block's samples as the GPU would read them: its parts copied by address to
    their offsets of a device-buffer stand-in, then the layout formula alone."""
    raw = np.zeros(max(off + nbytes for _, nbytes, off in block.parts), np.uint8)
    for addr, nbytes, off in block.parts:
        raw[off : off + nbytes] = np.frombuffer((ctypes.c_uint8 * nbytes).from_address(addr),
                                                np.uint8)  # fmt: skip
    assert raw.size >= block.skip + layout.nbytes(block.nsamp)
    return decode_ref(raw[block.skip :], layout, block.nsamp)


def collect(src):
    """(block, decoded samples) of every block, each released once decoded; the block's
    ``data`` is replaced by a copy (the buffer is reused after the release)."""
    blocks = []
    for b in src:
        blocks.append((b, decode(b, src.layout)))
        b.data = b.data.copy()
        b.release()
    return blocks


# --- DADA


@pytest.mark.parametrize("ndim", [2, 1])
@pytest.mark.parametrize("readers,stripe", [(1, 1 << 20), (3, 4096)])
def test_dada_blocks_are_the_files_samples(tmp_path, ndim, readers, stripe):
    path = tmp_path / "a.dada"
    x = write_dada(path, 2503, ndim=ndim, nchan=8)
    bps = 8 * 2 * ndim
    with open_file_source(path, block_samples=700, readers=readers, depth=2,
                          alloc=CountingAlloc(), stripe_bytes=stripe) as src:  # fmt: skip
        assert src.kind == "dada" and src.nsamp == 2503 and src.nblocks == 4
        assert src.obs == open_dada(path).obs
        assert (src.layout.nbit, src.layout.encoding, src.layout.spf) == (8, "twos", 1)
        assert src.block_bytes == 700 * bps
        blocks = collect(src)
    assert [b.chunk_id for b, _ in blocks] == [0, 1, 2, 3]
    assert [b.nsamp for b, _ in blocks] == [700, 700, 700, 403]
    assert all(b.skip == 0 and b.valid is None for b, _ in blocks)
    assert all(b.parts[0][1] == b.nsamp * bps for b, _ in blocks)
    got = np.concatenate([d for _, d in blocks])
    want = x[..., 0] + (1j * x[..., 1] if ndim == 2 else 0)
    assert np.array_equal(got, want.reshape(2503, -1))


def test_dada_default_block_is_about_64_mib(tmp_path):
    path = tmp_path / "a.dada"
    write_dada(path, 10, nchan=3)  # 12 bytes per sample: 64 MiB is not a whole number
    os.truncate(path, 4096 + 6_000_000 * 12)  # (sparse: these bytes are not checked)
    with open_file_source(path, alloc=CountingAlloc(), depth=1) as src:
        assert src.block_samples == (64 << 20) // 12 and src.nblocks == 2
        assert src.block_bytes == src.block_samples * 12
        for b in src:
            b.release()
    small = tmp_path / "b.dada"
    write_dada(small, 100, nchan=3)
    with open_file_source(small, alloc=CountingAlloc(), depth=1) as src:
        assert src.block_samples == 100 and src.block_bytes == 1200  # no bigger than the file
        (b,) = list(src)
        assert b.nsamp == 100
        b.release()


def test_default_allocator(tmp_path):
    path = tmp_path / "a.dada"
    x = write_dada(path, 300)
    with open_file_source(path, block_samples=128, depth=2) as src:  # pinned with a GPU
        got = np.concatenate([d for _, d in collect(src)])
        assert len(src.buffers()) == 2 and all(n == 128 * 16 for _, n in src.buffers())
    assert np.array_equal(got, (x[..., 0] + 1j * x[..., 1]).reshape(300, -1))


def test_dada_partial_sample_is_left_out_and_counted(tmp_path):
    path = tmp_path / "a.dada"
    write_dada(path, 50, tail=b"\x01\x02\x03")
    with pytest.warns(UserWarning, match="partial sample"):
        src = open_file_source(path, block_samples=16, alloc=CountingAlloc())
    with src:
        assert src.nsamp == 50 and src.leftover_bytes == 3
        assert any("3 trailing bytes" in n for n in src.notes)
        assert [b.nsamp for b, _ in collect(src)] == [16, 16, 16, 2]


def test_dada_16_bit_asks_for_the_staged_path(tmp_path):
    path = tmp_path / "a.dada"
    write_dada(path, 10, nbit=16)
    with pytest.raises(ConfigError, match="16-bit DADA.*staged path"):
        open_file_source(path, alloc=CountingAlloc())


def test_direct_reads_give_the_same_samples(tmp_path):
    path = tmp_path / "a.dada"
    x = write_dada(path, 3001, nchan=3)  # 12-byte samples: blocks start off 4096 bytes
    with open_file_source(path, block_samples=1000, readers=2, alloc=CountingAlloc(),
                          direct=True, stripe_bytes=4096) as src:  # fmt: skip
        blocks = collect(src)
        assert src.block_bytes >= max(b.parts[0][1] for b, _ in blocks)
        if src.direct:  # ext4 and most disks; tmpfs refuses O_DIRECT and reads buffered
            assert all(b.parts[0][0] % 4096 == 0 for b, _ in blocks)
            assert {b.skip for b, _ in blocks} != {0}
        else:
            assert any("O_DIRECT" in n for n in src.notes)
    got = np.concatenate([d for _, d in blocks])
    assert np.array_equal(got, (x[..., 0] + 1j * x[..., 1]).reshape(3001, -1))


# --- VDIF


@pytest.mark.parametrize(
    "nbit,ndim,legacy", [(8, 2, False), (4, 2, False), (2, 2, False), (2, 1, True), (8, 1, False)]
)
def test_regular_vdif_is_read_as_stored(tmp_path, nbit, ndim, legacy):
    path = tmp_path / "a.vdif"
    frames, x = vdif_frames(nbit, ndim, nframes=21, legacy=legacy)
    write_vdif(path, frames)
    flen = frames.shape[1]
    hlen = 16 if legacy else 32
    with open_file_source(path, block_samples=5 * 32 + 7, readers=2, depth=3,
                          alloc=CountingAlloc(), stripe_bytes=4096) as src:  # fmt: skip
        assert src.kind == "vdif" and src.block_samples == 5 * 32
        L = src.layout
        assert (L.s_blk, L.s_p, L.spf) == (2 * flen * 8 // nbit, flen * 8 // nbit, 32)
        assert src.block_bytes == 5 * 2 * flen
        blocks = collect(src)
    assert [b.nsamp for b, _ in blocks] == [160] * 4 + [32]
    for b, _ in blocks:
        assert b.skip == hlen and b.valid is None
        assert b.skip + L.nbytes(b.nsamp) == b.parts[0][1] == b.nsamp // 32 * 2 * flen
        # The bytes are the file's own, headers included.
        k = b.chunk_id
        assert np.array_equal(b.data, frames[k * 10 : k * 10 + b.nsamp // 16].reshape(-1))
    got = np.concatenate([d for _, d in blocks])
    want = open_vdif_samples(path)
    assert np.array_equal(got, want.reshape(len(want), -1).astype(np.complex128))
    assert np.array_equal(got, x.reshape(len(x), -1).astype(np.complex64))


def open_vdif_samples(path):
    with vdif.open_vdif(path) as r:
        return r.read()


def test_vdif_channel_width_sets_the_bandwidth(tmp_path):
    path = tmp_path / "a.vdif"
    frames, _ = vdif_frames(nframes=4)
    frames.tofile(path)
    src = open_file_source(path, alloc=CountingAlloc(), chan_bw_mhz=-2.0, freq_mhz=1400.0)
    with src:
        assert (src.obs.bw_mhz, src.obs.freq_mhz, src.obs.nchan) == (-8.0, 1400.0, 4)


def irregular(kind, frames):
    """An irregular file's frames (npol 2): one frame missing, flagged, or swapped."""
    f = frames.copy()
    if kind == "missing":
        return np.delete(f, 2 * 7 + 1, axis=0)  # time frame 7 of pol 1
    if kind == "invalid":
        f[2 * 3, 3] |= 0x80  # word 0 bit 31: time frame 3 of pol 0 flagged invalid
        return f
    f[[2 * 5, 2 * 5 + 1]] = f[[2 * 5 + 1, 2 * 5]]  # time frame 5: threads swapped
    return f


@pytest.mark.parametrize("kind,lost", [("missing", 7), ("invalid", 3), ("swapped", None)])
@pytest.mark.parametrize("nbit", [8, 2])
def test_irregular_vdif_is_gathered_and_masked(tmp_path, kind, lost, nbit):
    path = tmp_path / "a.vdif"
    frames, _ = vdif_frames(nbit, nframes=12, spf=32)
    write_vdif(path, irregular(kind, frames))
    with vdif.open_vdif(path) as r:
        assert not r.regular
        blocks_ref = list(r.read_blocks(4 * 32))
        packed_ref = [r.read_packed(f, min(f + 4, 12)) for f in range(0, 12, 4)]
    with open_file_source(path, block_samples=4 * 32, readers=2, depth=2,
                          alloc=CountingAlloc(), stripe_bytes=4096) as src:  # fmt: skip
        assert src.kind == "vdif-gather" and any("not regular" in n for n in src.notes)
        assert src.layout == vdif.open_vdif(path).packed_layout()
        blocks = collect(src)
    assert [b.chunk_id for b, _ in blocks] == [0, 1, 2]
    for (b, got), ref, (pk, pvalid) in zip(blocks, blocks_ref, packed_ref, strict=True):
        assert b.skip == 0
        assert np.array_equal(b.data, pk.reshape(-1))  # read_packed's bytes exactly
        samples, valid = ref if isinstance(ref, tuple) else (ref, None)
        if valid is None:
            assert b.valid is None and pvalid is None
        else:
            assert np.array_equal(b.valid, valid) and np.array_equal(b.valid, pvalid)
            got = got[b.valid]
            samples = samples[b.valid]
        assert np.array_equal(got, samples.reshape(len(samples), -1).astype(np.complex128))
    marked = np.concatenate([np.ones(b.nsamp, bool) if b.valid is None else b.valid
                             for b, _ in blocks])  # fmt: skip
    want = np.ones(12 * 32, bool)
    if lost is not None:
        want[lost * 32 : (lost + 1) * 32] = False
    assert np.array_equal(marked, want)


# --- the pool: readers ahead, the depth bound, release


def test_readers_fill_ahead_and_stall_at_depth(tmp_path):
    path = tmp_path / "a.dada"
    write_dada(path, 2000)
    alloc = CountingAlloc()
    with open_file_source(path, block_samples=100, readers=2, depth=3, alloc=alloc,
                          stall_timeout_s=0.2) as src:  # fmt: skip
        # Before anything is taken the readers fill every buffer, and stop there.
        wait_for(lambda: src.blocks_read == 3)
        time.sleep(0.1)
        assert src.blocks_read == 3 and src.in_flight == 3
        held = [next(src) for _ in range(3)]
        time.sleep(0.1)
        assert src.blocks_read == 3  # nothing released: no buffer to read block 3 into
        assert len(alloc.calls) == 3 and src.max_in_flight == 3
        with pytest.raises(ConfigError, match="holds all 3 buffers"):
            next(src)
        assert len({b.parts[0][0] for b in held}) == 3
        held[1].release()
        b3 = next(src)  # the freed buffer now holds block 3
        assert b3.chunk_id == 3 and b3.parts[0][0] == held[1].parts[0][0]
        wait_for(lambda: src.blocks_read == 4)
        assert len(alloc.calls) == 3
        for b in [held[0], held[2], b3]:
            b.release()
        rest = collect(src)
        assert [b.chunk_id for b, _ in rest] == list(range(4, 20))
        assert len(alloc.calls) == 3 and src.max_in_flight == 3


def test_release_returns_buffers_and_is_idempotent(tmp_path):
    path = tmp_path / "a.dada"
    write_dada(path, 1000)
    with open_file_source(path, block_samples=50, readers=2, depth=2,
                          alloc=CountingAlloc()) as src:  # fmt: skip
        addrs = set()
        for b in src:
            addrs.add(b.parts[0][0])
            b.release()
            b.release()  # a second call must not free the buffer twice
            assert src.in_flight <= 2
        assert len(addrs) == 2 and src.blocks_read == 20
        assert sorted(src.buffers()) == sorted((a, 50 * 16) for a in addrs)


def test_release_from_another_thread_unblocks_the_consumer(tmp_path):
    path = tmp_path / "a.dada"
    write_dada(path, 400)
    with open_file_source(path, block_samples=100, readers=1, depth=1,
                          alloc=CountingAlloc()) as src:  # fmt: skip
        b0 = next(src)
        threading.Timer(0.05, b0.release).start()
        b1 = next(src)  # waits for the release (as a CUDA callback thread would do it)
        assert b1.chunk_id == 1
        b1.release()


# --- errors


def test_truncated_dada_header(tmp_path):
    path = tmp_path / "a.dada"
    write_dada(path, 10)
    os.truncate(path, 1000)
    with pytest.raises(TruncatedFileError, match="truncated"):
        open_file_source(path, alloc=CountingAlloc())


@pytest.mark.parametrize("name,make", [
    ("a.dada", lambda p: write_dada(p, 3000)),
    ("a.vdif", lambda p: write_vdif(p, vdif_frames(nframes=40)[0])),
    ("b.vdif", lambda p: write_vdif(p, irregular("missing", vdif_frames(nframes=40)[0]))),
])  # fmt: skip
def test_file_cut_short_while_read(tmp_path, name, make):
    path = tmp_path / name
    make(path)
    size = path.stat().st_size
    with open_file_source(path, block_samples=128, readers=2, depth=2,
                          alloc=CountingAlloc(), stripe_bytes=4096) as src:  # fmt: skip
        b = next(src)
        b.release()
        os.truncate(path, size // 2)
        with pytest.raises(TruncatedFileError, match="cut short while being read"):
            for b in src:
                b.release()
        with pytest.raises(TruncatedFileError):  # and again, not a hang
            next(src)
    assert isinstance(TruncatedFileError("x"), FormatError)


def test_vdif_with_a_cut_last_frame_is_refused(tmp_path):
    path = tmp_path / "a.vdif"
    frames, _ = vdif_frames(nframes=4)
    write_vdif(path, frames)
    os.truncate(path, path.stat().st_size - 5)
    with pytest.raises(TruncatedFileError, match="not a whole number of .*VDIF frames"):
        open_file_source(path, alloc=CountingAlloc())


def test_io_error_reaches_the_consumer(tmp_path, monkeypatch):
    path = tmp_path / "a.dada"
    write_dada(path, 1000)

    def failing(fd, buffers, offset):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(fs.os, "preadv", failing)
    with open_file_source(path, block_samples=100, alloc=CountingAlloc()) as src:
        with pytest.raises(FormatError, match="reading block 0 failed: Input/output error"):
            next(src)


def test_not_a_baseband_file(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"\0" * 100)
    refuses(open_file_source, path, "not a DADA file")
    refuses(open_file_source, tmp_path / "none.dada", "no such file", ConfigError)


# --- shutdown


def test_close_mid_iteration_ends_the_readers(tmp_path):
    path = tmp_path / "a.dada"
    write_dada(path, 5000)
    src = open_file_source(path, block_samples=100, readers=3, depth=4, alloc=CountingAlloc())
    assert len(reader_threads()) == 3
    it = iter(src)
    b = next(it)
    b.release()
    held = next(it)
    src.close()
    assert reader_threads() == []
    with pytest.raises(StopIteration):
        next(it)
    held.release()  # after close: harmless
    src.close()  # twice: harmless


def test_close_from_another_thread_wakes_a_waiting_consumer(tmp_path):
    path = tmp_path / "a.dada"
    write_dada(path, 400)
    src = open_file_source(path, block_samples=100, readers=1, depth=1, alloc=CountingAlloc())
    b0 = next(src)
    closer = threading.Timer(0.05, src.close)
    closer.start()
    with pytest.raises(StopIteration):
        next(src)  # every buffer held; the close ends the wait
    b0.release()
    closer.join()
    assert reader_threads() == []


def test_readers_exit_once_the_file_is_read(tmp_path):
    path = tmp_path / "a.dada"
    write_dada(path, 300)
    reader = open_dada(path)
    src = FileSource(reader, block_samples=100, readers=4, depth=4, alloc=CountingAlloc())
    wait_for(lambda: reader_threads() == [])  # 3 blocks, 4 buffers: all read, all done
    assert [b.chunk_id for b, _ in collect(src)] == [0, 1, 2]
    src.close()
    assert reader.read_raw(0, 2).shape == (2, 4, 2, 2)  # the caller's reader stays open


# --- the file through the one stage runner (pipeline/gpu.py StageRunner), with a host
# stand-in for GpuFolder.feed_block


class Event:
    def __init__(self, polls):
        self.left = polls

    @property
    def done(self):
        self.left -= 1
        return self.left < 0

    def synchronize(self):
        self.left = -1


class HostStage:
    """feed_block's contract on the host: copies each part by address into a device
    buffer stand-in of ``raw_bytes`` (the copy), first waiting for the copy of the
    block fed two calls ago (GpuFolder's two slots); returns the copy's event. Fails
    on block ``fail_at`` where given (a kernel error)."""

    def __init__(self, layout, raw_bytes, polls=1, fail_at=None):
        self.layout, self.polls, self.fail_at = layout, polls, fail_at
        self.dev = [np.zeros(raw_bytes, np.uint8) for _ in range(2)]
        self.events = [None, None]
        self.slot = 0
        self.samples, self.valid = [], []
        self.samples_in = self.samples_out = 0
        self.synchronized = 0

    def feed_block(self, parts, n, skip=0, valid=None):
        if len(self.samples) == self.fail_at:
            raise RuntimeError("kernel failed")
        slot, dev = self.slot, self.dev[self.slot]
        if self.events[slot] is not None:
            self.events[slot].synchronize()
        for addr, nbytes, off in parts:
            assert off + nbytes <= dev.size
            dev[off : off + nbytes] = np.frombuffer(
                (ctypes.c_uint8 * nbytes).from_address(addr), np.uint8
            )
        assert skip + self.layout.nbytes(n) <= dev.size
        self.samples.append(decode_ref(dev[skip:], self.layout, n))
        self.valid.append(np.ones(n, bool) if valid is None else valid)
        self.samples_in += n
        ev = self.events[slot] = Event(self.polls)
        self.slot = 1 - slot
        return ev

    def synchronize(self):
        self.synchronized += 1


class Runtime:
    """cupy.cuda.runtime's hostRegister/hostUnregister, logged."""

    def __init__(self):
        self.registered, self.unregistered = [], []

    def hostRegister(self, addr, nbytes, flags):  # noqa: N802 (CUDA's name)
        self.registered.append((addr, nbytes))

    def hostUnregister(self, addr):  # noqa: N802
        self.unregistered.append(addr)


@pytest.mark.parametrize("kind", ["dada", "vdif", "vdif-gather"])
def test_the_file_fold_goes_through_the_stage_runner(tmp_path, kind):
    """fold_file_gpu's file path (gpu_file_fold.fold_source) is the live fold's runner:
    the pool page-locked by it, every block fed, held until its copy's event and given
    back, the stage finished, and the runner's counters the report's."""
    if kind == "dada":
        path = tmp_path / "a.dada"
        x = write_dada(path, 1000)
        want = (x[..., 0] + 1j * x[..., 1]).reshape(1000, -1)
        want_bytes = x.nbytes
    else:
        path = tmp_path / "a.vdif"
        frames, _ = vdif_frames(nframes=30)
        write_vdif(path, irregular("missing", frames) if kind == "vdif-gather" else frames)
        want = open_vdif_samples(path).astype(np.complex128).reshape(30 * 32, -1)
        want_bytes = frames.nbytes  # as stored: every frame, headers too
        if kind == "vdif-gather":  # gathered: each time frame's data, pol by pol
            with vdif.open_vdif(path) as r:
                want_bytes = 30 * 2 * (r.frame_len - r.header_len)
    rt, seen = Runtime(), []
    with open_file_source(path, block_samples=96, readers=2, depth=3, alloc=CountingAlloc(),
                          stall_timeout_s=2.0) as src:  # fmt: skip
        assert src.kind == kind and not src.page_locked
        stage = HostStage(src.layout, src.block_bytes)
        runner = fold_source(src, stage, lambda i, o: seen.append(i), HostRegistry(rt))
        assert src.in_flight == 0  # every buffer back before the source closes
        pool = src.buffers()
    got = np.concatenate(stage.samples)
    valid = np.concatenate(stage.valid)
    assert np.array_equal(got[valid], want[valid])
    assert valid.all() == (kind != "vdif-gather")
    report = runner.as_dict()
    assert report["blocks"] == src.nblocks == len(stage.samples) and report["gaps"] == 0
    assert report["samples_fed"] == src.nsamp == len(want)
    assert report["lost_samples"] == int((~valid).sum())
    assert report["bytes_fed"] == want_bytes
    assert report["pool_chunks"] == 3 and 1 <= report["max_copies_in_flight"] <= 2
    assert report["registered_bytes"] == 3 * src.buffer_bytes
    assert rt.registered == pool and sorted(rt.unregistered) == sorted(a for a, _ in pool)
    assert runner.handoff.held == runner.handoff.released == src.nblocks
    assert stage.synchronized == 1 and seen == list(np.cumsum([len(s) for s in stage.samples]))


def test_the_runner_leaves_a_page_locked_pool_alone(tmp_path):
    path = tmp_path / "a.dada"
    write_dada(path, 300)
    rt = Runtime()
    with open_file_source(path, block_samples=96, readers=1, depth=2, alloc=CountingAlloc()) as src:
        src.page_locked = True  # as pinned_alloc's buffers are
        runner = fold_source(src, HostStage(src.layout, src.block_bytes), None, HostRegistry(rt))
    assert rt.registered == [] and runner.as_dict()["registered_bytes"] == 0
    assert runner.as_dict()["blocks"] == 4


def test_a_stage_error_gives_every_block_back(tmp_path):
    path = tmp_path / "a.dada"
    write_dada(path, 1000)
    rt = Runtime()
    with open_file_source(path, block_samples=96, readers=2, depth=3, alloc=CountingAlloc(),
                          stall_timeout_s=2.0) as src:  # fmt: skip
        stage = HostStage(src.layout, src.block_bytes, polls=5, fail_at=3)
        with pytest.raises(RuntimeError, match="kernel failed"):
            fold_source(src, stage, None, HostRegistry(rt))
        assert src._held == 0  # the failed block and those in flight: all back
        assert len(rt.unregistered) == len(rt.registered) == 3
