"""The data-parallel transformer step (examples/data_parallel.py) on 1 and 2 GPUs: waited step
times (medians) with the batch given as NumPy arrays, three ways: pageable uploads
(OURJAX_STAGED_UPLOADS=0, the old path), staged through pinned chunks and copied before the
step is enqueued (OURJAX_UPLOAD_OVERLAP=0), and staged with the copies running while the step
is enqueued (gated DMAs, the default); with the batch already on the devices; the host time to
enqueue a step; the upload of the batch alone; steps back to back (10, waited at the end: a
step's upload may overlap the step before), each way.  Needs two GPUs (one for the 1-GPU rows).
    python benchmarks/dp_why.py 16,128 [--variants 8x2,8x4,4x4]"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.getcwd(), "examples"))
import ourjax  # noqa: E402
import data_parallel as dp  # noqa: E402
from bench_util import med, pmapped_step  # noqa: E402
from upload_time import mode  # noqa: E402

pc = time.perf_counter

MODES = {"pageable": (False, False), "staged": (True, False), "overlapped": (True, True)}

def breakdown(one, x, labels, n):
  """Where the host's time goes in back-to-back steps with the NumPy batch, staged and
  overlapped: per step (mean ms), the call in all, its uploads (``Uploads.run``, or
  ``start``), the step's enqueueing (``Program.run``) and the wait for the copies
  (``Uploads.finish``); and whether the devices' copy streams take gates."""
  from ourjax.backends.cuda import backend, staging
  from ourjax.interpreters import spmd
  spent: dict = {}

  def timed(cls, name):
    real = getattr(cls, name)

    def wrapper(*a, **k):
      t0 = pc()
      try:
        return real(*a, **k)
      finally:
        spent[name] = spent.get(name, 0.0) + pc() - t0
    return real, wrapper
  patches = [(cls, name) + timed(cls, name) for cls, name in
             [(backend.Uploads, "run"), (backend.Uploads, "start"), (backend.Uploads, "finish"),
              (spmd.Program, "run")]]
  for cls, name, _, w in patches:
    setattr(cls, name, w)
  try:
    for name, m in MODES.items():
      if name == "pageable":
        continue
      mode(*m)
      k = 30
      ourjax.block_until_ready(one())
      spent.clear()
      t0 = pc()
      for _ in range(k):
        loss = one(x, labels)
      call = pc() - t0
      ourjax.block_until_ready(loss)
      total = pc() - t0
      parts = ", ".join(f"{nm} {v / k * 1e3:.3f}" for nm, v in sorted(spent.items()))
      print(f"  host breakdown, {n} device(s), {name}: {k} steps {total / k * 1e3:.3f} ms a "
            f"step (calls {call / k * 1e3:.3f}); per step: {parts}", flush=True)
  finally:
    for cls, name, real, _ in patches:
      setattr(cls, name, real)
  from ourjax.backends.cuda import driver
  if driver.available():
    pools = [staging.Pool.of(driver.get_device(i)) for i in range(n)]
    print("  gates:", [(p.gated(), p.gate_error) for p in pools], flush=True)


def variants(one, x, labels, n, b):
  """Back-to-back steps with the NumPy batch, staged and overlapped, under other staging
  threads and chunk sizes (``--variants``: most threads x chunk MiB), set in this process
  (new executor, new pools)."""
  from ourjax.backends.cuda import driver, staging
  saved = staging.THREADS, staging.CHUNK_BYTES
  out = []
  try:
    for spec in VARIANTS:
      t, mb = spec.split("x")
      staging.THREADS, staging.CHUNK_BYTES = int(t), int(float(mb) * (1 << 20))
      staging._workers = None
      for i in range(n):
        d = driver.get_device(i)
        d.synchronize()
        d._staging_pool = None
      row = []
      for name in ("staged", "overlapped"):
        mode(*MODES[name])

        def b2b(k=10):
          loss = None
          for _ in range(k):
            loss = one(x, labels)
          ourjax.block_until_ready(loss)
        row.append(med(b2b, k=7, warm=2) / 10)
      out.append(f"{spec}: staged {row[0]:.3f} overlapped {row[1]:.3f}")
  finally:
    staging.THREADS, staging.CHUNK_BYTES = saved
    staging._workers = None
  print(f"batch {b:4d} devices {n}: back to back numpy-in, threads x chunk MiB: " +
        "; ".join(out), flush=True)


VARIANTS = []
if "--variants" in sys.argv:
  VARIANTS = sys.argv[sys.argv.index("--variants") + 1].split(",")

rows = {}
for b in [int(v) for v in sys.argv[1].split(",")]:
  for n in (1, 2):
    if n > len(ourjax.devices()):
      continue
    s = pmapped_step(ourjax, n, b)
    step, ident, one, x, labels, xd, ld = s.step, s.ident, s.one, s.x, s.labels, s.xd, s.ld
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
    breakdown(one, x, labels, n)
    if VARIANTS and ourjax.devices()[0].platform == "gpu":
      variants(one, x, labels, n, b)
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
    def ratio(key):
      return ", ".join(f"{k} {2 * r1[key(k)] / r2[key(k)]:.2f}x" for k in MODES)
    print(f"batch {b:4d} two-GPU throughput over one (same per-GPU batch): numpy-in "
          f"{ratio(lambda k: k)}, device-in {2 * w1 / w2:.2f}x; back to back: numpy-in "
          f"{ratio(lambda k: ('b2b', k))}, device-in {2 * d1 / d2:.2f}x", flush=True)
