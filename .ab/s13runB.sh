set -x
timeout 150 scripts/gpu.sh bench-search --json $OUT/search.json 2>&1 | tail -14
timeout 200 scripts/gpu.sh bench-e2e --only capture_ynao,fold_ynao,filterbank_ynao --rates 24,32 --probe-seconds 5 --confirm-seconds 10 --capture-args=--packets-per-chunk=4096 --budget 190 --json $OUT/e2e_fb.json 2>&1 | grep -E "asked|^\| (capture|fold|filterbank)_ynao|ratio" | tail -14
timeout 130 scripts/gpu.sh bench-e2e --only capture_vdif4real,fold_vdif4real --senders 16 --rates 8,16 --probe-seconds 4 --confirm-seconds 10 --budget 120 --json $OUT/e2e_v4r.json 2>&1 | grep -E "asked|^\| (capture|fold)_vdif4real" | tail -8
timeout 100 scripts/gpu.sh bench-e2e --only fold_4streams --capture-threads 4 --senders 24 --receiver-cpus 0,1 --capture-cpus 2,3,4,5 --rates 100 --probe-seconds 5 --confirm-seconds 20 --fold-args "--ring-mb 1024" --budget 90 --json $OUT/e2e_4s.json 2>&1 | grep -E "asked|^\| fold_4" | tail -4
