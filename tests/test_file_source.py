"""pipeline/file_source.py: file blocks read by several threads into pooled buffers."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from voltstream.errors import FormatError
from voltstream.pipeline.file_source import FileBlocks


@pytest.fixture
def data_file(tmp_path):
    rng = np.random.default_rng(7)
    head = b"H" * 4096
    data = rng.integers(0, 256, 37 * 1000 + 13, dtype=np.uint8)  # 13 bytes of a partial sample
    path = tmp_path / "f.dat"
    path.write_bytes(head + data.tobytes())
    return path, data


def test_blocks_hold_the_files_bytes_in_order_and_buffers_are_reused(data_file):
    path, data = data_file
    allocated = []

    def alloc(n):
        allocated.append(np.empty(n, np.uint8))
        return allocated[-1]

    got, ids = [], []
    with FileBlocks(path, 4096, 1000, 37, block_samples=96, depth=3, readers=3,
                    alloc=alloc) as src:  # fmt: skip
        for blk in src:
            ((addr, nbytes, off),) = blk.parts
            assert off == 0 and addr == blk.buffer.ctypes.data
            got.append(blk.buffer[:nbytes].copy())
            ids.append((blk.index, blk.first, blk.nsamp))
            blk.release()
            blk.release()  # twice is once
        assert src.bytes_read == 37 * 1000
    assert len(allocated) == 3  # the pool, allocated once
    assert np.array_equal(np.concatenate(got), data[: 37 * 1000])
    assert ids[0] == (0, 0, 96) and ids[-1] == (10, 960, 40) and len(ids) == 11


def test_a_consumer_holding_every_buffer_is_told_or_made_to_release(data_file):
    path, _ = data_file
    held = []
    with FileBlocks(path, 4096, 1000, 37, block_samples=100, depth=2) as src:
        it = src.blocks()
        held += [next(it), next(it)]
        with pytest.raises(FormatError, match="buffers are held"):
            next(it)
    with FileBlocks(path, 4096, 1000, 37, block_samples=100, depth=2) as src:
        waits = []

        def wait_free():
            waits.append(1)
            held.pop(0).release()

        held.clear()
        for blk in src.blocks(wait_free=wait_free):
            held.append(blk)
        assert len(waits) == 8 and held[-1].index == 9


def test_a_truncated_file_is_a_clear_error_and_close_ends_the_readers(data_file):
    path, _ = data_file
    before = {t.name for t in threading.enumerate()}
    with pytest.raises(FormatError, match="before the 2000 samples"):
        with FileBlocks(path, 4096, 2000, 37, block_samples=500, depth=4) as src:
            for blk in src:
                blk.release()
    after = {t.name for t in threading.enumerate() if t.name.startswith("vs-read")}
    assert not after - before
