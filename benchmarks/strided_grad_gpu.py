"""Gradients of strided convolutions on the GPU, ourjax vs JAX (same process, alternating
rounds, medians): the input gradient alone (xgrad: an lhs-dilated convolution of the output
gradient, f32 at tf32 and bf16), both gradients (grad) and a transposed convolution (tconv), at
ResNet-like sizes; with ``--before`` also ourjax with the split by output phase switched off
(``conv_to_dot._split_phases``: the dilated patch matrix written, as before it), compiled in
the same process with the disk cache off.  Prints times, first-call times, the error against
JAX's result and the kernels ourjax ran.

    python benchmarks/strided_grad_gpu.py [xgrad,bf16,grad,tconv] [--before]
"""
import os
import statistics
import sys
import time

os.environ["OURJAX_CACHE_DIR"] = "off"     # (--before patches a pass: no cached executables)
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jjnp  # noqa: E402
from jax import lax as jlax  # noqa: E402
import ourjax  # noqa: E402
import ourjax.numpy as ojnp  # noqa: E402
from ourjax import lax as olax  # noqa: E402
from ourjax.lowering.passes import conv_to_dot  # noqa: E402

dev = ourjax.devices("cuda")[0]
jdev = jax.devices("gpu")[0]
DN = ("NHWC", "HWIO", "NHWC")


from bench_util import block, per_call  # noqa: E402


def bench(fns, argss, rounds=7):
  times = [[] for _ in fns]
  for r in range(rounds):
    order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
    for i in order:
      times[i].append(per_call(fns[i], argss[i]))
  return [statistics.median(t) for t in times]


# (batch, input size, input channels, output channels, kernel, stride)
CASES = [(32, 56, 64, 128, 3, 2), (32, 56, 64, 128, 1, 2), (32, 28, 128, 256, 3, 2),
         (32, 14, 256, 512, 3, 2)]


def make(mode, lax, jnp, grad, k, s):
  if mode == "tconv":
    return lambda x, w, c: lax.conv_transpose(x, w, (s, s), "SAME", dimension_numbers=DN)

  def conv(x, w):
    return lax.conv_general_dilated(x, w, (s, s), "SAME", dimension_numbers=DN)
  argnums = (0, 1) if mode == "grad" else 0
  return lambda x, w, c: grad(
      lambda x, w: jnp.sum(jnp.tanh(conv(x, w).astype(jnp.float32)) * c), argnums=argnums)(x, w)


def main():
  modes = sys.argv[1].split(",") if len(sys.argv) > 1 and not sys.argv[1].startswith("-") \
      else ["xgrad", "bf16", "grad", "tconv"]
  before = "--before" in sys.argv
  rng = np.random.default_rng(0)
  print(f"device: {jdev.device_kind}", flush=True)
  for mode in modes:
    for (N, H, C, O, k, s) in CASES:
      if mode == "tconv" and k == 1:
        continue
      dt = ml_dtypes.bfloat16 if mode == "bf16" else np.float32
      if mode == "tconv":       # (a decoder's upsampling: C -> O at s times the size)
        x = rng.standard_normal((N, H // s, H // s, O)).astype(dt)
        w = (rng.standard_normal((k + 1, k + 1, O, C)) * 0.05).astype(dt)
      else:
        x = rng.standard_normal((N, H, H, C)).astype(dt)
        w = (rng.standard_normal((k, k, C, O)) * 0.05).astype(dt)
      c = rng.standard_normal(O).astype(np.float32)
      fns = [ourjax.jit(make(mode, olax, ojnp, ourjax.grad, k, s)),
             jax.jit(make(mode, jlax, jjnp, jax.grad, k, s))]
      argss = [tuple(ourjax.device_put(a, dev) for a in (x, w, c)),
               tuple(jax.device_put(a, jdev) for a in (x, w, c))]
      firsts, results = [], []
      for f, a in zip(fns, argss):
        t0 = time.perf_counter()
        r = f(*a)
        block(r)
        firsts.append(time.perf_counter() - t0)
        results.append(r if isinstance(r, tuple) else (r,))
      if before:
        saved = conv_to_dot._phase_refusal
        conv_to_dot._phase_refusal = lambda conv, cb: "switched off (--before)"
        try:
          fns.append(ourjax.jit(make(mode, olax, ojnp, ourjax.grad, k, s)))
          argss.append(argss[0])
          block(fns[-1](*argss[0]))
        finally:
          conv_to_dot._phase_refusal = saved
      errs = []
      for a, b in zip(results[0], results[1]):
        a = np.asarray(a).astype(np.float64)
        b = np.asarray(b).astype(np.float64)
        errs.append(np.linalg.norm(a - b) / np.linalg.norm(b))
      kinds = [type(q).__name__ for q in fns[0].lower(*argss[0]).compile()
               .runtime_executable().kernels]
      t = bench(fns, argss)
      extra = f"; phases off {t[2]:.3f} ms" if before else ""
      print(f"{mode} N{N} H{H} C{C} O{O} k{k} s{s}: ourjax {t[0]:.3f} ms jax {t[1]:.3f} ms "
            f"(ratio {t[0] / t[1]:.2f}){extra}; first call {firsts[0]:.2f}/{firsts[1]:.2f} s; "
            f"rel err vs jax {max(errs):.1e}; kernels {kinds}", flush=True)


if __name__ == "__main__":
  main()
