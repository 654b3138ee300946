set -x
timeout 150 scripts/gpu.sh test --tb=line -rf tests/gpu/test_cli_gpu.py::test_record_and_fold_on_the_gpu_in_one_process tests/gpu/test_filterbank_gpu.py tests/gpu/test_search_gpu.py tests/gpu/test_live_gpu.py tests/gpu/test_live_real_gpu.py 2>&1 | grep -vE "^\.+ *\[|^$" | tail -25
timeout 150 scripts/gpu.sh bench-search --json $OUT/search.json 2>&1 | tail -14
timeout 130 scripts/gpu.sh bench-e2e --only capture_ynao,fold_ynao,filterbank_ynao --rates 32 --probe-seconds 5 --confirm-seconds 10 --capture-args=--packets-per-chunk=4096 --budget 120 --json $OUT/e2e_fb.json 2>&1 | grep -E "asked|^\| (capture|fold|filterbank)_ynao|ratio" | tail -10
timeout 110 scripts/gpu.sh bench-e2e --only capture_vdif4real,fold_vdif4real --senders 16 --rates 16 --probe-seconds 4 --confirm-seconds 10 --budget 100 --json $OUT/e2e_v4r.json 2>&1 | grep -E "asked|^\| (capture|fold)_vdif4real" | tail -6
