"""Weight gradients of 3x3 convolutions with small batches on the GPU, ourjax vs JAX (same
process, alternating rounds, medians): the gradient in w of sum(tanh(conv(x, w))) (the forward
convolution included), batches too small to fill a 16-byte copy of the weight gradient's
channels (bfloat16: < 8, f32: < 4) and a full one; with ``--before`` also ourjax without
the batch's zero padding (``conv_to_dot._gathered_bytes`` as before it: the weight gradient's
patch matrix written), compiled in the same process with the disk cache off.

    python benchmarks/wgrad_small_batch_gpu.py [--before]
"""
import os
import statistics
import sys

os.environ["OURJAX_CACHE_DIR"] = "off"
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jjnp  # noqa: E402
from jax import lax as jlax  # noqa: E402
import ourjax  # noqa: E402
import ourjax.numpy as ojnp  # noqa: E402
from ourjax import lax as olax  # noqa: E402
from ourjax.lowering.passes import conv_to_dot  # noqa: E402

DN = ("NHWC", "HWIO", "NHWC")
CASES = [(1, 56, 64, "bf16"), (4, 56, 64, "bf16"), (8, 56, 64, "bf16"), (4, 28, 128, "bf16"),
         (2, 56, 64, "f32"), (4, 56, 64, "f32")]


from bench_util import block, per_call  # noqa: E402


def make(lax, jnp, grad):
  def conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=DN)
  return grad(lambda w, x: jnp.sum(jnp.tanh(conv(x, w).astype(jnp.float32))))


def main():
  before = "--before" in sys.argv
  dev, jdev = ourjax.devices("cuda")[0], jax.devices("gpu")[0]
  print(f"device: {jdev.device_kind}", flush=True)
  rng = np.random.default_rng(0)
  for n, h, c, t in CASES:
    dt = ml_dtypes.bfloat16 if t == "bf16" else np.float32
    x = rng.standard_normal((n, h, h, c)).astype(dt)
    w = (rng.standard_normal((3, 3, c, c)) * 0.05).astype(dt)
    fns = [ourjax.jit(make(olax, ojnp, ourjax.grad)), jax.jit(make(jlax, jjnp, jax.grad))]
    argss = [tuple(ourjax.device_put(a, dev) for a in (w, x)),
             tuple(jax.device_put(a, jdev) for a in (w, x))]
    outs = [np.asarray(f(*a)).astype(np.float64) for f, a in zip(fns, argss)]
    kinds = [type(k).__name__ for k in fns[0].lower(*argss[0]).compile()
             .runtime_executable().kernels]
    if before:
      saved = conv_to_dot._gathered_bytes
      conv_to_dot._gathered_bytes = lambda ip, conv, cb: (
          cb if ip and conv_to_dot._read_in_place(conv) else 1)
      try:
        fns.append(ourjax.jit(make(olax, ojnp, ourjax.grad)))
        argss.append(argss[0])
        block(fns[-1](*argss[0]))
      finally:
        conv_to_dot._gathered_bytes = saved
    times = [[] for _ in fns]
    for r in range(7):
      for i in (range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))):
        times[i].append(per_call(fns[i], argss[i]))
    med = [statistics.median(x) for x in times]
    err = np.linalg.norm(outs[0] - outs[1]) / np.linalg.norm(outs[1])
    extra = f"; padding off {med[2]:.3f} ms" if before else ""
    print(f"wgrad {t} N{n} H{h} C{c}: ourjax {med[0]:.3f} ms jax {med[1]:.3f} ms "
          f"(ratio {med[0] / med[1]:.2f}){extra}; rel err vs jax {err:.1e}; kernels {kinds}",
          flush=True)


if __name__ == "__main__":
  main()
