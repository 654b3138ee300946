#!/usr/bin/env bash
# Run the GPU tests or the GPU benchmark on the GPU machine, from the repo root:
#   scripts/gpu.sh test|bench|bench-fold|bench-fengine
# Installs carried wheels (.whl/*.whl) into /tmp/site first; needs no astropy and
# no compiled voltstream._core (the GPU path is pure Python + CuPy).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
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
    bench-fengine)
        shift
        exec "$PY" bench/fengine_gpu.py "$@"
        ;;
    *)
        echo "usage: scripts/gpu.sh test|bench|bench-fold|bench-fengine [args...]" >&2
        exit 2
        ;;
esac
