"""Warm starts of the CUDA backend: a whole executable an earlier process compiled, found in
the disk cache by its module as lowered and rebuilt without the compiler (``cuda/cache.py``).
Without a GPU, the entry's round trip, the keys and the warm path run on a stand-in device
(``cuda_fake_device``); on a GPU, new processes that find their programs in the cache give
the bits a cold compile gives."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.backends import disk_cache
from ourjax.backends import settings as backend_settings
from ourjax.backends.cuda import backend as cuda_backend
from ourjax.backends.cuda import cache as cuda_cache
from ourjax.backends.cuda import driver, kernel_cache
from ourjax.backends.cuda.target import DeviceInfo
from ourjax.config import config
from ourjax.lowering import from_jaxpr

from cuda_cases import CASES
from cuda_fake_device import FakeDevice as _FakeDevice, FakeEvent as _FakeEvent

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
F32 = np.float32


def _case(name):
  _, fn, make, _ = next(c for c in CASES if c[0] == name)
  return fn, make(np.random.default_rng(0))


def _lowered(f, *args):
  return from_jaxpr.lower(ourjax.make_jaxpr(f)(*args), "f").module


def _while(x):
  return lax.while_loop(lambda c: c[0] < 7, lambda c: (c[0] + 1, jnp.sin(c[1]) * 1.5), (0, x))[1]


def _scan(w, xs):
  return lax.scan(lambda h, x: (jnp.tanh(h @ w + x), jnp.sum(h)), jnp.zeros(w.shape[0]), xs)


#: (name, function, arguments): a model step, a host-driven while loop, a scan, a conditional
PROGRAMS = [
    ("mlp_step",) + _case("mlp_step"),
    ("while", _while, (np.linspace(-1, 1, 300, dtype=F32),)),
    ("scan", _scan, (np.eye(16, dtype=F32) * 0.5, np.ones((9, 16), F32))),
    ("cond",) + _case("cond"),
    ("softmax",) + _case("softmax"),
]


def _same(a, b) -> bool:
  """Structural equality of launch programs and their parts (arrays by dtype and values)."""
  if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
    return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
            and a.shape == b.shape and np.array_equal(a, b))
  if isinstance(a, (list, tuple)):
    return (type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b)))
  return type(a) is type(b) and a == b


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
  """A stand-in GPU as device 0 and a fresh disk cache in ``tmp_path``."""
  fake = _FakeDevice()
  monkeypatch.setattr(driver, "available", lambda: True)
  monkeypatch.setattr(driver, "get_device", lambda ordinal=0: fake)
  monkeypatch.setattr(driver, "Event", _FakeEvent)
  monkeypatch.setenv("OURJAX_CUDA_GRAPHS", "0")     # (this stand-in has no graph API)
  monkeypatch.setattr(config, "_values", dict(config._values,
                                              jax_compilation_cache_dir=str(tmp_path)))
  kernel_cache.clear()
  yield fake
  kernel_cache.clear()


def _entries(cache):
  return sorted(f for _, _, fs in os.walk(cache) for f in fs if f.startswith("gpusrc-"))


# ---------------------------------------------------------------------------------------------
# the entry
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [p[0] for p in PROGRAMS])
def test_entry_round_trip(name, monkeypatch, tmp_path):
  """``describe`` then ``rebuild`` (through JSON, as the disk cache stores the meta) gives the
  executable's launch program, kernels and launches, PTX, cubins, constants, types, arena and
  slots as they were.  (A disk cache of its own: the executable is this process's compile,
  whose PTX its introspection shows, not an entry another test process stored.)"""
  monkeypatch.setattr(config, "_values", dict(config._values,
                                              jax_compilation_cache_dir=str(tmp_path)))
  _, fn, args = next(p for p in PROGRAMS if p[0] == name)
  exe = ourjax.jit(fn, backend="cuda").lower(*args).compile().runtime_executable()
  assert isinstance(exe, cuda_backend.CudaExecutable)
  dev = _FakeDevice()
  cubins = [f"cubin {g}".encode() if g % 2 == 0 else None for g in range(len(exe.ptx_modules))]
  meta, blob = cuda_cache.describe(exe, dev, cubins)
  meta = json.loads(json.dumps(meta))
  assert _same(cuda_cache.decode_program(meta["program"]), exe.program)
  back = cuda_cache.rebuild(meta, blob, lambda: exe.module)
  assert back.name == exe.name and back._ptx_modules == exe.ptx_modules
  assert back._images == cubins and back._made_for == (dev.arch, dev.multiprocessor_count)
  assert _same(back._program, exe.program)
  info = DeviceInfo(dev.arch, dev.multiprocessor_count)
  assert [(k.name, k.ptx_entry, k.launch(info)) for k in back._kernels] == \
      [(k.name, tuple(k.ptx_entry), tuple(tuple(int(v) for v in x) if isinstance(x, tuple)
                                          else int(x) for x in k.launch(info)))
       for k in exe.kernels]
  with pytest.raises(ValueError, match="made for"):
    back._kernels[0].launch(DeviceInfo(dev.arch, dev.multiprocessor_count + 1))
  assert [s for s, _ in back._consts] == [s for s, _ in exe.consts]
  for (_, a), (_, b) in zip(back._consts, exe.consts):
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
  assert back.param_specs == [(np.dtype(d), tuple(s)) for d, s in exe.param_specs]
  assert back.out_specs == exe.out_specs
  assert (back.arena_bytes, back.nslots, back.aliases, back.code_bytes) == \
      (exe.arena_bytes, exe.nslots, exe.aliases, exe.code_bytes)
  assert back.module is exe.module
  # what it shows of its code is a compile of its module: the same code
  assert back.llvm_ir == exe.llvm_ir and back.ptx == exe.ptx and _same(back.program, exe.program)
  assert [type(k) for k in back.kernels] == [type(k) for k in exe.kernels]
  # a rebuilt executable describes itself as the one it was rebuilt from (its kernels are
  # recorded ones, carrying their descriptions: an executable that hit the cache is stored so)
  again, blob_again = cuda_cache.describe(back, dev, cubins)
  assert json.loads(json.dumps(again)) == meta and blob_again == blob
  # a damaged entry does not rebuild
  bad = dict(meta, kernels=[[*k[:1], 99, *k[2:]] for k in meta["kernels"]])
  with pytest.raises(ValueError):
    cuda_cache.rebuild(bad, blob, lambda: exe.module)
  with pytest.raises(ValueError):
    cuda_cache.rebuild(meta, blob[:len(blob) // 2], lambda: exe.module)


# ---------------------------------------------------------------------------------------------
# keys
# ---------------------------------------------------------------------------------------------

#: Modules of the CUDA backend whose settings change how code runs or is loaded, not the code
#: (an executable from the disk cache reads them as one compiled in the process does).
RUNTIME_ONLY = {"backend", "cache", "conditional", "device_buffers", "driver", "kernel_cache",
                "memory", "profiling", "program", "staging", "target"}


def test_every_cuda_module_with_settings_records_them_at_import():
  """The modules of the CUDA backend with settings (upper-case scalars) are those whose settings
  its keys hold (``settings.CUDA_MODULES``), each recording them as imported, or ones that
  change no code."""
  import importlib
  import pkgutil
  import ourjax.backends.cuda as pkg
  for m in pkgutil.iter_modules(pkg.__path__):
    module = importlib.import_module(f"{pkg.__name__}.{m.name}")
    has = any(k.isupper() and isinstance(v, (bool, int, float, str))
              for k, v in vars(module).items())
    if has and m.name not in RUNTIME_ONLY:
      assert module.__name__ in backend_settings.CUDA_MODULES, module.__name__
  for name in backend_settings.CUDA_MODULES:
    importlib.import_module(name)
    assert name in backend_settings._pristine, name
  assert "unrecorded" not in backend_settings.digest(cuda=True)


def test_keys_follow_the_program_settings_and_the_gpu(fake_gpu, monkeypatch):
  f = lambda a: jnp.sin(a) * 2.0
  x = np.ones((4, 5), F32)
  key = cuda_cache.source_key(_lowered(f, x))
  assert key.startswith("gpusrc-") and cuda_cache.source_key(_lowered(f, x)) == key
  assert cuda_cache.source_key(_lowered(f, x.astype(np.float16))) != key       # dtype
  assert cuda_cache.source_key(_lowered(f, np.ones((5, 4), F32))) != key       # shape
  m = _lowered(f, x)
  m.input_output_alias = {0: 0}                                                 # donation
  assert cuda_cache.source_key(m) != key
  from ourjax.lowering.passes import fusion
  name = next(k for k, v in vars(fusion).items() if k.isupper() and isinstance(v, int)
              and not isinstance(v, bool))
  with monkeypatch.context() as mp:                                             # a pass's
    mp.setattr(fusion, name, getattr(fusion, name) + 1)
    assert cuda_cache.source_key(_lowered(f, x)) != key
  from ourjax.backends.cuda import wgmma
  with monkeypatch.context() as mp:                                             # this backend's
    mp.setattr(wgmma, "STAGES", wgmma.STAGES + 1)
    assert cuda_cache.source_key(_lowered(f, x)) != key
  with monkeypatch.context() as mp:                                             # an option
    mp.setenv("OURJAX_CUDA_HORIZONTAL", "0")
    assert cuda_cache.source_key(_lowered(f, x)) != key
  assert cuda_cache.source_key(_lowered(f, x)) == key                          # restored
  for attr, value in (("arch", "80"), ("multiprocessor_count", 114), ("driver_version", 2),
                      ("name", "another")):                                     # the GPU
    with monkeypatch.context() as mp:
      mp.setattr(fake_gpu, attr, value)
      assert cuda_cache.source_key(_lowered(f, x)) != key, attr
  with monkeypatch.context() as mp:                                             # no GPU
    mp.setattr(driver, "available", lambda: False)
    assert cuda_cache.source_key(_lowered(f, x)) is None


# ---------------------------------------------------------------------------------------------
# warm starts on the stand-in device
# ---------------------------------------------------------------------------------------------

def _launches(fake, exe, args):
  fake.log.clear()
  outs = exe(*args)
  return [e for e in fake.log if e[0] not in ("h2d", "d2h")], outs


@pytest.mark.parametrize("name", ["mlp_step", "while", "scan"])
def test_cache_hit_launches_what_the_compile_launches(fake_gpu, tmp_path, name):
  """The second compile of a program finds the first's entry: rebuilt without a compile, it
  launches the same kernels with the same grids, blocks and copies, and loads the cubins the
  entry holds."""
  _, fn, args = next(p for p in PROGRAMS if p[0] == name)
  cold = ourjax.jit(fn, backend="cuda").lower(*args).compile()
  assert len(_entries(tmp_path)) == 1
  kernel_cache.clear()
  warm = ourjax.jit(fn, backend="cuda").lower(*args).compile()
  a, b = cold.runtime_executable(), warm.runtime_executable()
  assert b._images is not None and a._images is None
  assert all(isinstance(k, cuda_cache.RecordedKernel) for k in b._kernels)
  leaves = ourjax.tree_util.tree_leaves(args)
  mexe = warm._executable
  if mexe.kept_args is not None:
    leaves = [leaves[i] for i in mexe.kept_args]
  hoisted = [ourjax.Array(h) for h in mexe.hoisted]
  assert _launches(fake_gpu, a, leaves + hoisted)[0] == _launches(fake_gpu, b, leaves + hoisted)[0]
  assert [p[:2] for p in b.profile(*leaves, *hoisted, reps=1)] == \
      [p[:2] for p in a.profile(*leaves, *hoisted, reps=1)]
  assert warm.as_text() == cold.as_text() and warm.as_text("ptx") == cold.as_text("ptx")


def test_entry_without_cubins_links_them_at_its_first_call(fake_gpu, tmp_path, monkeypatch):
  """Compiled without linking (``OURJAX_CUDA_LINK_AT_COMPILE=0``), the entry holds no cubins:
  the rebuilt executable's first call links its modules (once each) and loads them, and the
  next one finds them in the cubin cache."""
  _, fn, args = PROGRAMS[0]
  monkeypatch.setenv("OURJAX_CUDA_LINK_AT_COMPILE", "0")
  ourjax.jit(fn, backend="cuda").lower(*args).compile()
  kernel_cache.clear()
  exe = ourjax.jit(fn, backend="cuda").lower(*args).compile().runtime_executable()
  assert exe._images is not None and not any(exe._images)
  linked = []
  real = fake_gpu.link_ptx
  monkeypatch.setattr(fake_gpu, "link_ptx", lambda ptx, name: linked.append(ptx) or
                      real(ptx, name))
  exe(*ourjax.tree_util.tree_leaves(args))
  assert sorted(linked) == sorted(exe._ptx_modules)
  kernel_cache.clear()
  again = ourjax.jit(fn, backend="cuda").lower(*args).compile().runtime_executable()
  again(*ourjax.tree_util.tree_leaves(args))
  assert len(linked) == len(exe._ptx_modules)


def test_damaged_entries_and_other_gpus(fake_gpu, tmp_path, monkeypatch, caplog):
  """A damaged entry is a miss, compiled again and stored again; a cubin the driver refuses is
  dropped with the entry and the PTX loaded; on a GPU with another SM count than the entry's,
  the executable compiles again."""
  _, fn, args = PROGRAMS[0]
  ourjax.jit(fn, backend="cuda").lower(*args).compile()
  (entry,) = _entries(tmp_path)
  key = entry[:-len(".bin")]
  meta, blob, ir = disk_cache.read(key)
  disk_cache.write(key, dict(meta, nslots=1), blob, ir)     # (a launch outside the slots)
  kernel_cache.clear()
  exe = ourjax.jit(fn, backend="cuda").lower(*args).compile().runtime_executable()
  assert exe._images is None and "could not be loaded" in caplog.text
  assert _entries(tmp_path) == [entry]                     # (written again)
  # a cubin that does not load
  exe = ourjax.jit(fn, backend="cuda").lower(*args).compile().runtime_executable()
  assert exe._images is not None
  real = fake_gpu.load_module

  def refusing(image, name):
    if isinstance(image, bytes):
      raise driver.DeviceError("CUDA cuModuleLoadData failed: invalid image")
    return real(image, name)
  monkeypatch.setattr(fake_gpu, "load_module", refusing)
  monkeypatch.setattr(fake_gpu, "link_ptx", lambda ptx, name: None)
  leaves = ourjax.tree_util.tree_leaves(args)
  exe(*leaves)
  assert _entries(tmp_path) == [] and "does not load" in caplog.text
  monkeypatch.undo()
  # another GPU
  fake_gpu2 = _FakeDevice()
  monkeypatch.setattr(driver, "available", lambda: True)
  monkeypatch.setattr(driver, "Event", _FakeEvent)
  monkeypatch.setattr(driver, "get_device", lambda o=0: fake_gpu if o == 0 else fake_gpu2)
  monkeypatch.setenv("OURJAX_CUDA_GRAPHS", "0")
  monkeypatch.setattr(config, "_values", dict(config._values,
                                              jax_compilation_cache_dir=str(tmp_path)))
  ourjax.jit(fn, backend="cuda").lower(*args).compile()
  exe = ourjax.jit(fn, backend="cuda").lower(*args).compile().runtime_executable()
  assert exe._images is not None
  fake_gpu2.multiprocessor_count = 100
  other = exe.for_device(1)
  other(*leaves)
  assert other._made_for is None and not isinstance(other._kernels[0], cuda_cache.RecordedKernel)
  assert exe._made_for is not None


# ---------------------------------------------------------------------------------------------
# new processes
# ---------------------------------------------------------------------------------------------

_CHILD = textwrap.dedent(r"""
import json, sys
fake = sys.argv[1] == "fake"
sys.path.insert(0, sys.argv[2])
import numpy as np
before = set(sys.modules)
if fake:     # (the stand-in device)
  import os
  os.environ["OURJAX_CUDA_GRAPHS"] = "0"
  from ourjax.backends.cuda import driver
  from cuda_fake_device import FakeDevice, FakeEvent
  dev = FakeDevice()
  driver.available = lambda: True
  driver.get_device = lambda ordinal=0: dev
  driver.Event = FakeEvent
import ourjax
import test_cuda_warm_start as t
out = {}
for name, fn, args in t.PROGRAMS:
  got = ourjax.jit(fn, backend="cuda")(*args)
  out[name] = [np.asarray(x).tobytes().hex() for x in ourjax.tree_util.tree_leaves(got)]
new = sorted(set(sys.modules) - before)
print(json.dumps({"out": out, "llvm": [m for m in new if m.startswith("llvmlite")],
                  "compiler": [m for m in new if m.endswith((".emitter", ".pipeline", ".codegen",
                                                              ".planning", ".kernels"))]}))
""")


def _child(cache, how):
  e = dict(os.environ, OURJAX_CACHE_DIR=str(cache), OURJAX_PLATFORMS="cuda",
           PYTHONPATH=ROOT + os.pathsep + HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([sys.executable, "-c", _CHILD, how, HERE], env=e, capture_output=True,
                       text=True, timeout=900)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_warm_process_imports_no_compiler_on_a_stand_in_gpu(tmp_path):
  """A new process whose programs are all in the disk cache imports neither llvmlite nor the
  passes, the planner or the code generator (on the stand-in device: its results are not
  computed, the GPU test below compares them)."""
  cold = _child(tmp_path, "fake")
  assert cold["llvm"] and cold["compiler"]
  assert len(_entries(tmp_path)) == len(PROGRAMS)
  warm = _child(tmp_path, "fake")
  assert warm["llvm"] == [] and warm["compiler"] == [], warm
  assert len(_entries(tmp_path)) == len(PROGRAMS)


@pytest.mark.skipif(not driver.available(), reason="no CUDA GPU")
def test_warm_process_gives_the_bits_of_a_cold_compile_on_the_gpu(tmp_path):
  """On a GPU: a new process that finds every program in the disk cache gives the same bits
  as the process that compiled them, without importing the compiler."""
  cold = _child(tmp_path, "gpu")
  n = len(_entries(tmp_path))
  assert n == len(PROGRAMS)
  warm = _child(tmp_path, "gpu")
  assert warm["out"] == cold["out"]
  assert warm["llvm"] == [] and warm["compiler"] == [], warm
  assert len(_entries(tmp_path)) == n
