set -x
export PYTHONPATH=python:/tmp/site
timeout 240 scripts/gpu.sh test tests/gpu/test_live_gpu.py -x -q -o faulthandler_timeout=90 > $OUT/live.txt 2>&1; tail -40 $OUT/live.txt
timeout 90 scripts/gpu.sh bench-stage --seconds 3 --json $OUT/stage.json > $OUT/stage.txt 2>&1; tail -8 $OUT/stage.txt
P=17000
timeout 60 python3 -m voltstream.cli fold --listen 127.0.0.1:$P --format ynao --device gpu --dm 26.833 --period 0.0333 --duration 25 --idle-timeout 3 -o $OUT/live.fits --report $OUT/live.json > $OUT/cli.txt 2>&1 &
sleep 6
timeout 40 python3 -m voltstream.cli simulate --format ynao --signal noise --duration 8 --dest 127.0.0.1:$P --rate 8 2>&1 | tail -2
wait; tail -25 $OUT/cli.txt
