"""How the CUDA backend turns an executable's kernel modules into PTX and cubins
(``cuda/kernel_cache.py``), without a GPU: the PTX is the same whichever path made it (LLVM
started while the kernels are still emitted, or after; a module taken from an earlier
executable of the process), a module compiled once in the process is not compiled again, every
kernel's entry is in its module, and where a GPU is present (here the stand-in driver) the
modules are linked while the program compiles, so its first call links nothing."""
import re

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax.backends.cuda import backend as cuda_backend
from ourjax.backends.cuda import codegen, kernel_cache

from cuda_cases import CASES
from test_ptx import _assemble, needs_ptxas


def _case(name):
  return next(c for c in CASES if c[0] == name)


def _compile(fn, args):
  return ourjax.jit(fn, backend="cuda").lower(*args).compile().runtime_executable()


def _entries_resolve(exe):
  """Every kernel's (module, entry) names a ``.entry`` of that module's PTX."""
  for k in exe.kernels:
    g, name = k.ptx_entry
    assert re.search(r"\.entry " + re.escape(name) + r"\(", exe.ptx_modules[g]), (k, name)


def _count_llvm(monkeypatch):
  """A list that grows by one per module LLVM compiles."""
  made = []
  real = codegen._ptx

  def counting(text, *a, **kw):
    made.append(1)
    return real(text, *a, **kw)
  monkeypatch.setattr(codegen, "_ptx", counting)
  return made


@pytest.mark.parametrize("name", ["mlp_step", "layernorm", "dot_epilogue_bias_gelu"])
def test_same_ptx_on_every_path(monkeypatch, name):
  """Pipelined or not, cached or not: the same modules, the same PTX, the same entries."""
  _, fn, make, _ = _case(name)
  args = make(np.random.default_rng(0))
  got = {}
  for pipe, cache in (("0", "0"), ("1", "0"), ("1", "1"), ("0", "1")):
    monkeypatch.setenv("OURJAX_CUDA_PIPELINE", pipe)
    monkeypatch.setenv("OURJAX_CUDA_KERNEL_CACHE", cache)
    kernel_cache.clear()
    exe = _compile(fn, args)
    _entries_resolve(exe)
    got[pipe, cache] = (exe.ptx_modules, [k.ptx_entry for k in exe.kernels], exe.llvm_ir)
  first = got["0", "0"]
  for key, value in got.items():
    assert value == first, key


def test_modules_compiled_once_per_process(monkeypatch):
  """A second executable of the same program (another function object) compiles no module
  again, and its kernels find their entries in the PTX it takes; with the cache off it
  compiles them all again, into the same PTX up to the kernels' names."""
  _, fn, make, _ = _case("mlp_step")
  args = make(np.random.default_rng(1))
  kernel_cache.clear()
  made = _count_llvm(monkeypatch)
  first = _compile(fn, args)
  n = len(first.ptx_modules)
  assert len(made) == n >= 3
  again = _compile(lambda *a: fn(*a), args)
  assert len(made) == n
  assert again.ptx_modules == first.ptx_modules
  _entries_resolve(again)
  monkeypatch.setenv("OURJAX_CUDA_KERNEL_CACHE", "0")
  third = _compile(lambda *a: fn(*a), args)
  assert len(made) == 2 * n
  _entries_resolve(third)
  # (the same code: only the names of the kernels, numbered per executable, may differ)
  strip = lambda p: re.sub(r"\bk\d+_\d+", "K", p)      # noqa: E731
  assert [strip(p) for p in third.ptx_modules] == [strip(p) for p in first.ptx_modules]


def test_shared_kernels_between_programs(monkeypatch):
  """Two different programs whose dot kernels are the same share their module: the second
  compiles only what is new."""
  kernel_cache.clear()
  made = _count_llvm(monkeypatch)
  x = np.ones((256, 512), np.float32)
  w = np.ones((512, 384), np.float32)
  a = _compile(lambda x, w: jnp.tanh(x @ w), (x, w))
  before = len(made)
  b = _compile(lambda x, w: (jnp.tanh(x @ w), jnp.sum(x, axis=0)), (x, w))
  assert len(made) - before < len(b.ptx_modules)
  assert set(a.ptx_modules) & set(b.ptx_modules)
  _entries_resolve(b)


@needs_ptxas
def test_reused_modules_assemble(monkeypatch):
  _, fn, make, _ = _case("mlp_step")
  args = make(np.random.default_rng(2))
  kernel_cache.clear()
  _compile(fn, args)
  _assemble(cuda_backend.MODULE_SEPARATOR.join(_compile(lambda *a: fn(*a), args).ptx_modules))


def test_ptx_cache_is_bounded(monkeypatch):
  kernel_cache.clear()
  monkeypatch.setattr(kernel_cache, "PTX_CACHE_BYTES", 250)
  for i in range(5):
    kernel_cache._put(f"k{i}", "x" * 100, f"n{i}")
  assert list(kernel_cache._ptx) == ["k3", "k4"]
  assert kernel_cache._get("k4") == ("x" * 100, "n4") and kernel_cache._get("k0") is None
  kernel_cache.clear()
  assert not kernel_cache._ptx


cuda_fake_driver = pytest.importorskip("cuda_fake_driver")   # needs cuda.bindings (types only)


@pytest.fixture
def no_disk_cache():
  from ourjax.config import config
  old = config.jax_compilation_cache_dir
  config.update("jax_compilation_cache_dir", "off")
  yield
  config.update("jax_compilation_cache_dir", old)


@pytest.mark.parametrize("at_compile", ["1", "0"])
def test_modules_linked_while_compiling(monkeypatch, no_disk_cache, at_compile):
  """With a GPU, every new module is linked by the driver as the program compiles, and the
  first call loads those cubins without linking (``OURJAX_CUDA_LINK_AT_COMPILE=0``: linked by
  the first call)."""
  monkeypatch.setenv("OURJAX_CUDA_LINK_AT_COMPILE", at_compile)
  kernel_cache.clear()
  x = np.linspace(-1, 1, 4096, dtype=np.float32).reshape(64, 64)
  with cuda_fake_driver.installed() as fake:
    compiled = ourjax.jit(lambda v: (jnp.sum(jnp.exp(v), axis=1), v @ v.T + 1.0)).lower(
        ourjax.device_put(x)).compile()
    exe = compiled.runtime_executable()
    n = len(exe.ptx_modules)
    assert n >= 2
    assert fake.calls["cuLinkComplete"] == (n if at_compile == "1" else 0)
    out = compiled(ourjax.device_put(x))
    assert fake.calls["cuLinkComplete"] == n and fake.calls["cuModuleLoadData"] == n
    assert fake.calls["cuModuleLoadDataEx"] == 0
    # a program compiled again in the process links nothing: its modules' cubins are kept
    again = ourjax.jit(lambda v: (jnp.sum(jnp.exp(v), axis=1), v @ v.T + 1.0)).lower(
        ourjax.device_put(x)).compile()
    again(ourjax.device_put(x))
    assert fake.calls["cuLinkComplete"] == n and fake.calls["cuModuleLoadData"] == 2 * n
    del exe, compiled, again, out


def test_failed_link_at_compile_loads_the_ptx(monkeypatch, no_disk_cache):
  """A module the linker fails on while compiling is loaded as PTX by the first call (whose
  error, on a real driver, names the problem), not linked a second time."""
  kernel_cache.clear()
  x = np.linspace(-1, 1, 4096, dtype=np.float32).reshape(64, 64)
  with cuda_fake_driver.installed() as fake:
    fake.fail = {"cuLinkComplete"}
    compiled = ourjax.jit(lambda v: (jnp.sum(jnp.exp(v), axis=1), v @ v.T + 1.0)).lower(
        ourjax.device_put(x)).compile()
    n = len(compiled.runtime_executable().ptx_modules)
    links = fake.calls["cuLinkComplete"]
    assert links == n
    out = compiled(ourjax.device_put(x))
    assert fake.calls["cuLinkComplete"] == links
    assert fake.calls["cuModuleLoadDataEx"] == n and fake.calls["cuModuleLoadData"] == 0
    del compiled, out


def test_copy_small_b_switch(monkeypatch):
  """``OURJAX_CUDA_WGMMA_COPY_B``: a tf32 convolution whose weights are much smaller than its
  patch matrix copies them K-major and runs a shared-memory form: by default (``auto``) the
  transposed one, which keeps the register form's tile for 128 output channels; ``1``: the
  plain one; ``0``: the transposed register form."""
  from ourjax import lax
  # (shapes only: enough output tiles that the product is not split along k)
  x = ourjax.ShapeDtypeStruct((32, 32, 32, 128), np.float32)
  w = ourjax.ShapeDtypeStruct((3, 3, 128, 128), np.float32)

  def conv(x, w):
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jnp.maximum(y, 0.0)
  forms = {}
  for on in ("0", "1", "auto"):
    monkeypatch.setenv("OURJAX_CUDA_WGMMA_COPY_B", on)
    exe = _compile(conv, (x, w))
    forms[on] = [(type(k).__name__, getattr(k, "mode", None)) for k in exe.kernels]
    _entries_resolve(exe)
  assert forms["0"] == [("WgmmaDot", "rs_t")]
  assert forms["1"] == [("StridedTranspose", None), ("WgmmaDot", "ss")]
  assert forms["auto"] == [("StridedTranspose", None), ("WgmmaDot", "ss_t")]


@needs_ptxas
def test_copy_small_b_assembles(monkeypatch):
  monkeypatch.setenv("OURJAX_CUDA_WGMMA_COPY_B", "1")
  from ourjax import lax
  x = np.ones((2, 16, 16, 32), np.float32)
  w = np.ones((3, 3, 32, 48), np.float32)
  exe = _compile(lambda x, w: lax.conv_general_dilated(
      x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) * 2.0, (x, w))
  assert "StridedTranspose" in [type(k).__name__ for k in exe.kernels]
  _assemble(cuda_backend.MODULE_SEPARATOR.join(exe.ptx_modules))
