"""The emitter's 8-bit float conversions (``backends/llvm/fp8.py``, used by the CUDA backend)
run here on the CPU: each conversion is emitted as a small LLVM function (load, convert, store,
exactly what a GPU kernel does per element), compiled with llvmlite's JIT and compared bit for
bit with the reference backend's conversion (ml_dtypes' casts, JAX's rounding) over every
8- and 16-bit code, float32 patterns across the whole range, values next to every rounding
threshold, and hypothesis-drawn floats.  NaN must give NaN (any payload)."""
import ctypes

import llvmlite.binding as llvm
import llvmlite.ir as ir
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ourjax.backends import reference_ops as rops
from ourjax.backends.cpu import jit as cpu_jit
from ourjax.backends.llvm import emitter as E
from ourjax.backends.llvm import fp8

E4M3, E5M2 = fp8.E4M3, fp8.E5M2
BF16 = np.dtype(ml_dtypes.bfloat16)
SOURCES = [np.dtype(t) for t in (np.float32, np.float64, np.float16, BF16, np.int8, np.int16,
                                 np.int32, np.int64, np.uint8, np.uint32)]
TARGETS = [np.dtype(t) for t in (np.float32, np.float64, np.float16, BF16, np.int8, np.int32,
                                 np.uint8, np.int64, np.bool_)]
PAIRS = ([(s, d) for s in SOURCES for d in (E4M3, E5M2)]
         + [(s, d) for s in (E4M3, E5M2) for d in TARGETS + [E4M3, E5M2] if s != d])


def _name(src, dst):
  return f"cvt_{src.name}_{dst.name}"


def _build():
  """f(src, dst, array) running the emitted conversion over an array."""
  llvm.initialize_native_target()
  llvm.initialize_native_asmprinter()
  mod = ir.Module("fp8_test")
  mod.triple = llvm.get_process_triple()
  for src, dst in PAIRS:
    sty, dty = E.storage_type(src), E.storage_type(dst)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [sty.as_pointer(), dty.as_pointer(),
                                                           E.I64]), _name(src, dst))
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x, y, n = fn.args
    with E.ForLoop(b, 0, n, "i") as loop:
      v = E.load_element(b, x, loop.index, src)
      E.store_element(b, E.convert_value(b, v, src, dst), y, loop.index, dst)
    b.ret_void()
  # (the host's CPU and features, as the CPU backend's: float16 converts need F16C, not the
  # generic CPU's library calls, which MCJIT cannot resolve here)
  tm = cpu_jit.target_machine_for(*cpu_jit._target_cpu())
  parsed = llvm.parse_assembly(str(mod))
  parsed.verify()
  engine = llvm.create_mcjit_compiler(parsed, tm)
  engine.finalize_object()
  proto = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)

  def run(src, dst, x):
    x = np.ascontiguousarray(x, src)
    out = np.empty(x.shape, dst)
    proto(engine.get_function_address(_name(src, dst)))(x.ctypes.data, out.ctypes.data, x.size)
    return out
  run.engine, run.tm = engine, tm        # (kept alive with the function)
  return run


@pytest.fixture(scope="module")
def jit():
  return _build()


def _check(got, want, what):
  assert got.dtype == want.dtype and got.shape == want.shape
  if rops.is_float(want.dtype):
    g, w = got.astype(np.float64), want.astype(np.float64)
    same = (g == w) & (np.signbit(g) == np.signbit(w)) | (np.isnan(g) & np.isnan(w))
  else:
    same = got == want
  bad = np.nonzero(~same.ravel())[0]
  assert bad.size == 0, (f"{what}: {bad.size} of {got.size} differ, e.g. "
                         f"{[(i, got.ravel()[i], want.ravel()[i]) for i in bad[:5]]}")


def _grid(n=200_000):
  """float32 bit patterns spread over the whole range (both signs, NaNs, infinities)."""
  return (np.linspace(0, 2 ** 32 - 1, n).astype(np.uint64).astype(np.uint32)).view(np.float32)


def _thresholds(dt):
  """Every value of ``dt``, the midpoints between neighbours, and float32 and float64 values
  just either side of each (the rounding decisions), overflow thresholds included."""
  v = np.arange(256, dtype=np.uint8).view(dt).astype(np.float64)
  v = np.unique(v[np.isfinite(v)])
  top = v[-1] + (v[-1] - v[-2])          # the next value past the largest: NaN/inf territory
  pts = np.concatenate([v, (v[1:] + v[:-1]) / 2, [top, (v[-1] + top) / 2]])
  return pts


def _values(src, rng):
  if src.itemsize == 1 and rops.is_float(src):
    return np.arange(256, dtype=np.uint8).view(src)
  if src in (np.dtype(np.float16), BF16):
    return np.arange(1 << 16, dtype=np.uint16).view(src)
  if src == np.float32:
    pts = np.concatenate([_thresholds(E4M3), _thresholds(E5M2)]).astype(np.float32)
    near = [pts, np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(-np.inf))]
    return np.concatenate(near + [-x for x in near] + [_grid()])
  if src == np.float64:
    pts = np.concatenate([_thresholds(E4M3), _thresholds(E5M2)])
    # (a float64 just past a midpoint rounds to float32 onto the midpoint: one rounding, not
    # two, as JAX)
    near = [pts, pts * (1 + 2.0 ** -40), pts * (1 - 2.0 ** -40)]
    wide = rng.standard_normal(20_000) * 2.0 ** rng.integers(-30, 30, 20_000)
    return np.concatenate(near + [-x for x in near] + [wide, [np.inf, -np.inf, np.nan, 1e300]])
  info = np.iinfo(src)
  small = np.arange(max(info.min, -70_000), min(int(info.max), 70_000) + 1)
  return np.concatenate([small, rng.integers(info.min, info.max, 5000, dtype=src,
                                             endpoint=True)]).astype(src)


@pytest.mark.parametrize("src,dst", PAIRS, ids=[_name(s, d) for s, d in PAIRS])
def test_conversion_matches_reference(jit, src, dst):
  x = _values(src, np.random.default_rng(0))
  with np.errstate(all="ignore"):
    want = rops.convert_element_type(x, dst)
  _check(jit(src, dst, x), want, f"{src.name} -> {dst.name}")


def test_overflow_and_nan_follow_ml_dtypes(jit):
  """e4m3fn has no infinity: overflow (|x| > 464) and infinities give NaN, not the saturated
  448 of PTX's ``cvt.satfinite``; e5m2 overflows to infinity (|x| >= 61440)."""
  x = np.array([448, 464, 464.0001, -1e9, np.inf, 57344, 61439.99, 61440, -np.inf], np.float32)
  e4 = jit(np.dtype(np.float32), E4M3, x).astype(np.float32)
  e5 = jit(np.dtype(np.float32), E5M2, x).astype(np.float32)
  np.testing.assert_array_equal(e4[:2], [448, 448])
  assert np.isnan(e4[2:5]).all()
  np.testing.assert_array_equal(e5[5:], [57344, 57344, np.inf, -np.inf])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=1,
                max_size=64),
       st.sampled_from([E4M3, E5M2]))
def test_any_float32_rounds_as_ml_dtypes(jit, xs, dt):
  x = np.array(xs, np.float32)
  with np.errstate(all="ignore"):
    want = x.astype(dt)
  _check(jit(np.dtype(np.float32), dt, x), want, f"float32 -> {dt.name}")
