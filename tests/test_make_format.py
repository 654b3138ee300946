"""formats.make_format refuses what a format cannot carry, naming the option."""

from __future__ import annotations

import pytest

from voltstream.errors import ConfigError
from voltstream.formats import make_format


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(name="ynao", bits=4), "8-bit samples; --bits is for VDIF"),
        (dict(name="ynao", nchan=16), "always carries"),
        (dict(name="vdif", nchan=12), "power-of-two channel count"),
        (dict(name="vdif", bits=3), "use 1, 2, 4, 8, 16"),
        (dict(name="mark5b"), "unknown format"),
    ],
)
def test_bad_options_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        make_format(**kwargs)


def test_defaults_make_the_frames_of_each_format():
    ynao = make_format("ynao")
    assert (ynao.name, ynao.nchan, ynao.npol) == ("ynao", 32, 2)
    vdif = make_format("vdif", bits=4)
    assert vdif.name == "vdif" and vdif.nchan == 32
