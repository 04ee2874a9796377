"""Helpers shared by the timing scripts (upload_time.py, upload_threads.py, dp_why.py,
dp_jax.py, and the GPU convolution scripts gconv_gpu.py, strided_grad_gpu.py,
wgrad_small_batch_gpu.py).  Standard library only, and the library under test
passed in: a process timing JAX imports this without importing ourjax."""
import os
import statistics
import sys
import time
import types


def med(fn, k=30, warm=5):
  """Median ms of ``k`` calls of ``fn`` after ``warm`` untimed ones."""
  for _ in range(warm):
    fn()
  ts = []
  for _ in range(k):
    t0 = time.perf_counter()
    fn()
    ts.append(time.perf_counter() - t0)
  return statistics.median(ts) * 1e3


def block(r):
  """Wait for a result or a tuple of results (either library's arrays)."""
  for x in (r if isinstance(r, tuple) else (r,)):
    x.block_until_ready()


def per_call(f, args, n=20):
  """Mean ms per call of ``f(*args)`` over ``n`` calls back to back, then one wait."""
  t = time.perf_counter()
  for _ in range(n):
    r = f(*args)
  block(r)
  return (time.perf_counter() - t) / n * 1e3


def pmapped_step(lib, n, per_device):
  """examples/data_parallel.py's training step under ``lib.pmap`` (ourjax or jax) over
  ``lib``'s first ``n`` devices, ``per_device`` examples each: a namespace of ``step`` (the
  pmapped step), ``ident`` (a pmapped identity: puts a batch on the devices), ``one(x,
  labels)`` (a step on the parameters and optimizer state it keeps, replicated; by default the
  NumPy batch), the NumPy batch ``x``, ``labels`` and the same on the devices, ``xd``, ``ld``."""
  examples = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
  if examples not in sys.path:
    sys.path.insert(0, examples)
  import data_parallel as dp
  devs = lib.devices()[:n]
  step = lib.pmap(dp.make_step(lib), axis_name="devices", devices=devs)
  ident = lib.pmap(lambda v: v, axis_name="devices", devices=devs)
  params, opt = dp.init(0)
  state = [dp.replicate(params, n), dp.replicate(opt, n)]
  x, labels = dp.batch(1, n, per_device)

  def one(x=x, labels=labels):
    p, o, loss = step(state[0], state[1], x, labels)
    state[0], state[1] = p, o
    return loss
  return types.SimpleNamespace(step=step, ident=ident, one=one, x=x, labels=labels,
                               xd=ident(x), ld=ident(labels))
