"""What `voltstream search`'s file and live forms share: the settings from the options,
the device, the live gulp (cli/search.py, cli/search_live.py)."""

from __future__ import annotations

import argparse
import math

from voltstream.errors import ConfigError
from voltstream.search.single_pulse import SearchSettings

DEFAULTS = SearchSettings()
#: Seconds of arrival times per gulp of a live search: a burst is written about a
#: gulp plus the sweep across the band after it arrived.
LIVE_GULP_S = 0.5


def settings_from(args: argparse.Namespace, tsamp_s: float) -> SearchSettings:
    """The search's settings from the options, --max-width in samples of ``tsamp_s``."""
    boxcar = DEFAULTS.boxcar_max
    if args.max_width is not None:
        boxcar = 1 << max(0, int(math.floor(math.log2(max(1.0, args.max_width / tsamp_s)))))
    return SearchSettings(
        dm_min=args.dm_min, dm_max=args.dm_max, dm_tol=args.dm_tol, threshold=args.threshold,
        boxcar_max=boxcar, window_s=args.baseline,
    )  # fmt: skip


def search_device(args: argparse.Namespace) -> str:
    """--device as the search takes it: cpu or gpu."""
    from voltstream.device import resolve_device

    def need() -> None:
        from voltstream.dsp.cuda import GpuError, cupy_module

        try:
            cupy_module()
        except GpuError as e:
            raise ConfigError(str(e)) from e

    return resolve_device(args.device, need)
