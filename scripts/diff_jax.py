"""Differential check of ourjax against JAX on drawn jnp/lax calls (not part of the test suite:
CI has no JAX).

    /work/bvenv/bin/python scripts/diff_jax.py run jax /tmp/jax.pkl [--seed S --n N --x64]
    PYTHONPATH=. python scripts/diff_jax.py run ourjax /tmp/ours.pkl [same options]
    python scripts/diff_jax.py compare /tmp/jax.pkl /tmp/ours.pkl

With ``--suite programs`` the cases are instead the programs of ``diff_programs.py`` (typical
user code: keyword arguments, promotion, jax.nn, jax.random, tree_util, control flow, grad and
vmap, misuse errors), each run as written ("eager") and whole under jit ("jit"); ``--only
PREFIX`` keeps the programs whose name starts with PREFIX.

Each case is one function (unary, binary or reduction; jnp or lax) on drawn operands: dtypes
bool, signed and unsigned ints, float16, bfloat16, float32 (float64 with --x64), Python scalars
(weak types), shapes that broadcast, special values (NaN, infinities, signed zeros); called
eagerly and under jit.  Recorded per call: the error's type, or the result's dtype, weak type,
shape and bytes.  ``compare`` prints the cases whose outcome differs: one raises and the other
does not, or dtype / weak_type / shape / values (NaN positions, signs of zeros, values within a
dtype tolerance) differ."""
from __future__ import annotations

import argparse
import pickle
import sys

import numpy as np

UNARY = ["sin", "cos", "tan", "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sqrt",
         "cbrt", "abs", "negative", "positive", "sign", "floor", "ceil", "round", "rint",
         "trunc", "fix", "tanh", "sinh", "cosh", "arcsin", "arccos", "arctan", "arcsinh",
         "arccosh", "arctanh", "square", "reciprocal", "isnan", "isinf", "isfinite", "signbit",
         "logical_not", "bitwise_not", "invert", "deg2rad", "rad2deg", "sinc", "i0",
         "nan_to_num", "real", "imag", "conj", "angle", "absolute", "fabs", "spacing",
         "bitwise_count", "frexp", "modf", "isreal", "iscomplex"]
BINARY = ["add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "remainder",
          "mod", "fmod", "power", "float_power", "maximum", "minimum", "fmax", "fmin", "arctan2",
          "hypot", "logaddexp", "logaddexp2", "equal", "not_equal", "less", "less_equal",
          "greater", "greater_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and",
          "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "copysign", "nextafter",
          "heaviside", "ldexp", "gcd", "lcm", "divmod", "isclose", "where0", "polyval2"]
REDUCE = ["sum", "prod", "max", "min", "mean", "var", "std", "argmax", "argmin", "any", "all",
          "cumsum", "cumprod", "nansum", "nanmax", "nanmin", "nanmean", "ptp", "median",
          "count_nonzero", "average", "cummax", "logsumexp", "sort", "argsort"]
LAX_BINARY = ["add", "sub", "mul", "div", "rem", "max", "min", "pow", "atan2", "nextafter",
              "shift_left", "shift_right_logical", "shift_right_arithmetic", "bitwise_and",
              "eq", "lt", "ge"]
LAX_UNARY = ["neg", "sign", "floor", "ceil", "round", "is_finite", "exp", "log", "tanh",
             "logistic", "abs", "sqrt", "rsqrt", "cbrt", "erf", "erfc", "erf_inv", "lgamma",
             "digamma", "population_count", "clz", "bitwise_not", "square", "integer_pow3",
             "convert_f32", "convert_i32", "convert_bf16", "convert_bool", "convert_u8",
             "reduce_precision"]

DTYPES = ["bool", "int8", "int16", "int32", "uint8", "uint32", "float16", "bfloat16", "float32"]
SHAPES = [(), (3,), (2, 3), (1, 3), (2, 1), (4,)]


def _np_dtype(name):
  import ml_dtypes
  return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _draw_array(rng, dt, shape):
  dt = _np_dtype(dt)
  n = int(np.prod(shape)) if shape else 1
  if dt == np.bool_:
    v = rng.random(n) < 0.5
  elif dt.kind in "iu":
    info = np.iinfo(dt)
    small = rng.integers(-5 if dt.kind == "i" else 0, 9, n)
    big = rng.integers(int(info.min), int(info.max), n, endpoint=True, dtype=np.int64)
    v = np.where(rng.random(n) < 0.8, small, big)
  else:
    normal = np.round(rng.standard_normal(n) * 3, 2)
    special = rng.choice(np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 0.5, 2.0]), n)
    v = np.where(rng.random(n) < 0.75, normal, special)
  with np.errstate(all="ignore"):
    return v.astype(dt).reshape(shape)


def _draw_operand(rng, x64):
  """('array', np array) | ('jarray', np array: made a library array) | ('py', scalar)."""
  r = rng.random()
  if r < 0.2:
    kind = rng.choice(["int", "float", "bool"])
    if kind == "int":
      return ("py", int(rng.integers(-3, 6)))
    if kind == "float":
      return ("py", float(rng.choice([0.5, -1.5, 2.0, 0.0, -0.0, 3.25])))
    return ("py", bool(rng.random() < 0.5))
  dts = DTYPES + (["float64", "int64"] if x64 else [])
  dt = dts[rng.integers(len(dts))]
  shape = SHAPES[rng.integers(len(SHAPES))]
  return ("jarray" if r < 0.6 else "array", _draw_array(rng, dt, shape))


def draw_cases(seed, n, x64):
  rng = np.random.default_rng(seed)
  cases = []
  for i in range(n):
    family = rng.choice(["unary", "binary", "reduce", "lax_unary", "lax_binary"],
                        p=[0.25, 0.35, 0.15, 0.1, 0.15])
    if family in ("unary", "lax_unary"):
      names = UNARY if family == "unary" else LAX_UNARY
      ops = [_draw_operand(rng, x64)]
    elif family in ("binary", "lax_binary"):
      names = BINARY if family == "binary" else LAX_BINARY
      a = _draw_operand(rng, x64)
      if family == "lax_binary" and rng.random() < 0.7 and a[0] != "py":
        b = (a[0], _draw_array(rng, a[1].dtype.name, a[1].shape))     # same dtype and shape
      else:
        b = _draw_operand(rng, x64)
      ops = [a, b]
    else:
      names = REDUCE
      a = _draw_operand(rng, x64)
      ops = [a]
    name = names[rng.integers(len(names))]
    axis = None
    if family == "reduce" and a[0] != "py" and a[1].ndim:
      axis = [None, 0, -1][rng.integers(3)]
    cases.append((i, family, name, ops, axis))
  return cases


def _fn(lib, family, name, axis):
  jnp, lax = lib.numpy, lib.lax
  if family == "unary":
    return getattr(jnp, name)
  if family == "binary":
    if name == "where0":
      return lambda a, b: jnp.where(jnp.asarray(a) > 0, a, b)
    if name == "polyval2":
      return lambda a, b: jnp.polyval(jnp.stack(jnp.broadcast_arrays(a, b))
                                      if jnp.ndim(a) == jnp.ndim(b) else jnp.asarray([1.0, 2.0]),
                                      a)
    return getattr(jnp, name)
  if family == "reduce":
    f = getattr(jnp, name) if name not in ("logsumexp", "cummax") else (
        lib.scipy.special.logsumexp if name == "logsumexp" else
        (lambda x, axis=None: lax.cummax(jnp.ravel(x) if axis is None else x,
                                         axis=0 if axis is None else axis % jnp.ndim(x))))
    return lambda x: f(x, axis=axis)
  if family == "lax_unary":
    if name == "integer_pow3":
      return lambda x: lax.integer_pow(x, 3)
    if name.startswith("convert_"):
      import ml_dtypes
      to = {"f32": np.float32, "i32": np.int32, "bf16": ml_dtypes.bfloat16, "bool": np.bool_,
            "u8": np.uint8}[name[8:]]
      return lambda x: lax.convert_element_type(x, to)
    if name == "reduce_precision":
      return lambda x: lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10)
    if name == "bitwise_not":
      return lax.bitwise_not
    return getattr(lax, name)
  if name == "bitwise_and":
    return lax.bitwise_and
  return getattr(lax, name)


def _record(r, lib=None):
  import ml_dtypes  # noqa: F401
  if isinstance(r, (tuple, list)):
    return ("tuple", [_record(x, lib) for x in r])
  if r is None or isinstance(r, str):
    return ("py", repr(r))
  if isinstance(r, (bool, int, float, complex)) and not hasattr(r, "dtype"):
    return ("py", f"{type(r).__name__}:{r!r}")
  if lib is not None and "key<" in str(getattr(r, "dtype", "")):
    r = lib.random.key_data(r)
  a = np.asarray(r)
  return ("ok", a.dtype.name, a.shape, bool(getattr(r, "weak_type", False)),
          np.ascontiguousarray(a).tobytes())


def run(libname, seed, n, x64):
  if libname == "jax":
    import jax as lib
    import jax.scipy.special  # noqa: F401
  else:
    import ourjax as lib
    import ourjax.scipy.special  # noqa: F401
  if x64:
    lib.config.update("jax_enable_x64", True)
  import warnings
  warnings.simplefilter("ignore")
  out = {}
  for i, family, name, ops, axis in draw_cases(seed, n, x64):
    try:
      fn = _fn(lib, family, name, axis)
    except AttributeError as e:
      out[i] = {"eager": ("missing", str(e)), "jit": ("missing", str(e))}
      continue

    def make_args():
      args = []
      for kind, v in ops:
        args.append(lib.numpy.asarray(v) if kind == "jarray" else
                    (v.copy() if kind == "array" else v))
      return args
    res = {}
    for mode in ("eager", "jit"):
      try:
        args = make_args()
        f = fn if mode == "eager" else lib.jit(fn)
        with np.errstate(all="ignore"):
          res[mode] = _record(f(*args))
      except Exception as e:     # noqa: BLE001
        res[mode] = ("error", type(e).__name__, str(e)[:200])
    out[i] = res
  with open(sys.argv[3], "wb") as fh:
    pickle.dump(out, fh)


class _Libs:
  """The namespace a program gets: ``L.jnp``, ``L.lax``, ``L.nn``, ``L.random``, ``L.jax``..."""

  def __init__(self, lib):
    import importlib
    self.jax = lib
    self.jnp, self.lax, self.nn, self.random = lib.numpy, lib.lax, lib.nn, lib.random
    self.tree_util = lib.tree_util
    self.flatten_util = importlib.import_module(lib.__name__ + ".flatten_util")
    self.optimizers = importlib.import_module(lib.__name__ + ".example_libraries.optimizers")
    self.scipy = importlib.import_module(lib.__name__ + ".scipy")
    for sub in ("special", "stats", "linalg"):
      importlib.import_module(f"{lib.__name__}.scipy.{sub}")
    self.logsumexp = self.scipy.special.logsumexp


def run_programs(libname, out_path, only, x64=False):
  import warnings
  warnings.simplefilter("ignore")
  if libname == "jax":
    import jax as lib
  else:
    import ourjax as lib
  if x64:
    lib.config.update("jax_enable_x64", True)
  import diff_programs
  L = _Libs(lib)
  out = {}
  for name, fn in diff_programs.PROGRAMS:
    if only and not name.startswith(only):
      continue
    res = {}
    for mode in ("eager", "jit"):
      try:
        with np.errstate(all="ignore"):
          r = fn(L) if mode == "eager" else lib.jit(lambda: fn(L))()
          leaves, tdef = lib.tree_util.tree_flatten(r, is_leaf=lambda x: x is None)
          res[mode] = ("tuple", [("py", str(len(leaves)))] + [_record(v, lib) for v in leaves])
      except Exception as e:     # noqa: BLE001
        res[mode] = ("error", type(e).__name__, str(e)[:300])
    out[name] = res
    if len(out) % 100 == 0:          # (a long run keeps what it has)
      with open(out_path, "wb") as fh:
        pickle.dump(out, fh)
  with open(out_path, "wb") as fh:
    pickle.dump(out, fh)


def compare_programs(pa, pb, show_jit_errors=False):
  with open(pa, "rb") as fh:
    ja = pickle.load(fh)
  with open(pb, "rb") as fh:
    ob = pickle.load(fh)
  bad = 0
  for name in ja:
    if name not in ob:
      continue
    for mode in ("eager", "jit"):
      a, b = ja[name][mode], ob[name][mode]
      if mode == "jit" and a[0] == "error" and not show_jit_errors:
        continue       # (a program JAX cannot jit whole: Python values out, concrete use...)
      d = _same(a, b)
      if d:
        bad += 1
        extra = ""
        if a[0] == "error" or b[0] == "error":
          extra = f"\n      JAX: {a[2] if a[0] == 'error' else ''}\n      ours: {b[2] if b[0] == 'error' else ''}"
        print(f"{name} [{mode}]: {d}{extra}")
  print(f"{bad} differences in {len(ja)} programs x 2 modes")


def _tol(dt):
  return {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-12}.get(dt, 0)


def _same(a, b):
  """None when records a (JAX) and b (ourjax) agree, else the difference in words."""
  if a[0] == "tuple" or b[0] == "tuple":
    if a[0] != b[0] or len(a[1]) != len(b[1]):
      return f"structure {a[0]} vs {b[0]}"
    for x, y in zip(a[1], b[1]):
      d = _same(x, y)
      if d:
        return d
    return None
  if a[0] == "py" or b[0] == "py":
    return None if a == b else f"python value {a[1]} vs {b[1] if len(b) > 1 else b}"
  if a[0] != b[0]:
    return f"JAX {a[0]} {a[1:3] if a[0] != 'ok' else a[1:4]} / ours {b[0]} " \
           f"{b[1:3] if b[0] != 'ok' else b[1:4]}"
  if a[0] == "error" and a[1] != b[1] and not (
      b[1] == "AxisError" and a[1] in ("ValueError", "IndexError")):   # (AxisError is both)
    return f"error {a[1]} vs {b[1]}"
  if a[0] != "ok":
    return None
  _, dta, sha, wa, ba = a
  _, dtb, shb, wb, bb = b
  if dta != dtb:
    return f"dtype {dta} vs {dtb}"
  if tuple(sha) != tuple(shb):
    return f"shape {sha} vs {shb}"
  if wa != wb:
    return f"weak_type {wa} vs {wb}"
  dt = _np_dtype(dta)
  x = np.frombuffer(ba, dt).reshape(sha)
  y = np.frombuffer(bb, dt).reshape(shb)
  if dt.kind in "biu" or dt == np.bool_:
    if not np.array_equal(x, y):
      return f"values {x.ravel()[:8]} vs {y.ravel()[:8]}"
    return None
  if dt.kind == "c":
    x, y = x.astype(np.complex128), y.astype(np.complex128)
    pairs = [(x.real, y.real), (x.imag, y.imag)]
  else:
    pairs = [(x.astype(np.float64), y.astype(np.float64))]
  for u, v in pairs:
    if not np.array_equal(np.isnan(u), np.isnan(v)):
      return f"NaN positions {u.ravel()[:8]} vs {v.ravel()[:8]}"
    m = ~np.isnan(u)
    u, v = u[m], v[m]
    zero = (u == 0) & (v == 0)
    if not np.array_equal(np.signbit(u[zero]), np.signbit(v[zero])):
      return f"signed zeros {u[:8]} vs {v[:8]}"
    tol = _tol(dta)
    with np.errstate(all="ignore"):
      bad = ~((u == v) | (np.abs(u - v) <= tol * np.maximum(np.abs(u), 1e-30) * 4))
    if bad.any():
      return f"values {u[bad][:6]} vs {v[bad][:6]}"
  return None


def compare(pa, pb, seed, n, x64):
  with open(pa, "rb") as fh:
    ja = pickle.load(fh)
  with open(pb, "rb") as fh:
    ob = pickle.load(fh)
  cases = {c[0]: c for c in draw_cases(seed, n, x64)}
  bad = 0
  for i in sorted(ja):
    for mode in ("eager", "jit"):
      d = _same(ja[i][mode], ob[i][mode])
      if d:
        bad += 1
        _, family, name, ops, axis = cases[i]
        desc = ", ".join(f"{k}:{v!r}" if k == "py" else f"{k}:{v.dtype.name}{list(v.shape)}"
                         for k, v in ops)
        print(f"#{i} {mode} {family}.{name}({desc}{'' if axis is None else f', axis={axis}'}):"
              f" {d}")
  print(f"{bad} differences in {len(ja)} cases x 2 modes")


if __name__ == "__main__":
  p = argparse.ArgumentParser()
  p.add_argument("cmd")
  p.add_argument("a")
  p.add_argument("b")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--n", type=int, default=500)
  p.add_argument("--x64", action="store_true")
  p.add_argument("--suite", choices=["ops", "programs"], default="ops")
  p.add_argument("--only", default="")
  p.add_argument("--show-jit-errors", action="store_true")
  o = p.parse_args()
  if o.suite == "programs":
    sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
    if o.cmd == "run":
      run_programs(o.a, o.b, o.only, o.x64)
    else:
      compare_programs(o.a, o.b, o.show_jit_errors)
  elif o.cmd == "run":
    run(o.a, o.seed, o.n, o.x64)
  else:
    compare(o.a, o.b, o.seed, o.n, o.x64)
