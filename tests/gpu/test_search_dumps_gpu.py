"""`voltstream search --listen --device gpu --ring-seconds ...`: the live search on the
GPU keeps the voltage ring beside its capture as on the CPU (the ring takes each chunk
in front of the reader whose blocks the GPU filterbank takes) and dumps each burst it
finds, end to end over loopback (tests/search_dump_run.py, as tests/
test_search_dumps.py on the CPU)."""

from __future__ import annotations

import pytest

from search_dump_run import check_burst_dumps, search_with_dumps
from voltstream.device import gpu_available

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def _gpu():
    assert gpu_available(), "no CUDA device visible to CuPy"


def test_a_burst_found_live_on_the_gpu_is_dumped_with_its_sweep(tmp_path):
    report, out, _ = search_with_dumps(tmp_path, "gpu")
    assert report["search"]["device"] == "gpu"
    check_burst_dumps(report)
    assert report["capture"]["lost"] == 0
    assert "candidates with S/N >= 10: 2 of 2 triggered: dumped=2" in out, out
