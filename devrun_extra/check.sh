#!/bin/bash
# gpucomp (#17) check on the H100: cwd = a copy of the branch's tree, PYTHONPATH set, $OUT for logs.
# Files: $OUT/models.txt (models.py, default and the A/B), $OUT/compile.txt (gpu_compile.py --load:
# per-phase compile with the driver's real load), $OUT/tests.txt (GPU tests), $OUT/summary.txt.
# Budget ~190 s; each step has its own timeout and is skipped when the budget is spent.
T0=$(date +%s)
left() { echo $(( 190 - ($(date +%s) - T0) )); }
S=$OUT/summary.txt
W=conv_bn_relu,resnet_infer,ode_rk4
echo "gpucomp check $(git log --oneline -1 2>/dev/null)" > $S
nvidia-smi --query-gpu=name --format=csv,noheader >> $S 2>&1

# 1. the brief's run: default switches (COPY_B=auto: ss/ss_t; late epilogue on)
echo "=== default (OURJAX_CUDA_WGMMA_COPY_B=auto, OURJAX_CUDA_LATE_EPILOGUE=1)" > $OUT/models.txt
timeout 70 python benchmarks/models.py --target cuda --repeat 3 --only $W >> $OUT/models.txt 2>&1
echo "models default rc=$? at $(( $(date +%s) - T0 )) s" >> $S

# 2. GPU tests of the touched code (cuda_cases: the new ss_t / late-epilogue cases included)
timeout 75 python -m pytest -o addopts="" -q -p no:cacheprovider -n 8 tests/test_cuda.py \
  > $OUT/tests.txt 2>&1
echo "tests rc=$? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/tests.txt)" >> $S
grep -E "^(FAILED|ERROR)" $OUT/tests.txt | head -20 >> $S

# 3. A/B: the previous forms (register form rs_t, epilogue at each accumulator)
if [ $(left) -gt 45 ]; then
  echo "=== A/B: OURJAX_CUDA_WGMMA_COPY_B=0 OURJAX_CUDA_LATE_EPILOGUE=0 (the forms before)" >> $OUT/models.txt
  OURJAX_CUDA_WGMMA_COPY_B=0 OURJAX_CUDA_LATE_EPILOGUE=0 timeout $(( $(left) - 25 )) \
    python benchmarks/models.py --target cuda --repeat 3 --only $W >> $OUT/models.txt 2>&1
  echo "models A/B rc=$? at $(( $(date +%s) - T0 )) s" >> $S
fi

# 4. where the first call goes, per phase, with the driver's load (default switches)
if [ $(left) -gt 12 ]; then
  timeout $(( $(left) - 2 )) python benchmarks/gpu_compile.py --load --modules --only $W \
    > $OUT/compile.txt 2>&1
  echo "gpu_compile rc=$? at $(( $(date +%s) - T0 )) s" >> $S
fi
grep -E "^(conv|resnet|ode|geomean|===)" $OUT/models.txt >> $S
echo "total $(( $(date +%s) - T0 )) s" >> $S
