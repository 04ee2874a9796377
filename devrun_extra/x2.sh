# Task #20 on a 2-GPU machine (bash, cwd = a copy of the up20 tree, PYTHONPATH set, nccl4py
# installed).  Logs: $OUT/env.txt, upload.txt, dist.txt, dp.txt, tests.txt (5 files); < 240 s.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/x2out}; mkdir -p "$OUT"
T0=$SECONDS
{ nvidia-smi -L; nproc; python3 -c "import nccl, numpy; print('nccl4py ok, numpy', numpy.__version__)"
  python3 -c "import xdist" 2>/dev/null && echo "xdist present" || echo "no xdist"
  git log --oneline -1 2>/dev/null; } > $OUT/env.txt 2>&1
XD=""; python3 -c "import xdist" 2>/dev/null && XD="-n 4"
PT="python3 -m pytest -p no:cacheprovider -o addopts="

# 1. upload timings: pageable (old path) vs pinned staging, sizes, 1 and 2 GPUs, threads
echo "== upload_time ($((SECONDS-T0)) s)" > $OUT/upload.txt
timeout 35 python3 devrun_extra/upload_time.py >> $OUT/upload.txt 2>&1; echo "rc $?" >> $OUT/upload.txt

# 2. NCCL across processes, one GPU each: collectives + data-parallel transformer steps against
#    one process over both GPUs (test_distributed), the multi-process SPMD programs (shard_map,
#    sharded jit with donation, pmap) on a mesh of the two GPUs against one process
#    (test_multiprocess_spmd); both with GPUs only visible one per process, and with
#    local_device_ids
echo "== distributed GPU ($((SECONDS-T0)) s)" > $OUT/dist.txt
timeout 95 $PT -q -rs tests/test_distributed.py tests/test_multiprocess_spmd.py -k one_gpu \
  >> $OUT/dist.txt 2>&1; echo "rc $?" >> $OUT/dist.txt

# 3. dp_why-style step timings, batch 16 and 128, pageable vs staged uploads
echo "== dp_why ($((SECONDS-T0)) s)" > $OUT/dp.txt
timeout 70 python3 devrun_extra/dp_why.py 16,128 >> $OUT/dp.txt 2>&1; echo "rc $?" >> $OUT/dp.txt

# 4. SPMD / pmap / sharded-jit / donation / staging test files on the GPUs, in the time left
#    (-v: each test's line is written even if the time runs out)
LEFT=$((232 - (SECONDS - T0))); [ $LEFT -lt 15 ] && LEFT=15
echo "== tests ($((SECONDS-T0)) s, $LEFT s left)" > $OUT/tests.txt
timeout $LEFT $PT -v --tb=short $XD tests/test_cuda_staging.py tests/test_spmd.py \
  tests/test_sharded_jit.py tests/test_spmd_donation.py tests/test_spmd_program.py \
  tests/test_nccl_calls.py tests/test_donation.py tests/test_distributed.py \
  tests/test_multiprocess_spmd.py -k "not one_gpu" >> $OUT/tests.txt 2>&1
echo "rc $?" >> $OUT/tests.txt
grep -E "passed|failed|FAILED|ERROR" $OUT/tests.txt | tail -8
echo "total $((SECONDS-T0)) s" | tee -a $OUT/env.txt
