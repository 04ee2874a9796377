"""JAX's figures for ``dp_why.py``'s data-parallel transformer step (examples/data_parallel.py,
``jax.pmap``) on 1 and 2 GPUs at the same per-GPU batch: medians of waited steps and of steps
back to back (10, waited at the end), with the batch given as NumPy arrays and with it already
on the devices; the two-GPU throughput over one.  The reference issue 20 asks for.

    python benchmarks/dp_jax.py 128"""
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import jax  # noqa: E402
from bench_util import med, pmapped_step  # noqa: E402


def main():
  rows = {}
  for b in [int(v) for v in sys.argv[1].split(",")]:
    for n in (1, 2):
      if n > len(jax.devices()):
        continue
      s = pmapped_step(jax, n, b)
      one, x, labels, xd, ld = s.one, s.x, s.labels, s.xd, s.ld
      for _ in range(5):
        jax.block_until_ready(one())
        jax.block_until_ready(one(xd, ld))

      def b2b(k=10, xs=x, ls=labels):
        loss = None
        for _ in range(k):
          loss = one(xs, ls)
        jax.block_until_ready(loss)
      r = (med(lambda: jax.block_until_ready(one()), warm=0),
           med(lambda: jax.block_until_ready(one(xd, ld)), warm=0),
           med(b2b, k=5, warm=1) / 10, med(lambda: b2b(xs=xd, ls=ld), k=5, warm=1) / 10)
      rows[(b, n)] = r
      print(f"jax batch {b:4d} devices {n}: waited numpy-in {r[0]:.3f} ms, device-in {r[1]:.3f}; "
            f"back to back numpy-in {r[2]:.3f}, device-in {r[3]:.3f}", flush=True)
    if (b, 2) in rows:
      r1, r2 = rows[(b, 1)], rows[(b, 2)]
      print(f"jax batch {b:4d} two-GPU throughput over one: waited numpy-in "
            f"{2 * r1[0] / r2[0]:.2f}x, device-in {2 * r1[1] / r2[1]:.2f}x; back to back "
            f"numpy-in {2 * r1[2] / r2[2]:.2f}x, device-in {2 * r1[3] / r2[3]:.2f}x", flush=True)


if __name__ == "__main__":
  main()
