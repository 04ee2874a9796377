"""The data-parallel transformer step (examples/data_parallel.py) on 1 and 2 GPUs: waited step
times (medians) with the batch given as NumPy arrays, pageable uploads (OURJAX_STAGED_UPLOADS=0,
the old path) against pinned staging, and with the batch already on the devices; the host time
to enqueue a step; the upload of the batch alone; steps back to back (10, waited at the end:
a step's upload may overlap the step before), each way.  Needs two GPUs.
    python benchmarks/dp_why.py 16,128"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.getcwd(), "examples"))
import ourjax  # noqa: E402
import data_parallel as dp  # noqa: E402
from upload_time import med, mode  # noqa: E402

pc = time.perf_counter

rows = {}
for b in [int(v) for v in sys.argv[1].split(",")]:
  for n in (1, 2):
    devs = ourjax.devices()[:n]
    step = ourjax.pmap(dp.make_step(ourjax), axis_name="devices", devices=devs)
    ident = ourjax.pmap(lambda v: v, axis_name="devices", devices=devs)
    params, opt = dp.init(0)
    params, opt = dp.replicate(params, n), dp.replicate(opt, n)
    x, labels = dp.batch(1, n, b)
    xd, ld = ident(x), ident(labels)
    state = [params, opt]

    def one(x=x, labels=labels):
      p, o, l = step(state[0], state[1], x, labels)
      state[0], state[1] = p, o
      return l
    for staged in (False, True):
      mode(staged)
      for _ in range(5):
        ourjax.block_until_ready(one())
        ourjax.block_until_ready(one(xd, ld))
    res = {}
    for staged in (False, True):
      mode(staged)
      res[staged] = med(lambda: ourjax.block_until_ready(one()), warm=0)
      res[("up", staged)] = med(lambda: ourjax.block_until_ready(ident(x)), warm=0)
    waited_dev = med(lambda: ourjax.block_until_ready(one(xd, ld)), warm=0)

    def back_to_back(k=10, xs=x, ls=labels):
      l = None
      for _ in range(k):
        l = one(xs, ls)
      ourjax.block_until_ready(l)
    for staged in (False, True):     # steps not waited for: a step's upload may overlap the last
      mode(staged)
      res[("b2b", staged)] = med(back_to_back, k=5, warm=1) / 10
    b2b_dev = med(lambda: back_to_back(xs=xd, ls=ld), k=5, warm=1) / 10

    def enq():
      t0 = pc()
      l = one(xd, ld)
      t = pc() - t0
      ourjax.block_until_ready(l)
      return t
    enq_ms = statistics.median([enq() for _ in range(30)]) * 1e3
    rows[(b, n)] = (res[False], res[True], waited_dev, res[("b2b", False)],
                    res[("b2b", True)], b2b_dev)
    print(f"batch {b:4d} devices {n}: step waited numpy-in pageable {res[False]:.3f} ms, "
          f"staged {res[True]:.3f}; device-in {waited_dev:.3f}; enqueue {enq_ms:.3f}; upload x "
          f"pageable {res[('up', False)]:.3f} staged {res[('up', True)]:.3f}; back to back: "
          f"numpy-in pageable {res[('b2b', False)]:.3f} staged {res[('b2b', True)]:.3f} "
          f"device-in {b2b_dev:.3f}", flush=True)
  if (b, 1) in rows and (b, 2) in rows:
    r1, r2 = rows[(b, 1)], rows[(b, 2)]
    print(f"batch {b:4d} two-GPU throughput over one (same per-GPU batch): numpy-in pageable "
          f"{2 * r1[0] / r2[0]:.2f}x, staged {2 * r1[1] / r2[1]:.2f}x, device-in "
          f"{2 * r1[2] / r2[2]:.2f}x; back to back: numpy-in pageable {2 * r1[3] / r2[3]:.2f}x, "
          f"staged {2 * r1[4] / r2[4]:.2f}x, device-in {2 * r1[5] / r2[5]:.2f}x", flush=True)
