"""Warm starts: a program an earlier process compiled, found in the disk cache by a new process
(``cpu/cache.py``), loaded without LLVM (``cpu/loader.py``), keyed by what changes its code
(``backends/settings.py``, ``cpu/host.py``)."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax.backends import settings as backend_settings
from ourjax.backends.cpu import cache as cpu_cache
from ourjax.backends.cpu import host, jit as cpu_jit, loader
from ourjax.backends.cpu import backend as cpu
from ourjax.config import config
from ourjax.lowering import from_jaxpr
from jaxpr_programs import programs

F32 = np.float32
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


@pytest.fixture(autouse=True)
def _cpu_default(monkeypatch):
  monkeypatch.setattr(config, "_values", dict(config._values, jax_platforms="cpu"))


def _lowered(f, *args):
  closed = ourjax.make_jaxpr(f)(*args)
  return from_jaxpr.lower(closed, "f").module


# ---------------------------------------------------------------------------------------------
# the loader
# ---------------------------------------------------------------------------------------------

_IR = r"""
@table = internal constant [4 x double] [double 1.5, double -2.0, double 0.25, double 8.0]
@counter = internal global i64 0
declare double @fmod(double, double)
define internal double @pick(i64 %i) {
  %p = getelementptr [4 x double], [4 x double]* @table, i64 0, i64 %i
  %v = load double, double* %p
  ret double %v
}
define double @ojx_probe(i64 %i, double %x) {
  %n = load i64, i64* @counter
  %n1 = add i64 %n, 1
  store i64 %n1, i64* @counter
  %k = and i64 %i, 3
  %t = call double @pick(i64 %k)
  %m = call double @fmod(double %x, double 3.0)
  %s = fmul double %t, %m
  %c = sitofp i64 %n1 to double
  %r = fadd double %s, %c
  ret double %r
}
"""


def _object():
  from ourjax.backends.cpu.libraries import _ensure_runtime_symbols
  _ensure_runtime_symbols()          # (fmod, for LLVM's check of the module's externals)
  return cpu_jit.compile_to_object(_IR, keep_ir=False)[0]


def _probe(cm):
  return cm.ctypes_function("ojx_probe", ctypes.c_double, [ctypes.c_int64, ctypes.c_double])


@pytest.mark.skipif(not loader.enabled(), reason="the loader serves x86-64 Linux")
def test_loader_runs_what_mcjit_runs():
  """Object code with read-only data, writable data, an internal call and a C library call
  gives the same numbers loaded by this loader as by MCJIT; each load has its own data."""
  obj = _object()
  mine = loader.load_object(obj, ["ojx_probe"])
  assert isinstance(mine, loader.LoadedCode)
  theirs = cpu_jit.load_object(obj, ["ojx_probe"])
  f, g = _probe(mine), _probe(theirs)
  for i, x in [(0, 7.0), (1, -5.5), (6, 2.25), (3, 100.0)]:
    assert f(i, x) == g(i, x)
  table = [1.5, -2.0, 0.25, 8.0]
  again = _probe(loader.load_object(obj, ["ojx_probe"]))
  assert again(2, 7.0) == table[2] * np.fmod(7.0, 3.0) + 1


def test_loader_refuses_damaged_objects_and_missing_entries():
  obj = _object()
  with pytest.raises(ourjax.errors.CompileError, match="entry point"):
    loader.load_object(obj, ["not_there"])
  bad = bytearray(obj)
  bad[40:48] = (len(obj) * 4).to_bytes(8, "little")     # (the section table's offset)
  with pytest.raises(ourjax.errors.CompileError, match="failed its check"):
    loader.load_object(bytes(bad), ["ojx_probe"])
  if loader.enabled():      # sections' names outside the name table (elf.check reads none)
    shoff = int.from_bytes(obj[40:48], "little")
    shnum = int.from_bytes(obj[60:62], "little")
    bad = bytearray(obj)
    for i in range(1, shnum):
      bad[shoff + 64 * i:shoff + 64 * i + 4] = (1 << 30).to_bytes(4, "little")
    with pytest.raises(ourjax.errors.CompileError, match="failed its check"):
      loader.load_object(bytes(bad), ["ojx_probe"])


@settings(max_examples=6, deadline=None)
@given(n=st.integers(1, 3000), scale=st.floats(-4, 4, allow_nan=False))
def test_programs_loaded_by_either_loader_agree(n, scale):
  """A program's object code (kernels, the entry, calls into the shared math library) gives
  the same bits loaded by this loader and by MCJIT (what ``OURJAX_CPU_LOADER=0`` uses)."""
  x = np.linspace(-3, 3, n).astype(F32)
  with config._override("jax_compilation_cache_dir", "off"):
    exe = ourjax.jit(lambda a: jnp.tanh(a * scale) + jnp.exp(-a * a).sum()).lower(x) \
        .compile().runtime_executable()
  assert isinstance(exe, cpu.CpuExecutable)
  assert isinstance(exe.compiled, loader.LoadedCode) == loader.enabled()
  other = cpu_jit.load_object(exe.compiled._object, [cpu.ENTRY])
  twin = cpu.CpuExecutable(exe.module, other, exe.meta, exe.llvm_ir)
  np.testing.assert_array_equal(exe(x)[0], twin(x)[0])
  want = np.tanh(x.astype(np.float64) * scale) + np.exp(-x.astype(np.float64) ** 2).sum()
  np.testing.assert_allclose(exe(x)[0], want, rtol=2e-5, atol=2e-5 * n)


@settings(max_examples=12, deadline=None)
@given(prog=programs(max_ops=20))
def test_random_programs_loaded_by_either_loader_agree(prog):
  """Random programs (elementwise, reductions, dots, slices, conversions over several dtypes):
  the object code this loader loaded and the same bytes loaded by MCJIT give the same bits."""
  with config._override("jax_compilation_cache_dir", "off"):
    module_exe = ourjax.jit(prog).lower(*prog.inputs).compile()._executable
  exe = getattr(module_exe, "compiled", None)
  if not isinstance(exe, cpu.CpuExecutable):
    return      # (a module the native backend does not take)
  kept = module_exe.kept_args
  args = [np.asarray(a) for a in prog.inputs]
  args = [args[k] for k in kept] if kept is not None else args
  args += [np.asarray(c) for c in getattr(module_exe, "hoisted", None) or ()]
  if len(args) != exe.nparams:
    return      # (parameters this test does not know how to pass)
  twin = cpu.CpuExecutable(exe.module, cpu_jit.load_object(exe.compiled._object, [cpu.ENTRY]),
                           exe.meta, exe.llvm_ir)
  for a, b in zip(exe(*args), twin(*args)):
    np.testing.assert_array_equal(a, b, err_msg=repr(prog))


# ---------------------------------------------------------------------------------------------
# keys
# ---------------------------------------------------------------------------------------------

def test_every_module_with_settings_records_them_at_import():
  """Each module whose settings keys follow records them as imported (else its programs
  would be keyed apart in processes that import it and those that do not)."""
  import importlib
  import pkgutil
  import ourjax.lowering.passes as passes
  for name in backend_settings.MODULES:
    importlib.import_module(name)
  for m in pkgutil.iter_modules(passes.__path__):
    importlib.import_module(f"{passes.__name__}.{m.name}")
  assert backend_settings.digest() == backend_settings.digest(passes=True)
  assert "unrecorded" not in backend_settings.digest()
  for name in backend_settings.watched():
    assert name in backend_settings._pristine, name
  assert set(backend_settings.MODULES) <= set(sys.modules)


#: Modules of the CPU backend and the shared emitter whose upper-case names change no compiled
#: code: where and how code is cached, loaded and run (threads, tuning budgets, names, checks).
CPU_RUNTIME_ONLY = {"cache", "executable", "jit", "libraries", "gemm_tune", "kernel_key",
                    "math", "gemm_rows", "gemm_scratch", "arena", "threads", "host", "loader",
                    "profiling", "gemm_table"}


def test_every_cpu_module_with_settings_is_keyed():
  """The modules of the CPU backend and the shared LLVM emitter with settings (upper-case
  scalars) are among those the keys follow (``settings.MODULES``), or change no code: a
  setting changed at run time (a test's monkeypatch) gives a new key, not another setting's
  cached code."""
  import importlib
  import pkgutil
  import ourjax.backends.cpu as cpu_pkg
  import ourjax.backends.llvm as llvm_pkg
  for pkg in (cpu_pkg, llvm_pkg):
    for m in pkgutil.iter_modules(pkg.__path__):
      module = importlib.import_module(f"{pkg.__name__}.{m.name}")
      has = any(k.isupper() and not k.startswith("_") and isinstance(v, (bool, int, float, str))
                for k, v in vars(module).items())
      if has and m.name not in CPU_RUNTIME_ONLY:
        assert module.__name__ in backend_settings.MODULES, module.__name__
  for name in backend_settings.MODULES:
    importlib.import_module(name)
    assert name in backend_settings._pristine, name
  from ourjax.backends.llvm import row_cache
  before = backend_settings.digest()
  old = row_cache.READ_MOVED
  row_cache.READ_MOVED = not old
  try:
    assert backend_settings.digest() != before
  finally:
    row_cache.READ_MOVED = old
  assert backend_settings.digest() == before


def test_keys_follow_dtype_shape_donation_settings_and_the_target(monkeypatch, tmp_path):
  monkeypatch.setattr(config, "_values", dict(config._values,
                                              jax_compilation_cache_dir=str(tmp_path)))
  f = lambda a: jnp.sin(a) * 2.0
  x = np.ones((4, 5), F32)
  key = cpu_cache.source_key(_lowered(f, x))
  assert cpu_cache.source_key(_lowered(f, x)) == key                      # (deterministic)
  assert cpu_cache.source_key(_lowered(f, x.astype(np.int32))) != key     # dtype
  assert cpu_cache.source_key(_lowered(f, x.astype(np.float16))) != key
  assert cpu_cache.source_key(_lowered(f, np.ones((5, 4), F32))) != key  # shape
  m = _lowered(f, x)
  m.input_output_alias = {0: 0}                                          # donation
  assert cpu_cache.source_key(m) != key
  from ourjax.lowering.passes import fusion
  name = next(k for k, v in vars(fusion).items() if k.isupper() and isinstance(v, int)
              and not isinstance(v, bool))
  monkeypatch.setattr(fusion, name, getattr(fusion, name) + 1)          # a pass's setting
  assert cpu_cache.source_key(_lowered(f, x)) != key
  monkeypatch.undo()
  monkeypatch.setattr(config, "_values", dict(config._values,
                                              jax_compilation_cache_dir=str(tmp_path)))
  assert cpu_cache.source_key(_lowered(f, x)) == key                      # restored
  monkeypatch.setenv("OURJAX_CPU_UNROLL", "0")                           # an option
  assert cpu_cache.source_key(_lowered(f, x)) != key
  monkeypatch.delenv("OURJAX_CPU_UNROLL")
  t = dict(host.target())
  monkeypatch.setattr(host, "target", lambda: dict(t, name=t["name"] + "x"))   # the CPU
  assert cpu_cache.source_key(_lowered(f, x)) != key
  monkeypatch.setattr(host, "target", lambda: dict(t, features=t["features"] + ",-avx"))
  assert cpu_cache.source_key(_lowered(f, x)) != key
  monkeypatch.undo()


# another CPU than the one the tests run for: AVX2 code either way (it runs on every host here)
OTHER_CPU = "skylake" if os.environ.get("OURJAX_CPU") == "haswell" else "haswell"


def test_host_fingerprint_follows_the_named_cpu(monkeypatch):
  fp = host.fingerprint()
  if fp is None:
    pytest.skip("no /proc/cpuinfo")
  monkeypatch.setattr(host, "_fingerprint", None)
  monkeypatch.setenv("OURJAX_CPU", OTHER_CPU)
  assert host.fingerprint() not in (None, fp)


# ---------------------------------------------------------------------------------------------
# warm starts in new processes
# ---------------------------------------------------------------------------------------------

_CHILD = textwrap.dedent(r"""
import json, sys
import numpy as np
import ourjax, ourjax.numpy as jnp
from ourjax.backends.cpu import jit as cpu_jit
compiled = []
real = cpu_jit.compile_to_objects
cpu_jit.compile_to_objects = lambda *a, **k: compiled.append(1) or real(*a, **k)
real_results = cpu_jit.ObjectBuilds.results
cpu_jit.ObjectBuilds.results = lambda self: compiled.append(1) or real_results(self)
rows = int(sys.argv[1])
rng = np.random.default_rng(0)
w = rng.standard_normal((96, 64)).astype(np.float32)
x = rng.standard_normal((rows, 96)).astype(np.float32)

def step(w, x):
  h = jnp.tanh(x @ w)
  # (a loop: its entry calls the runtime library's waiting helpers)
  h = ourjax.lax.fori_loop(0, 3, lambda i, c: c * 0.5 + h, h)
  return jnp.sum(jnp.exp(-h * h)), h

before = set(sys.modules)
loss, h = ourjax.jit(step)(w, x)
new = sorted(set(sys.modules) - before)
print(json.dumps({"loss": float(loss), "h": np.asarray(h).tobytes().hex(),
                  "compiled": len(compiled),
                  "llvm": "llvmlite.binding" in new,
                  "compiler": [m for m in new if m.endswith((".emitter", ".pipeline",
                                                              ".planning", ".kernels"))]}))
""")


def _child(cache, rows=32, **env):
  e = dict(os.environ, OURJAX_CACHE_DIR=str(cache), OURJAX_PLATFORMS="cpu",
           PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
  out = subprocess.run([sys.executable, "-c", _CHILD, str(rows)], env=e, capture_output=True,
                       text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def _entries(cache):
  return sorted(f for _, _, fs in os.walk(cache) for f in fs if f.startswith("src-"))


def test_warm_start_gives_the_same_results_without_the_compiler(tmp_path):
  """A new process finds the program an earlier one compiled: the same bits, no LLVM
  compilation, and neither llvmlite's binding nor the passes, planner or emitter imported.
  Another shape or another CPU is another entry; a library entry gone, or a host description
  that lies, costs a build, not a wrong answer."""
  cold = _child(tmp_path)
  assert cold["compiled"] >= 1
  warm = _child(tmp_path)
  assert warm["compiled"] == 0
  assert (warm["loss"], warm["h"]) == (cold["loss"], cold["h"])
  if loader.enabled() and host.fingerprint() is not None:
    assert not warm["llvm"] and warm["compiler"] == [], warm
  entries = _entries(tmp_path)
  assert len(entries) == 1
  # another shape: another entry
  other = _child(tmp_path, rows=48)
  assert other["compiled"] >= 1 and len(_entries(tmp_path)) == 2
  # the code for another CPU (AVX2): another entry, and its numbers are NumPy's too
  hsw = _child(tmp_path, OURJAX_CPU=OTHER_CPU)
  assert hsw["compiled"] >= 1 and len(_entries(tmp_path)) == 3
  assert _child(tmp_path, OURJAX_CPU=OTHER_CPU)["compiled"] == 0
  np.testing.assert_allclose(hsw["loss"], cold["loss"], rtol=1e-5)
  # the libraries' entries gone: built again (the program's own entry still serves)
  for d, _, fs in os.walk(tmp_path):
    for f in fs:
      if f.startswith(("math-", "ourjax_gemm_")):
        os.remove(os.path.join(d, f))
  again = _child(tmp_path)
  assert (again["loss"], again["h"]) == (cold["loss"], cold["h"])
  # a host description that lies: the program is made for the real CPU and no entry is
  # written under the lie; the description is put right
  hosts = os.path.join(tmp_path, "host")
  if os.path.isdir(hosts) and host.fingerprint() is not None:
    # (this process's environment is the children's: the same fingerprint, the same file)
    path = os.path.join(hosts, host.fingerprint() + ".json")
    for name in os.listdir(hosts):
      p = os.path.join(hosts, name)
      with open(p) as f:
        t = json.load(f)
      with open(p, "w") as f:
        json.dump(dict(t, features=t["features"] + ",+madeup"), f)
    n = len(_entries(tmp_path))
    lied = _child(tmp_path)
    assert (lied["loss"], lied["h"]) == (cold["loss"], cold["h"])
    assert len(_entries(tmp_path)) == n
    with open(path) as f:
      assert "+madeup" not in json.load(f)["features"]


def test_damaged_host_description_is_asked_again(tmp_path, monkeypatch):
  if host.fingerprint() is None:
    pytest.skip("no /proc/cpuinfo")
  monkeypatch.setattr(config, "_values", dict(config._values,
                                              jax_compilation_cache_dir=str(tmp_path)))
  path = host._path(host.fingerprint())
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write("{not json")
  monkeypatch.setattr(host, "_target", None)
  cpu_jit._setup()
  assert host.target() == host._from_llvm()
  with open(path) as f:
    assert json.load(f) == host._from_llvm()
