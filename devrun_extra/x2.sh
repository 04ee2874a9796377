# Task #20 on a 2-GPU machine (bash, cwd = a copy of the up20 tree, PYTHONPATH set, nccl4py
# installed).  Logs: $OUT/env.txt, dp_example.txt, upload.txt, dp.txt, dist.txt, tests.txt
# (6 files); < 240 s (every part after the first two gets a share of what is left of 232 s).
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/x2out}; mkdir -p "$OUT"
T0=$SECONDS
{ nvidia-smi -L; nproc; python3 -c "import nccl, numpy; print('nccl4py ok, numpy', numpy.__version__)"
  python3 -c "import xdist" 2>/dev/null && echo "xdist present" || echo "no xdist"
  git log --oneline -1 2>/dev/null; } > $OUT/env.txt 2>&1
XD=""; python3 -c "import xdist" 2>/dev/null && XD="-n 4"
PT="python3 -m pytest -p no:cacheprovider -o addopts="
left() { local l=$(( $1 - (SECONDS - T0) )); [ $l -lt $2 ] && l=$2; echo $l; }

# 1. examples/data_parallel.py back to back (float(loss) every 5 steps, so a step's upload can
#    overlap the step before), batch 128 per device, 1 and 2 GPUs, pageable (old path) vs
#    staged uploads on the copy stream: the throughput lines (2-GPU/1-GPU target 1.85x)
echo "== data_parallel ($((SECONDS-T0)) s)" > $OUT/dp_example.txt
for st in 0 1; do for nd in 1 2; do
  echo "-- OURJAX_STAGED_UPLOADS=$st --devices $nd" >> $OUT/dp_example.txt
  OURJAX_STAGED_UPLOADS=$st timeout $(left 70 10) python3 examples/data_parallel.py \
    --devices $nd --batch 128 --steps 30 >> $OUT/dp_example.txt 2>&1
  echo "rc $?" >> $OUT/dp_example.txt
done; done
grep -E "^--|tokens/s" $OUT/dp_example.txt

# 2. upload timings: pageable (old path) vs pinned staging, 1-64 MiB, 1 and 2 GPUs
echo "== upload_time ($((SECONDS-T0)) s)" > $OUT/upload.txt
timeout $(left 95 10) python3 devrun_extra/upload_time.py >> $OUT/upload.txt 2>&1
echo "rc $?" >> $OUT/upload.txt

# 3. dp_why-style step timings (waited each step), batch 16 and 128, pageable vs staged
echo "== dp_why ($((SECONDS-T0)) s)" > $OUT/dp.txt
timeout $(left 135 10) python3 devrun_extra/dp_why.py 16,128 >> $OUT/dp.txt 2>&1
echo "rc $?" >> $OUT/dp.txt

# 4. NCCL across processes, one GPU each (test_distributed, test_multiprocess_spmd: GPU
#    variants)
echo "== distributed GPU ($((SECONDS-T0)) s)" > $OUT/dist.txt
timeout $(left 205 15) $PT -q -rs tests/test_distributed.py tests/test_multiprocess_spmd.py \
  -k one_gpu >> $OUT/dist.txt 2>&1; echo "rc $?" >> $OUT/dist.txt

# 5. staging / SPMD / pmap / sharded-jit / donation test files on the GPUs, in the time left
#    (-v: each test's line is written even if the time runs out)
LEFT=$(left 232 10)
echo "== tests ($((SECONDS-T0)) s, $LEFT s left)" > $OUT/tests.txt
timeout $LEFT $PT -v --tb=short $XD tests/test_cuda_staging.py tests/test_spmd.py \
  tests/test_sharded_jit.py tests/test_spmd_donation.py tests/test_spmd_program.py \
  tests/test_nccl_calls.py tests/test_donation.py tests/test_distributed.py \
  tests/test_multiprocess_spmd.py -k "not one_gpu" >> $OUT/tests.txt 2>&1
echo "rc $?" >> $OUT/tests.txt
grep -E "passed|failed|FAILED|ERROR" $OUT/tests.txt | tail -8
echo "total $((SECONDS-T0)) s" | tee -a $OUT/env.txt
