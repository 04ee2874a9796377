"""Grouped 3x3 convolutions on the GPU, ourjax vs JAX (same process, alternating rounds,
medians): forward (f32 at tf32, bf16), forward * scale + relu, both gradients of
sum(tanh(conv) * scale), the weight gradient alone (wgrad: a batch-grouped convolution, for
the depthwise case reductions of products), the weight-gradient convolution by itself (wconv:
the gradient of sum(conv(x, w) * x) in w, no forward convolution) and the input gradient
alone (xgrad); first-call
times, the error against JAX's result, the kernels ourjax ran.  The second argument keeps
only the cases of these group counts (64: the depthwise 32x56x56x64).

    python benchmarks/gconv_gpu.py [fwd,bf16,relu,grad,wgrad,wconv,xgrad] [G,...] [--before]

``--before``: also ourjax without ``simplify_sinks.sink_group_transpose`` (the scale and relu after
the groups' swap a kernel of their own, as before it), compiled in the same process with the
disk cache off.

(Comparing a pass switched off by patching it in one process with a later process: set
OURJAX_CACHE_DIR=off in both, or the later one runs the earlier one's executable, which the
disk cache found by its module as lowered and the unchanged sources.)
"""
import os, time, statistics, numpy as np, sys, ml_dtypes
BEFORE = "--before" in sys.argv
if BEFORE:
  sys.argv.remove("--before")
  os.environ["OURJAX_CACHE_DIR"] = "off"
import ourjax, jax
import ourjax.numpy as ojnp, jax.numpy as jjnp
from ourjax import lax as olax
from jax import lax as jlax
dev = ourjax.devices("cuda")[0]; jdev = jax.devices("gpu")[0]

from bench_util import block, per_call  # noqa: E402

def bench(fo, ao, fj, aj, rounds=9):
  to, tj = [], []
  for r in range(rounds):
    for which in ((0, 1) if r % 2 == 0 else (1, 0)):
      if which == 0: to.append(per_call(fo, ao))
      else: tj.append(per_call(fj, aj))
  return statistics.median(to), statistics.median(tj)

rng = np.random.default_rng(0)
dn = ("NHWC", "HWIO", "NHWC")
cases = [(32, 28, 128, 128, 2), (32, 28, 128, 128, 8), (32, 28, 128, 128, 32), (32, 56, 64, 64, 64),
         (32, 28, 256, 256, 32), (32, 14, 512, 512, 32)]
modes = sys.argv[1].split(",") if len(sys.argv) > 1 else ["fwd", "bf16", "relu", "grad"]
if len(sys.argv) > 2:
  cases = [c for c in cases if str(c[4]) in sys.argv[2].split(",")]
for mode in modes:
  for (N, H, C, O, G) in cases:
    dt = ml_dtypes.bfloat16 if mode == "bf16" else np.float32
    x = rng.standard_normal((N, H, H, C)).astype(dt); w = (rng.standard_normal((3, 3, C // G, O)) * 0.1).astype(dt)
    s = rng.standard_normal(O).astype(np.float32)
    def make(lax, jnp, grad):
      def conv(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn,
                                        feature_group_count=G)
      if mode in ("grad", "wgrad", "xgrad"):
        argnums = {"grad": (0, 1), "wgrad": 1, "xgrad": 0}[mode]
        return lambda x, w, s: grad(lambda x, w: jnp.sum(jnp.tanh(conv(x, w)) * s),
                                    argnums=argnums)(x, w)
      if mode == "wconv":
        return lambda x, w, s: grad(lambda w: jnp.sum(conv(x, w) * x))(w)
      if mode == "relu":
        return lambda x, w, s: jnp.maximum(conv(x, w) * s, 0.0)
      return lambda x, w, s: conv(x, w)
    fo, fj = ourjax.jit(make(olax, ojnp, ourjax.grad)), jax.jit(make(jlax, jjnp, jax.grad))
    ao = tuple(ourjax.device_put(a, dev) for a in (x, w, s)); aj = tuple(jax.device_put(a, jdev) for a in (x, w, s))
    t0 = time.perf_counter(); ro = fo(*ao); block(ro); tc = time.perf_counter() - t0
    t0 = time.perf_counter(); rj = fj(*aj); block(rj); tjc = time.perf_counter() - t0
    ro = ro if isinstance(ro, tuple) else (ro,); rj = rj if isinstance(rj, tuple) else (rj,)
    errs = []
    for a, b in zip(ro, rj):
      a = np.asarray(a).astype(np.float64); b = np.asarray(b).astype(np.float64)
      errs.append(np.linalg.norm(a - b) / np.linalg.norm(b))
    kinds = [type(k).__name__ for k in fo.lower(*ao).compile().runtime_executable().kernels]
    extra = ""
    if BEFORE:
      from ourjax.lowering.passes import simplify
      saved = simplify.ELEMENTWISE_RULES
      simplify.ELEMENTWISE_RULES = tuple(r for r in saved if r.__name__ != "sink_group_transpose")
      try:
        fb = ourjax.jit(make(olax, ojnp, ourjax.grad)); block(fb(*ao))
        kb = [type(k).__name__ for k in fb.lower(*ao).compile().runtime_executable().kernels]
      finally:
        simplify.ELEMENTWISE_RULES = saved
      mb, _ = bench(fb, ao, fj, aj, rounds=5)
      extra = f"; before {mb:.3f} ms {kb}"
    mo, mj = bench(fo, ao, fj, aj)
    print(f"{mode} N{N} H{H} C{C} O{O} G{G}: ourjax {mo:.3f} ms jax {mj:.3f} ms (ratio {mo/mj:.2f}){extra}; "
          f"first call {tc:.2f}/{tjc:.2f} s; rel err vs jax {max(errs):.1e}; kernels {kinds}", flush=True)
