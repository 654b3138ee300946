"""Which device folds which VDIF width live (issue 27, items 2 and 3): the CPU decodes
every width the file reader does (1, 2, 4, 8, 16 bits: tests/test_cli_outcomes.py and
tests/test_inspect_commands.py fold them live); the GPU unpacks 2, 4 and 8 bits and
refuses 1 and 16 in one line naming --device cpu, before any socket opens, whichever
way the fold reaches it (the fold's device choice; a capture chunk's layout)."""

from __future__ import annotations

import argparse

import pytest

from voltstream.cli.stream_options import fold_stream_options, gpu_check
from voltstream.errors import ConfigError
from voltstream.formats import make_format


def _fold_args(**kw: object) -> argparse.Namespace:
    base = dict(listen="127.0.0.1:9", input=None, format="vdif", bits=8, stream=None,
                real=False, scheduler=None, subband=None)  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("bits", [1, 16])
def test_the_gpu_refuses_one_and_sixteen_bits_live_naming_the_cpu(bits):
    with pytest.raises(ConfigError, match=rf"not {bits}-bit.*--device cpu"):
        gpu_check(_fold_args(bits=bits))()
    fmt = make_format("vdif", nchan=4, chan_bw_mhz=1.0, vdif_payload=1024, bits=bits)
    with pytest.raises(ConfigError, match=rf"not {bits}-bit.*--device cpu"):
        fmt.chunk_layout(64)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_the_gpu_takes_two_four_and_eight_bits_live(bits):
    gpu_check(_fold_args(bits=bits))()  # no refusal
    fmt = make_format("vdif", nchan=4, chan_bw_mhz=1.0, vdif_payload=1024, bits=bits)
    assert fmt.chunk_layout(64).nbit == bits


def test_a_file_fold_of_one_bit_is_the_gpus_too():
    """The refusal is the live path's: a 1-bit file folds where --device says."""
    gpu_check(_fold_args(listen=None, input="x.vdif", bits=1))()


def test_a_legacy_description_folds_live_with_its_shorter_header(tmp_path):
    """A stream description with legacy = true: the live fold's format has 16-byte
    headers, so the capture expects frames of frame_len and payloads after 16 bytes."""
    toml = tmp_path / "legacy.toml"
    toml.write_text('format = "vdif"\nthreads = [0, 1]\nframe_len = 1040\n'
                    "frames_per_second = 1000\nlegacy = true\nbits_per_sample = 1\n"
                    "complex = false\n")  # fmt: skip
    args = _fold_args(stream=str(toml), vdif_threads=None, chan_bw=None, station=None,
                      nchan=None, vdif_payload=None, npol=2)  # fmt: skip
    fold_stream_options(args)
    assert (args.legacy, args.vdif_payload, args.bits, args.real) == (True, 1024, 1, True)
    fmt = make_format("vdif", nchan=args.nchan, chan_bw_mhz=args.chan_bw, npol=args.npol,
                      vdif_payload=args.vdif_payload, bits=args.bits, real=args.real,
                      vdif_threads=args.vdif_threads, legacy=args.legacy)  # fmt: skip
    kw = fmt.capture_kwargs()
    assert (fmt.packet_len, kw["vdif_frame_len"], kw["vdif_legacy"]) == (1040, 1040, True)
    assert kw["frames_per_second"] == 1000


def test_more_than_two_threads_live_fold_every_thread_as_subbands(tmp_path):
    """Four threads are no longer refused (nor two picked): each thread a subband of
    one polarisation unless the description says npol = 2 (io/vdif_threads.py)."""
    toml = tmp_path / "four.toml"
    toml.write_text('format = "vdif"\nthreads = [0, 1, 2, 3]\nframe_len = 1056\n'
                    "frames_per_second = 1000\nbits_per_sample = 2\ncomplex = false\n")  # fmt: skip
    args = _fold_args(stream=str(toml), vdif_threads=None, chan_bw=None, station=None,
                      nchan=None, vdif_payload=None, npol=None)  # fmt: skip
    fold_stream_options(args)
    assert (args.vdif_threads, args.npol, args.nchan) == ([0, 1, 2, 3], 1, 1)
    fmt = make_format("vdif", nchan=args.nchan, chan_bw_mhz=args.chan_bw, npol=args.npol,
                      vdif_payload=args.vdif_payload, bits=args.bits, real=args.real,
                      vdif_threads=args.vdif_threads)  # fmt: skip
    assert (fmt.streams, fmt.nchan, fmt.npol) == (4, 4, 1)
