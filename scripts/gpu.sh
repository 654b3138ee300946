#!/usr/bin/env bash
# Run the GPU tests or the GPU benchmark on the GPU machine, from the repo root:
#   scripts/gpu.sh test|bench|bench-fold|bench-stage|bench-fengine|bench-capture|bench-e2e
#                  |bench-soak|bench-cluster|bench-record|bench-latency|bench-search
# Installs carried wheels (.whl/*.whl) into /tmp/site first; needs no astropy and
# no compiled voltstream._core (the GPU path is pure Python + CuPy). bench-capture
# (bench/capture_multicore.py, loopback only, about 3-4 minutes) does need the
# compiled extension: build the wheel with `VOLTSTREAM_NO_XDP=1 maturin build
# --release` and carry it in .whl/. bench-e2e (bench/e2e.py: the CLI end to end on
# loopback, one GPU) needs it too and writes $OUT/e2e.json; pick configurations with
# --only so that one call stays under 10 minutes (the script's docstring has a split).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=0
if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
    WHEELS=1
    # The checkout's python/ comes first on the path but has no compiled extension:
    # give it the wheel's, so live tests and benches capture for real.
    cp /tmp/site/voltstream/_core*.so python/voltstream/ 2>/dev/null || true
fi
export PYTHONPATH="python:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
case "${1:-}" in
    test)
        shift
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
        exec "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/gpu "$@"
        ;;
    bench)
        shift
        "$PY" bench/fold_gpu.py "$@"
        exec "$PY" bench/fengine_gpu.py
        ;;
    bench-fold)
        shift
        exec "$PY" bench/fold_gpu.py "$@"
        ;;
    bench-stage)
        shift
        exec "$PY" bench/fold_stage.py "$@"
        ;;
    bench-fengine)
        shift
        exec "$PY" bench/fengine_gpu.py "$@"
        ;;
    bench-capture)
        shift
        # The checkout's python/ has no compiled _core on the GPU machine: import the
        # whole package from the carried wheel instead.
        if [ "$WHEELS" = 1 ]; then
            export PYTHONPATH=/tmp/site
        fi
        "$PY" -c "from voltstream import _core" || {
            echo "bench-capture needs voltstream._core: carry the wheel in .whl/ (see above)" >&2
            exit 2
        }
        exec "$PY" bench/capture_multicore.py --json "${OUT:-/tmp}/capture_multicore.json" "$@"
        ;;
    bench-e2e)
        shift
        # The receivers are `python -m voltstream.cli` subprocesses of the checkout's
        # python/, which has the wheel's compiled _core (copied above).
        "$PY" -c "from voltstream import _core" || {
            echo "bench-e2e needs voltstream._core: carry the wheel in .whl/ (see above)" >&2
            exit 2
        }
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
        # dump_ynao's figures merge into search.json (bench/e2e_dump.py): seeded with the
        # checkout's, so the file that comes back is the whole merged one.
        if [ -n "${OUT:-}" ] && [ ! -e "$OUT/search.json" ] && [ -e docs/results/search.json ]; then
            cp docs/results/search.json "$OUT/search.json"
        fi
        exec "$PY" bench/e2e.py --json "${OUT:-/tmp}/e2e.json" --workdir /tmp/voltstream-e2e \
            --search-json "${OUT:-/tmp}/search.json" "$@"
        ;;
    bench-soak)
        shift
        # bench/soak.py: one bench/e2e.py point held for minutes (default 9), the
        # receiver's memory sampled; writes $OUT/soak.json. Needs the wheel's _core.
        "$PY" -c "from voltstream import _core" || {
            echo "bench-soak needs voltstream._core: carry the wheel in .whl/ (see above)" >&2
            exit 2
        }
        exec "$PY" bench/soak.py --json "${OUT:-/tmp}/soak.json" --workdir /tmp/voltstream-soak "$@"
        ;;
    bench-cluster)
        shift
        # bench/cluster.py (issue 29): 4 live GPU nodes of YNAO subbands (32 x 4 MHz,
        # 4.1 Gb/s each) on this GPU, beside one `fold --listen --device gpu` process of
        # the same subband; writes $OUT/cluster_ynao.json. Needs the wheel (nodes capture
        # for real) and Dask, distributed and astropy (the merger's archive) in .whl/.
        "$PY" -c "from voltstream import _core; import distributed, astropy" || {
            echo "bench-cluster needs voltstream._core, distributed and astropy: carry their wheels in .whl/" >&2
            exit 2
        }
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
        exec "$PY" bench/cluster.py --geometry ynao --device gpu --seconds 2 \
            --json "${OUT:-/tmp}/cluster_ynao.json" "$@"
        ;;
    bench-record)
        shift
        # bench/record.py (issue 12): the recorder's sustained rate against fio on the
        # same directories. fio: the machine's, else the portable copy made here by
        # scripts/fio_portable.sh and carried as .fio.tar.xz (or the .fio folder).
        [ "$WHEELS" = 1 ] && export PYTHONPATH=/tmp/site
        "$PY" -c "from voltstream import _core" || {
            echo "bench-record needs voltstream._core: carry the wheel in .whl/ (see above)" >&2
            exit 2
        }
        FIO=$(command -v fio || true)
        if [ -z "$FIO" ] && [ -f .fio.tar.xz ]; then
            mkdir -p /tmp/fio-portable && tar -xJf .fio.tar.xz -C /tmp/fio-portable
            FIO=/tmp/fio-portable/.fio/fio
        fi
        [ -z "$FIO" ] && [ -x .fio/fio ] && FIO=$PWD/.fio/fio
        [ -n "$FIO" ] || { echo "bench-record: no fio (run scripts/fio_portable.sh here, carry .fio.tar.xz)" >&2; exit 2; }
        # About 6-7 minutes with these settings (one call's limit is 10); later
        # arguments override them.
        mkdir -p /tmp/rd0 /tmp/rd1
        exec "$PY" bench/record.py --fio "$FIO" --dirs /tmp/rd0,/tmp/rd1 --seconds 8 \
            --trials 5 --queue-chunks 2,8 --budget-s 450 --machine "GPU machine" \
            --json "${OUT:-/tmp}/record.json" "$@"
        ;;
    bench-latency)
        shift
        # bench/latency.py (issue 14): packet to GPU latency per hand-off mode, the
        # Rust hot loop of the carried wheel, CuPy kernels of the checkout. Writes
        # $OUT/latency.json. All sizes, modes and loads take about 3-4 minutes.
        "$PY" -c "from voltstream import _core; _core.LatencySession" || {
            echo "bench-latency needs voltstream._core: carry the wheel in .whl/ (see above)" >&2
            exit 2
        }
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
        exec "$PY" bench/latency.py --json "${OUT:-/tmp}/latency.json" "$@"
        ;;
    bench-search)
        shift
        # bench/search.py (issue 28 item 2): (a) the GPU search's headroom on YNAO's
        # 4096 x 64 us filterbank, DM 0-2000 (CuPy only); (b) the live search's
        # detection latency, bursts from the simulator over loopback (needs the
        # wheel's _core for the capture). Writes $OUT/search.json; about 2-4 minutes.
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
        if ! "$PY" -c "from voltstream import _core" 2>/dev/null; then
            echo "bench-search: no voltstream._core (carry the wheel in .whl/): headroom only" >&2
            set -- --only headroom "$@"
        fi
        exec "$PY" bench/search.py --json "${OUT:-/tmp}/search.json" "$@"
        ;;
    *)
        echo "usage: scripts/gpu.sh test|bench|bench-fold|bench-stage|bench-fengine|bench-capture|bench-e2e|bench-soak|bench-cluster|bench-record|bench-latency|bench-search [args...]" >&2
        exit 2
        ;;
esac
