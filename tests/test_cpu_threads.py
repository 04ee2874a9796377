"""The CPU backend's native thread pool (``ourjax/backends/cpu/threads.py``): its workers are
POSIX threads, retired pools end them, a forked child starts its own, and two Python threads
calling at once both get right answers."""
from __future__ import annotations

import multiprocessing
import os
import sys
import threading

import numpy as np
import pytest

import ourjax
from ourjax.backends import reference
from ourjax.backends.cpu import backend as cpu
from ourjax.backends.cpu import threads
from ourjax.lowering import pipeline
from test_cpu_backend import _big_module

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="counts threads in /proc/self/task")


def _tasks() -> int:
  return len(os.listdir("/proc/self/task"))


@pytest.fixture(scope="module")
def program():
  m, args = _big_module()
  pipeline.optimize(m)
  exe = cpu.compile(m)
  assert isinstance(exe, cpu.CpuExecutable) and exe.parallel
  old = cpu.num_threads()
  cpu.set_num_threads(1)
  try:
    one = [np.array(o) for o in exe(*args)]
  finally:
    cpu.set_num_threads(old)
  for o, w in zip(one, reference.compile(m)(*args)):
    np.testing.assert_allclose(o, np.asarray(w), rtol=1e-4, atol=1e-3)
  return exe, args, one


def _check(outs, want):
  """Bit for bit the one-thread results: piece boundaries do not depend on the thread count."""
  for o, w in zip(outs, want):
    np.testing.assert_array_equal(o, w)


@pytest.fixture
def saved_threads():
  old = cpu.num_threads()
  yield
  cpu.set_num_threads(old)


def _wait_for_tasks(want: int) -> int:
  import time
  for _ in range(400):              # (an ended worker leaves /proc/self/task when it exits)
    n = _tasks()
    if n <= want:
      return n
    time.sleep(0.005)
  return _tasks()


def test_workers_are_native_and_retired_pools_end_them(program, saved_threads):
  exe, args, want = program
  cpu.set_num_threads(1)
  _check(exe(*args), want)
  base = _tasks()
  for n in (3, 5, 2, 4):
    cpu.set_num_threads(n)
    _check(exe(*args), want)
    assert threads.get_pool().nthreads == n
    # n - 1 workers beside the threads the process had; the retired pools' workers are gone
    assert _wait_for_tasks(base + n - 1) == base + n - 1
    # none of them is a Python thread
    assert not any(t.name.startswith("ourjax-cpu") for t in threading.enumerate())
  cpu.set_num_threads(1)
  assert _wait_for_tasks(base) == base


def _child(exe, args, want, q):
  try:
    _check(exe(*args), want)
    q.put(threads.get_pool().nthreads)
  except BaseException as e:        # pragma: no cover - reported to the parent
    q.put(repr(e))


def test_a_forked_child_starts_its_own_workers(program, saved_threads):
  exe, args, want = program
  cpu.set_num_threads(3)
  _check(exe(*args), want)          # (the parent's pool is running)
  ctx = multiprocessing.get_context("fork")
  q = ctx.Queue()
  p = ctx.Process(target=_child, args=(exe, args, want, q))
  p.start()
  got = q.get(timeout=120)
  p.join(60)
  assert got == 3 and p.exitcode == 0


def test_two_python_threads_at_once(program, saved_threads):
  exe, args, want = program
  cpu.set_num_threads(3)
  errors = []

  def work():
    try:
      for _ in range(4):
        _check(exe(*args), want)
    except BaseException as e:      # pragma: no cover - reported below
      errors.append(e)
  ts = [threading.Thread(target=work) for _ in range(2)]
  for t in ts:
    t.start()
  for t in ts:
    t.join()
  assert not errors, errors


def test_the_dispatch_words_are_the_pools_not_the_programs(saved_threads):
  """A parallel program's control words (gate, claimed and finished pieces) live in the
  pool's block, not among the program's temporaries: a program of one elementwise kernel
  has none; its calls are right on the pool, and alone beside a busy pool (each such call on
  a block of its own, several at once)."""
  v = np.random.default_rng(11).standard_normal(1 << 20).astype(np.float32)
  f = ourjax.jit(lambda v: ourjax.numpy.tanh(v) * 2.0 + 1.0)
  c = f.lower(v).compile()
  exe = c._executable
  exe = getattr(exe, "compiled", exe)
  assert isinstance(exe, cpu.CpuExecutable) and exe.parallel and exe.control_bytes >= 64
  assert c.memory_analysis().temp_size_in_bytes == 0
  want = np.tanh(v.astype(np.float64)) * 2.0 + 1.0
  cpu.set_num_threads(3)

  def check(out):
    np.testing.assert_allclose(np.asarray(out, np.float64), want, rtol=1e-5, atol=1e-5)
  check(f(v))
  pool = threads.get_pool()
  assert pool.nthreads == 3
  errors = []

  def work():
    try:
      for _ in range(3):
        check(f(v))
    except BaseException as e:      # pragma: no cover - reported below
      errors.append(e)
  with pool._busy:                 # (every call now runs alone, on a spare block)
    ts = [threading.Thread(target=work) for _ in range(3)]
    for t in ts:
      t.start()
    for t in ts:
      t.join()
  assert not errors, errors
  assert threads._spare                     # (kept for the next such call)
  check(f(v))


def test_parallel_entry_calls_the_runtime_library(program, saved_threads):
  """A parallel program's entry declares the waiting helpers of the process's runtime library
  instead of compiling its own copy, lists the library among the code it links, and computes
  the reference's numbers on several threads."""
  from ourjax.backends.cpu import libraries
  exe, args, one = program
  assert libraries.RUNTIME in exe.meta["symbols"]
  entry_ir = exe.llvm_ir.split(cpu._MODULE_SEPARATOR)[0]
  for name in threads.SYNC_SYMBOLS:
    assert f'declare void @"{name}"(' in entry_ir
    assert f'define void @"{name}"(' not in entry_ir
    assert f'define internal void @"{name}"(' not in entry_ir
  cpu.set_num_threads(2)
  _check([np.array(o) for o in exe(*args)], one)


def test_runtime_library_cached_on_disk(tmp_path, monkeypatch):
  """The runtime library's object code is stored in the disk cache; a later build (a new
  process's) loads those same bytes instead of compiling them."""
  from ourjax.backends import disk_cache
  from ourjax.backends.cpu import jit
  monkeypatch.setattr(disk_cache, "cache_dir", lambda: str(tmp_path))
  first = threads._load_or_compile()
  assert any(tmp_path.rglob("*")), "nothing stored"

  def no_compile(*a, **k):
    raise AssertionError("compiled again instead of read from the cache")
  monkeypatch.setattr(jit, "compile_to_object", no_compile)
  again = threads._load_or_compile()
  assert bytes(again._object) == bytes(first._object)
  for name in threads.RUNTIME_SYMBOLS:
    assert again.address(name)


def test_library_source_digest_read_once(tmp_path):
  """A library's source digest (part of its cache key) is the SHA-256 of its files, read once
  per process: later loads of the process do not read the files again."""
  import hashlib

  from ourjax.backends import disk_cache
  a, b = tmp_path / "a.py", tmp_path / "b.py"
  a.write_bytes(b"x = 1\n")
  b.write_bytes(b"y = 2\n")
  want = hashlib.sha256(b"x = 1\ny = 2\n").hexdigest()
  assert disk_cache.source_digest(str(a), str(b)) == want
  a.unlink()
  assert disk_cache.source_digest(str(a), str(b)) == want


@pytest.mark.parametrize("threads", ["1", "2", "3", "7"])
@pytest.mark.parametrize("shape,axis", [((1024, 1024), 0), ((3, 700, 130), 1), ((2, 50, 129), 1),
                                        ((7, 300, 257), 1)])
def test_column_sums_bit_exact_across_thread_splits(monkeypatch, tmp_path, threads, shape,
                                                    axis):
  """A column reduction's threads take spans of columns (of one leading index or across two)
  and add the rows in order: float32 sums equal NumPy's, which adds rows in order too, bit for
  bit, however the spans fall."""
  monkeypatch.setenv("OURJAX_CPU_THREADS", threads)
  monkeypatch.setenv("OURJAX_CACHE_DIR", str(tmp_path))
  x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
  got = ourjax.jit(lambda a: ourjax.numpy.sum(a, axis=axis), backend="cpu")(x)
  np.testing.assert_array_equal(np.asarray(got), np.sum(x, axis=axis))


_PREFETCH_SCRIPT = r"""
import os, threading
import numpy as np
import ourjax
from ourjax.backends.cpu import threads
ran_on = []
build = threads._finish
def recorded(*a, **k):
  ran_on.append(threading.current_thread().name)
  return build(*a, **k)
threads._finish = recorded
x = np.arange(8, dtype=np.float32)
np.testing.assert_array_equal(np.asarray(ourjax.jit(lambda a: a * 2.0)(x)), x * 2.0)
assert ran_on == [] and threads._runtime is None, ran_on    # (small: nothing needs the pool)
big = np.random.default_rng(0).standard_normal((512, 1024)).astype(np.float32)
f = ourjax.jit(lambda a: ourjax.numpy.sin(a) * a + 1.0)
np.testing.assert_allclose(np.asarray(f(big)), np.sin(big) * big + 1.0, rtol=1e-5, atol=1e-5)
assert ran_on == ["ourjax-runtime"], ran_on
assert threads.runtime_library() is not None
pid = os.fork()
if pid == 0:
  ok = np.allclose(np.asarray(f(big + 1.0)), np.sin(big + 1.0) * (big + 1.0) + 1.0, atol=1e-5)
  os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
print("OK")
"""


def test_runtime_library_built_beside_the_passes():
  """The runtime library starts building on a thread of its own when a program with large
  arrays is first compiled (``libraries.prefetch_for``), not when its entry is emitted; a
  program of small arrays does not start it; the program computes NumPy's numbers on two
  threads, and so does a forked child."""
  import subprocess
  env = dict(os.environ, OURJAX_CACHE_DIR="off", OURJAX_CPU_THREADS="2",
             OURJAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", _PREFETCH_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=300)
  assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]
