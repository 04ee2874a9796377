"""The data-parallel transformer step (examples/data_parallel.py) on 1 and 2 GPUs: waited step
times (medians) with the batch given as NumPy arrays, three ways: pageable uploads
(OURJAX_STAGED_UPLOADS=0, the old path), staged through pinned chunks and copied before the
step is enqueued (OURJAX_UPLOAD_OVERLAP=0), and staged with the copies running while the step
is enqueued (gated DMAs, the default); with the batch already on the devices; the host time to
enqueue a step; the upload of the batch alone; steps back to back (10, waited at the end: a
step's upload may overlap the step before), each way.  Needs two GPUs (one for the 1-GPU rows).
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

MODES = {"pageable": (False, False), "staged": (True, False), "overlapped": (True, True)}

rows = {}
for b in [int(v) for v in sys.argv[1].split(",")]:
  for n in (1, 2):
    if n > len(ourjax.devices()):
      continue
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
    for m in MODES.values():
      mode(*m)
      for _ in range(5):
        ourjax.block_until_ready(one())
        ourjax.block_until_ready(one(xd, ld))
    res = {}
    for name, m in MODES.items():
      mode(*m)
      res[name] = med(lambda: ourjax.block_until_ready(one()), warm=0)
      res[("up", name)] = med(lambda: ourjax.block_until_ready(ident(x)), warm=0)
    waited_dev = med(lambda: ourjax.block_until_ready(one(xd, ld)), warm=0)

    def back_to_back(k=10, xs=x, ls=labels):
      l = None
      for _ in range(k):
        l = one(xs, ls)
      ourjax.block_until_ready(l)
    for name, m in MODES.items():   # steps not waited for: a step's upload may overlap the last
      mode(*m)
      res[("b2b", name)] = med(back_to_back, k=7, warm=1) / 10
    b2b_dev = med(lambda: back_to_back(xs=xd, ls=ld), k=7, warm=1) / 10

    def enq():
      t0 = pc()
      l = one(xd, ld)
      t = pc() - t0
      ourjax.block_until_ready(l)
      return t
    enq_ms = statistics.median([enq() for _ in range(30)]) * 1e3
    rows[(b, n)] = res, waited_dev, b2b_dev
    # the results are exact whichever way the batch came, also when the caller overwrites
    # its arrays as soon as the call returns (the upload must have read them by then)
    import numpy as np
    p0, o0 = dp.init(0)
    p0, o0 = dp.replicate(p0, n), dp.replicate(o0, n)
    ref = ourjax.tree_util.tree_map(np.asarray, step(p0, o0, xd, ld))
    same = {}
    for name, m in MODES.items():
      mode(*m)
      xc, lc = x.copy(), labels.copy()
      out = step(p0, o0, xc, lc)
      xc[:] = np.nan
      lc[:] = 0
      got = ourjax.tree_util.tree_map(np.asarray, out)
      same[name] = all(np.array_equal(a, c) for a, c in zip(
          ourjax.tree_util.tree_leaves(ref), ourjax.tree_util.tree_leaves(got)))
    print(f"batch {b:4d} devices {n}: results equal to the device-in step's: {same}", flush=True)
    each = lambda key: ", ".join(f"{k} {res[key(k)]:.3f}" for k in MODES)  # noqa: E731
    print(f"batch {b:4d} devices {n}: step waited numpy-in {each(lambda k: k)}; device-in "
          f"{waited_dev:.3f}; enqueue {enq_ms:.3f}; upload x {each(lambda k: ('up', k))}; "
          f"back to back: numpy-in {each(lambda k: ('b2b', k))}; device-in {b2b_dev:.3f}",
          flush=True)
  if (b, 1) in rows and (b, 2) in rows:
    (r1, w1, d1), (r2, w2, d2) = rows[(b, 1)], rows[(b, 2)]
    ratio = lambda key: ", ".join(f"{k} {2 * r1[key(k)] / r2[key(k)]:.2f}x" for k in MODES)  # noqa: E731
    print(f"batch {b:4d} two-GPU throughput over one (same per-GPU batch): numpy-in "
          f"{ratio(lambda k: k)}, device-in {2 * w1 / w2:.2f}x; back to back: numpy-in "
          f"{ratio(lambda k: ('b2b', k))}, device-in {2 * d1 / d2:.2f}x", flush=True)
