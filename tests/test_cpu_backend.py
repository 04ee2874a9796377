"""The native CPU backend end to end: jit of jnp programs against eager evaluation, backend
selection, the executable's API, threads, the on-disk compilation cache and the dispatch path."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from jaxpr_programs import assert_outputs_close, programs
from ourjax.backends import disk_cache, reference
from ourjax.backends.cpu import backend as cpu
from ourjax.backends.cpu import jit as cpu_jit
from ourjax.config import config
from ourjax.lowering.hlo import Builder, Module, Shape, scalar_computation

F32 = np.float32


@pytest.fixture(autouse=True)
def _cpu_default(monkeypatch):
  """The CPU backend for ``jit`` even on a host whose default is a GPU."""
  monkeypatch.setattr(config, "_values", dict(config._values, jax_platforms="cpu"))


@pytest.fixture(autouse=True, scope="module")
def _private_cache(tmp_path_factory):
  old = config.jax_compilation_cache_dir
  config.update("jax_compilation_cache_dir", str(tmp_path_factory.mktemp("ojx_cache")))
  yield
  config.update("jax_compilation_cache_dir", old)


def _native_exe(jitted, *args):
  """The backend executable behind ``jitted`` for ``args``."""
  return jitted.lower(*args).compile().runtime_executable()


# ---------------------------------------------------------------------------------------------
# jit == eager
# ---------------------------------------------------------------------------------------------

@settings(max_examples=15)
@given(prog=programs(max_ops=25))
def test_jit_of_random_programs_matches_eager(prog):
  want = prog(*prog.inputs)
  got = ourjax.jit(prog, backend="cpu")(*prog.inputs)
  assert_outputs_close(got, want, repr(prog))


def _softmax(x):
  m = jnp.max(x, axis=-1, keepdims=True)
  e = jnp.exp(x - m)
  return e / jnp.sum(e, axis=-1, keepdims=True)


def _layernorm(x):
  mu = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
  return (x - mu) / jnp.sqrt(var + 1e-5)


def _gelu(x):
  return 0.5 * x * (1.0 + jnp.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def _mlp_step(params, x, y):
  def loss(params, x, y):
    h = x
    for i, (w, b) in enumerate(params):
      h = h @ w + b
      if i < len(params) - 1:
        h = jnp.maximum(h, 0.0)
    h = h - jnp.max(h, axis=-1, keepdims=True)
    logp = h - jnp.log(jnp.sum(jnp.exp(h), axis=-1, keepdims=True))
    return -jnp.mean(jnp.sum(logp * y, axis=-1))
  l, g = ourjax.value_and_grad(loss)(params, x, y)
  return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, g)], l


def _scan_cumprod(x):
  def body(c, v):
    c = c * v + 1.0
    return c, jnp.sin(c)
  return lax.scan(body, jnp.zeros(x.shape[1:], x.dtype), x)


def _control(x, k):
  y = lax.cond(k > 2, lambda v: jnp.exp(v), lambda v: -v, x)
  return lax.fori_loop(0, 5, lambda i, v: v * 0.5 + jnp.cos(v), y)


def _indexing(x, idx):
  x = jnp.asarray(x)
  return jnp.sort(x, axis=-1), x[idx], x.at[idx].add(1.0), jnp.cumsum(x, axis=0), \
      jnp.argmax(x, axis=1)


def _rng(seed=0):
  return np.random.default_rng(seed)


def _mlp_args():
  r = _rng(1)
  sizes = (20, 16, 16, 5)
  params = [(r.standard_normal((m, n)).astype(F32) * 0.3, np.zeros(n, F32))
            for m, n in zip(sizes[:-1], sizes[1:])]
  x = r.standard_normal((8, 20)).astype(F32)
  y = np.eye(5, dtype=F32)[r.integers(0, 5, 8)]
  return params, x, y


WORKLOADS = {
    "softmax": (_softmax, lambda: (_rng().standard_normal((37, 129)).astype(F32),)),
    "layernorm": (_layernorm, lambda: (_rng().standard_normal((9, 300)).astype(F32),)),
    "gelu": (_gelu, lambda: (_rng().standard_normal(1000).astype(F32),)),
    "mlp_step": (_mlp_step, _mlp_args),
    "scan": (_scan_cumprod, lambda: (_rng().standard_normal((6, 3)).astype(F32),)),
    "control": (_control, lambda: (_rng().standard_normal(7).astype(F32), np.int32(3))),
    "indexing": (_indexing, lambda: (_rng().standard_normal((5, 9)).astype(F32),
                                     np.array([3, 0, 3, 1], np.int32))),
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_jit_of_workloads_matches_eager(name):
  fn, make = WORKLOADS[name]
  args = make()
  want = fn(*args)
  jitted = ourjax.jit(fn, backend="cpu")
  got = jitted(*args)
  got_again = jitted(*args)        # the cached executable (dispatch fast path where it applies)
  leaves_w = ourjax.tree_util.tree_leaves(want)
  for g in (got, got_again):
    leaves_g = ourjax.tree_util.tree_leaves(g)
    assert len(leaves_g) == len(leaves_w)
    for a, e in zip(leaves_g, leaves_w):
      a, e = np.asarray(a), np.asarray(e)
      assert a.dtype == e.dtype and a.shape == e.shape, (name, a.dtype, e.dtype)
      np.testing.assert_allclose(a, e, rtol=2e-5, atol=2e-6, err_msg=name)
  assert isinstance(_native_exe(jitted, *args), cpu.CpuExecutable), name


def test_backend_selection_by_platforms_flag():
  x = np.arange(4, dtype=F32)
  old = config.jax_platforms
  try:
    config.update("jax_platforms", "reference")
    f = ourjax.jit(lambda v: v * 2.0 + 1.0)
    assert isinstance(_native_exe(f, x), reference.ReferenceExecutable)
    config.update("jax_platforms", "cpu")
    g = ourjax.jit(lambda v: v * 2.0 + 3.0)
    assert isinstance(_native_exe(g, x), cpu.CpuExecutable)
    np.testing.assert_array_equal(g(x), x * 2 + 3)
  finally:
    config.update("jax_platforms", old)
  h = ourjax.jit(lambda v: v - 1.0, backend="reference")
  assert isinstance(_native_exe(h, x), reference.ReferenceExecutable)
  assert [d.platform for d in ourjax.devices("cpu")] == ["cpu"]


def test_as_text_shows_llvm_ir():
  compiled = ourjax.jit(lambda v: jnp.exp(v) + 1.0, backend="cpu").lower(
      np.ones(8, F32)).compile()
  ir_text = compiled.as_text(dialect="llvm")
  assert "define" in ir_text and cpu.ENTRY in ir_text
  assert "ojx_m_exp_f32" in ir_text     # the out-of-line math function and its vector variants


def test_unsupported_types_fall_back_to_the_reference():
  f = ourjax.jit(lambda v: (v * (1 + 2j)).real, backend="cpu")
  x = np.arange(3, dtype=F32)
  np.testing.assert_allclose(f(x), x)
  assert not isinstance(_native_exe(f, x), cpu.CpuExecutable)


# ---------------------------------------------------------------------------------------------
# threads
# ---------------------------------------------------------------------------------------------

def _big_module():
  m = Module("threads")
  b = Builder(m, "main")
  x = b.parameter(Shape("f32", (256, 1024)), "x")
  w = b.parameter(Shape("f32", (1024, 96)), "w")
  v = b.parameter(Shape("f32", (1 << 20,)), "v")
  add = scalar_computation(m, "add", "f32")
  mx = scalar_computation(m, "maximum", "f32")
  rmax = b.reduce(x, b.constant(-np.inf, "f32"), (1,), mx)
  e = b.exp(b.sub(x, b.broadcast(rmax, (256, 1024), (0,))))
  sm = b.div(e, b.broadcast(b.reduce(e, b.constant(0.0, "f32"), (1,), add), (256, 1024), (0,)))
  outs = [sm, b.dot(x, w, (1,), (0,)), b.reduce(b.mul(v, v), b.constant(0.0, "f32"), (0,), add),
          b.reduce(x, b.constant(0.0, "f32"), (0,), add), b.tanh(v)]
  m.entry = b.build(b.tuple(outs))
  r = _rng(5)
  args = [r.standard_normal((256, 1024)).astype(F32), r.standard_normal((1024, 96)).astype(F32),
          r.standard_normal(1 << 20).astype(F32)]
  return m, args


def test_thread_pool_gives_identical_results():
  m, args = _big_module()
  from ourjax.lowering import pipeline
  pipeline.optimize(m)
  exe = cpu.compile(m)
  assert isinstance(exe, cpu.CpuExecutable) and exe.parallel
  old = cpu.num_threads()
  try:
    cpu.set_num_threads(1)
    one = exe(*args)
    cpu.set_num_threads(max(2, old))
    many = [exe(*args) for _ in range(3)]
  finally:
    cpu.set_num_threads(old)
  want = reference.compile(m)(*args)
  for run in many:
    for a, c in zip(one, run):
      np.testing.assert_array_equal(a, c)     # bit for bit, whatever the thread count
  for a, e in zip(one, want):
    np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-3)


def test_pool_busy_runs_on_the_callers_thread():
  """A call that finds the pool in use (another Python thread) runs alone, correctly."""
  import threading
  m, args = _big_module()
  exe = cpu.compile(m)
  want = exe(*args)
  results, errors = [], []

  def work():
    try:
      for _ in range(3):
        results.append(exe(*args))
    except Exception as e:   # pragma: no cover
      errors.append(e)
  ts = [threading.Thread(target=work) for _ in range(3)]
  for t in ts:
    t.start()
  for t in ts:
    t.join()
  assert not errors and len(results) == 9
  for r in results:
    for a, c in zip(r, want):
      np.testing.assert_array_equal(a, c)


# ---------------------------------------------------------------------------------------------
# the on-disk cache
# ---------------------------------------------------------------------------------------------

def _small_module(scale=3.0):
  m = Module("cached")
  b = Builder(m, "main")
  x = b.parameter(Shape("f32", (5,)), "x")
  m.entry = b.build(b.add(b.mul(x, b.full(scale, x.shape)), b.exp(x)))
  return m


def _entry_path(m, d):
  key = cpu.cache_key(m)
  return os.path.join(d, key[:2], key + ".bin")


def _count_compiles(monkeypatch):
  """Count the CPU backend's compilations (one ``compile_to_objects`` call per program, or,
  for a program of several modules, one ``ObjectBuilds.results``)."""
  calls = []
  real = cpu_jit.compile_to_objects
  real_results = cpu_jit.ObjectBuilds.results

  def counting(*a, **k):
    calls.append(1)
    return real(*a, **k)

  def counting_results(self):
    calls.append(1)
    return real_results(self)
  monkeypatch.setattr(cpu_jit, "compile_to_objects", counting)
  monkeypatch.setattr(cpu_jit.ObjectBuilds, "results", counting_results)
  return calls


def test_disk_cache_hit_corrupt_and_truncated_entries(tmp_path, monkeypatch, caplog):
  monkeypatch.setattr(config, "_values", dict(config._values,
                                              jax_compilation_cache_dir=str(tmp_path)))
  calls = _count_compiles(monkeypatch)
  x = np.linspace(-1, 1, 5).astype(F32)
  want = reference.compile(_small_module())(x)[0]
  first = cpu.compile(_small_module())
  path = _entry_path(_small_module(), str(tmp_path))
  assert os.path.exists(path) and len(calls) == 1
  np.testing.assert_allclose(first(x)[0], want, rtol=1e-6)
  again = cpu.compile(_small_module())                 # a hit: no compilation
  assert len(calls) == 1 and again.llvm_ir == first.llvm_ir
  np.testing.assert_array_equal(again(x)[0], first(x)[0])
  data = open(path, "rb").read()
  for damaged in (data[:len(data) // 2],                                     # truncated
                  data[:-10] + bytes(b ^ 0xFF for b in data[-10:]),          # flipped bytes
                  b"garbage", b""):
    with open(path, "wb") as f:
      f.write(damaged)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ourjax"):
      exe = cpu.compile(_small_module())
    np.testing.assert_array_equal(exe(x)[0], first(x)[0])
    assert any("damaged" in r.getMessage() for r in caplog.records), damaged[:20]
    assert open(path, "rb").read() == data     # recompiled and written again, whole
  assert len(calls) == 5
  assert not [p for p in os.listdir(os.path.dirname(path)) if p.endswith(".tmp")]


def test_disk_cache_disabled(tmp_path, monkeypatch):
  monkeypatch.setattr(config, "_values", dict(config._values, jax_compilation_cache_dir="off"))
  assert cpu.cache_dir() is None
  calls = _count_compiles(monkeypatch)
  cpu.compile(_small_module(5.0))
  cpu.compile(_small_module(5.0))
  assert len(calls) == 2


def test_disk_cache_two_concurrent_writers(tmp_path):
  """Two processes compiling the same module into one cache directory at once: both get a
  working executable and the entry left behind is complete."""
  script = textwrap.dedent(f"""
      import sys, numpy as np
      sys.path.insert(0, {os.path.dirname(os.path.dirname(cpu.__file__))!r})
      sys.path.insert(0, {os.path.dirname(__file__)!r})
      from ourjax.backends.cpu import backend as cpu
      from test_cpu_backend import _small_module
      for i in range(3):
        exe = cpu.compile(_small_module(7.0))
        assert isinstance(exe, cpu.CpuExecutable)
        out = exe(np.ones(5, np.float32))[0]
        assert np.allclose(out, 7 + np.e), out
      print("ok")
  """)
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(cpu.__file__))))
  env = dict(os.environ, OURJAX_CACHE_DIR=str(tmp_path), PYTHONPATH=root,
             OURJAX_PLATFORMS="cpu")
  procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True) for _ in range(2)]
  outs = [p.communicate(timeout=300) for p in procs]
  for p, (o, e) in zip(procs, outs):
    assert p.returncode == 0 and "ok" in o, e
  # (the shared math functions have entries too, the host's LLVM target its description,
  # cpu/host.py, and the sources their digest, cpu/cache.py)
  entries = [os.path.join(dp, f) for dp, _, fs in os.walk(tmp_path) for f in fs
             if not f.startswith("math-") and os.path.basename(dp) not in ("host", "sources")]
  assert len(entries) == 1 and entries[0].endswith(".bin"), entries
  meta, obj, ir_text = disk_cache.unpack(open(entries[0], "rb").read())
  assert obj and cpu.ENTRY in ir_text


def test_disk_cache_entry_under_another_key_is_a_miss(tmp_path, monkeypatch, caplog):
  """An entry file copied under another key's name (its recorded key differs) is not used:
  the program of the requested key is compiled again and gives its own result."""
  monkeypatch.setattr(config, "_values", dict(config._values,
                                              jax_compilation_cache_dir=str(tmp_path)))
  calls = _count_compiles(monkeypatch)
  x = np.linspace(-1, 1, 5).astype(F32)
  a, b = _small_module(5.0), _small_module(7.0)
  cpu.compile(a), cpu.compile(b)
  assert len(calls) == 2
  path_a, path_b = _entry_path(a, str(tmp_path)), _entry_path(b, str(tmp_path))
  with open(path_a, "rb") as f:
    data_a = f.read()
  with open(path_b, "wb") as f:         # b's path now holds a's program
    f.write(data_a)
  with caplog.at_level(logging.WARNING, logger="ourjax"):
    exe = cpu.compile(_small_module(7.0))
  assert len(calls) == 3
  np.testing.assert_allclose(exe(x)[0], 7 * x + np.exp(x), rtol=1e-6)
  assert any("holds the program of key" in r.getMessage() for r in caplog.records)
  meta, _, _ = disk_cache.unpack(open(path_b, "rb").read(), cpu.cache_key(b))  # rewritten


_DAMAGE_SCRIPT = r"""
import logging, os, struct, sys
import numpy as np
sys.path.insert(0, {root!r})
sys.path.insert(0, {tests!r})
from ourjax.backends import disk_cache
from ourjax.backends.cpu import backend as cpu, elf
from test_cpu_backend import _small_module
logging.basicConfig(level=logging.WARNING)
cpu.compile_groups = lambda n, control_flow=False: 0    # (one module: one ELF object, damaged below)
x = np.linspace(-1, 1, 5).astype(np.float32)
want = 3 * x + np.exp(x)
key = cpu.cache_key(_small_module())
path = disk_cache.entry_path(key, disk_cache.cache_dir())
np.testing.assert_allclose(cpu.compile(_small_module())(x)[0], want, rtol=1e-6)
meta, obj, ir_text = disk_cache.unpack(open(path, "rb").read(), key)
assert obj[:4] == b"\x7fELF"
shoff, = struct.unpack_from("<Q", obj, 40)
shnum, = struct.unpack_from("<H", obj, 60)
sh = np.frombuffer(obj, elf._SHDR, shnum, shoff)
rela = [i for i in range(shnum) if sh[i]["type"] == 4 and sh[i]["size"]][0]
r0 = int(sh[rela]["offset"])
symtab = [i for i in range(shnum) if sh[i]["type"] == 2][0]
strtab = int(sh[int(sh[symtab]["link"])]["offset"])
entry_at = obj.index(cpu.ENTRY.encode() + b"\0", strtab)

def put(b, at, fmt, *v):
  b = bytearray(b)
  struct.pack_into(fmt, b, at, *v)
  return bytes(b)

damages = {{
    "section table past the end": put(obj, 40, "<Q", len(obj) + 4096),
    "relocation offset past its section": put(obj, r0, "<Q", 1 << 40),
    "relocation of a symbol past the table": put(obj, r0 + 8, "<Q", (1 << 62) | 2),
    "unknown relocation type": put(obj, r0 + 8, "<Q", 200),
    "entry symbol renamed": put(obj, entry_at, "<B", ord("Q")),
    "truncated": obj[:len(obj) // 2],
    "section size enlarged": put(obj, shoff + rela * 64 + 32, "<Q", 1 << 30),
}}
for what, bad in damages.items():
  assert bad != obj, what
  with open(path, "wb") as f:          # a valid entry (its checksum recomputed) over bad code
    f.write(disk_cache.pack(key, meta, bad, ir_text))
  exe = cpu.compile(_small_module())
  assert isinstance(exe, cpu.CpuExecutable), what
  np.testing.assert_allclose(exe(x)[0], want, rtol=1e-6, err_msg=what)
  assert disk_cache.unpack(open(path, "rb").read(), key)[1] == obj, what   # rewritten whole
  print("ok:", what, flush=True)
print("all ok")
"""


def test_disk_cache_damaged_object_with_valid_checksum(tmp_path):
  """Object code damaged inside an entry whose checksum was recomputed over it is rejected
  by the object check (a miss, compiled again), never loaded: the process gets the right
  result and exits normally (run in a subprocess, so that a crash fails the test)."""
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(cpu.__file__))))
  script = _DAMAGE_SCRIPT.format(root=root, tests=os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, OURJAX_CACHE_DIR=str(tmp_path), PYTHONPATH=root,
             OURJAX_PLATFORMS="cpu")
  p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                     timeout=300)
  assert p.returncode == 0 and "all ok" in p.stdout, (p.returncode, p.stdout, p.stderr[-3000:])
  assert p.stderr.count("failed its check") == 7, p.stderr[-3000:]


# ---------------------------------------------------------------------------------------------
# dispatch
# ---------------------------------------------------------------------------------------------

def test_dispatch_fast_path_accepts_every_kind_of_argument():
  f = ourjax.jit(lambda a, b: a * 2.0 + b, backend="cpu")
  x = np.arange(6, dtype=F32).reshape(2, 3)
  y = np.ones((2, 3), F32)
  want = x * 2 + y
  for a, b in [(x, y), (jnp.asarray(x), y), (x, jnp.asarray(y)), (x, y)]:
    np.testing.assert_array_equal(f(a, b), want)
  assert any(f._fast.values())        # a fast entry was made
  # non-contiguous inputs: the native entry refuses them, the general path copies
  xt = np.ascontiguousarray(x.T).T
  np.testing.assert_array_equal(f(xt, y), xt * 2 + y)
  at = jnp.transpose(jnp.asarray(np.arange(6, dtype=F32).reshape(3, 2)))
  np.testing.assert_array_equal(f(at, y), np.asarray(at) * 2 + y)
  # non-canonical dtypes (float64 without x64), Python scalars, keywords
  np.testing.assert_allclose(f(x.astype(np.float64), y), want)
  np.testing.assert_array_equal(f(x, 1.0), x * 2 + 1)
  np.testing.assert_array_equal(f(a=x, b=y), want)
  # results are read-only ourjax Arrays of the right types
  r = f(x, y)
  assert isinstance(r, ourjax.Array) and r.dtype == F32 and not np.asarray(r).flags.writeable


def test_dispatch_pytrees_and_multiple_outputs():
  g = ourjax.jit(lambda p, x: {"s": p["w"] @ x, "t": (x + 1, jnp.sum(x))}, backend="cpu")
  p = {"w": np.ones((3, 4), F32)}
  x = np.arange(4, dtype=F32)
  for _ in range(3):
    out = g(p, x)
    np.testing.assert_array_equal(out["s"], np.full(3, 6, F32))
    np.testing.assert_array_equal(out["t"][0], x + 1)
    assert float(out["t"][1]) == 6.0
  h = ourjax.jit(lambda x: (x, x * 2), backend="cpu")
  for _ in range(2):
    a, b = h(x)
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(b, 2 * x)


@settings(max_examples=15, deadline=None)
@given(keys=st.lists(st.sampled_from("abcd"), min_size=1, max_size=4, unique=True),
       dtype=st.sampled_from([np.float32, np.int32]), weak=st.booleans(),
       n=st.integers(1, 4))
def test_dispatch_fast_path_over_pytrees(keys, dtype, weak, n):
  """A pytree of arrays (a training step's parameters) takes the fast path on its second call,
  keyed by its structure and its leaves' types: another structure, dtype or weak type of the
  same leaves gets its own entry and the results of the general path."""
  f = ourjax.jit(lambda p, s: ({k: v * s for k, v in p.items()}, [s + 1]), backend="cpu")
  p = {k: jnp.asarray(np.arange(n, dtype=dtype) + i) for i, k in enumerate(keys)}
  s = 2 if weak else jnp.asarray(2, dtype)
  s = jnp.asarray(s)
  for _ in range(3):
    out, (t,) = f(p, s)
    assert sorted(out) == sorted(keys)
    for i, k in enumerate(keys):
      want = (np.arange(n, dtype=dtype) + i) * 2
      assert out[k].dtype == dtype       # (a weak scalar takes the array's type)
      np.testing.assert_array_equal(np.asarray(out[k]), want)
    assert int(t) == 3 and t.weak_type == s.weak_type
  assert any(isinstance(k[2], tuple) and len(k[2]) == 2 and not isinstance(k[2][0], tuple)
             for k in f._fast), list(f._fast)      # (PyTreeDef, leaf types)
  # the same leaves under another structure: a list instead of a dict
  q = [p[k] for k in keys]
  g = ourjax.jit(lambda p, s: [v * s for v in p], backend="cpu")
  for _ in range(2):
    for v, k in zip(g(q, s), keys):
      np.testing.assert_array_equal(np.asarray(v), np.asarray(p[k]) * np.asarray(s))


def test_large_outputs_reuse_blocks_only_when_dead():
  """Outputs of 1 MiB and more come from recycled blocks: a block is reused only once no array
  (or view of one) uses it."""
  import gc
  f = ourjax.jit(lambda v, c: v * c, backend="cpu")
  x = np.ones(1 << 19, F32)
  a = f(x, np.float32(2.0))
  view = np.asarray(a)[10:20]
  del a
  gc.collect()
  b = f(x, np.float32(3.0))                 # must not land in a's block: the view still uses it
  assert np.all(view == 2.0) and np.all(np.asarray(b) == 3.0)
  del view, b
  gc.collect()
  c = f(x, np.float32(4.0))
  assert np.all(np.asarray(c) == 4.0)
  assert not np.asarray(c).flags.writeable


def test_barriers_under_oversubscription(monkeypatch):
  """Every kernel split across 4 threads on this (2-core) machine: many barriers per call, with
  threads descheduled at them (they sleep on the futex); results stay identical."""
  from ourjax.backends.llvm import kernels
  monkeypatch.setattr(kernels, "PARALLEL_MIN_WORK", 1)
  m = Module("barriers")
  b = Builder(m, "main")
  x = b.parameter(Shape("f32", (64, 33)), "x")
  add = scalar_computation(m, "add", "f32")
  v = x
  for k in range(12):      # a chain of small kernels, each reading the previous one
    s = b.reduce(v, b.constant(0.0, "f32"), (1,), add)
    v = b.add(b.sin(v), b.broadcast(b.mul(s, b.full(1e-3, s.shape)), (64, 33), (0,)))
  m.entry = b.build(v)
  from ourjax.lowering import pipeline
  pipeline.optimize(m)
  exe = cpu.compile(m)
  assert exe.parallel
  args = [_rng(2).standard_normal((64, 33)).astype(F32)]
  old = cpu.num_threads()
  try:
    cpu.set_num_threads(1)
    want = exe(*args)[0]
    cpu.set_num_threads(4)
    for _ in range(100):
      np.testing.assert_array_equal(exe(*args)[0], want)
  finally:
    cpu.set_num_threads(old)
  np.testing.assert_allclose(want, reference.compile(m)(*args)[0], rtol=1e-5, atol=1e-5)


def test_profile_mode_reports_every_kernel(monkeypatch):
  """OURJAX_CPU_PROFILE: cycles per kernel of the last call (ourjax.profiler reads the same
  counters); the results are the plain executable's."""
  m, args = _big_module()
  plain = cpu.compile(m)
  monkeypatch.setattr(cpu, "PROFILE", True)
  exe = cpu.compile(m)
  assert exe.meta["profile"] and not plain.meta["profile"]
  outs = exe(*args)
  prof = exe.profile()
  assert len(prof) == len(exe.meta["profile"]["items"]) == exe.meta["kernels"]
  assert all(0 < c < 10 ** 12 for c, _ in prof)
  assert any("DotKernel" in name for _, name in prof)
  for a, b in zip(outs, plain(*args)):
    np.testing.assert_array_equal(a, b)


def test_concatenate_of_many_fused_parts():
  """More than emitter.BRANCHY_CONCAT_PARTS parts: only the part holding an element is
  evaluated (branches); results as NumPy's, along each axis, parts of different sizes."""
  rng = np.random.default_rng(4)
  xs = [rng.standard_normal((3, 2 + k, 5)).astype(np.float32) for k in range(7)]
  f = ourjax.jit(lambda *a: jnp.concatenate([jnp.exp(v) * k for k, v in enumerate(a)], axis=1))
  want = np.concatenate([np.exp(v) * k for k, v in enumerate(xs)], axis=1)
  np.testing.assert_allclose(np.asarray(f(*xs)), want, rtol=1e-6)
  ys = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(9)]
  g = ourjax.jit(lambda *a: jnp.stack([v[::-1] + 1 for v in a], axis=-1))
  np.testing.assert_array_equal(np.asarray(g(*ys)), np.stack([v[::-1] + 1 for v in ys], -1))


def test_an_entry_under_another_programs_key_is_not_run(tmp_path, monkeypatch, caplog):
  """Entries record their own key: one copied to another program's path is refused as damaged
  (and recompiled), never run as that program."""
  monkeypatch.setattr(config, "_values", dict(config._values,
                                              jax_compilation_cache_dir=str(tmp_path)))
  x = np.linspace(-1, 1, 5).astype(F32)
  a, b = _small_module(2.0), _small_module(3.0)
  cpu.compile(a)
  cpu.compile(b)
  pa, pb = _entry_path(_small_module(2.0), str(tmp_path)), _entry_path(_small_module(3.0),
                                                                        str(tmp_path))
  with open(pa, "rb") as f:
    foreign = f.read()
  with open(pb, "wb") as f:                # program a's entry where program b's belongs
    f.write(foreign)
  calls = _count_compiles(monkeypatch)
  with caplog.at_level(logging.WARNING, logger="ourjax"):
    exe = cpu.compile(_small_module(3.0))
  assert len(calls) == 1 and any("not" in r.getMessage() and "damaged" in r.getMessage()
                                 for r in caplog.records)
  want = reference.compile(_small_module(3.0))(x)[0]
  np.testing.assert_allclose(exe(x)[0], want, rtol=1e-6)


def test_dot_pieces_follow_the_host_threads_without_changing_bits():
  """An unbatched dot gets more pieces on a host with more threads (up to its packing cost
  bound, pieces of at least DOT_SPLIT_WORK products), a batched one whole batch entries where
  it has as many as threads; the numbers are the same bits either way."""
  rng = np.random.default_rng(0)
  a = rng.standard_normal((1200, 300)).astype(F32)
  b = rng.standard_normal((300, 700)).astype(F32)
  q = rng.standard_normal((12, 64, 40)).astype(F32)
  k = rng.standard_normal((12, 40, 64)).astype(F32)
  h = rng.standard_normal((32, 128)).astype(F32)       # an LSTM step's h @ W_h: 2M products
  w = rng.standard_normal((128, 512)).astype(F32)
  saved = cpu.num_threads()
  outs, pieces = {}, {}
  try:
    for n in (2, 16):
      cpu.set_num_threads(n)
      mm = ourjax.jit(lambda x, y: x @ y)
      bmm = ourjax.jit(lambda x, y: jnp.einsum("bik,bkj->bij", x, y))
      got = [np.asarray(mm(a, b)), np.asarray(bmm(q, k)), np.asarray(mm(h, w))]
      outs[n] = got
      exes = [f.lower(*args).compile()._executable.compiled
              for f, args in ((mm, (a, b)), (bmm, (q, k)), (mm, (h, w)))]
      pieces[n] = [[int(s.split(" x")[1].split()[0]) for s in e.meta["steps"]
                    if s.startswith("DotKernel") and " x" in s] for e in exes]
  finally:
    cpu.set_num_threads(saved)
  for x, y in zip(outs[2], outs[16]):
    np.testing.assert_array_equal(x, y)
  np.testing.assert_allclose(outs[2][0], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(outs[2][2], h.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)
  assert pieces[2][0] == [2] and pieces[16][0] == [16]
  # (12 entries: whole entries on 2 threads; on 16, fewer entries than threads, the GEMM's grid)
  assert pieces[2][1][0] >= 2 and pieces[16][1][0] >= pieces[2][1][0]
  # a small unbatched product: pieces of DOT_SPLIT_WORK (512k) where threads allow
  assert pieces[2][2] == [2] and pieces[16][2] == [4]


def _too_big(x):
  return jnp.broadcast_to(x, (2 ** 24, 2 ** 24)) * 2     # 1 PiB: more than any address space


def test_a_result_too_large_to_allocate_names_the_operation_and_line():
  f = ourjax.jit(_too_big, backend="cpu")
  for _ in range(2):     # also once the signature has a dispatch fast path
    with pytest.raises(ourjax.errors.ResourceExhaustedError) as info:
      f(np.ones(2 ** 24, np.float32))
    e = info.value
    assert isinstance(e, MemoryError) and e.nbytes == 2 ** 50 and e.output == 0
    msg = str(e)
    assert msg.startswith("RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                          f"{2 ** 50} bytes (1.0 PiB)")
    assert "f32[16777216, 16777216]" in msg and "in jit(_too_big)" in msg
    line = _too_big.__code__.co_firstlineno + 1
    assert f"computed by mul at {__file__}:{line}" in msg


def test_temporaries_too_large_to_allocate_name_the_largest_values():
  f = ourjax.jit(lambda x: jnp.sort(_too_big(x), axis=0).sum(), backend="cpu")
  with pytest.raises(ourjax.errors.ResourceExhaustedError) as info:
    f(np.ones(2 ** 24, np.float32))
  msg = str(info.value)
  assert info.value.output is None and info.value.nbytes >= 2 ** 50
  assert "for its temporaries; the largest values: " in msg
  assert "sort f32[16777216, 16777216] (1.0 PiB)" in msg


@pytest.mark.parametrize("n", [12, 4096])
def test_a_sum_of_quotients_keeps_the_nan_of_0_over_0(n):
  """sum(a / z) at z = 0 with some a = 0 is NaN (0/0) whatever the order of the sum; a
  reassociating reduction must not factor it into sum(a) / z (an infinity).  Found by the
  differential fuzzer, through the gradient of a / z."""
  a = np.zeros(n, np.float32)
  a[-1] = 1.0
  z = np.float32(0.0)
  with np.errstate(divide="ignore", invalid="ignore"):
    want = np.sum(a / z)
  assert np.isnan(want)
  got = ourjax.jit(lambda a, z: jnp.sum(a / z), backend="cpu")(a, z)
  assert np.isnan(float(got))
  g = ourjax.jit(ourjax.grad(lambda z, a: jnp.sum(a / z)), backend="cpu")(z, a)
  assert np.isnan(float(g))


def test_a_fusion_that_only_reshapes_is_a_view_of_its_operand():
  """A reshape with nothing to fuse (a convolution's weights flattened for its GEMM, here a
  temporary's) is a fusion of its own after the fusion pass; it is planned as a view of its
  operand's buffer, not copied, and that buffer lives as long as the view is read (other
  temporaries made meanwhile must not take its place).  Results against NumPy float64."""
  def f(x, w, y):
    t = jnp.exp(w)                                   # a temporary
    u = jnp.tanh(y) * 2.0                            # made while t is still needed
    return x @ t.reshape(12, 5) + u.sum(), u

  rng = np.random.default_rng(0)
  x = rng.standard_normal((7, 12)).astype(F32)
  w = rng.standard_normal((3, 4, 5)).astype(F32) * 0.3
  y = rng.standard_normal((12, 5)).astype(F32)
  jf = ourjax.jit(f, backend="cpu")
  got, got_u = (np.asarray(v) for v in jf(x, w, y))
  u = np.tanh(y.astype(np.float64)) * 2.0
  want = x.astype(np.float64) @ np.exp(w.astype(np.float64)).reshape(12, 5) + u.sum()
  np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)
  np.testing.assert_allclose(got_u, u, rtol=2e-6, atol=1e-6)
  # the weights of a convolution as its GEMM reads them: no kernel copies them
  conv = ourjax.jit(lambda x, w: lax.conv_general_dilated(
      x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")), backend="cpu")
  xc = rng.standard_normal((2, 6, 6, 8)).astype(F32)
  wc = rng.standard_normal((3, 3, 8, 4)).astype(F32)
  exe = _native_exe(conv, xc, wc)
  steps = exe.meta["steps"]
  # (the weights reshaped to [72, 4] were a fusion's, written by a kernel of their own)
  assert not any("-> fusion" in s and "[72, 4]" in s for s in steps), steps
  xp = np.pad(xc.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
  want = sum(np.einsum("nhwc,co->nhwo", xp[:, dy:dy + 6, dx:dx + 6], wc[dy, dx])
             for dy in range(3) for dx in range(3))
  np.testing.assert_allclose(np.asarray(conv(xc, wc)), want, rtol=1e-5, atol=1e-4)


def test_a_program_cached_by_its_source_skips_the_passes(tmp_path, monkeypatch, caplog):
  """A jitted program found in the disk cache by its module as lowered (``source_key``) runs
  neither the passes nor LLVM; its optimised module is made only when asked for (and is the
  one compiled before).  A pass setting that differs is another key; a damaged entry is a
  miss that compiles again."""
  from ourjax.lowering import pipeline
  from ourjax.lowering.passes import constant_folding
  monkeypatch.setattr(config, "_values", dict(config._values,
                                              jax_compilation_cache_dir=str(tmp_path)))
  compiles = _count_compiles(monkeypatch)
  optimized = []
  real = pipeline.optimize
  monkeypatch.setattr(pipeline, "optimize", lambda m, *a, **k: optimized.append(1) or
                      real(m, *a, **k))
  x = np.linspace(-2, 2, 24).astype(F32).reshape(4, 6)
  want = np.tanh(x.astype(np.float64)).sum(axis=1) * 3 + np.arange(4)

  def program():   # a new function object each time: nothing cached in this process
    return ourjax.jit(lambda x: jnp.tanh(x).sum(axis=1) * 3 + jnp.arange(4.0))

  first = program()
  np.testing.assert_allclose(np.asarray(first(x)), want, rtol=1e-5)
  assert len(compiles) == 1 and len(optimized) == 1
  assert any(f.startswith("src-") for _, _, fs in os.walk(tmp_path) for f in fs)
  second = program()
  np.testing.assert_allclose(np.asarray(second(x)), want, rtol=1e-5)
  assert len(compiles) == 1 and len(optimized) == 1      # neither LLVM nor the passes
  text = second.lower(x).compile().as_text()            # (the passes run now, for the text)
  assert len(optimized) == 2 and len(compiles) == 1
  with config._override("jax_compilation_cache_dir", "off"):   # the passes' module, fresh
    assert program().lower(x).compile().as_text() == text
  assert len(compiles) == 2
  # another setting of a pass: another source key, so the passes run (their module is the
  # same, and so is its code: that comes from the cache by the optimised module's key)
  n = len(optimized)
  monkeypatch.setattr(constant_folding, "MAX_ELEMENTS", constant_folding.MAX_ELEMENTS + 1)
  np.testing.assert_allclose(np.asarray(program()(x)), want, rtol=1e-5)
  assert len(optimized) == n + 1 and len(compiles) == 2
  # a damaged entry: said, compiled again
  for dp, _, fs in os.walk(tmp_path):
    for f in fs:
      if f.startswith("src-"):
        with open(os.path.join(dp, f), "r+b") as fh:
          fh.seek(-8, os.SEEK_END)
          fh.write(b"\0" * 8)
  caplog.clear()
  with caplog.at_level(logging.WARNING, logger="ourjax"):
    np.testing.assert_allclose(np.asarray(program()(x)), want, rtol=1e-5)
  assert any("damaged" in r.getMessage() for r in caplog.records)


_MATH_THREAD_SCRIPT = r"""
import os, sys
sys.path.insert(0, {root!r})
import numpy as np
import ourjax, ourjax.numpy as jnp
from ourjax.backends.cpu import libraries as lib
started = []
real = lib._prefetch_math
lib._prefetch_math = lambda fn, tag, n: (started.append((fn, tag)), real(fn, tag, n))
x = np.linspace(0.1, 3.0, 1000).astype(np.float32)
got = ourjax.jit(lambda v: jnp.tanh(v) * jnp.exp(-v) + jnp.log(v), backend="cpu")(x)
want = np.tanh(x.astype(np.float64)) * np.exp(-x.astype(np.float64)) + np.log(x.astype(np.float64))
np.testing.assert_allclose(np.asarray(got), want, rtol=2e-6, atol=2e-6)
assert {{f for f, _ in started}} >= {{"tanh", "exp", "log"}}, started
assert all(k in lib._math_done for k in started) and not lib._math_pending, lib._math_pending
if hasattr(os, "fork"):      # a fork waits for builds under way; the child builds its own
  lib._prefetch_math("erf", "f32", 1)
  pid = os.fork()
  if pid == 0:
    y = ourjax.jit(lambda v: ourjax.scipy.special.erf(v) + jnp.sinh(v), backend="cpu")(x)
    import math
    w = np.array([math.erf(v) + math.sinh(v) for v in x.astype(np.float64)])
    os._exit(0 if np.allclose(np.asarray(y), w, rtol=2e-6, atol=2e-6) else 3)
  assert os.waitpid(pid, 0)[1] == 0
print("all ok")
"""


def test_math_libraries_build_on_their_thread_beside_the_kernels():
  """A new process's first program starts its math libraries (tanh, exp, log) on the math
  thread and compiles its kernels meanwhile; they are linked before the program loads, and it
  computes what NumPy does.  A fork while one builds waits for it; the child compiles its own
  programs (run in a subprocess: the libraries must not be there yet)."""
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(cpu.__file__))))
  env = dict(os.environ, OURJAX_CACHE_DIR="off", PYTHONPATH=root)
  p = subprocess.run([sys.executable, "-c", _MATH_THREAD_SCRIPT.format(root=root)], env=env,
                     capture_output=True, text=True, timeout=300)
  assert p.returncode == 0 and "all ok" in p.stdout, (p.returncode, p.stdout, p.stderr[-3000:])


@pytest.mark.parametrize("shape_a, shape_b, want", [
    ((64, 64), (64, 48), ["ourjax_gemm_f32"]),       # a GEMM-sized dot
    ((2, 3), (3, 2), []),                            # a dot its kernel computes
    (None, None, []),                                # no dot
])
def test_the_shared_gemm_starts_building_before_the_passes(shape_a, shape_b, want, monkeypatch):
  """A program whose dots will call the shared GEMM starts its build (on the GEMM's thread)
  from the module as lowered, before the passes and the emission run; others start none.  The
  results stay NumPy's."""
  from ourjax.backends.cpu import libraries as lib
  monkeypatch.setattr(config, "_values", dict(config._values, jax_compilation_cache_dir="off"))
  started, fused = [], []
  monkeypatch.setattr(lib, "_link_symbols", lambda syms, wait=True: started.append(
      (list(syms), wait)))
  real = lib.prefetch_for
  monkeypatch.setattr(lib, "prefetch_for", lambda m: (fused.append(any(
      i.opcode == "fusion" for c in m.computations for i in c.instructions)), real(m)))
  rng = np.random.default_rng(0)
  if shape_a is None:
    x = rng.standard_normal((5, 7)).astype(F32)
    got = ourjax.jit(lambda v: jnp.tanh(v) + 1.0)(x)
    np.testing.assert_allclose(np.asarray(got), np.tanh(x.astype(np.float64)) + 1, rtol=1e-6)
  else:
    a, b = rng.standard_normal(shape_a).astype(F32), rng.standard_normal(shape_b).astype(F32)
    got = ourjax.jit(lambda u, v: jnp.maximum(u @ v, 0.0))(a, b)
    np.testing.assert_allclose(np.asarray(got), np.maximum(a.astype(np.float64) @ b, 0),
                               rtol=1e-5, atol=1e-5)
  assert fused == [False]              # (called once, on the module before the fusion pass)
  assert started == ([(want, False)] if want else [])


def test_a_convolution_starts_its_implicit_im2col_gemm_too(monkeypatch):
  """A convolution's program starts the build of the shared GEMM and of the packer of its
  patch matrix's layout before the passes (with OURJAX_CPU_IMPLICIT_GEMM=0, the GEMM only); the
  results stay the reference's."""
  from ourjax.backends.cpu import libraries as lib
  monkeypatch.setattr(config, "_values", dict(config._values, jax_compilation_cache_dir="off"))
  rng = np.random.default_rng(1)
  x = rng.standard_normal((2, 6, 6, 8)).astype(F32)
  w = rng.standard_normal((3, 3, 8, 4)).astype(F32)
  f = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME",  # noqa: E731
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))
  want = np.asarray(ourjax.jit(f, backend="reference")(x, w))
  for implicit, syms in (("1", ["ourjax_gemm_f32", "ourjax_gemm_f32_im2col_F"]),
                         ("0", ["ourjax_gemm_f32"])):
    monkeypatch.setenv("OURJAX_CPU_IMPLICIT_GEMM", implicit)
    started = []
    monkeypatch.setattr(lib, "_link_symbols", lambda s, wait=True: started.append(
        (list(s), wait)))
    got = ourjax.jit(lambda x, w, i=implicit: f(x, w))(x, w)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    assert (syms, False) in started, started
