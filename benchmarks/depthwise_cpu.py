"""A depthwise 3x3 convolution (32x56x56x64 NHWC, 64 groups) on the CPU, ourjax vs JAX (same
process, alternating rounds, medians): the forward, the input gradient and the weight
gradient (a batch-grouped convolution: reductions of products of x's windows and dy) each by
itself, as vjps of a given output gradient; the error against JAX's result.

    python benchmarks/depthwise_cpu.py [N]
"""
import statistics, sys, time
import numpy as np
import ourjax, jax
from ourjax import lax as olax
from jax import lax as jlax

N = int(sys.argv[1]) if len(sys.argv) > 1 else 32
H, C = 56, 64
dn = ("NHWC", "HWIO", "NHWC")
rng = np.random.default_rng(0)
x = rng.standard_normal((N, H, H, C)).astype(np.float32)
w = (rng.standard_normal((3, 3, 1, C)) * 0.1).astype(np.float32)
dy = rng.standard_normal((N, H, H, C)).astype(np.float32)


def make(lax, lib, part):
  conv = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn,
                                               feature_group_count=C)
  if part == "fwd":
    return lambda x, w, dy: conv(x, w)
  if part == "dx":
    return lambda x, w, dy: lib.vjp(lambda x: conv(x, w), x)[1](dy)[0]
  return lambda x, w, dy: lib.vjp(lambda w: conv(x, w), w)[1](dy)[0]


def per_call(f, args, n=3):
  t = time.perf_counter()
  for _ in range(n):
    r = f(*args)
  r.block_until_ready()
  return (time.perf_counter() - t) / n * 1e3


for part in ("fwd", "dx", "dw"):
  fo, fj = ourjax.jit(make(olax, ourjax, part)), jax.jit(make(jlax, jax, part))
  ro, rj = np.asarray(fo(x, w, dy)), np.asarray(fj(x, w, dy))
  err = np.linalg.norm(ro - rj) / np.linalg.norm(rj)
  to, tj = [], []
  for r in range(5):
    for which in ((0, 1) if r % 2 == 0 else (1, 0)):
      (to if which == 0 else tj).append(per_call(fo if which == 0 else fj, (x, w, dy)))
  mo, mj = statistics.median(to), statistics.median(tj)
  print(f"depthwise {part} N{N} H{H} C{C}: ourjax {mo:.2f} ms jax {mj:.2f} ms "
        f"(ratio {mo / mj:.2f}); rel err vs jax {err:.1e}", flush=True)
