set -x
nvidia-smi -L
timeout 330 scripts/gpu.sh test --tb=line -rf 2>&1 | grep -vE "^\.+ *\[|^$" | tail -40
. .ab/setup_old.sh
for i in 1; do
  timeout 75 scripts/gpu.sh bench-e2e --only file_fold --file-gb 4 --budget 600 --json $OUT/ff-new-$i.json 2>&1 | grep "file fold"
  (cd /tmp/old && timeout 75 scripts/gpu.sh bench-e2e --only file_fold --file-gb 4 --budget 600 --json $OUT/ff-old-$i.json 2>&1 | grep "file fold")
done
