"""Accuracy and special values of the inline math emitters (ourjax.backends.llvm.math).

Every function is compiled once per dtype into one module (one vectorized loop kernel each) by the
CPU JIT, run on large sample sets (random bit patterns, dense log-spaced magnitudes over the whole
float range, uniform samples of the interesting intervals, edge cases), and compared with a
reference: float64 NumPy for float32 results, 80-bit long double (NumPy, or the series and
continued fractions below) for float64 results.  Errors are in ulp of the result type.
"""
from __future__ import annotations

import ctypes
import math
import re
import zlib

import numpy as np
import pytest
import llvmlite.ir as ir
from hypothesis import given, settings, strategies as st, HealthCheck

from ourjax.backends.cpu import jit
from ourjax.backends.llvm import math as lm

LD = np.longdouble
F32, F64 = np.float32, np.float64
DTYPES = [F32, F64]
UNARY = sorted(lm.SUPPORTED_UNARY)
BINARY = sorted(lm.SUPPORTED_BINARY)
GPU = sorted(lm.GPU_VARIANTS)

# max error in ulp allowed per function (float32, float64); the measured values are in the
# docstring of ourjax/backends/llvm/math.py
BOUNDS = {
    "exp": (1, 1), "exp2": (1, 1), "expm1": (1, 1), "log": (1, 1), "log2": (1.5, 1.5),
    "log10": (1.5, 1), "log1p": (1, 1), "tanh": (1, 1), "logistic": (1, 1), "sin": (1, 1),
    "cos": (1, 1), "tan": (1, 1), "sinh": (1, 1), "cosh": (1, 1), "asin": (1, 1),
    "acos": (1, 1), "atan": (1, 1), "asinh": (1, 1.5), "acosh": (1, 1), "atanh": (1, 1),
    "erf": (1, 1), "erfc": (1, 1.5), "erf_inv": (1, 1.5), "cbrt": (1, 1), "rsqrt": (1, 1),
    "lgamma": (1, 1.5), "digamma": (1, 1),
    "pow": (1, 1), "atan2": (1.5, 1),
}
TRIG_LIMIT = 2.0 ** 48            # beyond: the huge-argument (Payne-Hanek) reduction


# ---------------------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------------------

def _build(dtype, variant="cpu"):
  """Loop kernels of every function (variant "gpu": the float32 GPU variants only, compiled
  for the host)."""
  fty = ir.FloatType() if dtype == F32 else ir.DoubleType()
  i64 = ir.IntType(64)
  mod = jit.new_module(f"math_{np.dtype(dtype).name}_{variant}")
  unary = GPU if variant == "gpu" else UNARY
  binary = [] if variant == "gpu" else BINARY

  def kernel(name, nin, emit):
    fnty = ir.FunctionType(ir.VoidType(), [i64] + [fty.as_pointer()] * (nin + 1))
    fn = ir.Function(mod, fnty, f"k_{name}")
    for a in fn.args[1:]:
      a.add_attribute("noalias")
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    n = fn.args[0]
    b.cbranch(b.icmp_signed(">", n, ir.Constant(i64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    xs = [b.load(b.gep(fn.args[1 + j], [i])) for j in range(nin)]
    b.store(emit(b, *xs), b.gep(fn.args[1 + nin], [i]))
    i2 = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(i2, b.block)
    b.cbranch(b.icmp_signed("<", i2, n), loop, done)
    b.position_at_end(done)
    b.ret_void()

  for nm in unary:
    kernel(nm, 1, lambda b, x, nm=nm: lm.emit_unary(b, nm, x, variant=variant))
  for nm in binary:
    kernel(nm, 2, lambda b, x, y, nm=nm: lm.emit_binary(b, nm, x, y))
  text = str(mod)
  cm = jit.compile_module(mod, [f"k_{n}" for n in unary + binary])
  fns = {}
  for nm in unary + binary:
    nin = 2 if nm in BINARY else 1
    fns[nm] = cm.ctypes_function(f"k_{nm}", None, [ctypes.c_int64] + [ctypes.c_void_p] * (nin + 1))
  return cm, text, fns


_CACHE = {}


def kernels(dtype, variant="cpu"):
  if (dtype, variant) not in _CACHE:
    _CACHE[dtype, variant] = _build(dtype, variant)
  return _CACHE[dtype, variant]


def run(name, dtype, *args, variant="cpu"):
  arrays = [np.ascontiguousarray(np.asarray(a, dtype=dtype)) for a in args]
  out = np.empty_like(arrays[0])
  kernels(dtype, variant)[2][name](arrays[0].size, *[a.ctypes.data for a in arrays],
                                   out.ctypes.data)
  return out


# ---------------------------------------------------------------------------------------------
# references (long double)
# ---------------------------------------------------------------------------------------------
PI_LD = LD("3.14159265358979323846264338327950288")
SQPI = np.sqrt(PI_LD)
EULER = LD("0.577215664901532860606512090082402431")
# zero of digamma on the positive axis (computed with Python's decimal module)
PSI_X0 = "1.46163214496836234126265954232572132846819620400644635129"


def _erf_series(x):
  """erf(x), |x| <= 3: exp(-x^2) * sum 2^n x^(2n+1) / (2n+1)!!, terms all positive."""
  z = x * x
  term, s = x.copy(), x.copy()
  for n in range(1, 400):
    term = term * 2 * z / (2 * n + 1)
    s = s + term
    if np.all(term <= s * LD(1e-21)):
      break
  return 2 / SQPI * np.exp(-z) * s


def _erfc_cf(x):
  """erfc(x), x >= 1.25: the continued fraction, evaluated backwards."""
  depth = int(min(600, 40 + 300 / max(float(np.min(x)) if x.size else 1.0, 0.5) ** 2))
  f = x.copy()
  for k in range(depth, 0, -1):
    f = x + (LD(k) / 2) / f
  return np.exp(-x * x) / SQPI / f


def _split(a, thr, fa, fb):
  out = np.empty_like(a)
  m = a < thr
  if m.any():
    out[m] = fa(a[m])
  if (~m).any():
    out[~m] = fb(a[~m])
  return out


def erf_ld(x):
  x = np.asarray(x, dtype=LD)
  a = np.nan_to_num(np.abs(x), posinf=LD(40))
  r = _split(a, 2.5, _erf_series, lambda v: 1 - _erfc_cf(np.minimum(v, LD(30))))
  return np.where(np.isnan(x), x, np.copysign(r, x))


def erfc_ld(x):
  x = np.asarray(x, dtype=LD)
  a = np.nan_to_num(np.abs(x), posinf=LD(40))
  pos = _split(a, 1.25, lambda v: 1 - _erf_series(v), lambda v: _erfc_cf(np.minimum(v, LD(40))))
  return np.where(np.isnan(x), x, np.where(x < 0, 2 - pos, pos))


def erf_inv_ld(x):
  x = np.asarray(x, dtype=LD)
  a = np.abs(x)
  with np.errstate(all="ignore"):
    ad = np.minimum(a.astype(np.float64), 1.0)
    lg = np.log((1 - ad) * (1 + ad))
    t = 2 / (np.pi * 0.147) + lg / 2
    y = np.sqrt(np.sqrt(t * t - lg / 0.147) - t)            # Winitzki's start, ~1e-3
    y = np.where(np.isfinite(y), y, 0.0).astype(LD)
    for _ in range(4):                                      # Newton on erf / erfc
      yc = np.minimum(y, LD(27))
      r = np.where(a < 0.5, erf_ld(yc) - a, (1 - a) - erfc_ld(yc))
      y = yc - r * (SQPI / 2) * np.exp(yc * yc)
  y = np.where(a == 1, LD(np.inf), np.where(a > 1, LD(np.nan), y))
  return np.where(np.isnan(x), x, np.copysign(y, x))


def logistic_ld(x):
  x = np.asarray(x)
  with np.errstate(over="ignore"):
    return np.where(x >= 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x)))


def _sinpi_abs(x):
  """|sin(pi x)| with an exact reduction (long double)."""
  r = x - 2 * np.round(x / 2)                               # exact, in [-1, 1]
  r = np.where(np.abs(r) > 0.5, np.copysign(1 - np.abs(r), r), r)
  return np.abs(np.sin(PI_LD * r))


def _cotpi(x):
  r = x - np.round(x)                                       # exact, in [-1/2, 1/2]
  return np.cos(PI_LD * r) / np.sin(PI_LD * r)


_BERN = [LD(1) / 6, LD(-1) / 30, LD(1) / 42, LD(-1) / 30, LD(5) / 66, LD(-691) / 2730, LD(7) / 6,
         LD(-3617) / 510, LD(43867) / 798, LD(-174611) / 330, LD(854513) / 138]


def _zeta(k):
  n = np.arange(1, 2001, dtype=LD)
  N = LD(2001)
  return np.sum(n ** -k) + N ** (1 - k) / (k - 1) + N ** -k / 2 + k * N ** (-k - 1) / 12


_ZETA = {k: _zeta(k) for k in range(2, 90)}


def _lgamma_pos(x):
  """lgamma for x > 0 (long double): Taylor series at 1 and 2, else shift up and Stirling."""
  out = np.empty_like(x)
  n1 = np.abs(x - 1) < 0.5
  n2 = (np.abs(x - 2) < 0.6) & ~n1
  u = x[n1] - 1
  s = -EULER * u
  for k in range(2, 90):
    s = s + (-1) ** k * _ZETA[k] / k * u ** k
  out[n1] = s
  u = x[n2] - 2
  s = (1 - EULER) * u
  for k in range(2, 70):
    s = s + (-1) ** k * (_ZETA[k] - 1) / k * u ** k
  out[n2] = s
  rest = ~(n1 | n2)
  z = x[rest].copy()
  p = np.ones_like(z)
  for _ in range(30):
    small = z < 30
    p = np.where(small, p * z, p)
    z = np.where(small, z + 1, z)
  t = 1 / z
  corr = sum(b / ((2 * k + 2) * (2 * k + 1)) * t ** (2 * k + 1) for k, b in enumerate(_BERN))
  out[rest] = (z - LD(0.5)) * np.log(z) - z + np.log(2 * PI_LD) / 2 + corr - np.log(p)
  return out


def lgamma_ld(x):
  x = np.asarray(x, dtype=LD)
  a = np.abs(x)
  fin = np.isfinite(a) & (a > 0)
  res = np.full_like(x, LD(np.inf))
  pos = fin & (x > 0)
  res[pos] = _lgamma_pos(x[pos])
  neg = fin & (x < 0) & (x != np.floor(x))
  an = a[neg]
  res[neg] = np.log(PI_LD / (an * _sinpi_abs(an))) - _lgamma_pos(an)
  return np.where(np.isnan(x), x, res)


def _digamma_pos(x):
  out = np.empty_like(x)
  x0, x0_lo = _PSI_X0_PAIR
  near = np.abs(x - x0) < 0.5
  # Taylor series at x0: psi^(k)(x0) = (-1)^(k+1) k! zeta(k+1, x0)
  u = (x[near] - x0) - x0_lo
  s = np.zeros_like(u)
  for k in range(1, 70):
    zk = _HURWITZ_X0[k + 1]
    s = s + (-1) ** (k + 1) * zk * u ** k
  out[near] = s
  rest = ~near
  z = x[rest].copy()
  acc = np.zeros_like(z)
  for _ in range(30):
    small = z < 30
    acc = np.where(small, acc + 1 / z, acc)
    z = np.where(small, z + 1, z)
  t2 = 1 / (z * z)
  ser = sum(b / (2 * k + 2) * t2 ** (k + 1) for k, b in enumerate(_BERN))
  out[rest] = np.log(z) - 1 / (2 * z) - ser - acc
  return out


def _x0_pair():
  import decimal
  x0 = LD(PSI_X0)
  hi = float(x0)
  lo = float(x0 - LD(hi))
  with decimal.localcontext() as ctx:
    ctx.prec = 60
    rest = decimal.Decimal(PSI_X0) - decimal.Decimal(hi) - decimal.Decimal(lo)
  return x0, LD(float(rest))


_PSI_X0_PAIR = _x0_pair()


def _hurwitz(s, q):
  """zeta(s, q) = sum_n (q + n)^-s by Euler-Maclaurin (long double)."""
  N = 30
  n = np.arange(N, dtype=LD)
  a = q + N
  tot = np.sum((q + n) ** -s) + a ** (1 - s) / (s - 1) + a ** -s / 2
  fac = LD(s) * a ** (-s - 1)                             # s(s+1)...(s+2k-2) a^(-s-2k+1)
  for k, b in enumerate(_BERN):
    tot = tot + b / math.factorial(2 * k + 2) * fac
    fac = fac * (s + 2 * k + 1) * (s + 2 * k + 2) / (a * a)
  return tot


_HURWITZ_X0 = {}


def digamma_ld(x):
  if not _HURWITZ_X0:
    _HURWITZ_X0.update({k: _hurwitz(k, _PSI_X0_PAIR[0]) for k in range(2, 71)})
  x = np.asarray(x, dtype=LD)
  res = np.full_like(x, LD(np.nan))
  fin = np.isfinite(x)
  pos = fin & (x > 0)
  res[pos] = _digamma_pos(x[pos])
  neg = fin & (x < 0) & (x != np.floor(x))
  an = -x[neg]
  res[neg] = _digamma_pos(an) + 1 / an - PI_LD * _cotpi(x[neg])
  res = np.where(x == np.inf, LD(np.inf), res)
  return np.where(np.isnan(x), x, res)


REF = {
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2,
    "log10": np.log10, "log1p": np.log1p, "tanh": np.tanh, "logistic": logistic_ld,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "cbrt": np.cbrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "erf": erf_ld, "erfc": erfc_ld, "erf_inv": erf_inv_ld, "lgamma": lgamma_ld,
    "digamma": digamma_ld, "pow": np.power, "atan2": np.arctan2,
}
SLOW_REF = {"erf", "erfc", "erf_inv", "lgamma", "digamma"}


def reference(name, dtype, *args):
  """The reference in float64 (float32 results) or long double (float64 results)."""
  slow = name in SLOW_REF
  wt = LD if (dtype == F64 or slow) else F64
  with np.errstate(all="ignore"):
    r = REF[name](*[np.asarray(a).astype(wt) for a in args])
  return np.asarray(r, dtype=LD if dtype == F64 else F64)


def ulp_error(got, ref, dtype):
  """|got - ref| in ulp of dtype at ref; 0 where both are the same special value, inf where
  only one of them is special."""
  p, emin = (24, -149) if dtype == F32 else (53, -1074)
  R = np.asarray(ref, dtype=LD)
  with np.errstate(all="ignore"):
    _, e = np.frexp(np.where(np.isfinite(R), R, 1))
    ulp = np.ldexp(np.ones_like(R), np.maximum(e.astype(np.int64) - p, emin))
    want = np.asarray(ref).astype(dtype)
    err = np.abs(got.astype(LD) - R) / ulp
  fin = np.isfinite(want) & np.isfinite(got)
  same = (want == got) | (np.isnan(want) & np.isnan(got))
  return np.where(fin, err, np.where(same, 0.0, np.inf))


# ---------------------------------------------------------------------------------------------
# samples
# ---------------------------------------------------------------------------------------------

def finfo(dtype):
  fi = np.finfo(dtype)
  return float(fi.smallest_subnormal), float(fi.tiny), float(fi.max)


def edges(dtype):
  den, tiny, big = finfo(dtype)
  eps = float(np.finfo(dtype).eps)
  v = [0.0, den, 2 * den, tiny / 2, tiny, tiny * (1 + eps), big, big * (1 - eps / 2), 1.0,
       1 - eps / 2, 1 + eps, 0.5, 2.0, 0.84375, 0.55, np.pi / 2, np.pi, 10.0, 1e-30, 1e-8]
  v = np.array(v, dtype=np.float64)
  v = np.concatenate([v, -v, [np.inf, -np.inf, np.nan]])
  return v.astype(dtype)


def log_spaced(dtype, n, lo_exp=None, hi_exp=None):
  den, tiny, big = finfo(dtype)
  lo = math.log10(den) if lo_exp is None else lo_exp
  hi = math.log10(big) if hi_exp is None else hi_exp
  with np.errstate(over="ignore"):
    mag = np.minimum(10.0 ** np.linspace(lo, hi, n), big)
  return np.concatenate([mag, -mag]).astype(dtype)


def random_bits(dtype, n, seed):
  rng = np.random.default_rng(seed)
  it = np.uint32 if dtype == F32 else np.uint64
  x = rng.integers(0, np.iinfo(it).max, n, dtype=it, endpoint=True).view(dtype)
  return x[np.isfinite(x)]


# intervals where each function does something interesting: (lo, hi) for float32, float64
INTERVALS = {
    "exp": [(-104, 89), (-746, 710)], "exp2": [(-150, 129), (-1075, 1025)],
    "expm1": [(-20, 89), (-40, 710)], "log": [(0, 4), (0, 4)], "log2": [(0, 4), (0, 4)],
    "log10": [(0, 4), (0, 4)], "log1p": [(-1, 4), (-1, 4)], "tanh": [(-10, 10), (-20, 20)],
    "logistic": [(-105, 20), (-746, 40)], "sin": [(-10, 10), (-10, 10)],
    "cos": [(-10, 10), (-10, 10)], "tan": [(-10, 10), (-10, 10)],
    "sinh": [(-90, 90), (-711, 711)], "cosh": [(-90, 90), (-711, 711)],
    "asin": [(-1, 1), (-1, 1)], "acos": [(-1, 1), (-1, 1)], "atan": [(-5, 5), (-5, 5)],
    "asinh": [(-5, 5), (-5, 5)], "acosh": [(1, 5), (1, 5)], "atanh": [(-1, 1), (-1, 1)],
    "erf": [(-5, 5), (-7, 7)], "erfc": [(-3, 11), (-6, 28)], "erf_inv": [(-1, 1), (-1, 1)],
    "cbrt": [(-10, 10), (-10, 10)], "rsqrt": [(0, 10), (0, 10)],
    "lgamma": [(-20, 20), (-20, 20)], "digamma": [(-20, 20), (-20, 20)],
}


def samples(name, dtype, n=20000, seed=0):
  rng = np.random.default_rng(seed)
  lo, hi = INTERVALS[name][0 if dtype == F32 else 1]
  parts = [random_bits(dtype, n, seed), log_spaced(dtype, n // 2),
           rng.uniform(lo, hi, n).astype(dtype), edges(dtype)]
  if name in ("erf_inv", "atanh", "asin", "acos"):
    parts.append((1 - 10.0 ** rng.uniform(-17, 0, n // 2)).astype(dtype))
  if name in ("lgamma", "digamma"):
    parts.append(rng.uniform(0, 3, n).astype(dtype))
  if name in ("sin", "cos", "tan"):
    top = math.log2(finfo(dtype)[2])
    parts.append((10.0 ** rng.uniform(0, math.log10(TRIG_LIMIT), n)).astype(dtype))
    parts.append((2.0 ** rng.uniform(math.log2(TRIG_LIMIT) - 2, top, n // 2)).astype(dtype))
  if name in ("log", "log2", "log10", "log1p"):
    parts.append(rng.uniform(0.5, 2, n).astype(dtype))
  return np.concatenate(parts)


def _sample_size(name):
  return 8000 if name in SLOW_REF else 60000


# ---------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", UNARY)
def test_unary_accuracy(name, dtype):
  x = samples(name, dtype, n=_sample_size(name), seed=zlib.crc32(name.encode()) % 1000)
  got = run(name, dtype, x)
  ref = reference(name, dtype, x)
  err = ulp_error(got, ref, dtype)
  if name in GAMMA_FAMILY:
    err = np.where(x < 0, reflection_error(name, x, got, ref, dtype), err)
  i = int(np.argmax(err))
  bound = BOUNDS[name][0 if dtype == F32 else 1]
  assert err[i] <= bound, (f"{name}[{np.dtype(dtype).name}]({x[i]!r}) = {got[i]!r}, "
                           f"reference {ref[i]!r}: {err[i]:.3g} ulp > {bound}")


GAMMA_FAMILY = ("lgamma", "digamma")


def reflection_error(name, x, got, ref, dtype):
  """For x < 0 lgamma and digamma are differences of terms of size T (|lgamma(|x|)|, or
  log|x| and pi*cot(pi*x)) that cancel near their zeros: the error there is measured in ulp of
  max(|f(x)|, T, 1)."""
  with np.errstate(all="ignore"):
    a = np.abs(np.asarray(x, dtype=LD))
    if name == "lgamma":
      t = np.abs(lgamma_ld(a))
    else:
      t = np.log1p(a)
    scale = np.maximum(np.maximum(np.abs(np.asarray(ref, dtype=LD)), t), 1)
    scale = np.where(np.isfinite(scale), scale, 1)
  return _abs_ulp(got, ref, scale, dtype)


def _abs_ulp(got, ref, scale, dtype):
  p = 24 if dtype == F32 else 53
  _, e = np.frexp(scale)
  ulp = np.ldexp(np.ones_like(scale), e.astype(np.int64) - p)
  with np.errstate(all="ignore"):
    want = np.asarray(ref).astype(dtype)
    err = np.abs(got.astype(LD) - np.asarray(ref, dtype=LD)) / ulp
  fin = np.isfinite(want) & np.isfinite(got)
  same = (want == got) | (np.isnan(want) & np.isnan(got))
  return np.where(fin, err, np.where(same, 0.0, np.inf))


def _binary_samples(name, dtype, n, seed):
  rng = np.random.default_rng(seed)
  e = edges(dtype)
  ex, ey = np.meshgrid(e, e)
  xs = [random_bits(dtype, n, seed)[: n // 2], ex.ravel()]
  ys = [random_bits(dtype, n, seed + 1)[: n // 2], ey.ravel()]
  if name == "pow":
    lim = 128 if dtype == F32 else 1024
    xs += [rng.uniform(0, 4, n), 10 ** rng.uniform(-3, 3, n), -rng.integers(1, 40, n)]
    ys += [rng.uniform(-30, 30, n), rng.uniform(-1, 1, n) * lim / np.abs(np.log2(
        10 ** rng.uniform(-3, 3, n))).clip(1e-3), rng.integers(-60, 60, n)]
  else:
    xs += [rng.uniform(-10, 10, n), 10 ** rng.uniform(-40, 40, n) * rng.choice([-1, 1], n)]
    ys += [rng.uniform(-10, 10, n), 10 ** rng.uniform(-40, 40, n) * rng.choice([-1, 1], n)]
  x = np.concatenate([np.asarray(v, dtype=np.float64) for v in xs]).astype(dtype)
  y = np.concatenate([np.asarray(v, dtype=np.float64) for v in ys]).astype(dtype)
  m = min(x.size, y.size)
  return x[:m], y[:m]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", BINARY)
def test_binary_accuracy(name, dtype):
  with np.errstate(all="ignore"):
    x, y = _binary_samples(name, dtype, 60000, seed=7)
  got = run(name, dtype, x, y)
  ref = reference(name, dtype, x, y)
  err = ulp_error(got, ref, dtype)
  i = int(np.argmax(err))
  bound = BOUNDS[name][0 if dtype == F32 else 1]
  assert err[i] <= bound, (f"{name}[{np.dtype(dtype).name}]({x[i]!r}, {y[i]!r}) = {got[i]!r}, "
                           f"reference {ref[i]!r}: {err[i]:.3g} ulp > {bound}")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", UNARY)
def test_unary_special_values(name, dtype):
  """NaN-ness, infinities and signs of zeros exactly as the reference, on edge inputs."""
  x = edges(dtype)
  got = run(name, dtype, x)
  with np.errstate(over="ignore"):
    want = reference(name, dtype, x).astype(dtype)
  for xi, g, w in zip(x, got, want):
    if np.isnan(w) or np.isnan(g):
      assert np.isnan(w) and np.isnan(g), (name, xi, g, w)
    elif np.isinf(w) or w == 0:
      assert g == w and np.signbit(g) == np.signbit(w), (name, xi, g, w)


EXACT = {  # (name, x, expected) on both dtypes; NaN means "is NaN"
    "exp": [(0.0, 1.0), (-0.0, 1.0), (np.inf, np.inf), (-np.inf, 0.0), (1e4, np.inf),
            (-1e4, 0.0)],
    "log": [(0.0, -np.inf), (-0.0, -np.inf), (-1.0, np.nan), (1.0, 0.0), (np.inf, np.inf),
            (-np.inf, np.nan)],
    "log1p": [(-1.0, -np.inf), (-2.0, np.nan), (-0.0, -0.0), (0.0, 0.0), (np.inf, np.inf)],
    "expm1": [(-0.0, -0.0), (np.inf, np.inf), (-np.inf, -1.0), (1e4, np.inf)],
    "tanh": [(-0.0, -0.0), (np.inf, 1.0), (-np.inf, -1.0), (50.0, 1.0), (-50.0, -1.0)],
    "logistic": [(np.inf, 1.0), (-np.inf, 0.0), (0.0, 0.5), (-1e4, 0.0)],
    "sin": [(-0.0, -0.0), (np.inf, np.nan), (-np.inf, np.nan)],
    "cos": [(-0.0, 1.0), (np.inf, np.nan)],
    "tan": [(-0.0, -0.0), (np.inf, np.nan)],
    "asin": [(-0.0, -0.0), (1.5, np.nan), (-1.5, np.nan)],
    "acos": [(1.0, 0.0), (1.5, np.nan)],
    "atan": [(-0.0, -0.0), (np.inf, np.pi / 2), (-np.inf, -np.pi / 2)],
    "sinh": [(-0.0, -0.0), (np.inf, np.inf), (-np.inf, -np.inf), (1e4, np.inf)],
    "cosh": [(-0.0, 1.0), (-np.inf, np.inf), (-1e4, np.inf)],
    "asinh": [(-0.0, -0.0), (-np.inf, -np.inf)],
    "acosh": [(1.0, 0.0), (0.5, np.nan), (np.inf, np.inf)],
    "atanh": [(-0.0, -0.0), (1.0, np.inf), (-1.0, -np.inf), (1.5, np.nan)],
    "erf": [(-0.0, -0.0), (np.inf, 1.0), (-np.inf, -1.0)],
    "erfc": [(np.inf, 0.0), (-np.inf, 2.0), (0.0, 1.0)],
    "erf_inv": [(1.0, np.inf), (-1.0, -np.inf), (-0.0, -0.0), (1.5, np.nan)],
    "cbrt": [(-0.0, -0.0), (-np.inf, -np.inf), (-8.0, -2.0), (27.0, 3.0)],
    "rsqrt": [(0.0, np.inf), (-0.0, -np.inf), (np.inf, 0.0), (-1.0, np.nan), (4.0, 0.5)],
    "lgamma": [(1.0, 0.0), (2.0, 0.0), (0.0, np.inf), (-0.0, np.inf), (-3.0, np.inf),
               (np.inf, np.inf), (-np.inf, np.inf)],
    "digamma": [(0.0, np.nan), (-2.0, np.nan), (np.inf, np.inf), (-np.inf, np.nan)],
}


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_values(name, dtype):
  xs = np.array([x for x, _ in EXACT[name]] + [np.nan], dtype=dtype)
  want = np.array([w for _, w in EXACT[name]] + [np.nan], dtype=dtype)
  got = run(name, dtype, xs)
  for x, g, w in zip(xs, got, want):
    if np.isnan(w):
      assert np.isnan(g), (name, x, g)
    else:
      assert g == w and np.signbit(g) == np.signbit(w), (name, x, g, w)


POW_CASES = [  # C99 Annex F / NumPy
    (2.0, 0.0, 1.0), (np.nan, 0.0, 1.0), (np.nan, -0.0, 1.0), (1.0, np.nan, 1.0),
    (1.0, np.inf, 1.0), (-1.0, np.inf, 1.0), (-1.0, -np.inf, 1.0), (np.nan, 1.0, np.nan),
    (2.0, np.nan, np.nan), (0.0, -1.0, np.inf), (-0.0, -1.0, -np.inf), (-0.0, -2.0, np.inf),
    (-0.0, -0.5, np.inf), (0.0, 3.0, 0.0), (-0.0, 3.0, -0.0), (-0.0, 2.0, 0.0),
    (-0.0, 0.5, 0.0), (0.5, -np.inf, np.inf), (2.0, -np.inf, 0.0), (0.5, np.inf, 0.0),
    (-2.0, np.inf, np.inf), (-np.inf, -3.0, -0.0), (-np.inf, -2.0, 0.0), (-np.inf, 3.0, -np.inf),
    (-np.inf, 2.0, np.inf), (-np.inf, 0.5, np.inf), (np.inf, -1.0, 0.0), (np.inf, 2.0, np.inf),
    (-2.0, 0.5, np.nan), (-2.0, 3.0, -8.0), (-2.0, 2.0, 4.0), (-2.0, -1.0, -0.5),
    (10.0, 400.0, np.inf), (10.0, -400.0, 0.0), (-10.0, 401.0, -np.inf), (4.0, 0.5, 2.0),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_pow_special_cases(dtype):
  x = np.array([c[0] for c in POW_CASES], dtype=dtype)
  y = np.array([c[1] for c in POW_CASES], dtype=dtype)
  got = run("pow", dtype, x, y)
  with np.errstate(all="ignore"):
    npw = np.power(x, y)
  for (cx, cy, w), g, n in zip(POW_CASES, got, npw):
    big = dtype == F32 and abs(w) == np.inf and abs(cy) == 400
    w = np.float64(n) if big else w
    if np.isnan(w):
      assert np.isnan(g), (cx, cy, g)
    else:
      assert g == w and np.signbit(g) == np.signbit(w), (cx, cy, g, w)
    assert (np.isnan(g) and np.isnan(n)) or (g == n and np.signbit(g) == np.signbit(n))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_atan2_quadrants(dtype):
  vals = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 3e-30, -7.5]
  y, x = np.meshgrid(np.array(vals, dtype=dtype), np.array(vals, dtype=dtype))
  y, x = y.ravel(), x.ravel()
  got = run("atan2", dtype, y, x)
  ref = reference("atan2", dtype, y, x)
  want = ref.astype(dtype)
  for a, b, g, w in zip(y, x, got, want):
    if np.isnan(w):
      assert np.isnan(g), (a, b, g)
    elif w == 0 or np.isinf(w):
      assert g == w and np.signbit(g) == np.signbit(w), (a, b, g, w)
  assert ulp_error(got, ref, dtype).max() <= 1


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_trig_large_arguments(dtype):
  """Full accuracy over the whole range: Cody-Waite below 2^48, the Payne-Hanek reduction
  (2/pi from its bits table) beyond, up to the largest finite value; the values JAX gives for
  sin(float32([1e17, 1e30, 3.4e38])) among them (-0.570, -0.791, -0.244)."""
  rng = np.random.default_rng(3)
  top = math.log2(finfo(dtype)[2])
  x = np.concatenate([2.0 ** rng.uniform(20, top, 40000), 2.0 ** rng.uniform(46, 50, 4000),
                      2.0 ** np.arange(40, math.ceil(top)),              # every power of two
                      [1e17, 1e30, 3.4e38, float(np.finfo(dtype).max)]]).astype(dtype)
  x = np.concatenate([x, np.nextafter(x, dtype(0)), -x])
  for name in ("sin", "cos", "tan"):
    err = ulp_error(run(name, dtype, x), reference(name, dtype, x), dtype)
    i = int(np.argmax(err))
    assert err[i] <= BOUNDS[name][0 if dtype == F32 else 1], (name, x[i], err[i])
  got = run("sin", dtype, np.array([1e17, 1e30, 3.4e38], dtype))
  np.testing.assert_allclose(got, np.sin(np.array([1e17, 1e30, 3.4e38], dtype).astype(LD)),
                             rtol=1e-6)


# 2/pi in 24-bit words, as printed in the classic C libraries' reduction tables
_TWO_OVER_PI_HEX = (
    "A2F983 6E4E44 1529FC 2757D1 F534DD C0DB62 95993C 439041 FE5163 ABDEBB C561B7 246E3A 424DD2 "
    "E00649 2EEA09 D1921C FE1DEB 1CB129 A73EE8 8235F5 2EBB44 84E99C 7026B4 5F7E41 3991D6 398353 "
    "39F49C 845F8B BDF928 3B1FF8 97FFDE 05980F EF2F11 8B5A0A 6D1F6D 367ECF 27CB09 B74F46 3F669E "
    "5FEA2D 7527BA C7EBE5 F17B3D 0739F7 8A5292 EA6BFB 5FB11F 8D5D08 560330 46FC7B 6BABF0 CFBC20 "
    "9AF436 1DA9E3 91615E E61B08 659985 5F14A0 68408D FFD880 4D7327 310606 1556CA 73A8C9 60E27B "
    "C08C6B")


def test_two_over_pi_table():
  """The huge-argument reduction's 2/pi bits (computed by Machin's formula) are the published
  ones, and each table row D_j = 2^(16j-52) 2/pi mod 4 is those bits to ~210 bits."""
  words = _TWO_OVER_PI_HEX.split()
  published = int("".join(words), 16) >> (24 * len(words) - 1280)
  assert lm.TWO_OVER_PI_BITS == published
  from fractions import Fraction
  for j in (3, 10, 40, 63):
    row = lm._PH_TABLE[j]
    exact = Fraction((published << (16 * j)) % (4 << (1280 + 52)), 1 << (1280 + 52))
    assert abs(sum(map(Fraction, row)) - exact) < Fraction(1, 1 << 205), j


def test_unknown_names_and_types():
  mod = ir.Module()
  fn = ir.Function(mod, ir.FunctionType(ir.FloatType(), [ir.FloatType(), ir.IntType(32)]), "f")
  b = ir.IRBuilder(fn.append_basic_block())
  with pytest.raises(ValueError, match="no unary function 'sqrtt'"):
    lm.emit_unary(b, "sqrtt", fn.args[0])
  with pytest.raises(ValueError, match="no binary function"):
    lm.emit_binary(b, "hypotx", fn.args[0], fn.args[0])
  with pytest.raises(TypeError):
    lm.emit_unary(b, "exp", fn.args[1])
  assert {"exp", "log", "tanh", "sin", "erf", "lgamma", "digamma"} <= lm.SUPPORTED_UNARY
  assert {"pow", "atan2"} <= lm.SUPPORTED_BINARY


def _function_bodies(text):
  bodies = {}
  for m_ in re.finditer(r'define [^@]*@"?([\w.]+)"?\(.*?\n}\n', text, re.S):
    bodies[m_.group(1)] = m_.group(0)
  return bodies


# the instruction sets every function is checked on, whatever this host has: the IR is optimised
# for each (not run), so an AVX-512 host checks the AVX2 path and the other way round
VECTOR_TARGETS = [None, "haswell", "skylake-avx512", "znver3", "x86-64"]


@pytest.mark.parametrize("cpu", VECTOR_TARGETS, ids=lambda c: c or "host")
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_ir_has_no_calls_and_vectorizes(dtype, cpu):
  """No function calls out (to libm or anything but LLVM intrinsics), and every function's loop
  vectorizes for the target: its widest floating-point vectors are at least 256 bits on AVX2 and
  AVX-512 targets and 128 bits on baseline x86-64 (LLVM picks the width by its cost model; the
  float32 functions that compute in float64 run 4 lanes of <4 x double> on AVX2).  On baseline
  x86-64 (SSE2, no FMA) only float32 is asserted: some float64 functions stay scalar there."""
  cm, text, _ = kernels(dtype)
  calls = set(re.findall(r'call [^@]*@"?([\w.]+)', text))
  assert calls and all(c.startswith("llvm.") for c in calls), calls
  allowed = ("llvm.fma.", "llvm.fabs.", "llvm.floor.", "llvm.ceil.", "llvm.trunc.", "llvm.rint.",
             "llvm.sqrt.", "llvm.copysign.", "llvm.minnum.", "llvm.maxnum.", "llvm.round.")
  assert all(c.startswith(allowed) for c in calls), calls
  tm = jit.target_machine_for(cpu) if cpu else None
  opt = cm.optimized_ir if cpu is None else jit.optimize_for(text, tm)
  ocalls = set(re.findall(r'call [^@]*@"?([\w.]+)', opt))
  assert all(c.startswith("llvm.") for c in ocalls), ocalls
  isa = jit.vector_isa(tm)
  if isa == "sse" and dtype == F64:
    return
  min_bits = 128 if isa == "sse" else 256
  bodies = _function_bodies(opt)
  for nm in UNARY + BINARY:
    widths = [int(n) * (32 if t == "float" else 64)
              for n, t in re.findall(r"<(\d+) x (float|double)>", bodies[f"k_{nm}"])]
    assert widths and max(widths) >= min_bits, \
        f"k_{nm} did not vectorize for {cpu or jit.cpu_name()} ({isa}): {sorted(set(widths))} bits"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=1,
                max_size=64))
def test_hypothesis_float32(xs):
  x0 = np.array(xs, dtype=F32)
  for name in ("exp", "log", "tanh", "logistic", "sin", "cos", "tan", "expm1", "log1p", "atan"):
    x = x0
    err = ulp_error(run(name, F32, x), reference(name, F32, x), F32)
    assert err.max() <= BOUNDS[name][0], (name, x[np.argmax(err)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.floats(allow_nan=True, allow_infinity=True),
                          st.floats(allow_nan=True, allow_infinity=True)),
                min_size=1, max_size=64))
def test_hypothesis_float64_binary(pairs):
  x = np.array([p[0] for p in pairs], dtype=F64)
  y = np.array([p[1] for p in pairs], dtype=F64)
  for name in ("pow", "atan2"):
    err = ulp_error(run(name, F64, x, y), reference(name, F64, x, y), F64)
    assert err.max() <= BOUNDS[name][1], (name, x[np.argmax(err)], y[np.argmax(err)])


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_vector_operands_match_scalar(dtype):
  """The emitters also take <N x float/double> values (explicit SIMD, GPU vector types)."""
  lanes = 4
  fty = ir.FloatType() if dtype == F32 else ir.DoubleType()
  vty = ir.VectorType(fty, lanes)
  names = UNARY + BINARY
  mod = jit.new_module("vec_ops")
  for nm in names:
    nin = 2 if nm in BINARY else 1
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [vty.as_pointer()] * (nin + 1)), f"v_{nm}")
    b = ir.IRBuilder(fn.append_basic_block())
    align = np.dtype(dtype).itemsize                      # NumPy buffers: element alignment
    xs = [b.load(fn.args[j], align=align) for j in range(nin)]
    y = lm.emit_unary(b, nm, xs[0]) if nin == 1 else lm.emit_binary(b, nm, *xs)
    b.store(y, fn.args[nin], align=align)
    b.ret_void()
  cm = jit.compile_module(mod, [f"v_{n}" for n in names])
  x = np.array([0.3, -2.5, 7.0, np.nan], dtype=dtype)
  y = np.array([1.5, 3.0, -0.25, 2.0], dtype=dtype)
  for nm in names:
    nin = 2 if nm in BINARY else 1
    f = cm.ctypes_function(f"v_{nm}", None, [ctypes.c_void_p] * (nin + 1))
    out = np.empty(lanes, dtype=dtype)
    args = [x, y][:nin]
    f(*[a.ctypes.data for a in args], out.ctypes.data)
    np.testing.assert_array_equal(out, run(nm, dtype, *args), err_msg=nm)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_vector_trig_takes_the_huge_argument_branch_per_vector(dtype):
  """On vector operands sin/cos/tan branch once per vector to the huge-argument reduction (a
  cold block) where some lane has |x| >= 2^48; the other lanes keep the fast path's values:
  every lane equals the scalar (loop) result."""
  lanes = 4
  fty = ir.FloatType() if dtype == F32 else ir.DoubleType()
  vty = ir.VectorType(fty, lanes)
  mod = jit.new_module("vec_trig_huge")
  names = ["sin", "cos", "tan"]
  for nm in names:
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [vty.as_pointer()] * 2), f"v_{nm}")
    b = ir.IRBuilder(fn.append_basic_block())
    b.store(lm.emit_unary(b, nm, b.load(fn.args[0], align=4)), fn.args[1], align=4)
    b.ret_void()
    assert len(fn.blocks) == 3, nm                          # entry, cold block, join
  cm = jit.compile_module(mod, [f"v_{n}" for n in names])
  rng = np.random.default_rng(5)
  top = math.log2(finfo(dtype)[2])
  for _ in range(50):
    x = np.where(rng.random(lanes) < 0.3, 2.0 ** rng.uniform(48, top, lanes),
                 rng.uniform(-10, 10, lanes)).astype(dtype)
    for nm in names:
      f = cm.ctypes_function(f"v_{nm}", None, [ctypes.c_void_p] * 2)
      out = np.empty(lanes, dtype=dtype)
      f(x.ctypes.data, out.ctypes.data)
      np.testing.assert_array_equal(out, run(nm, dtype, x), err_msg=f"{nm}{x}")


# ---------------------------------------------------------------------------------------------
# the float32 GPU variants (compiled for the host here; the same IR runs on NVPTX)
# ---------------------------------------------------------------------------------------------
# max error in ulp allowed per function; the measured values (all float32 inputs) are in the
# docstring of ourjax/backends/llvm/math.py
GPU_BOUNDS = {"exp": 1, "expm1": 1.5, "log": 1, "log1p": 1, "sin": 1, "cos": 1, "tanh": 1.55,
              "logistic": 1, "erf": 1.5}
GPU_TRIG_MAX = 2.0 ** 17


def test_gpu_bounds_cover_every_variant():
  assert set(GPU_BOUNDS) == set(GPU)
  assert set(GPU) <= set(UNARY)


def _gpu_samples(name, n, seed):
  """The accuracy samplers plus, for sin/cos, both sides of the fast path's bound."""
  rng = np.random.default_rng(seed)
  x = samples(name, F32, n=n, seed=seed)
  if name in ("sin", "cos"):
    near = GPU_TRIG_MAX * 2.0 ** rng.uniform(-3, 1, n // 2)
    steps = np.nextafter(np.float32(GPU_TRIG_MAX), np.float32([0, np.inf]))
    x = np.concatenate([x, near.astype(F32), -near.astype(F32), steps, [GPU_TRIG_MAX]])
    x = x.astype(F32)
  return x


@pytest.mark.parametrize("name", GPU)
def test_gpu_variant_accuracy(name):
  x = _gpu_samples(name, _sample_size(name), seed=zlib.crc32(name.encode()) % 1000 + 1)
  got = run(name, F32, x, variant="gpu")
  ref = reference(name, F32, x)
  err = ulp_error(got, ref, F32)
  i = int(np.argmax(err))
  assert err[i] <= GPU_BOUNDS[name], (f"gpu {name}({x[i]!r}) = {got[i]!r}, reference {ref[i]!r}: "
                                      f"{err[i]:.3g} ulp > {GPU_BOUNDS[name]}")


@pytest.mark.parametrize("name", GPU)
def test_gpu_variant_special_values(name):
  """Special values and signed zeros exactly as the CPU variant (edges, EXACT, NaN)."""
  x = np.concatenate([edges(F32), [v for v, _ in EXACT.get(name, [])],
                      np.float32([np.nan, -np.nan])]).astype(F32)
  got = run(name, F32, x, variant="gpu")
  want = run(name, F32, x)
  for xi, g, w in zip(x, got, want):
    if np.isnan(w) or np.isnan(g):
      assert np.isnan(w) and np.isnan(g), (name, xi, g, w)
    elif np.isinf(w) or w == 0 or abs(w) == 1:
      assert g == w and np.signbit(g) == np.signbit(w), (name, xi, g, w)


def test_gpu_variant_is_chosen_by_the_module_triple():
  """emit_unary picks the GPU variant in an NVPTX module (float32 only): no double arithmetic
  on float32 sin there, the CPU variant's double reduction elsewhere."""
  from ourjax.backends.cuda import codegen

  def ir_of(mod, ty, name="sin"):
    fn = ir.Function(mod, ir.FunctionType(ty, [ty]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    b.ret(lm.emit_unary(b, name, fn.args[0]))
    return str(fn)

  assert "double" not in ir_of(codegen.new_module("g"), ir.FloatType())
  assert "double" in ir_of(jit.new_module("c"), ir.FloatType())
  assert "_patch" not in ir_of(codegen.new_module("g"), ir.DoubleType())
  mod = ir.Module()
  fn = ir.Function(mod, ir.FunctionType(ir.FloatType(), [ir.FloatType()]), "f")
  with pytest.raises(ValueError, match="variant"):
    lm.emit_unary(ir.IRBuilder(fn.append_basic_block()), "sin", fn.args[0], variant="tpu")


def test_gpu_variant_vector_operands_match_scalar():
  lanes = 4
  vty = ir.VectorType(ir.FloatType(), lanes)
  mod = jit.new_module("gpu_vec_ops")
  for nm in GPU:
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [vty.as_pointer()] * 2), f"v_{nm}")
    b = ir.IRBuilder(fn.append_basic_block())
    y = lm.emit_unary(b, nm, b.load(fn.args[0], align=4), variant="gpu")
    b.store(y, fn.args[1], align=4)
    b.ret_void()
  cm = jit.compile_module(mod, [f"v_{n}" for n in GPU])
  # one lane beyond the sin/cos fast path: the whole vector takes the slow path's call
  x = np.array([0.3, -2.5, 3e5, np.nan], dtype=F32)
  x_huge = np.array([0.3, 1e30, -3e5, 3.4e38], dtype=F32)       # the double path's own branch
  for nm in GPU:
    for xs in (x, x_huge):
      f = cm.ctypes_function(f"v_{nm}", None, [ctypes.c_void_p] * 2)
      out = np.empty(lanes, dtype=F32)
      f(xs.ctypes.data, out.ctypes.data)
      np.testing.assert_array_equal(out, run(nm, F32, xs, variant="gpu"), err_msg=nm)
  for nm in GPU:
    f = cm.ctypes_function(f"v_{nm}", None, [ctypes.c_void_p] * 2)
    out = np.empty(lanes, dtype=F32)
    f(x.ctypes.data, out.ctypes.data)
    np.testing.assert_array_equal(out, run(nm, F32, x, variant="gpu"), err_msg=nm)


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_collect_slow_paths_hands_over_the_guard(name):
  """Under ``collect_slow_paths`` the GPU sin/cos emit no branch: the fast path's value, and
  the condition under which it is wrong (|x| >= 2^17, inf, NaN) goes to the caller; the fast
  path equals the variant wherever the condition is false."""
  f32 = ir.FloatType()
  mod = jit.new_module(f"collect_{name}")
  fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [f32.as_pointer()] * 2 +
                                        [ir.IntType(8).as_pointer()]), "k")
  b = ir.IRBuilder(fn.append_basic_block())
  with lm.collect_slow_paths(b) as guards:
    y = lm.emit_unary(b, name, b.load(fn.args[0]), variant="gpu")
  assert len(guards) == 1 and len(fn.blocks) == 1
  b.store(y, fn.args[1])
  b.store(b.zext(guards[0], ir.IntType(8)), fn.args[2])
  b.ret_void()
  cm = jit.compile_module(mod, ["k"])
  k = cm.ctypes_function("k", None, [ctypes.c_void_p] * 3)
  xs = np.float32([0.0, -0.0, 1.5, -1e4, GPU_TRIG_MAX * 0.99, GPU_TRIG_MAX, -3e5, 1e30,
                   np.inf, -np.inf, np.nan])
  want = run(name, F32, xs, variant="gpu")
  for xv, w in zip(xs, want):
    x, out, g = np.float32([xv]), np.empty(1, F32), np.empty(1, np.uint8)
    k(x.ctypes.data, out.ctypes.data, g.ctypes.data)
    slow = not abs(xv) < GPU_TRIG_MAX
    assert bool(g[0]) == slow, (name, xv)
    if not slow:
      assert out[0] == w and np.signbit(out[0]) == np.signbit(w), (name, xv, out[0], w)


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_collect_slow_paths_outside_the_starting_block_branch_themselves(name):
  """Code emitted under ``collect_slow_paths`` in another basic block than the one it started
  in (an inner reduction loop's body) does not dominate the caller's branch: there the GPU
  sin/cos take their own slow path and hand nothing over (it was handed over, and LLVM rejected
  the kernel: ``sum(sin(x))`` over a short axis ran on the host)."""
  f32 = ir.FloatType()
  mod = jit.new_module(f"collect_inner_{name}")
  fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [f32.as_pointer()] * 2), "k")
  b = ir.IRBuilder(fn.append_basic_block("entry"))
  with lm.collect_slow_paths(b) as guards:
    inner = b.append_basic_block("inner")
    b.branch(inner)
    b.position_at_end(inner)
    y = lm.emit_unary(b, name, b.load(fn.args[0]), variant="gpu")
  assert guards == []
  b.store(y, fn.args[1])
  b.ret_void()
  cm = jit.compile_module(mod, ["k"])        # (verifies the module)
  k = cm.ctypes_function("k", None, [ctypes.c_void_p] * 2)
  xs = np.float32([1.5, -1e4, GPU_TRIG_MAX * 4, 3e30, np.inf])
  want = run(name, F32, xs, variant="gpu")
  for xv, w in zip(xs, want):
    x, out = np.float32([xv]), np.empty(1, F32)
    k(x.ctypes.data, out.ctypes.data)
    np.testing.assert_array_equal(out[0], w, err_msg=f"{name}({xv})")


@pytest.mark.parametrize("dtype", [F32, F64])
def test_exact_fmod_is_c_fmod(dtype):
  """``emitter.exact_fmod`` (the GPU's float remainder; NVPTX's own ``frem`` is x - trunc(x/y)*y)
  compiled for the host: C's fmod bit for bit, signed zeros and NaNs included."""
  from ourjax.backends.llvm import emitter as E
  fty = ir.FloatType() if dtype == F32 else ir.DoubleType()
  i64 = ir.IntType(64)
  mod = jit.new_module(f"fmod_{np.dtype(dtype).name}")
  fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64] + [fty.as_pointer()] * 3), "k")
  b = ir.IRBuilder(fn.append_basic_block("entry"))
  with E.ForLoop(b, 0, fn.args[0], "i") as lp:
    x, y = (b.load(b.gep(fn.args[k], [lp.index])) for k in (1, 2))
    b.store(E.exact_fmod(b, x, y), b.gep(fn.args[3], [lp.index]))
  b.ret_void()
  cm = jit.compile_module(mod, ["k"])
  k = cm.ctypes_function("k", None, [ctypes.c_int64] + [ctypes.c_void_p] * 3)
  rng = np.random.default_rng(7)
  bits = np.uint32 if dtype == F32 else np.uint64
  n = 100000
  special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 3.0, 0.1,
                      *finfo(dtype)],
                     dtype)
  xs = np.concatenate([rng.integers(0, np.iinfo(bits).max, n, dtype=bits).view(dtype),
                       np.repeat(special, len(special)),
                       (rng.standard_normal(5000) * 1e6).astype(dtype)])
  ys = np.concatenate([rng.integers(0, np.iinfo(bits).max, n, dtype=bits).view(dtype),
                       np.tile(special, len(special)), rng.standard_normal(5000).astype(dtype)])
  out = np.empty_like(xs)
  k(xs.size, xs.ctypes.data, ys.ctypes.data, out.ctypes.data)
  with np.errstate(all="ignore"):
    want = np.fmod(xs, ys)
  same = (out.view(bits) == want.view(bits)) | (np.isnan(out) & np.isnan(want))
  assert same.all(), (xs[~same][:5], ys[~same][:5], out[~same][:5], want[~same][:5])


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_outlined_scalar_trig_branches_to_the_huge_argument_reduction(dtype):
  """The CPU backend's out-of-line scalar sin/cos/tan (``emitter.MathLib``: what scalar work,
  a while loop's say, calls) branch to the Payne-Hanek reduction instead of computing it for
  every argument (2x a 10,000-step while loop of scalar sin): small, large and huge arguments
  keep their accuracy (float32 through jit, one scalar call each)."""
  from ourjax.backends.llvm import emitter
  tag = "f32" if dtype == F32 else "f64"
  mod = jit.new_module("outlined")
  emitter.MathLib(mod).define_all("sin", tag, 1)
  text = str(mod)
  scalar = text[text.index('@"ojx_m_sin_%s"(' % tag):]
  assert "trig.huge" in scalar[:scalar.index("\n}")]    # a branch, not a select of both
  if dtype == F64:
    return
  import ourjax
  import ourjax.numpy as jnp
  x = np.array([0.3, -2.5, 1e4, -3e5, 2.0 ** 47, 2.0 ** 49, -1e17, 1e30, 3.4e38,
                float(np.finfo(dtype).max)], dtype)
  for name in ("sin", "cos", "tan"):
    f = ourjax.jit(getattr(jnp, name))
    got = np.array([np.asarray(f(v)) for v in x], dtype)
    err = ulp_error(got, reference(name, dtype, x), dtype)
    i = int(np.argmax(err))
    assert err[i] <= BOUNDS[name][0], (name, x[i], err[i])


def _outlined_scalar_kernel(name, tag):
  """A loop calling the out-of-line scalar ``name`` (``emitter.MathLib``, no vector variants:
  every element through the scalar function, as scalar work in a while loop calls it)."""
  from ourjax.backends.llvm import emitter
  mod = jit.new_module(f"outlined_{name}_{tag}")
  emitter.MathLib(mod).define_all(name, tag, 1)
  f = mod.globals[f"ojx_m_{name}_{tag}"]
  fty = f.function_type.return_type
  i64 = ir.IntType(64)
  fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64, fty.as_pointer(), fty.as_pointer()]),
                   "k")
  entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
  b = ir.IRBuilder(entry)
  b.cbranch(b.icmp_signed(">", fn.args[0], ir.Constant(i64, 0)), loop, done)
  b.position_at_end(loop)
  i = b.phi(i64)
  i.add_incoming(ir.Constant(i64, 0), entry)
  b.store(b.call(f, [b.load(b.gep(fn.args[1], [i]))]), b.gep(fn.args[2], [i]))
  i2 = b.add(i, ir.Constant(i64, 1))
  i.add_incoming(i2, b.block)
  b.cbranch(b.icmp_signed("<", i2, fn.args[0]), loop, done)
  b.position_at_end(done)
  b.ret_void()
  text = str(mod)
  cm = jit.compile_module(mod, ["k"])
  return text, cm, cm.ctypes_function("k", None, [ctypes.c_int64] + [ctypes.c_void_p] * 2)


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_outlined_scalar_float32_sin_cos_paths(name):
  """The out-of-line scalar float32 sin/cos branch three ways (|x| < pi/4: no reduction;
  < 2^24: two FMAs; the rest: the full reduction) and keep the accuracy bound on every path
  (the samples of ``test_unary_accuracy``, arguments around pi/4 and 2^24, specials)."""
  text, _cm, k = _outlined_scalar_kernel(name, "f32")
  scalar = text[text.index('@"ojx_m_%s_f32"(' % name):]
  scalar = scalar[:scalar.index("\n}")]
  for blk in ("sincos.small", "sincos.medium", "sincos.full", "trig.huge"):
    assert blk in scalar, blk
  rng = np.random.default_rng(11)
  x = np.concatenate([
      samples(name, F32, n=20000, seed=7),
      (np.pi / 4 * (1 + rng.uniform(-1e-6, 1e-6, 2000))).astype(F32),
      (2.0 ** 24 * (1 + rng.uniform(-1e-6, 1e-6, 2000))).astype(F32),
      np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-38], F32)])
  x = np.concatenate([x, -x])
  out = np.empty_like(x)
  k(x.size, x.ctypes.data, out.ctypes.data)
  err = ulp_error(out, reference(name, F32, x), F32)
  i = int(np.argmax(err))
  assert err[i] <= BOUNDS[name][0], (x[i], out[i], err[i])
  # the scalar function and the vectorized inline version agree to within an ulp
  np.testing.assert_allclose(out, run(name, F32, x), rtol=2.5e-7, atol=1e-45)
