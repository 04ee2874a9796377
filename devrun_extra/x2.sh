# Task #20 on a 2-GPU machine (bash, cwd = a copy of the up20 tree, PYTHONPATH set, nccl4py
# installed).  Logs: $OUT/env.txt, upload.txt, dist.txt, dp.txt, tests.txt (5 files); under 240 s.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/x2out}; mkdir -p "$OUT"
T0=$SECONDS
{ nvidia-smi -L; nproc; python3 -c "import nccl, numpy; print('nccl4py ok, numpy', numpy.__version__)"
  python3 -c "import xdist" 2>/dev/null && echo "xdist present" || echo "no xdist"; } > $OUT/env.txt 2>&1
XD=""; python3 -c "import xdist" 2>/dev/null && XD="-n 4"
PT="python3 -m pytest -q -p no:cacheprovider -o addopts="

# 1. upload timings: pageable vs pinned staging, 1 and 2 GPUs, thread counts (~20 s)
echo "== upload_time ($((SECONDS-T0)) s)" > $OUT/upload.txt
timeout 45 python3 devrun_extra/upload_time.py >> $OUT/upload.txt 2>&1; echo "rc $?" >> $OUT/upload.txt

# 2. NCCL across processes: 2 processes x 1 GPU, collectives + data-parallel steps against one
#    process over both GPUs, and the multi-process SPMD programs (shard_map, sharded jit,
#    donation, pmap) on a mesh of the two GPUs against one process (the GPU variants)
echo "== distributed GPU ($((SECONDS-T0)) s)" > $OUT/dist.txt
timeout 90 $PT -rs tests/test_distributed.py tests/test_multiprocess_spmd.py -k one_gpu >> $OUT/dist.txt 2>&1; echo "rc $?" >> $OUT/dist.txt

# 3. dp_why-style step timings, batch 16 and 128, pageable vs staged (4 compiles)
echo "== dp_why ($((SECONDS-T0)) s)" > $OUT/dp.txt
timeout 90 python3 devrun_extra/dp_why.py 16,128 >> $OUT/dp.txt 2>&1; echo "rc $?" >> $OUT/dp.txt

# 4. the SPMD / pmap / sharded-jit / donation / multi-process / staging test files, in the
#    time left (at most 230 s in all)
LEFT=$((230 - (SECONDS - T0))); [ $LEFT -lt 20 ] && LEFT=20
echo "== tests ($((SECONDS-T0)) s, $LEFT s left)" > $OUT/tests.txt
timeout $LEFT $PT $XD tests/test_cuda_staging.py tests/test_spmd.py tests/test_spmd_program.py \
  tests/test_sharded_jit.py tests/test_spmd_donation.py tests/test_distributed.py \
  tests/test_multiprocess_spmd.py tests/test_nccl_calls.py tests/test_donation.py \
  >> $OUT/tests.txt 2>&1; echo "rc $?" >> $OUT/tests.txt
tail -5 $OUT/tests.txt
echo "total $((SECONDS-T0)) s" | tee -a $OUT/env.txt
