#!/usr/bin/env python
"""Differential compatibility audit: the same small programs run with real JAX and with ourjax.

Every case is written once against the module-level names ``jax``, ``jnp``, ``lax`` (and
``np``, which is NumPy on both sides); ``setup(side)`` binds them to JAX or to ourjax.

    /work/benchvenv/bin/python tools/jaxdiff.py --side jax    --out /tmp/jax.pkl
    .venv/bin/python          tools/jaxdiff.py --side ourjax --out /tmp/ours.pkl
    .venv/bin/python          tools/jaxdiff.py --compare /tmp/jax.pkl /tmp/ours.pkl

``--both`` runs the two sides (the JAX side with ``--jax-python``) and compares.
``-k SUBSTR`` keeps only the cases whose name contains SUBSTR.

Each case runs in its own try/except: a result is normalised to plain data (arrays become
(dtype, shape, weak_type, NumPy value); containers keep their type; exceptions become their type
name, base classes and message), so one failing case never stops the others.  The comparison
reports differences in value (tolerance), dtype, shape, weak_type, pytree structure, Python type
and exception type.  An exception of a different type that is a subclass of JAX's (so that
``except JaxType`` still catches it) is reported apart, as a soft difference.

This script is a tool: ourjax never imports it, and the test suite does not run it.
"""
from __future__ import annotations

import argparse
import collections
import functools
import math
import os
import pickle
import signal
import subprocess
import sys
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

jax = jnp = lax = None   # bound by setup()
SIDE = None

CASES: list[tuple[str, callable]] = []


def C(name, fn):
  CASES.append((name, fn))


def case(name):
  def deco(fn):
    C(name, fn)
    return fn
  return deco


def setup(side, x64=False):
  global jax, jnp, lax, SIDE
  SIDE = side
  if side == "jax":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax as _jax
    import jax.numpy as _jnp
    from jax import lax as _lax
    import jax.nn, jax.random, jax.tree_util, jax.errors  # noqa: F401,E401
  else:
    sys.path.insert(0, ROOT)
    import ourjax as _jax
    import ourjax.numpy as _jnp
    from ourjax import lax as _lax
  jax, jnp, lax = _jax, _jnp, _lax
  if x64:
    jax.config.update("jax_enable_x64", True)


# ---------------------------------------------------------------------------------------------
# Normalisation of results.

def _is_array(x):
  return (hasattr(x, "dtype") and hasattr(x, "shape") and hasattr(x, "__array__")
          and not isinstance(x, (np.ndarray, np.generic)))


def _np_value(a):
  v = np.asarray(a)
  if v.dtype.kind == "V" or v.dtype.name in ("bfloat16",) or v.dtype.name.startswith("float8"):
    v = v.astype(np.float32)
  return v


def norm(x, depth=0):
  if depth > 20:
    return ("other", type(x).__name__, "<deep>")
  if x is None:
    return ("none",)
  if isinstance(x, bool):
    return ("py", "bool", x)
  if isinstance(x, int):
    return ("py", "int", x)
  if isinstance(x, float):
    return ("py", "float", x)
  if isinstance(x, complex):
    return ("py", "complex", x)
  if isinstance(x, str):
    return ("py", "str", x)
  if isinstance(x, np.dtype):
    return ("dtype", str(x))
  if isinstance(x, type):
    return ("type", x.__name__)
  if isinstance(x, np.ndarray):
    return ("ndarray", str(x.dtype), tuple(x.shape), _np_value(x))
  if isinstance(x, np.generic):
    return ("npscalar", type(x).__name__, str(x.dtype), _np_value(x))
  if _is_array(x):
    dt = str(x.dtype)
    try:
      r = repr(x)
    except Exception as e:  # noqa: BLE001
      r = f"<repr failed: {type(e).__name__}>"
    weak = "weak_type=True" in r
    if "key<" in dt:
      return ("keyarray", dt, tuple(x.shape), None)
    try:
      v = _np_value(x)
    except Exception as e:  # noqa: BLE001
      v = f"<asarray failed: {type(e).__name__}: {e}>"
    return ("array", dt, tuple(x.shape), weak, v)
  if isinstance(x, tuple) and hasattr(x, "_fields"):
    return ("namedtuple", type(x).__name__, tuple(x._fields),
            [norm(v, depth + 1) for v in x])
  if isinstance(x, (tuple, list)):
    return (type(x).__name__ if type(x) in (tuple, list) else "seq:" + type(x).__name__,
            [norm(v, depth + 1) for v in x])
  if isinstance(x, dict):
    keys = list(x.keys())
    try:
      keys = sorted(keys)
    except TypeError:
      pass
    return ("dict", [repr(k) for k in keys], [norm(x[k], depth + 1) for k in keys])
  return ("other", type(x).__name__, str(x)[:300])


def norm_exc(e):
  mro = [c.__name__ for c in type(e).__mro__]
  msg = str(e).strip().splitlines()
  return ("exc", type(e).__name__, mro, (msg[0] if msg else "")[:300])


class _Timeout(Exception):
  pass


def _alarm(signum, frame):
  raise _Timeout("case took too long")


def run_side(side, out, filt=None, verbose=False, x64=False):
  setup(side, x64)
  import warnings
  warnings.simplefilter("ignore")
  results = collections.OrderedDict()
  signal.signal(signal.SIGALRM, _alarm)
  for name, fn in CASES:
    if filt and not any(f in name for f in filt):
      continue
    signal.alarm(60)
    if verbose:
      print(name, flush=True)
    try:
      r = norm(fn())
    except _Timeout as e:
      r = ("exc", "Timeout", ["Timeout"], str(e))
    except BaseException as e:  # noqa: BLE001
      if isinstance(e, KeyboardInterrupt):
        raise
      r = norm_exc(e)
      if verbose:
        traceback.print_exc()
    finally:
      signal.alarm(0)
    results[name] = r
  with open(out, "wb") as f:
    pickle.dump({"side": side, "results": results}, f)
  print(f"{side}: {len(results)} cases -> {out}")


# ---------------------------------------------------------------------------------------------
# Comparison.

def _tol(dt):
  if dt in ("float16", "bfloat16") or dt.startswith("float8"):
    return 1e-2, 1e-2
  if dt in ("complex64", "float32"):
    return 2e-5, 1e-5
  return 1e-7, 1e-9


def _values_close(a, b, dt):
  if isinstance(a, str) or isinstance(b, str):
    return a == b
  a, b = np.asarray(a), np.asarray(b)
  if a.shape != b.shape:
    return False
  if a.dtype.kind in "fc" or b.dtype.kind in "fc":
    rtol, atol = _tol(dt)
    try:
      return bool(np.allclose(a.astype(np.complex128), b.astype(np.complex128), rtol=rtol,
                              atol=atol, equal_nan=True))
    except Exception:  # noqa: BLE001
      return False
  if a.dtype.kind == "V" or b.dtype.kind == "V":
    return a.shape == b.shape
  return bool(np.array_equal(a, b))


def _show(v):
  if isinstance(v, np.ndarray):
    s = np.array2string(v, threshold=12, precision=6)
    return s.replace("\n", " ")
  return repr(v)


def diff(j, o, path="$"):
  """A list of (kind, message) differences between normalised values j (JAX) and o (ours)."""
  if j[0] == "exc" or o[0] == "exc":
    if j[0] == "exc" and o[0] == "exc":
      if j[1] == o[1]:
        return []
      if j[1] in o[2]:
        return [("soft-exc", f"{path}: exception {o[1]} (a {j[1]}) where JAX raises {j[1]}: "
                             f"jax: {j[3]!r} | ours: {o[3]!r}")]
      return [("exc", f"{path}: exception type {o[1]} where JAX raises {j[1]}: "
                      f"jax: {j[3]!r} | ours: {o[3]!r}")]
    if j[0] == "exc":
      return [("exc", f"{path}: JAX raises {j[1]}: {j[3]!r}; ours returns {_brief(o)}")]
    return [("exc", f"{path}: ours raises {o[1]}: {o[3]!r}; JAX returns {_brief(j)}")]
  if j[0] != o[0]:
    return [("kind", f"{path}: JAX gives {_brief(j)}, ours {_brief(o)}")]
  k = j[0]
  out = []
  if k == "array":
    _, jdt, jsh, jw, jv = j
    _, odt, osh, ow, ov = o
    if jdt != odt:
      out.append(("dtype", f"{path}: dtype {odt}, JAX {jdt}"))
    if jsh != osh:
      out.append(("shape", f"{path}: shape {osh}, JAX {jsh}"))
    if jw != ow:
      out.append(("weak", f"{path}: weak_type {ow}, JAX {jw}"))
    if jsh == osh and not _values_close(jv, ov, jdt):
      out.append(("value", f"{path}: value {_show(ov)}, JAX {_show(jv)}"))
    return out
  if k == "ndarray":
    if j[1] != o[1]:
      out.append(("dtype", f"{path}: numpy dtype {o[1]}, JAX {j[1]}"))
    if j[2] != o[2]:
      out.append(("shape", f"{path}: numpy shape {o[2]}, JAX {j[2]}"))
    elif not _values_close(j[3], o[3], j[1]):
      out.append(("value", f"{path}: value {_show(o[3])}, JAX {_show(j[3])}"))
    return out
  if k == "npscalar":
    if j[1] != o[1] or j[2] != o[2]:
      out.append(("dtype", f"{path}: numpy scalar {o[1]}/{o[2]}, JAX {j[1]}/{j[2]}"))
    elif not _values_close(j[3], o[3], j[2]):
      out.append(("value", f"{path}: value {_show(o[3])}, JAX {_show(j[3])}"))
    return out
  if k == "py":
    if j[1] != o[1]:
      return [("pytype", f"{path}: Python {o[1]} {o[2]!r}, JAX {j[1]} {j[2]!r}")]
    if j[1] == "str":
      if j[2] != o[2]:
        return [("text", f"{path}: text differs:\n--- JAX\n{j[2]}\n--- ours\n{o[2]}")]
      return []
    if j[1] == "float" and _values_close(j[2], o[2], "float64"):
      return []
    if j[1] == "complex" and _values_close(j[2], o[2], "complex128"):
      return []
    if j[2] != o[2]:
      return [("value", f"{path}: {o[2]!r}, JAX {j[2]!r}")]
    return []
  if k in ("dtype", "type", "none"):
    return [] if j == o else [("value", f"{path}: {o[1:]}, JAX {j[1:]}")]
  if k == "keyarray":
    return [] if j[1:3] == o[1:3] else [("dtype", f"{path}: key array {o[1:3]}, JAX {j[1:3]}")]
  if k in ("tuple", "list") or k.startswith("seq:"):
    if len(j[1]) != len(o[1]):
      return [("tree", f"{path}: {k} of length {len(o[1])}, JAX {len(j[1])}")]
    for i, (a, b) in enumerate(zip(j[1], o[1])):
      out += diff(a, b, f"{path}[{i}]")
    return out
  if k == "namedtuple":
    if j[1:3] != o[1:3]:
      return [("tree", f"{path}: namedtuple {o[1:3]}, JAX {j[1:3]}")]
    for i, (a, b) in enumerate(zip(j[3], o[3])):
      out += diff(a, b, f"{path}.{j[2][i]}")
    return out
  if k == "dict":
    if j[1] != o[1]:
      return [("tree", f"{path}: dict keys {o[1]}, JAX {j[1]}")]
    for key, a, b in zip(j[1], j[2], o[2]):
      out += diff(a, b, f"{path}[{key}]")
    return out
  if k == "other":
    if j[1] != o[1] or j[2] != o[2]:
      return [("other", f"{path}: {o[1]} {o[2]!r}, JAX {j[1]} {j[2]!r}")]
    return []
  return [] if j == o else [("other", f"{path}: {o}, JAX {j}")]


def _brief(v):
  if v[0] == "array":
    return f"Array({v[1]}{list(v[2])}{', weak' if v[3] else ''})"
  if v[0] == "exc":
    return f"{v[1]}: {v[3]!r}"
  if v[0] == "py":
    return f"{v[1]} {v[2]!r}"
  s = repr(v)
  return s if len(s) < 120 else s[:117] + "..."


def compare(jpath, opath, show_soft=True):
  with open(jpath, "rb") as f:
    J = pickle.load(f)["results"]
  with open(opath, "rb") as f:
    O = pickle.load(f)["results"]
  names = [n for n in J if n in O]
  n_match = n_soft = 0
  by_group = collections.Counter()
  kinds = collections.Counter()
  lines = []
  soft_lines = []
  for n in names:
    d = diff(J[n], O[n])
    hard = [x for x in d if x[0] != "soft-exc"]
    soft = [x for x in d if x[0] == "soft-exc"]
    if not hard:
      n_match += 1
      if soft:
        n_soft += 1
        soft_lines.append(f"[{n}]\n  " + "\n  ".join(m for _, m in soft))
      continue
    by_group[n.split("/")[0]] += 1
    for k, _ in hard:
      kinds[k] += 1
    lines.append(f"[{n}]\n  " + "\n  ".join(m for _, m in hard))
  for l in lines:
    print(l)
  if show_soft and soft_lines:
    print("\n=== soft differences (ours raises a subclass of JAX's exception) ===")
    for l in soft_lines:
      print(l)
  missing = [n for n in J if n not in O] + [n for n in O if n not in J]
  print(f"\n{len(names)} cases compared: {n_match} match ({n_soft} with a subclass exception), "
        f"{len(names) - n_match} differ" + (f"; {len(missing)} on one side only" if missing
                                            else ""))
  if by_group:
    print("differing by group:", dict(sorted(by_group.items())))
    print("differences by kind:", dict(sorted(kinds.items())))
  return len(names) - n_match


# =============================================================================================
# The cases.  Each is a zero-argument callable that uses jax/jnp/lax (bound by setup).
# =============================================================================================

def a3():
  return jnp.arange(3)


def f3():
  return jnp.arange(3.0)


def m23():
  return jnp.arange(6.0).reshape(2, 3)


def i23():
  return jnp.arange(6).reshape(2, 3)


# ---- creation -------------------------------------------------------------------------------
G = "create/"
C(G + "arange_int", lambda: jnp.arange(5))
C(G + "arange_float", lambda: jnp.arange(5.0))
C(G + "arange_start_stop_step", lambda: jnp.arange(1, 10, 2))
C(G + "arange_float_step", lambda: jnp.arange(0, 1, 0.25))
C(G + "arange_dtype", lambda: jnp.arange(5, dtype=jnp.float32))
C(G + "arange_dtype_str", lambda: jnp.arange(3, dtype="int16"))
C(G + "arange_neg_step", lambda: jnp.arange(5, 0, -1))
C(G + "arange_empty", lambda: jnp.arange(5, 2))
C(G + "arange_np_int", lambda: jnp.arange(np.int64(4)))
C(G + "linspace", lambda: jnp.linspace(0, 1, 5))
C(G + "linspace_noend", lambda: jnp.linspace(0, 1, 5, endpoint=False))
C(G + "linspace_int_dtype", lambda: jnp.linspace(0, 10, 5, dtype=jnp.int32))
C(G + "linspace_retstep", lambda: jnp.linspace(0, 1, 5, retstep=True))
C(G + "linspace_num1", lambda: jnp.linspace(2, 3, 1))
C(G + "logspace", lambda: jnp.logspace(0, 2, 3))
C(G + "eye", lambda: jnp.eye(3))
C(G + "eye_rect_k", lambda: jnp.eye(3, 4, k=1))
C(G + "eye_bool", lambda: jnp.eye(2, dtype=bool))
C(G + "identity", lambda: jnp.identity(2, dtype=jnp.int8))
C(G + "full_int", lambda: jnp.full((2,), 3))
C(G + "full_float", lambda: jnp.full((2,), 3.0))
C(G + "full_bool", lambda: jnp.full((2,), True))
C(G + "full_dtype", lambda: jnp.full((2,), 3, dtype=jnp.float16))
C(G + "full_strong_scalar", lambda: jnp.full((2, 2), jnp.float16(2)))
C(G + "full_array_fill", lambda: jnp.full((2, 3), jnp.arange(3)))
C(G + "zeros", lambda: jnp.zeros(3))
C(G + "zeros_tuple_dtype", lambda: jnp.zeros((2, 3), jnp.int8))
C(G + "zeros_scalar_shape", lambda: jnp.zeros(()))
C(G + "ones_bool", lambda: jnp.ones(2, bool))
C(G + "ones_int_builtin", lambda: jnp.ones(2, int))
C(G + "ones_float_builtin", lambda: jnp.ones(2, float))
C(G + "empty", lambda: jnp.empty(2).shape)
C(G + "zeros_like_int", lambda: jnp.zeros_like(a3()))
C(G + "ones_like_dtype", lambda: jnp.ones_like(a3(), dtype=jnp.float16))
C(G + "full_like_int_fill_float", lambda: jnp.full_like(a3(), 2.5))
C(G + "zeros_like_scalar", lambda: jnp.zeros_like(3.0))
C(G + "zeros_like_pyint", lambda: jnp.zeros_like(3))
C(G + "array_mixed_scalars", lambda: jnp.array([1, 2.0]))
C(G + "array_int_bool", lambda: jnp.array([1, True]))
C(G + "array_complex", lambda: jnp.array([1, 2j]))
C(G + "array_int", lambda: jnp.array(3))
C(G + "array_float", lambda: jnp.array(3.0))
C(G + "array_bool", lambda: jnp.array(True))
C(G + "array_nested_dtype", lambda: jnp.array([[1, 2], [3, 4]], dtype=jnp.float16))
C(G + "array_empty", lambda: jnp.array([]))
C(G + "asarray_f64", lambda: jnp.asarray(np.arange(3.0)))
C(G + "asarray_i64", lambda: jnp.asarray(np.arange(3)))
C(G + "array_np_int64_scalar", lambda: jnp.array(np.int64(5)))
C(G + "array_np_float32_list", lambda: jnp.array([np.float32(1), 2]))
C(G + "array_of_arrays", lambda: jnp.array([jnp.int8(1), jnp.int8(2)]))
C(G + "array_of_jnp_arrays_mixed", lambda: jnp.array([jnp.arange(2), jnp.ones(2)]))
C(G + "asarray_weak_pyfloat", lambda: jnp.asarray(2.0))
C(G + "array_tuple", lambda: jnp.array((1, 2, 3)))
C(G + "array_big_int", lambda: jnp.array(2 ** 31))
C(G + "array_copy_false", lambda: jnp.array(a3(), copy=False))
C(G + "array_ndmin", lambda: jnp.array(1.0, ndmin=2))
C(G + "tri", lambda: jnp.tri(3, k=-1))
C(G + "tril", lambda: jnp.tril(jnp.ones((3, 3))))
C(G + "triu_k", lambda: jnp.triu(jnp.ones((3, 3), int), k=1))
C(G + "diag_vec", lambda: jnp.diag(jnp.arange(3)))
C(G + "diag_mat_k", lambda: jnp.diag(jnp.arange(9).reshape(3, 3), k=1))
C(G + "meshgrid", lambda: jnp.meshgrid(jnp.arange(2), jnp.arange(3.0)))
C(G + "meshgrid_ij", lambda: jnp.meshgrid(jnp.arange(2), jnp.arange(3), indexing="ij"))
C(G + "indices", lambda: jnp.indices((2, 3)))
C(G + "scalar_type_float32", lambda: jnp.float32(3))
C(G + "scalar_type_int32_from_float", lambda: jnp.int32(2.7))
C(G + "scalar_type_bool", lambda: jnp.bool_(1))
C(G + "scalar_type_bf16", lambda: jnp.bfloat16(1.5))
C(G + "scalar_type_list", lambda: jnp.float32([1, 2]))
C(G + "astype_int_to_float", lambda: a3().astype(jnp.float32))
C(G + "astype_float_to_int_neg", lambda: jnp.array([-1.7, 1.7]).astype(jnp.int32))
C(G + "astype_float_to_bool", lambda: jnp.array([0.0, 0.5]).astype(bool))
C(G + "astype_bool_to_int", lambda: jnp.array([True, False]).astype(int))
C(G + "astype_bf16", lambda: jnp.array([1.0, 1.001]).astype(jnp.bfloat16))
C(G + "astype_weak_keeps", lambda: jnp.asarray(2.0).astype(jnp.float32))
C(G + "astype_float64_nox64", lambda: a3().astype(jnp.float64))
C(G + "astype_complex_to_float", lambda: jnp.array([1 + 2j]).astype(jnp.float32))
C(G + "jnp_astype_fn", lambda: jnp.astype(a3(), jnp.uint8))
C(G + "copy", lambda: jnp.copy(f3()))
C(G + "fromfunction", lambda: jnp.fromfunction(lambda i, j: i + j, (2, 2)))

# ---- promotion and weak types ------------------------------------------------------------------
G = "promote/"
C(G + "i32_plus_int", lambda: a3() + 1)
C(G + "i32_plus_float", lambda: a3() + 1.0)
C(G + "float_times_i32", lambda: 1.0 * a3())
C(G + "i32_times_bool", lambda: a3() * True)
C(G + "f16_plus_float", lambda: jnp.ones(2, jnp.float16) + 1.0)
C(G + "f16_plus_f32", lambda: jnp.ones(2, jnp.float16) + jnp.ones(2))
C(G + "bf16_plus_f16", lambda: jnp.ones(2, jnp.bfloat16) + jnp.ones(2, jnp.float16))
C(G + "i8_plus_u8", lambda: jnp.ones(2, jnp.int8) + jnp.ones(2, jnp.uint8))
C(G + "i8_plus_i32", lambda: jnp.ones(2, jnp.int8) + jnp.ones(2, jnp.int32))
C(G + "u32_plus_i32", lambda: jnp.ones(2, jnp.uint32) + jnp.ones(2, jnp.int32))
C(G + "u8_plus_int", lambda: jnp.ones(2, jnp.uint8) + 3)
C(G + "i8_plus_f16", lambda: jnp.ones(2, jnp.int8) + jnp.ones(2, jnp.float16))
C(G + "f16_scalar_plus_int", lambda: jnp.float16(1) + 1)
C(G + "f32_scalar_plus_float", lambda: jnp.float32(1) + 1.5)
C(G + "i8_scalar_plus_big_int", lambda: jnp.int8(1) + 1000)
C(G + "u8_minus_neg", lambda: jnp.uint8(3) + (-1))
C(G + "bool_plus_bool", lambda: jnp.array([True, False]) + jnp.array([True, True]))
C(G + "bool_times_int", lambda: jnp.array([True, False]) * 3)
C(G + "bool_plus_float", lambda: jnp.array([True, False]) + 1.5)
C(G + "bool_sub_bool", lambda: jnp.subtract(jnp.array([True]), jnp.array([True])))
C(G + "bool_neg", lambda: -jnp.array([True, False]))
C(G + "bool_invert", lambda: ~jnp.array([True, False]))
C(G + "weak_plus_weak", lambda: jnp.asarray(1.0) + 2)
C(G + "weak_int_plus_weak_float", lambda: jnp.asarray(1) + 2.0)
C(G + "i32_plus_np_f32_scalar", lambda: a3() + np.float32(1))
C(G + "i32_plus_np_f64_array", lambda: a3() + np.array(1.0))
C(G + "f32_plus_complex", lambda: f3() + 1j)
C(G + "i32_plus_complex", lambda: a3() + 1j)
C(G + "f32_plus_jnp_f32_scalar", lambda: jnp.ones(2, jnp.float16) + jnp.float32(1))
C(G + "result_type_int_float", lambda: jnp.result_type(jnp.int32, 1.0))
C(G + "result_type_f16_pyint", lambda: jnp.result_type(jnp.float16, 1))
C(G + "result_type_u8_i8", lambda: jnp.result_type(jnp.uint8, jnp.int8))
C(G + "promote_types_i32_f16", lambda: jnp.promote_types(jnp.int32, jnp.float16))
C(G + "promote_types_u64_i64", lambda: jnp.promote_types(jnp.uint64, jnp.int64))
C(G + "where_int_float", lambda: jnp.where(jnp.array([True, False]), a3()[:2], 2.5))
C(G + "where_scalars", lambda: jnp.where(jnp.array([True, False]), 1, 2.0))
C(G + "where_one_arg", lambda: jnp.where(jnp.array([0, 1, 2])))
C(G + "maximum_int_float", lambda: jnp.maximum(a3(), 1.5))
C(G + "minimum_weak", lambda: jnp.minimum(2, 3))
C(G + "add_two_pyscalars", lambda: jnp.add(1, 2))
C(G + "multiply_pyfloat_int", lambda: jnp.multiply(2.0, 3))
C(G + "sin_int", lambda: jnp.sin(a3()))
C(G + "sqrt_int", lambda: jnp.sqrt(jnp.array([4, 9])))
C(G + "exp_bool", lambda: jnp.exp(jnp.array([True, False])))
C(G + "sqrt_pyfloat", lambda: jnp.sqrt(4.0))
C(G + "sqrt_pyint", lambda: jnp.sqrt(4))
C(G + "floor_int", lambda: jnp.floor(a3()))
C(G + "ceil_f16", lambda: jnp.ceil(jnp.ones(2, jnp.float16) * 1.5))
C(G + "round_half_even", lambda: jnp.round(jnp.array([0.5, 1.5, 2.5, -0.5])))
C(G + "round_decimals", lambda: jnp.round(jnp.array([1.234, 5.678]), 2))
C(G + "round_int", lambda: jnp.round(a3()))
C(G + "sign_int", lambda: jnp.sign(jnp.array([-2, 0, 3])))
C(G + "abs_int8_min", lambda: jnp.abs(jnp.array([-128, 5], jnp.int8)))
C(G + "neg_uint", lambda: -jnp.array([1, 2], jnp.uint8))
C(G + "clip_int_float_bounds", lambda: jnp.clip(a3(), 0.5, 1.5))
C(G + "clip_weak", lambda: jnp.clip(5, 0, 3))
C(G + "isnan_int", lambda: jnp.isnan(a3()))
C(G + "logical_and_int", lambda: jnp.logical_and(a3(), 1))
C(G + "equal_pyscalars", lambda: jnp.equal(1, 1.0))
C(G + "compare_i32_float", lambda: a3() < 1.5)
C(G + "true_divide_ints", lambda: a3() / 2)
C(G + "true_divide_int_arrays", lambda: jnp.divide(a3(), jnp.array([1, 2, 4])))
C(G + "int_div_weak", lambda: jnp.asarray(7) / 2)
C(G + "floordiv_pos", lambda: jnp.array([7, -7, 7, -7]) // jnp.array([2, 2, -2, -2]))
C(G + "floordiv_float", lambda: jnp.array([7.5, -7.5]) // 2)
C(G + "floordiv_by_zero_int", lambda: jnp.array([7]) // 0)
C(G + "mod_int", lambda: jnp.array([7, -7, 7, -7]) % jnp.array([3, 3, -3, -3]))
C(G + "mod_float", lambda: jnp.array([7.5, -7.5]) % 2)
C(G + "fmod_int", lambda: jnp.fmod(jnp.array([7, -7]), 3))
C(G + "remainder_float_neg", lambda: jnp.remainder(-1.0, 3.0))
C(G + "divmod", lambda: jnp.divmod(jnp.array([7, -7]), 2))
C(G + "pow_int_2", lambda: a3() ** 2)
C(G + "pow_int_neg", lambda: jnp.array([1, 2]) ** -1)
C(G + "pow_int_float", lambda: a3() ** 2.0)
C(G + "pow_float_int_arr", lambda: f3() ** a3())
C(G + "pow_int_int_arr", lambda: jnp.array([2, 3]) ** jnp.array([3, 2]))
C(G + "pow_int_neg_arr", lambda: jnp.array([2, 3]) ** jnp.array([-1, 0]))
C(G + "rpow_int", lambda: 2 ** a3())
C(G + "rpow_float", lambda: 2.0 ** a3())
C(G + "power_fn_scalars", lambda: jnp.power(2, 3))
C(G + "pow_sqrt", lambda: f3() ** 0.5)
C(G + "f32_scalar_pow", lambda: jnp.float32(2) ** 2)
C(G + "pow_bool", lambda: jnp.array([True]) ** 2)
C(G + "bitand", lambda: a3() & 3)
C(G + "bitor_bool", lambda: jnp.array([True, False]) | jnp.array([False, False]))
C(G + "invert_int", lambda: ~a3())
C(G + "left_shift", lambda: jnp.left_shift(a3(), 2))
C(G + "right_shift_neg", lambda: jnp.right_shift(jnp.array([-8]), 1))
C(G + "shift_overflow", lambda: jnp.left_shift(jnp.int32(1), 40))
C(G + "xor_float_err", lambda: f3() ^ 1)
C(G + "int_mul_overflow", lambda: jnp.array([2 ** 30], jnp.int32) * 4)
C(G + "float_int_cast_nan", lambda: jnp.isnan(jnp.array([jnp.nan])).astype(int))
C(G + "heaviside", lambda: jnp.heaviside(jnp.array([-1.0, 0.0, 2.0]), 0.5))
C(G + "hypot_int", lambda: jnp.hypot(3, 4))
C(G + "arctan2_int", lambda: jnp.arctan2(a3(), 2))
C(G + "float_power_int", lambda: jnp.float_power(2, 3))
C(G + "logaddexp", lambda: jnp.logaddexp(1.0, 2.0))
C(G + "nan_to_num", lambda: jnp.nan_to_num(jnp.array([jnp.nan, jnp.inf, -jnp.inf])))
C(G + "isclose", lambda: jnp.isclose(jnp.array([1.0, 1.1]), 1.0))
C(G + "allclose_pybool", lambda: jnp.allclose(f3(), f3()))
C(G + "array_equal", lambda: jnp.array_equal(a3(), jnp.arange(3.0)))
C(G + "conj_real", lambda: jnp.conj(a3()))
C(G + "real_imag", lambda: (jnp.real(jnp.array([1 + 2j])), jnp.imag(f3())))
C(G + "signbit", lambda: jnp.signbit(jnp.array([-0.0, 0.0, -1.0])))
C(G + "reciprocal_int", lambda: jnp.reciprocal(jnp.array([1, 2])))
C(G + "square_weak", lambda: jnp.square(3))
C(G + "log1p_f16", lambda: jnp.log1p(jnp.ones(2, jnp.float16)))
C(G + "exp2_int", lambda: jnp.exp2(a3()))
C(G + "cbrt", lambda: jnp.cbrt(jnp.array([-8.0, 27.0])))
C(G + "sinc", lambda: jnp.sinc(jnp.array([0.0, 0.5])))
C(G + "deg2rad_int", lambda: jnp.deg2rad(180))
C(G + "gcd_lcm", lambda: (jnp.gcd(12, 18), jnp.lcm(jnp.array([4, 6]), 10)))

# ---- reductions -----------------------------------------------------------------------------
G = "reduce/"
C(G + "sum_all", lambda: jnp.sum(m23()))
C(G + "sum_axis0", lambda: jnp.sum(m23(), axis=0))
C(G + "sum_axis_neg", lambda: jnp.sum(m23(), axis=-1))
C(G + "sum_axis_tuple", lambda: jnp.sum(m23(), axis=(0, 1)))
C(G + "sum_keepdims", lambda: jnp.sum(m23(), axis=1, keepdims=True))
C(G + "sum_where", lambda: jnp.sum(m23(), where=m23() > 2))
C(G + "sum_initial", lambda: jnp.sum(m23(), initial=10.0))
C(G + "sum_int", lambda: jnp.sum(i23()))
C(G + "sum_bool", lambda: jnp.sum(jnp.array([True, True, False])))
C(G + "sum_int8", lambda: jnp.sum(jnp.ones(3, jnp.int8)))
C(G + "sum_uint8", lambda: jnp.sum(jnp.ones(3, jnp.uint8)))
C(G + "sum_f16", lambda: jnp.sum(jnp.ones(3, jnp.float16)))
C(G + "sum_dtype", lambda: jnp.sum(a3(), dtype=jnp.float32))
C(G + "sum_weak", lambda: jnp.sum(jnp.asarray(2.0)))
C(G + "sum_pyint", lambda: jnp.sum(3))
C(G + "sum_list", lambda: jnp.sum([1, 2, 3]))
C(G + "sum_empty", lambda: jnp.sum(jnp.zeros((0,))))
C(G + "prod_uint8", lambda: jnp.prod(jnp.array([2, 3], jnp.uint8)))
C(G + "prod_axis", lambda: jnp.prod(i23() + 1, axis=1))
C(G + "mean_int", lambda: jnp.mean(a3()))
C(G + "mean_bool", lambda: jnp.mean(jnp.array([True, False, True])))
C(G + "mean_f16", lambda: jnp.mean(jnp.ones(3, jnp.float16)))
C(G + "mean_axis_keepdims", lambda: jnp.mean(m23(), axis=0, keepdims=True))
C(G + "mean_where", lambda: jnp.mean(m23(), where=m23() > 1))
C(G + "mean_empty", lambda: jnp.mean(jnp.zeros((0,))))
C(G + "mean_dtype", lambda: jnp.mean(a3(), dtype=jnp.float16))
C(G + "mean_weak", lambda: jnp.mean(jnp.asarray(2.0)))
C(G + "var_int", lambda: jnp.var(a3()))
C(G + "var_ddof", lambda: jnp.var(m23(), ddof=1))
C(G + "var_axis", lambda: jnp.var(m23(), axis=1))
C(G + "std_bool", lambda: jnp.std(jnp.array([True, False])))
C(G + "std_ddof_axis", lambda: jnp.std(m23(), axis=0, ddof=1))
C(G + "var_complex", lambda: jnp.var(jnp.array([1 + 1j, 2 - 1j])))
C(G + "max_keepdims", lambda: jnp.max(m23(), axis=1, keepdims=True))
C(G + "max_bool", lambda: jnp.max(jnp.array([True, False])))
C(G + "max_initial", lambda: jnp.max(jnp.zeros((0,)), initial=-1.0))
C(G + "max_empty_err", lambda: jnp.max(jnp.zeros((0,))))
C(G + "min_where", lambda: jnp.min(m23(), where=m23() > 2, initial=100.0))
C(G + "amax", lambda: jnp.amax(i23(), axis=0))
C(G + "max_nan", lambda: jnp.max(jnp.array([1.0, jnp.nan])))
C(G + "argmax", lambda: jnp.argmax(jnp.array([1, 3, 3, 2])))
C(G + "argmax_axis", lambda: jnp.argmax(m23(), axis=1))
C(G + "argmax_keepdims", lambda: jnp.argmax(m23(), axis=1, keepdims=True))
C(G + "argmin_nan", lambda: jnp.argmin(jnp.array([1.0, jnp.nan, 0.0])))
C(G + "argmax_bool", lambda: jnp.argmax(jnp.array([False, True])))
C(G + "any_all", lambda: (jnp.any(a3() > 1), jnp.all(a3() >= 0)))
C(G + "any_axis_int", lambda: jnp.any(i23(), axis=0))
C(G + "all_empty", lambda: jnp.all(jnp.zeros((0,))))
C(G + "cumsum", lambda: jnp.cumsum(i23(), axis=1))
C(G + "cumsum_none", lambda: jnp.cumsum(i23()))
C(G + "cumsum_bool", lambda: jnp.cumsum(jnp.array([True, True])))
C(G + "cumsum_int8", lambda: jnp.cumsum(jnp.ones(3, jnp.int8)))
C(G + "cumprod_dtype", lambda: jnp.cumprod(a3() + 1, dtype=jnp.float32))
C(G + "nansum", lambda: jnp.nansum(jnp.array([1.0, jnp.nan])))
C(G + "nanmean", lambda: jnp.nanmean(jnp.array([1.0, jnp.nan, 3.0])))
C(G + "nanmax", lambda: jnp.nanmax(jnp.array([1.0, jnp.nan, 3.0])))
C(G + "median", lambda: jnp.median(jnp.array([3.0, 1.0, 2.0, 4.0])))
C(G + "median_int", lambda: jnp.median(jnp.array([3, 1, 2])))
C(G + "quantile", lambda: jnp.quantile(jnp.arange(5.0), 0.3))
C(G + "quantile_methods", lambda: [jnp.quantile(jnp.arange(5.0), 0.3, method=m) for m in
                                    ("lower", "higher", "nearest", "midpoint")])
C(G + "percentile_vec", lambda: jnp.percentile(jnp.arange(10.0), jnp.array([10.0, 90.0])))
C(G + "average_weights", lambda: jnp.average(f3(), weights=jnp.array([1.0, 2.0, 3.0])))
C(G + "average_returned", lambda: jnp.average(m23(), axis=0, returned=True))
C(G + "count_nonzero", lambda: jnp.count_nonzero(jnp.array([0, 1, 2])))
C(G + "ptp", lambda: jnp.ptp(m23(), axis=1))
C(G + "sum_axis_oob", lambda: jnp.sum(m23(), axis=2))
C(G + "method_sum", lambda: m23().sum(0))
C(G + "method_mean_keepdims", lambda: m23().mean(axis=-1, keepdims=True))
C(G + "method_max_argmax", lambda: (i23().max(), i23().argmax()))
C(G + "method_std", lambda: m23().std())
C(G + "method_cumsum", lambda: a3().cumsum())
C(G + "method_any", lambda: a3().any())
C(G + "logsumexp_scipy", lambda: jax.nn.logsumexp(f3()))

# ---- shapes ---------------------------------------------------------------------------------
G = "shape/"
C(G + "reshape_neg1", lambda: jnp.arange(6).reshape(-1, 2))
C(G + "reshape_tuple", lambda: jnp.reshape(jnp.arange(6), (3, 2)))
C(G + "reshape_order_F", lambda: jnp.reshape(jnp.arange(6), (2, 3), order="F"))
C(G + "reshape_args", lambda: jnp.arange(6).reshape(3, 2))
C(G + "reshape_bad", lambda: jnp.arange(6).reshape(4, 2))
C(G + "reshape_two_neg", lambda: jnp.arange(6).reshape(-1, -1))
C(G + "transpose_default", lambda: jnp.transpose(jnp.arange(24).reshape(2, 3, 4)).shape)
C(G + "transpose_axes", lambda: jnp.transpose(jnp.arange(24).reshape(2, 3, 4), (1, 0, 2)))
C(G + "T_1d", lambda: a3().T)
C(G + "T_3d", lambda: jnp.arange(24).reshape(2, 3, 4).T.shape)
C(G + "mT", lambda: jnp.arange(24).reshape(2, 3, 4).mT.shape)
C(G + "swapaxes", lambda: jnp.swapaxes(m23(), 0, 1))
C(G + "moveaxis", lambda: jnp.moveaxis(jnp.zeros((2, 3, 4)), 0, -1).shape)
C(G + "expand_dims_multi", lambda: jnp.expand_dims(a3(), (0, 2)).shape)
C(G + "squeeze", lambda: jnp.squeeze(jnp.zeros((1, 3, 1))).shape)
C(G + "squeeze_axis", lambda: jnp.squeeze(jnp.zeros((1, 3, 1)), axis=2).shape)
C(G + "squeeze_bad_axis", lambda: jnp.squeeze(jnp.zeros((1, 3)), axis=1))
C(G + "stack_neg_axis", lambda: jnp.stack([a3(), a3()], axis=-1))
C(G + "stack_mixed_dtypes", lambda: jnp.stack([a3(), f3()]))
C(G + "concatenate", lambda: jnp.concatenate([a3(), f3()]))
C(G + "concatenate_axis_none", lambda: jnp.concatenate([i23(), i23()], axis=None))
C(G + "concatenate_scalar_err", lambda: jnp.concatenate([jnp.array(1), jnp.array(2)]))
C(G + "split_sections", lambda: jnp.split(jnp.arange(6), 3))
C(G + "split_indices", lambda: jnp.split(jnp.arange(6), [1, 4]))
C(G + "split_uneven_err", lambda: jnp.split(jnp.arange(5), 2))
C(G + "array_split", lambda: jnp.array_split(jnp.arange(5), 2))
C(G + "hstack_1d", lambda: jnp.hstack([a3(), a3()]))
C(G + "vstack_1d", lambda: jnp.vstack([a3(), a3()]))
C(G + "dstack", lambda: jnp.dstack([a3(), a3()]).shape)
C(G + "column_stack", lambda: jnp.column_stack([a3(), a3()]))
C(G + "tile", lambda: jnp.tile(a3(), (2, 2)))
C(G + "repeat", lambda: jnp.repeat(a3(), 2))
C(G + "repeat_array", lambda: jnp.repeat(a3(), jnp.array([1, 0, 2])))
C(G + "repeat_total_len", lambda: jnp.repeat(a3(), jnp.array([1, 0, 2]), total_repeat_length=4))
C(G + "repeat_axis", lambda: jnp.repeat(i23(), 2, axis=1))
C(G + "flip", lambda: jnp.flip(i23()))
C(G + "flip_axis", lambda: jnp.flip(i23(), axis=1))
C(G + "roll_none", lambda: jnp.roll(i23(), 1))
C(G + "roll_axis", lambda: jnp.roll(i23(), -1, axis=1))
C(G + "rot90", lambda: jnp.rot90(i23()))
C(G + "pad_constant", lambda: jnp.pad(a3(), (1, 2)))
C(G + "pad_constant_value", lambda: jnp.pad(a3(), 1, constant_values=9))
C(G + "pad_edge", lambda: jnp.pad(a3(), 2, mode="edge"))
C(G + "pad_reflect", lambda: jnp.pad(a3(), 2, mode="reflect"))
C(G + "pad_wrap", lambda: jnp.pad(a3(), 2, mode="wrap"))
C(G + "pad_2d", lambda: jnp.pad(i23(), ((1, 0), (0, 1))))
C(G + "diff", lambda: jnp.diff(jnp.array([1, 4, 9, 16])))
C(G + "diff_n2", lambda: jnp.diff(jnp.array([1, 4, 9, 16]), n=2))
C(G + "diff_prepend", lambda: jnp.diff(a3(), prepend=0))
C(G + "broadcast_to", lambda: jnp.broadcast_to(a3(), (2, 3)))
C(G + "broadcast_to_bad", lambda: jnp.broadcast_to(a3(), (2, 4)))
C(G + "broadcast_arrays", lambda: jnp.broadcast_arrays(a3(), jnp.ones((2, 1))))
C(G + "broadcast_shapes", lambda: jnp.broadcast_shapes((3,), (2, 1)))
C(G + "atleast_2d", lambda: jnp.atleast_2d(1.0))
C(G + "atleast_1d_multi", lambda: jnp.atleast_1d(1, a3()))
C(G + "ravel", lambda: jnp.ravel(i23()))
C(G + "shape_list", lambda: jnp.shape([[1, 2, 3]]))
C(G + "ndim_scalar", lambda: jnp.ndim(3.0))
C(G + "size", lambda: jnp.size(i23()))
C(G + "size_axis", lambda: jnp.size(i23(), 1))
C(G + "insert", lambda: jnp.insert(a3(), 1, 9))
C(G + "delete", lambda: jnp.delete(jnp.arange(5), jnp.array([0, 2])))
C(G + "append", lambda: jnp.append(a3(), 1.5))
C(G + "add_shape_mismatch", lambda: jnp.ones(3) + jnp.ones(4))
C(G + "unstack", lambda: jnp.unstack(i23()))
C(G + "block", lambda: jnp.block([[jnp.ones((1, 1)), jnp.zeros((1, 2))]]))
C(G + "trace_method", lambda: jnp.arange(9).reshape(3, 3).trace())
C(G + "flatten_method", lambda: i23().flatten())
C(G + "squeeze_method", lambda: jnp.zeros((1, 2)).squeeze())
C(G + "reshape_method_order", lambda: jnp.arange(6).reshape((2, 3), order="F"))
C(G + "swapaxes_method", lambda: i23().swapaxes(0, 1))
C(G + "transpose_method_args", lambda: jnp.zeros((2, 3, 4)).transpose(2, 0, 1).shape)

# ---- indexing -------------------------------------------------------------------------------
G = "index/"
C(G + "int", lambda: a3()[1])
C(G + "neg", lambda: a3()[-1])
C(G + "slice", lambda: jnp.arange(5)[1:3])
C(G + "rev", lambda: jnp.arange(5)[::-1])
C(G + "none", lambda: a3()[None].shape)
C(G + "ellipsis", lambda: i23()[..., 0])
C(G + "list", lambda: jnp.arange(5)[[0, 2]])
C(G + "bool_mask", lambda: jnp.arange(5)[jnp.arange(5) > 2])
C(G + "array_idx", lambda: jnp.arange(5)[jnp.array([0, 2])])
C(G + "int_step", lambda: i23()[1, ::2])
C(G + "oob_int_eager", lambda: a3()[5])
C(G + "oob_array_idx", lambda: a3()[jnp.array([5, -5])])
C(G + "mixed_adv", lambda: i23()[:, [0, 2]])
C(G + "two_adv", lambda: i23()[[0, 1], [1, 2]])
C(G + "adv_separated", lambda: jnp.zeros((2, 3, 4))[[0, 1], :, [0, 1]].shape)
C(G + "jnp_scalar_idx", lambda: a3()[jnp.int32(1)])
C(G + "float_idx_err", lambda: a3()[1.0])
C(G + "tuple_none_slice", lambda: i23()[1:2, None, ::-1])
C(G + "too_many_idx", lambda: a3()[0, 0])
C(G + "at_set", lambda: a3().at[1].set(5))
C(G + "at_add_float_to_int", lambda: a3().at[1].add(1.5))
C(G + "at_add_dup", lambda: jnp.zeros(3).at[jnp.array([0, 0, 1])].add(1.0))
C(G + "at_set_dup_list", lambda: jnp.zeros(3).at[[0, 0]].add(2.0))
C(G + "at_mul", lambda: f3().at[1:].mul(2.0))
C(G + "at_min_max", lambda: (f3().at[0].min(-1.0), f3().at[0].max(5.0)))
C(G + "at_get_fill", lambda: f3().at[jnp.array([0, 5])].get(mode="fill", fill_value=-1.0))
C(G + "at_set_oob", lambda: a3().at[5].set(1))
C(G + "at_set_mask", lambda: a3().at[a3() > 0].set(0))
C(G + "at_divide", lambda: f3().at[1].divide(2.0))
C(G + "at_power", lambda: f3().at[2].power(2))
C(G + "at_weak_result", lambda: jnp.asarray(1.0).at[()].set(2.0))
C(G + "at_set_2d_slice", lambda: jnp.zeros((2, 3)).at[:, 1].set(jnp.array([1.0, 2.0])))
C(G + "take", lambda: jnp.take(jnp.arange(5), jnp.array([0, 4, 7])))
C(G + "take_axis", lambda: jnp.take(i23(), jnp.array([1]), axis=1))
C(G + "take_clip", lambda: jnp.take(jnp.arange(5), jnp.array([7]), mode="clip"))
C(G + "take_along_axis", lambda: jnp.take_along_axis(i23(), jnp.array([[0], [2]]), axis=1))
C(G + "newaxis_end", lambda: a3()[..., None].shape)
C(G + "nonzero_size", lambda: jnp.nonzero(jnp.array([0, 1, 0, 2]), size=3))
C(G + "nonzero", lambda: jnp.nonzero(jnp.array([0, 1, 0, 2])))
C(G + "argwhere", lambda: jnp.argwhere(i23() > 2))
C(G + "flatnonzero", lambda: jnp.flatnonzero(jnp.array([0, 1, 0, 2])))
C(G + "index_jit", lambda: jax.jit(lambda x, i: x[i])(jnp.arange(5.0), 2))
C(G + "index_jit_oob", lambda: jax.jit(lambda x, i: x[i])(jnp.arange(5.0), 9))
C(G + "dynamic_slice_idx_jit", lambda: jax.jit(lambda x, i: x[i:i + 2])(jnp.arange(5.0), 1))
C(G + "mask_in_jit_err", lambda: jax.jit(lambda x: x[x > 1])(jnp.arange(5.0)))
C(G + "unravel_index", lambda: jnp.unravel_index(jnp.array([5, 7]), (2, 4)))
C(G + "ravel_multi_index", lambda: jnp.ravel_multi_index((jnp.array([1]), jnp.array([2])),
                                                         (2, 4)))
C(G + "ix_", lambda: i23()[jnp.ix_(jnp.array([0, 1]), jnp.array([0, 2]))])
C(G + "diag_indices", lambda: jnp.diag_indices(3))
C(G + "tril_indices", lambda: jnp.tril_indices(3))
C(G + "choose", lambda: jnp.choose(jnp.array([0, 1, 0]), [a3(), a3() * 10]))
C(G + "select", lambda: jnp.select([a3() < 1, a3() < 2], [a3(), a3() * 10], default=-1))
C(G + "extract", lambda: jnp.extract(a3() > 0, a3()))
C(G + "compress", lambda: jnp.compress(jnp.array([True, False, True]), a3()))

# ---- sorting --------------------------------------------------------------------------------
G = "sort/"
x_s = lambda: jnp.array([3, 1, 2, 1, 3])  # noqa: E731
C(G + "sort", lambda: jnp.sort(x_s()))
C(G + "sort_axis0", lambda: jnp.sort(jnp.array([[3, 1], [1, 2]]), axis=0))
C(G + "sort_axis_none", lambda: jnp.sort(jnp.array([[3, 1], [1, 2]]), axis=None))
C(G + "sort_descending", lambda: jnp.sort(x_s(), descending=True))
C(G + "sort_nan", lambda: jnp.sort(jnp.array([jnp.nan, 1.0, -jnp.inf])))
C(G + "argsort", lambda: jnp.argsort(x_s()))
C(G + "argsort_stable", lambda: jnp.argsort(x_s(), stable=True))
C(G + "argsort_descending", lambda: jnp.argsort(x_s(), descending=True))
C(G + "argsort_neg_slice", lambda: jnp.argsort(x_s())[::-1])
C(G + "unique", lambda: jnp.unique(x_s()))
C(G + "unique_counts", lambda: jnp.unique(x_s(), return_counts=True))
C(G + "unique_all", lambda: jnp.unique(x_s(), return_index=True, return_inverse=True,
                                        return_counts=True))
C(G + "unique_size", lambda: jnp.unique(x_s(), size=5))
C(G + "unique_size_fill", lambda: jnp.unique(x_s(), size=5, fill_value=-1))
C(G + "unique_2d_axis", lambda: jnp.unique(jnp.array([[1, 2], [1, 2], [0, 1]]), axis=0))
C(G + "unique_jit_err", lambda: jax.jit(jnp.unique)(x_s()))
C(G + "searchsorted", lambda: jnp.searchsorted(jnp.array([1, 2, 3]), jnp.array([2, 5])))
C(G + "searchsorted_right", lambda: jnp.searchsorted(jnp.array([1, 2, 3]), 2, side="right"))
C(G + "lexsort", lambda: jnp.lexsort((jnp.array([1, 0, 1]), jnp.array([0, 0, 1]))))
C(G + "isin", lambda: jnp.isin(a3(), jnp.array([1, 5])))
C(G + "digitize", lambda: jnp.digitize(jnp.array([0.5, 1.5, 2.5]), jnp.array([1.0, 2.0])))
C(G + "sort_method", lambda: x_s().sort())
C(G + "argsort_method", lambda: x_s().argsort())
C(G + "lax_top_k", lambda: lax.top_k(jnp.array([1.0, 5.0, 3.0]), 2))
C(G + "lax_sort_multi", lambda: lax.sort((jnp.array([2, 1, 2]), jnp.array([0, 1, 2])),
                                         num_keys=1))
C(G + "bincount", lambda: jnp.bincount(jnp.array([0, 1, 1, 3])))
C(G + "bincount_length", lambda: jnp.bincount(jnp.array([0, 1, 1, 3]), length=5))
C(G + "histogram", lambda: jnp.histogram(jnp.array([0.0, 0.5, 1.0, 2.0]), bins=2))

# ---- linear algebra ---------------------------------------------------------------------------
G = "linalg/"
C(G + "dot_vv", lambda: jnp.dot(f3(), f3()))
C(G + "dot_mv", lambda: jnp.dot(m23(), f3()))
C(G + "dot_mm", lambda: jnp.dot(m23(), m23().T))
C(G + "dot_int", lambda: jnp.dot(a3(), a3()))
C(G + "dot_int_float", lambda: jnp.dot(a3(), f3()))
C(G + "dot_scalar", lambda: jnp.dot(2, f3()))
C(G + "dot_bool", lambda: jnp.dot(jnp.array([True, False]), jnp.array([True, True])))
C(G + "matmul_batched", lambda: jnp.matmul(jnp.ones((2, 3, 4)), jnp.ones((2, 4, 5))).shape)
C(G + "matmul_broadcast", lambda: (jnp.ones((2, 1, 3, 4)) @ jnp.ones((5, 4, 2))).shape)
C(G + "matmul_vec_mat", lambda: f3() @ jnp.ones((3, 2)))
C(G + "matmul_mat_vec", lambda: m23() @ f3())
C(G + "matmul_shape_err", lambda: m23() @ m23())
C(G + "matmul_scalar_err", lambda: jnp.matmul(2.0, f3()))
C(G + "matmul_f16", lambda: jnp.ones((2, 2), jnp.float16) @ jnp.ones((2, 2), jnp.float16))
C(G + "matmul_int8", lambda: jnp.ones((2, 2), jnp.int8) @ jnp.ones((2, 2), jnp.int8))
C(G + "einsum_mm", lambda: jnp.einsum("ij,jk->ik", m23(), m23().T))
C(G + "einsum_diag", lambda: jnp.einsum("ii->i", jnp.arange(9.0).reshape(3, 3)))
C(G + "einsum_sum", lambda: jnp.einsum("ij->", m23()))
C(G + "einsum_batched", lambda: jnp.einsum("bij,bjk->bik", jnp.ones((2, 3, 4)),
                                            jnp.ones((2, 4, 5))).shape)
C(G + "einsum_ellipsis", lambda: jnp.einsum("...ij,...jk", jnp.ones((2, 3, 4)),
                                             jnp.ones((4, 5))).shape)
C(G + "einsum_implicit", lambda: jnp.einsum("ij,jk", m23(), m23().T))
C(G + "einsum_outer", lambda: jnp.einsum("i,j->ij", f3(), f3()))
C(G + "einsum_int", lambda: jnp.einsum("i,i", a3(), a3()))
C(G + "einsum_mixed", lambda: jnp.einsum("i,i", a3(), f3()))
C(G + "einsum_trace", lambda: jnp.einsum("ii", jnp.arange(9.0).reshape(3, 3)))
C(G + "tensordot_1", lambda: jnp.tensordot(m23(), jnp.ones((3, 2)), axes=1))
C(G + "tensordot_lists", lambda: jnp.tensordot(m23(), jnp.ones((3, 2)), axes=([1], [0])))
C(G + "tensordot_0", lambda: jnp.tensordot(f3(), f3(), axes=0).shape)
C(G + "outer", lambda: jnp.outer(a3(), f3()))
C(G + "inner", lambda: jnp.inner(m23(), m23()))
C(G + "vdot", lambda: jnp.vdot(m23(), m23()))
C(G + "vdot_complex", lambda: jnp.vdot(jnp.array([1j, 2]), jnp.array([1j, 2])))
C(G + "kron", lambda: jnp.kron(jnp.eye(2), jnp.ones((2, 2))))
C(G + "trace", lambda: jnp.trace(jnp.arange(9).reshape(3, 3)))
C(G + "diagonal_offset", lambda: jnp.diagonal(jnp.arange(9).reshape(3, 3), offset=-1))
C(G + "cross", lambda: jnp.cross(jnp.array([1.0, 0, 0]), jnp.array([0.0, 1, 0])))
C(G + "linalg_norm", lambda: jnp.linalg.norm(jnp.array([3.0, 4.0])))
C(G + "linalg_norm_axis", lambda: jnp.linalg.norm(m23(), axis=1))
C(G + "linalg_inv", lambda: jnp.linalg.inv(jnp.array([[2.0, 0.0], [0.0, 4.0]])))
C(G + "linalg_det", lambda: jnp.linalg.det(jnp.array([[1.0, 2.0], [3.0, 4.0]])))
C(G + "linalg_solve", lambda: jnp.linalg.solve(jnp.array([[2.0, 0.0], [0.0, 4.0]]),
                                               jnp.array([1.0, 1.0])))
C(G + "vecdot", lambda: jnp.vecdot(m23(), m23()))
C(G + "lax_dot_general", lambda: lax.dot_general(jnp.ones((2, 3, 4)), jnp.ones((2, 4, 5)),
                                                 (((2,), (1,)), ((0,), (0,)))).shape)
C(G + "lax_dot_general_pref", lambda: lax.dot_general(
    jnp.ones((2, 2), jnp.int8), jnp.ones((2, 2), jnp.int8), (((1,), (0,)), ((), ())),
    preferred_element_type=jnp.int32))
C(G + "lax_dot", lambda: lax.dot(m23(), m23().T))
C(G + "lax_dot_mixed_err", lambda: lax.dot(a3(), f3()))

# ---- nn -------------------------------------------------------------------------------------
G = "nn/"
C(G + "softmax", lambda: jax.nn.softmax(f3()))
C(G + "softmax_axis0", lambda: jax.nn.softmax(m23(), axis=0))
C(G + "softmax_int", lambda: jax.nn.softmax(a3()))
C(G + "softmax_where", lambda: jax.nn.softmax(f3(), where=jnp.array([True, False, True])))
C(G + "log_softmax", lambda: jax.nn.log_softmax(m23()))
C(G + "log_softmax_f16", lambda: jax.nn.log_softmax(jnp.ones(3, jnp.float16)))
C(G + "logsumexp_axis", lambda: jax.nn.logsumexp(m23(), axis=1))
C(G + "logsumexp_b", lambda: jax.nn.logsumexp(f3(), b=jnp.array([1.0, 0.0, 2.0])))
C(G + "logsumexp_inf", lambda: jax.nn.logsumexp(jnp.array([-jnp.inf, -jnp.inf])))
C(G + "gelu", lambda: jax.nn.gelu(jnp.array([-1.0, 0.0, 1.0])))
C(G + "gelu_exact", lambda: jax.nn.gelu(jnp.array([-1.0, 0.0, 1.0]), approximate=False))
C(G + "relu", lambda: jax.nn.relu(jnp.array([-1.0, 0.0, 2.0])))
C(G + "relu_int", lambda: jax.nn.relu(jnp.array([-1, 2])))
C(G + "relu_weak", lambda: jax.nn.relu(2.0))
C(G + "relu_grad_zero", lambda: jax.grad(jax.nn.relu)(0.0))
C(G + "relu6", lambda: jax.nn.relu6(jnp.array([-1.0, 7.0])))
C(G + "sigmoid", lambda: jax.nn.sigmoid(jnp.array([0.0, 100.0, -100.0])))
C(G + "sigmoid_int", lambda: jax.nn.sigmoid(a3()))
C(G + "silu", lambda: jax.nn.silu(f3()))
C(G + "softplus", lambda: jax.nn.softplus(jnp.array([-100.0, 0.0, 100.0])))
C(G + "elu", lambda: jax.nn.elu(jnp.array([-1.0, 1.0])))
C(G + "leaky_relu", lambda: jax.nn.leaky_relu(jnp.array([-1.0, 1.0])))
C(G + "selu", lambda: jax.nn.selu(jnp.array([-1.0, 1.0])))
C(G + "glu", lambda: jax.nn.glu(jnp.arange(4.0)))
C(G + "hard_tanh", lambda: jax.nn.hard_tanh(jnp.array([-2.0, 0.5, 2.0])))
C(G + "log_sigmoid", lambda: jax.nn.log_sigmoid(jnp.array([-100.0, 0.0])))
C(G + "standardize", lambda: jax.nn.standardize(m23(), axis=-1))
C(G + "one_hot", lambda: jax.nn.one_hot(jnp.array([0, 2]), 3))
C(G + "one_hot_dtype", lambda: jax.nn.one_hot(jnp.array([0, 2]), 3, dtype=jnp.int32))
C(G + "one_hot_oob", lambda: jax.nn.one_hot(jnp.array([-1, 3]), 3))
C(G + "one_hot_2d", lambda: jax.nn.one_hot(jnp.array([[0], [1]]), 2).shape)
C(G + "one_hot_axis0", lambda: jax.nn.one_hot(jnp.array([0, 1]), 3, axis=0))
C(G + "one_hot_float_idx", lambda: jax.nn.one_hot(jnp.array([0.0, 1.0]), 2))
C(G + "tanh", lambda: jax.nn.tanh(f3()))
C(G + "celu", lambda: jax.nn.celu(jnp.array([-1.0, 1.0])))
C(G + "softmax_grad", lambda: jax.grad(lambda x: jax.nn.softmax(x)[0])(f3()))
C(G + "init_glorot_shape", lambda: jax.nn.initializers.glorot_uniform()(
    jax.random.PRNGKey(0), (3, 4)).shape)
C(G + "init_zeros", lambda: jax.nn.initializers.zeros(jax.random.PRNGKey(0), (2,)))

# ---- random ---------------------------------------------------------------------------------
G = "random/"
K = lambda s=0: jax.random.PRNGKey(s)  # noqa: E731
C(G + "PRNGKey0", lambda: K(0))
C(G + "PRNGKey42", lambda: K(42))
C(G + "PRNGKey_neg", lambda: K(-1))
C(G + "PRNGKey_big", lambda: K(2 ** 40))
C(G + "split", lambda: jax.random.split(K()))
C(G + "split3", lambda: jax.random.split(K(), 3))
C(G + "fold_in", lambda: jax.random.fold_in(K(), 7))
C(G + "uniform", lambda: jax.random.uniform(K(), (4,)))
C(G + "uniform_scalar", lambda: jax.random.uniform(K()))
C(G + "uniform_f16", lambda: jax.random.uniform(K(), (3,), dtype=jnp.float16))
C(G + "uniform_bf16", lambda: jax.random.uniform(K(), (3,), dtype=jnp.bfloat16))
C(G + "uniform_minmax", lambda: jax.random.uniform(K(), (3,), minval=-2.0, maxval=2.0))
C(G + "normal", lambda: jax.random.normal(K(), (4,)))
C(G + "normal_2d", lambda: jax.random.normal(K(1), (2, 3)))
C(G + "normal_split", lambda: jax.random.normal(jax.random.split(K())[1], (3,)))
C(G + "randint", lambda: jax.random.randint(K(), (6,), 0, 10))
C(G + "randint_neg", lambda: jax.random.randint(K(), (6,), -5, 5))
C(G + "randint_empty_range", lambda: jax.random.randint(K(), (3,), 5, 5))
C(G + "randint_uint8", lambda: jax.random.randint(K(), (4,), 0, 256, dtype=jnp.uint8))
C(G + "bernoulli", lambda: jax.random.bernoulli(K(), 0.3, (8,)))
C(G + "bernoulli_default", lambda: jax.random.bernoulli(K()))
C(G + "categorical", lambda: jax.random.categorical(K(), jnp.log(jnp.array([0.2, 0.3, 0.5])),
                                                   shape=(8,)))
C(G + "categorical_2d", lambda: jax.random.categorical(K(3), jnp.zeros((2, 4))))
C(G + "permutation_int", lambda: jax.random.permutation(K(), 6))
C(G + "permutation_array", lambda: jax.random.permutation(K(), jnp.arange(6) * 10))
C(G + "shuffle_2d", lambda: jax.random.permutation(K(), jnp.arange(6).reshape(3, 2), axis=0))
C(G + "choice", lambda: jax.random.choice(K(), 10, (3,)))
C(G + "choice_noreplace", lambda: jax.random.choice(K(), 10, (3,), replace=False))
C(G + "choice_p", lambda: jax.random.choice(K(), 3, (5,), p=jnp.array([0.1, 0.0, 0.9])))
C(G + "gumbel", lambda: jax.random.gumbel(K(), (3,)))
C(G + "truncated_normal", lambda: jax.random.truncated_normal(K(), -1.0, 1.0, (3,)))
C(G + "exponential", lambda: jax.random.exponential(K(), (3,)))
C(G + "laplace", lambda: jax.random.laplace(K(), (3,)))
C(G + "bits", lambda: jax.random.bits(K(), (4,)))
C(G + "bits_u8", lambda: jax.random.bits(K(), (4,), dtype=jnp.uint8))
C(G + "rademacher", lambda: jax.random.rademacher(K(), (6,)))
C(G + "key_new_style", lambda: jax.random.key(0))
C(G + "key_data", lambda: jax.random.key_data(jax.random.key(0)))
C(G + "key_new_split_data", lambda: jax.random.key_data(jax.random.split(jax.random.key(0))))
C(G + "key_new_normal", lambda: jax.random.normal(jax.random.key(0), (3,)))
C(G + "uniform_jit", lambda: jax.jit(lambda k: jax.random.uniform(k, (3,)))(K()))
C(G + "vmap_split", lambda: jax.vmap(lambda k: jax.random.normal(k, ()))(
    jax.random.split(K(), 3)))
C(G + "gamma", lambda: jax.random.gamma(K(), 2.0, (3,)))
C(G + "beta", lambda: jax.random.beta(K(), 2.0, 3.0, (3,)))
C(G + "poisson", lambda: jax.random.poisson(K(), 3.0, (4,)))
C(G + "multivariate_normal", lambda: jax.random.multivariate_normal(
    K(), jnp.zeros(2), jnp.eye(2), (3,)))
C(G + "dirichlet", lambda: jax.random.dirichlet(K(), jnp.ones(3)))
C(G + "shape_int_err", lambda: jax.random.normal(K(), 3))
C(G + "uniform_int_dtype_err", lambda: jax.random.uniform(K(), (2,), dtype=jnp.int32))
C(G + "pareto", lambda: jax.random.pareto(K(), 2.0, (4,)))
C(G + "pareto_arr", lambda: jax.random.pareto(K(), jnp.array([0.5, 1., 3.])))
C(G + "t", lambda: jax.random.t(K(), 3.0, (4,)))
C(G + "chisquare", lambda: jax.random.chisquare(K(), jnp.array([0.3, 1., 10.])))
C(G + "f", lambda: jax.random.f(K(), 2.0, 5.0, (4,)))
C(G + "maxwell", lambda: jax.random.maxwell(K(), (4,)))
C(G + "double_sided_maxwell", lambda: jax.random.double_sided_maxwell(K(), 1.0, 2.0, (4,)))
C(G + "double_sided_maxwell_shape", lambda: jax.random.double_sided_maxwell(
    K(), jnp.zeros(2), 1.0, (3,)))
C(G + "weibull_min", lambda: jax.random.weibull_min(K(), 2.0, 1.5, (4,)))
C(G + "generalized_normal", lambda: jax.random.generalized_normal(K(), 1.5, (4,)))
C(G + "ball", lambda: jax.random.ball(K(), 3, shape=(2,)))
C(G + "ball_p1", lambda: jax.random.ball(K(), 4, 1.0, (2,)))
C(G + "rayleigh", lambda: jax.random.rayleigh(K(), 2.0, (4,)))
C(G + "rayleigh_cast_err", lambda: jax.random.rayleigh(K(), jnp.ones(2), dtype=jnp.float16))
C(G + "wald", lambda: jax.random.wald(K(), jnp.array([0.5, 1., 4.])))
C(G + "geometric", lambda: jax.random.geometric(K(), 0.3, (6,)))
C(G + "geometric_int16", lambda: jax.random.geometric(K(), 0.3, (3,), dtype=jnp.int16))
C(G + "triangular", lambda: jax.random.triangular(K(), -1.0, 0.5, 2.0, (4,)))
C(G + "binomial", lambda: jax.random.binomial(K(), 10, 0.3, (6,)))
C(G + "binomial_btrs", lambda: jax.random.binomial(K(), jnp.array([50., 500, 5000]),
                                                   jnp.array([0.3, 0.5, 0.01])))
C(G + "binomial_edge", lambda: jax.random.binomial(
    K(), jnp.array([0., -1., jnp.inf, 7.5, 3.]), jnp.array([0.5, 0.5, 0.5, 0.5, jnp.nan])))
C(G + "multinomial", lambda: jax.random.multinomial(K(), 20., jnp.array([0.2, 0.3, 0.5])))
C(G + "multinomial_int", lambda: jax.random.multinomial(
    K(), jnp.array([10., 100.]), jnp.array([[0.1, 0.9], [0.5, 0.5]]), dtype=jnp.int32))
C(G + "multivariate_normal_chol", lambda: jax.random.multivariate_normal(
    K(), jnp.array([1., -1.]), jnp.array([[2., 0.5], [0.5, 1.]]), (3,)))
C(G + "multivariate_normal_eigh", lambda: jax.random.multivariate_normal(
    K(), jnp.zeros(2), jnp.array([[2., 0.5], [0.5, 1.]]), (2,), method="eigh"))
C(G + "multivariate_normal_method_err", lambda: jax.random.multivariate_normal(
    K(), jnp.zeros(2), jnp.eye(2), method="qr"))
C(G + "key_dtype", lambda: str(jax.random.key_dtype()))
C(G + "binomial_jit", lambda: jax.jit(lambda k: jax.random.binomial(k, 30, 0.4, (4,)))(K()))

# ---- polynomials and window functions -------------------------------------------------------
G = "poly/"
PI = lambda: jnp.array([2, -5, 3, -1])  # noqa: E731
PF = lambda: jnp.array([1., -3., 2.])  # noqa: E731
C(G + "poly_scalar", lambda: jnp.poly(1))
C(G + "poly_int", lambda: jnp.poly(jnp.array([1, 2, 3])))
C(G + "poly_empty", lambda: jnp.poly(jnp.zeros(0)))
C(G + "poly_complex", lambda: jnp.poly(jnp.array([1 + 1j, 1 - 1j])))
C(G + "poly_matrix", lambda: jnp.poly(jnp.array([[1., 2], [3, 4]])))
C(G + "poly_rect_err", lambda: jnp.poly(jnp.ones((2, 3))))
C(G + "poly_f16", lambda: jnp.poly(jnp.array([1, 2], jnp.float16)))
C(G + "poly_jit", lambda: jax.jit(jnp.poly)(jnp.array([1., 2, 3])))
C(G + "polyadd_int", lambda: jnp.polyadd(jnp.array([1, 2, 3]), jnp.array([5, 6])))
C(G + "polyadd_2d", lambda: jnp.polyadd(jnp.ones((1, 3)), jnp.ones((2, 3))))
C(G + "polyadd_scalar_err", lambda: jnp.polyadd(1, 2))
C(G + "polyadd_list_err", lambda: jnp.polyadd([1, 2], [3]))
C(G + "polysub", lambda: jnp.polysub(jnp.array([1, 2, 3]), jnp.array([5., 6.])))
C(G + "polysub_bool_err", lambda: jnp.polysub(jnp.array([True]), jnp.array([True])))
C(G + "polymul", lambda: jnp.polymul(jnp.array([2, 1, 0]), jnp.array([0, 5, 0, 3])))
C(G + "polymul_trim", lambda: jnp.polymul(jnp.array([2, 1, 0]), jnp.array([0, 5, 0, 3]),
                                          trim_leading_zeros=True))
C(G + "polymul_trim_jit_err", lambda: jax.jit(lambda a, b: jnp.polymul(
    a, b, trim_leading_zeros=True))(jnp.array([2., 1]), jnp.array([1., 3])))
C(G + "polymul_empty", lambda: jnp.polymul(jnp.zeros(0), jnp.array([1, 2])))
C(G + "polymul_complex", lambda: jnp.polymul(jnp.array([2., 1 + 2j]), jnp.array([0, 5, 3])))
C(G + "polymul_scalar_err", lambda: jnp.polymul(2.0, jnp.array([1, 2])))
C(G + "polydiv", lambda: jnp.polydiv(jnp.array([5, 7, 9]), jnp.array([4, 1])))
C(G + "polydiv_trim", lambda: jnp.polydiv(jnp.array([5, 7, 9]), jnp.array([4, 1]),
                                          trim_leading_zeros=True))
C(G + "polydiv_exact_trim", lambda: jnp.polydiv(jnp.array([1., 3, 2]), jnp.array([1., 1]),
                                                trim_leading_zeros=True))
C(G + "polydiv_short", lambda: jnp.polydiv(jnp.array([5.]), jnp.array([4., 1, 2])))
C(G + "polydiv_jit", lambda: jax.jit(jnp.polydiv)(jnp.array([5., 7, 9]), jnp.array([4., 1])))
C(G + "polyder", lambda: jnp.polyder(PI()))
C(G + "polyder_m2", lambda: jnp.polyder(PI(), 2))
C(G + "polyder_m0", lambda: jnp.polyder(PI(), 0))
C(G + "polyder_big_m", lambda: jnp.polyder(PI(), 5))
C(G + "polyder_neg_err", lambda: jnp.polyder(PI(), -1))
C(G + "polyder_f16", lambda: jnp.polyder(PI().astype(jnp.float16)))
C(G + "polyint", lambda: jnp.polyint(jnp.array([12, 12, 6])))
C(G + "polyint_k", lambda: jnp.polyint(jnp.array([12, 12, 6]), k=4))
C(G + "polyint_m2_k", lambda: jnp.polyint(jnp.array([12, 12, 6]), m=2, k=jnp.array([4, 5])))
C(G + "polyint_m0", lambda: jnp.polyint(jnp.array([12, 12, 6]), m=0))
C(G + "polyint_k_err", lambda: jnp.polyint(PI(), m=2, k=jnp.array([4, 5, 6])))
C(G + "polyint_f16_weak_k", lambda: jnp.polyint(jnp.array([1, 2], jnp.float16), k=1.0))
C(G + "roots", lambda: jnp.roots(PF()))
C(G + "roots_int", lambda: jnp.roots(jnp.array([1, -3, 2])))
C(G + "roots_leading_zero", lambda: jnp.roots(jnp.array([0, 1, 2])))
C(G + "roots_nostrip", lambda: jnp.roots(jnp.array([0, 1, 2]), strip_zeros=False))
C(G + "roots_all_zero", lambda: jnp.roots(jnp.zeros(3)))
C(G + "roots_all_zero_nostrip", lambda: jnp.roots(jnp.zeros(3), strip_zeros=False))
C(G + "roots_scalar", lambda: jnp.roots(3.0))
C(G + "roots_complex_pair", lambda: jnp.roots(jnp.array([1., 0, 1])))
C(G + "roots_complex_coeff", lambda: jnp.roots(jnp.array([1., 1j])))
# the eigenvalue order is the solver's (LAPACK's in JAX): compare sorted real and imaginary parts
C(G + "roots_deg5_parts", lambda: [jnp.sort(f(jnp.roots(jnp.array([1., 2, 3, 4, 5, 6]))))
                                   for f in (jnp.real, jnp.imag)])
C(G + "roots_trailing_zeros_parts", lambda: [jnp.sort(f(jnp.roots(jnp.array([1., -3, 2, 0, 0]))))
                                             for f in (jnp.real, jnp.imag)])
C(G + "roots_2d_err", lambda: jnp.roots(jnp.ones((2, 2))))
C(G + "roots_jit_err", lambda: jax.jit(jnp.roots)(PF()))
C(G + "roots_jit_nostrip", lambda: jax.jit(lambda p: jnp.roots(p, strip_zeros=False))(PF()))
C(G + "roots_f16_err", lambda: jnp.roots(PF().astype(jnp.float16)))
PX = lambda: jnp.array([3., 6, 9, 4])  # noqa: E731
PY = lambda: jnp.array([0., 2, 8, 1])  # noqa: E731
C(G + "polyfit", lambda: jnp.polyfit(PX(), PY(), 2))
C(G + "polyfit_full", lambda: jnp.polyfit(PX(), PY(), 2, full=True))
C(G + "polyfit_cov", lambda: jnp.polyfit(PX(), PY(), 2, cov=True))
C(G + "polyfit_cov_unscaled", lambda: jnp.polyfit(PX(), PY(), 2, cov="unscaled"))
C(G + "polyfit_w", lambda: jnp.polyfit(PX(), PY(), 1, w=jnp.array([1., 2, 1, 2])))
C(G + "polyfit_2d", lambda: jnp.polyfit(PX(), jnp.stack([PY(), PY()[::-1]], 1), 1))
C(G + "polyfit_2d_cov", lambda: jnp.polyfit(PX(), jnp.stack([PY(), PY()[::-1]], 1), 1,
                                            cov=True))
C(G + "polyfit_int_err", lambda: jnp.polyfit(jnp.array([3, 6, 9, 4]), jnp.array([0, 2, 8, 1]), 2))
C(G + "polyfit_deg_err", lambda: jnp.polyfit(PX(), PY(), -1))
C(G + "polyfit_len_err", lambda: jnp.polyfit(jnp.ones(3), jnp.ones(2), 1))
C(G + "polyfit_cov_few_err", lambda: jnp.polyfit(jnp.array([1., 2]), jnp.array([1., 2]), 1,
                                                 cov=True))
C(G + "polyfit_jit", lambda: jax.jit(jnp.polyfit, static_argnums=2)(PX(), PY(), 1))
C(G + "polyval_grad", lambda: jax.grad(lambda x: jnp.polyval(PF(), x))(2.0))
G = "winfn/"   # the window functions (lax.reduce_window cases are "window/")
for _w in ("bartlett", "blackman", "hamming", "hanning"):
  def _window_cases(w=_w):
    C(G + w, lambda: getattr(jnp, w)(7))
    C(G + w + "_0", lambda: getattr(jnp, w)(0))
    C(G + w + "_1", lambda: getattr(jnp, w)(1))
    C(G + w + "_neg_err", lambda: getattr(jnp, w)(-1))
    C(G + w + "_jit_err", lambda: jax.jit(getattr(jnp, w))(5))
  _window_cases()
C(G + "kaiser", lambda: jnp.kaiser(9, 6.0))
C(G + "kaiser_big_beta", lambda: jnp.kaiser(12, 30.0))
C(G + "kaiser_1", lambda: jnp.kaiser(1, 3.0))
C(G + "kaiser_array_beta", lambda: jnp.kaiser(5, jnp.float32(2.0)))
C(G + "i0", lambda: jnp.i0(jnp.array([-2., -1, 0, 1, 2, 9.5, 10.5, 40, 90])))
C(G + "i0_weak", lambda: jnp.i0(1.0))
C(G + "i0_int", lambda: jnp.i0(jnp.array([1, 2])))
C(G + "i0_f16", lambda: jnp.i0(jnp.array([1., 2.], jnp.float16)))
C(G + "i0_complex_err", lambda: jnp.i0(jnp.array([1j])))
C(G + "i0_grad", lambda: jax.grad(jnp.i0)(1.5))
C(G + "i0_grad_0", lambda: jax.grad(jnp.i0)(0.0))

# ---- autodiff -------------------------------------------------------------------------------
G = "grad/"
C(G + "pyfloat_weak", lambda: jax.grad(lambda x: x * x)(1.0))
C(G + "strong_f32", lambda: jax.grad(lambda x: x * x)(jnp.float32(1)))
C(G + "array_f32", lambda: jax.grad(lambda x: jnp.sum(x ** 2))(f3()))
C(G + "f16", lambda: jax.grad(lambda x: x * x)(jnp.float16(2)))
C(G + "bf16", lambda: jax.grad(lambda x: jnp.sum(x * x))(jnp.ones(2, jnp.bfloat16)))
C(G + "int_err", lambda: jax.grad(lambda x: x * 2.0)(1))
C(G + "allow_int", lambda: jax.grad(lambda x: x * 2.0, allow_int=True)(1).dtype)
C(G + "nonscalar_err", lambda: jax.grad(lambda x: x * 2)(f3()))
C(G + "int_output_err", lambda: jax.grad(lambda x: jnp.round(x).astype(int))(1.0))
C(G + "complex_output_err", lambda: jax.grad(lambda x: x * 1j)(1.0))
C(G + "value_and_grad", lambda: jax.value_and_grad(lambda x: jnp.sum(jnp.sin(x)))(f3()))
C(G + "value_and_grad_weak", lambda: jax.value_and_grad(lambda x: x ** 3)(2.0))
C(G + "has_aux", lambda: jax.grad(lambda x: (x ** 2, x + 1), has_aux=True)(3.0))
C(G + "argnums_tuple", lambda: jax.grad(lambda x, y: x * y, argnums=(0, 1))(2.0, 3.0))
C(G + "argnums_1", lambda: jax.grad(lambda x, y: x * y ** 2, argnums=1)(2.0, 3.0))
C(G + "dict_input", lambda: jax.grad(lambda p: p["a"] * p["b"])({"a": 2.0, "b": 3.0}))
C(G + "list_input", lambda: jax.grad(lambda p: p[0] * p[1])([2.0, jnp.float32(3)]))
C(G + "tuple_none_leaf", lambda: jax.grad(lambda p: p[0] * 2)((1.0, None)))
C(G + "mixed_weak_strong", lambda: jax.grad(lambda x, y: x * y)(2.0, jnp.float32(3)))
C(G + "jacfwd", lambda: jax.jacfwd(lambda x: x ** 2)(f3()))
C(G + "jacrev", lambda: jax.jacrev(lambda x: jnp.sin(x) * x[0])(f3()))
C(G + "jacrev_scalar_in", lambda: jax.jacrev(lambda x: jnp.array([x, 2 * x]))(1.0))
C(G + "jacfwd_weak", lambda: jax.jacfwd(lambda x: x ** 2)(3.0))
C(G + "jacobian_dict_out", lambda: jax.jacrev(lambda x: {"a": x.sum(), "b": x * 2})(f3()))
C(G + "hessian", lambda: jax.hessian(lambda x: jnp.sum(x ** 3))(f3()))
C(G + "hessian_scalar", lambda: jax.hessian(lambda x: x ** 3)(2.0))
C(G + "vmap_grad", lambda: jax.vmap(jax.grad(lambda x: x ** 3))(f3()))
C(G + "jit_grad", lambda: jax.jit(jax.grad(lambda x: jnp.sin(x)))(1.0))
C(G + "grad_jit", lambda: jax.grad(jax.jit(lambda x: jnp.sin(x)))(1.0))
C(G + "grad_grad", lambda: jax.grad(jax.grad(lambda x: x ** 4))(2.0))
C(G + "where_grad", lambda: jax.grad(lambda x: jnp.sum(jnp.where(x > 1, x ** 2, -x)))(f3()))
C(G + "abs_at_zero", lambda: jax.grad(jnp.abs)(0.0))
C(G + "sqrt_at_zero", lambda: jax.grad(jnp.sqrt)(0.0))
C(G + "max_tie", lambda: jax.grad(lambda x: jnp.max(x))(jnp.array([1.0, 2.0, 2.0])))
C(G + "maximum_tie", lambda: jax.grad(lambda x: jnp.maximum(x, 1.0))(1.0))
C(G + "min_tie", lambda: jax.grad(lambda x: jnp.min(x))(jnp.array([1.0, 1.0])))
C(G + "sort", lambda: jax.grad(lambda x: jnp.sort(x)[0])(jnp.array([3.0, 1.0, 2.0])))
C(G + "norm_zero", lambda: jax.grad(lambda x: jnp.sqrt(jnp.sum(x ** 2)))(jnp.zeros(2)))
C(G + "logsumexp", lambda: jax.grad(lambda x: jax.nn.logsumexp(x))(f3()))
C(G + "fori_loop", lambda: jax.grad(lambda x: lax.fori_loop(0, 3, lambda i, c: c * x, 1.0))(2.0))
C(G + "while_loop_err", lambda: jax.grad(
    lambda x: lax.while_loop(lambda c: c < 10.0, lambda c: c * x, 1.0))(2.0))
C(G + "scan", lambda: jax.grad(lambda x: lax.scan(lambda c, a: (c * a, c), 1.0, x)[0])(
    jnp.array([1.0, 2.0, 3.0])))
C(G + "cond", lambda: jax.grad(lambda x: lax.cond(x > 0, jnp.sin, jnp.cos, x))(1.0))
C(G + "stop_gradient", lambda: jax.grad(lambda x: x * lax.stop_gradient(x))(3.0))
C(G + "jvp", lambda: jax.jvp(lambda x: x ** 2, (3.0,), (1.0,)))
C(G + "jvp_array", lambda: jax.jvp(jnp.sin, (f3(),), (jnp.ones(3),)))
C(G + "jvp_dtype_mismatch_err", lambda: jax.jvp(jnp.sin, (f3(),), (jnp.ones(3, jnp.float16),)))
C(G + "vjp", lambda: jax.vjp(lambda x: x * 2, f3())[1](jnp.ones(3)))
C(G + "linearize", lambda: jax.linearize(jnp.sin, 1.0)[1](2.0))
C(G + "custom_jvp", lambda: jax.grad(_custom_jvp_f())(2.0))
C(G + "custom_vjp", lambda: jax.grad(_custom_vjp_f())(2.0))
C(G + "checkpoint", lambda: jax.grad(jax.checkpoint(lambda x: jnp.sin(x) ** 2))(1.0))
C(G + "int_arg_argnums_other", lambda: jax.grad(lambda x, n: x * n)(2.0, 3))
C(G + "pow_grad_zero", lambda: jax.grad(lambda x: x ** 2)(0.0))
C(G + "pow_float_grad_zero", lambda: jax.grad(lambda x: x ** 2.0)(0.0))
C(G + "power_int_exp_grad", lambda: jax.grad(lambda x: jnp.power(x, 3))(2.0))
C(G + "index_grad", lambda: jax.grad(lambda x: x[1] * 2)(f3()))
C(G + "at_set_grad", lambda: jax.grad(lambda x: jnp.sum(x.at[0].set(5.0)))(f3()))
C(G + "mean_grad", lambda: jax.grad(jnp.mean)(f3()))
C(G + "float0_tangent", lambda: jax.jvp(lambda x, n: x * n, (2.0, 3),
                                        (1.0, np.zeros((), jax.dtypes.float0))))
C(G + "grad_of_int_input_array_err", lambda: jax.grad(jnp.sum)(a3()))
C(G + "holomorphic", lambda: jax.grad(lambda z: z ** 2, holomorphic=True)(1.0 + 1j))
C(G + "complex_in_real_out", lambda: jax.grad(lambda z: jnp.abs(z) ** 2)(1.0 + 1j))


def _custom_jvp_f():
  @jax.custom_jvp
  def f(x):
    return jnp.sin(x)

  @f.defjvp
  def f_jvp(primals, tangents):
    x, = primals
    t, = tangents
    return f(x), 10.0 * t
  return f


def _custom_vjp_f():
  @jax.custom_vjp
  def f(x):
    return x ** 2

  def fwd(x):
    return f(x), x

  def bwd(x, g):
    return (g * 100.0,)
  f.defvjp(fwd, bwd)
  return f


# ---- vmap -----------------------------------------------------------------------------------
G = "vmap/"
C(G + "basic", lambda: jax.vmap(lambda x: x * 2)(f3()))
C(G + "in_axes_none", lambda: jax.vmap(lambda x, y: x + y, in_axes=(0, None))(m23(), f3()))
C(G + "in_axes_1", lambda: jax.vmap(jnp.sum, in_axes=1)(m23()))
C(G + "in_axes_neg", lambda: jax.vmap(jnp.sum, in_axes=-1)(m23()))
C(G + "out_axes_1", lambda: jax.vmap(lambda x: x * 2, out_axes=1)(m23()))
C(G + "out_axes_none", lambda: jax.vmap(lambda x: 1.0, out_axes=None)(f3()))
C(G + "out_axes_none_err", lambda: jax.vmap(lambda x: x, out_axes=None)(f3()))
C(G + "nested", lambda: jax.vmap(jax.vmap(lambda a, b: a * b))(m23(), m23()))
C(G + "dict", lambda: jax.vmap(lambda d: d["a"] + d["b"])({"a": f3(), "b": f3()}))
C(G + "dict_in_axes", lambda: jax.vmap(lambda d: d["a"] + d["b"],
                                       in_axes=({"a": 0, "b": None},))({"a": f3(), "b": 1.0}))
C(G + "size_mismatch_err", lambda: jax.vmap(lambda a, b: a + b)(f3(), jnp.ones(4)))
C(G + "scalar_err", lambda: jax.vmap(lambda a: a)(1.0))
C(G + "axis_oob_err", lambda: jax.vmap(lambda a: a, in_axes=1)(f3()))
C(G + "matmul", lambda: jax.vmap(jnp.matmul, in_axes=(0, None))(jnp.ones((2, 3, 4)),
                                                               jnp.ones((4, 5))).shape)
C(G + "returns_tuple", lambda: jax.vmap(lambda x: (x, x.sum()))(m23()))
C(G + "weak_preserved", lambda: jax.vmap(lambda x: x + 1)(jnp.asarray([1.0, 2.0])))
C(G + "py_scalar_out", lambda: jax.vmap(lambda x: x * 0 + 2)(f3()))
C(G + "cond", lambda: jax.vmap(lambda x: lax.cond(x > 1, lambda: x, lambda: -x))(f3()))
C(G + "while", lambda: jax.vmap(lambda x: lax.while_loop(lambda c: c < 5, lambda c: c + x,
                                                         0.0))(jnp.array([1.0, 2.0])))
C(G + "axis_size", lambda: jax.vmap(lambda: jnp.ones(2), axis_size=3)())
C(G + "kwargs", lambda: jax.vmap(lambda x, y: x * y)(f3(), y=f3()))
C(G + "index", lambda: jax.vmap(lambda x, i: x[i])(m23(), jnp.array([0, 2])))
C(G + "at_set", lambda: jax.vmap(lambda x, i: x.at[i].set(0.0))(m23(), jnp.array([0, 2])))
C(G + "dynamic_slice", lambda: jax.vmap(lambda x, i: lax.dynamic_slice(x, (i,), (2,)))(
    m23(), jnp.array([0, 1])))
C(G + "int_in", lambda: jax.vmap(lambda x: x // 2)(a3()))
C(G + "none_tree", lambda: jax.vmap(lambda x, n: x, in_axes=(0, None))(f3(), None))
C(G + "random", lambda: jax.vmap(lambda k: jax.random.uniform(k))(jax.random.split(K(), 2)))
C(G + "sum_axis", lambda: jax.vmap(lambda x: jnp.sum(x, axis=0))(jnp.ones((2, 3, 4))).shape)

# ---- jit ------------------------------------------------------------------------------------
G = "jit/"
C(G + "weak_float_in", lambda: jax.jit(lambda x: x)(1.0))
C(G + "weak_int_in", lambda: jax.jit(lambda x: x)(1))
C(G + "bool_in", lambda: jax.jit(lambda x: x)(True))
C(G + "np_f64_in", lambda: jax.jit(lambda x: x)(np.ones(2)))
C(G + "np_scalar_in", lambda: jax.jit(lambda x: x)(np.float32(2)))
C(G + "weak_arith", lambda: jax.jit(lambda x: x * 2)(3.0))
C(G + "static_argnums", lambda: jax.jit(lambda x, n: x * n, static_argnums=1)(f3(), 3))
C(G + "static_argnames", lambda: jax.jit(lambda x, n=1: x ** n, static_argnames="n")(f3(), n=2))
C(G + "static_unhashable_err", lambda: jax.jit(lambda x, n: x, static_argnums=1)(f3(), [1]))
C(G + "tuple_out", lambda: jax.jit(lambda x: (x, x + 1))(1.0))
C(G + "dict_out", lambda: jax.jit(lambda x: {"b": x, "a": [x, None]})(f3()))
C(G + "none_out", lambda: jax.jit(lambda x: None)(1.0))
C(G + "no_args", lambda: jax.jit(lambda: jnp.zeros(3))())
C(G + "const_capture", lambda: jax.jit(lambda x: x + np.arange(3))(f3()))
C(G + "shape_use", lambda: jax.jit(lambda x: x.reshape(x.shape[0] // 3, 3))(jnp.arange(6)))
C(G + "python_int_out", lambda: jax.jit(lambda x: 3)(1.0))
C(G + "bool_tracer_err", lambda: jax.jit(lambda x: 1 if x > 0 else 0)(1.0))
C(G + "int_tracer_err", lambda: jax.jit(lambda x: int(x))(1.0))
C(G + "float_tracer_err", lambda: jax.jit(lambda x: float(x))(1.0))
C(G + "index_tracer_err", lambda: jax.jit(lambda x: jnp.zeros(x))(3))
C(G + "np_asarray_tracer_err", lambda: jax.jit(lambda x: np.asarray(x))(1.0))
C(G + "range_tracer_err", lambda: jax.jit(lambda n: list(range(n)))(3))
C(G + "while_python_err", lambda: jax.jit(_py_while)(1.0))
C(G + "kwargs", lambda: jax.jit(lambda x, y: x - y)(y=1.0, x=3.0))
C(G + "pytree_arg", lambda: jax.jit(lambda p: p["w"] @ p["x"])({"w": m23(), "x": f3()}))
C(G + "eval_shape", lambda: jax.eval_shape(lambda x: x.sum(0), m23()))
C(G + "eval_shape_repr", lambda: repr(jax.eval_shape(lambda x: x.sum(0), m23())))
C(G + "ShapeDtypeStruct", lambda: jax.eval_shape(lambda x: x * 2,
                                                 jax.ShapeDtypeStruct((2,), jnp.float32)))
C(G + "lower_text_type", lambda: type(jax.jit(lambda x: x + 1).lower(1.0)).__name__)
C(G + "disable_jit", lambda: _with_disable_jit())
C(G + "recompile_dtype", lambda: [_jit_id(jnp.ones(2)), _jit_id(jnp.ones(2, jnp.int32))])
C(G + "jit_method_of_array", lambda: jax.jit(lambda x: x.T @ x)(m23()))
C(G + "int_overflow_in", lambda: jax.jit(lambda x: x)(2 ** 40))
C(G + "donate", lambda: jax.jit(lambda x: x + 1, donate_argnums=0)(jnp.ones(2)))
C(G + "print_tracer_str", lambda: _tracer_str())


def _py_while(x):
  while x < 3:
    x = x + 1
  return x


def _with_disable_jit():
  with jax.disable_jit():
    return jax.jit(lambda x: x * 2)(3.0)


def _jit_id(x):
  return jax.jit(lambda a: a + 1)(x)


def _tracer_str():
  out = []

  def f(x):
    out.append(str(x.aval) if hasattr(x, "aval") else "?")
    return x
  jax.jit(f)(jnp.ones((2, 3)))
  return out[0]


# ---- lax ------------------------------------------------------------------------------------
G = "lax/"
C(G + "cond", lambda: lax.cond(True, lambda x: x + 1, lambda x: x - 1, 1.0))
C(G + "cond_weak_mismatch", lambda: lax.cond(True, lambda: 1.0, lambda: jnp.float32(2)))
C(G + "cond_dtype_mismatch_err", lambda: lax.cond(True, lambda: 1.0, lambda: jnp.int32(2)))
C(G + "cond_int_pred", lambda: lax.cond(2, lambda: 1, lambda: 0))
C(G + "cond_multiple_operands", lambda: lax.cond(False, lambda a, b: a + b, lambda a, b: a - b,
                                                 1.0, 2.0))
C(G + "cond_pytree", lambda: lax.cond(True, lambda x: {"a": x, "b": (x, x)},
                                      lambda x: {"a": -x, "b": (x, x)}, f3()))
C(G + "switch", lambda: lax.switch(1, [lambda x: x, lambda x: x * 2, lambda x: x * 3], 2.0))
C(G + "switch_clamp", lambda: lax.switch(7, [lambda x: x, lambda x: x * 2], 2.0))
C(G + "switch_neg", lambda: lax.switch(-3, [lambda x: x, lambda x: x * 2], 2.0))
C(G + "while_loop", lambda: lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 2),
                                           (0, 1.0)))
C(G + "while_loop_weak", lambda: lax.while_loop(lambda c: c < 5, lambda c: c + 1, 0))
C(G + "while_carry_type_err", lambda: lax.while_loop(lambda c: c < 5, lambda c: c + 1.5, 0))
C(G + "fori_loop_int", lambda: lax.fori_loop(0, 3, lambda i, c: c + i, 0))
C(G + "fori_loop_float", lambda: lax.fori_loop(0, 3, lambda i, c: c + i, 0.0))
C(G + "fori_loop_array", lambda: lax.fori_loop(0, 3, lambda i, c: c.at[i].set(i), jnp.zeros(3)))
C(G + "fori_loop_traced_bounds", lambda: jax.jit(lambda n: lax.fori_loop(
    0, n, lambda i, c: c + 1, 0))(4))
C(G + "scan", lambda: lax.scan(lambda c, x: (c + x, c * x), 0.0, f3()))
C(G + "scan_int", lambda: lax.scan(lambda c, x: (c + x, c), 0, a3()))
C(G + "scan_length", lambda: lax.scan(lambda c, _: (c + 1, c), 0, None, length=3))
C(G + "scan_reverse", lambda: lax.scan(lambda c, x: (c + x, c), 0.0, f3(), reverse=True))
C(G + "scan_none_ys", lambda: lax.scan(lambda c, x: (c + x, None), 0.0, f3()))
C(G + "scan_pytree", lambda: lax.scan(lambda c, x: (c, {"a": x["a"] * 2}), 0.0,
                                      {"a": f3()}))
C(G + "scan_carry_mismatch_err", lambda: lax.scan(lambda c, x: (c + x, c), 0, f3()))
C(G + "map", lambda: lax.map(lambda x: x ** 2, f3()))
C(G + "map_tuple", lambda: lax.map(lambda xy: xy[0] * xy[1], (f3(), f3())))
C(G + "associative_scan", lambda: lax.associative_scan(jnp.add, f3()))
C(G + "dynamic_slice", lambda: lax.dynamic_slice(jnp.arange(10), (2,), (3,)))
C(G + "dynamic_slice_clamp", lambda: lax.dynamic_slice(jnp.arange(10), (8,), (3,)))
C(G + "dynamic_slice_neg", lambda: lax.dynamic_slice(jnp.arange(10), (-2,), (3,)))
C(G + "dynamic_update_slice", lambda: lax.dynamic_update_slice(jnp.zeros(5), jnp.ones(2), (4,)))
C(G + "dynamic_index_in_dim", lambda: lax.dynamic_index_in_dim(m23(), 1, axis=1))
C(G + "dynamic_slice_in_dim", lambda: lax.dynamic_slice_in_dim(m23(), 1, 2, axis=1))
C(G + "slice", lambda: lax.slice(jnp.arange(10), (1,), (8,), (3,)))
C(G + "slice_in_dim", lambda: lax.slice_in_dim(m23(), 0, 2, axis=1))
C(G + "pad_neg", lambda: lax.pad(jnp.arange(5.0), 0.0, [(-1, 2, 1)]))
C(G + "select", lambda: lax.select(jnp.array([True, False]), jnp.ones(2), jnp.zeros(2)))
C(G + "clamp", lambda: lax.clamp(0.0, jnp.array([-1.0, 0.5, 2.0]), 1.0))
C(G + "add_mismatch_err", lambda: lax.add(jnp.ones(2), jnp.ones(2, jnp.int32)))
C(G + "add_weak_scalar", lambda: lax.add(jnp.ones(2), 1.0))
C(G + "add_pyscalars", lambda: lax.add(1, 2))
C(G + "convert_element_type", lambda: lax.convert_element_type(jnp.array([1.7, -1.7]),
                                                               jnp.int32))
C(G + "convert_weak", lambda: lax.convert_element_type(2.0, jnp.float32))
C(G + "broadcast_in_dim", lambda: lax.broadcast_in_dim(f3(), (2, 3), (1,)))
C(G + "broadcast", lambda: lax.broadcast(f3(), (2,)).shape)
C(G + "reshape_dims", lambda: lax.reshape(jnp.arange(6), (3, 2), dimensions=(0,)))
C(G + "rsqrt", lambda: lax.rsqrt(jnp.array([4.0])))
C(G + "integer_pow", lambda: lax.integer_pow(jnp.array([2.0, 3.0]), 3))
C(G + "integer_pow_neg", lambda: lax.integer_pow(jnp.array([2.0]), -2))
C(G + "div_int", lambda: lax.div(jnp.array([7, -7]), jnp.array([2, 2])))
C(G + "rem_int", lambda: lax.rem(jnp.array([7, -7]), jnp.array([3, 3])))
C(G + "shift_right_logical", lambda: lax.shift_right_logical(jnp.array([-8]), 1))
C(G + "bitcast", lambda: lax.bitcast_convert_type(jnp.float32(1.0), jnp.int32))
C(G + "iota", lambda: lax.iota(jnp.int32, 4))
C(G + "broadcasted_iota", lambda: lax.broadcasted_iota(jnp.int32, (2, 3), 1))
C(G + "argmax", lambda: lax.argmax(m23(), 1, jnp.int32))
C(G + "cumsum", lambda: lax.cumsum(f3()))
C(G + "cummax_rev", lambda: lax.cummax(jnp.array([1.0, 3.0, 2.0]), reverse=True))
C(G + "reduce", lambda: lax.reduce(m23(), 0.0, lax.add, (0,)))
C(G + "reduce_window", lambda: lax.reduce_window(jnp.arange(6.0), -jnp.inf, lax.max, (2,), (1,),
                                                 "VALID"))
C(G + "conv", lambda: lax.conv(jnp.ones((1, 1, 5, 5)), jnp.ones((2, 1, 3, 3)), (1, 1), "SAME"))
C(G + "conv_valid_stride", lambda: lax.conv(jnp.arange(50.0).reshape(1, 2, 5, 5),
                                            jnp.ones((3, 2, 2, 2)), (2, 2), "VALID"))
C(G + "conv_general_dilated", lambda: lax.conv_general_dilated(
    jnp.ones((1, 5, 5, 2)), jnp.ones((3, 3, 2, 4)), (1, 1), "SAME",
    dimension_numbers=("NHWC", "HWIO", "NHWC")).shape)
C(G + "conv_general_padding", lambda: lax.conv_general_dilated(
    jnp.arange(5.0).reshape(1, 1, 5), jnp.ones((1, 1, 2)), (1,), [(1, 1)], rhs_dilation=(2,)))
C(G + "conv_grouped", lambda: lax.conv_general_dilated(
    jnp.ones((1, 4, 5)), jnp.ones((4, 1, 3)), (1,), "VALID", feature_group_count=4).shape)
C(G + "erf", lambda: lax.erf(jnp.array([0.5])))
C(G + "lgamma_digamma", lambda: (lax.lgamma(jnp.array([3.0])), lax.digamma(jnp.array([1.0]))))
C(G + "population_count", lambda: lax.population_count(jnp.array([7, 8])))
C(G + "sort_key_val", lambda: lax.sort_key_val(jnp.array([3, 1, 2]), jnp.array([0., 1., 2.])))
C(G + "squeeze", lambda: lax.squeeze(jnp.ones((1, 2, 1)), (0, 2)).shape)
C(G + "expand_dims", lambda: lax.expand_dims(f3(), (0,)).shape)
C(G + "transpose", lambda: lax.transpose(m23(), (1, 0)))
C(G + "rev", lambda: lax.rev(m23(), (1,)))
C(G + "concatenate", lambda: lax.concatenate([f3(), f3()], 0))
C(G + "gather_via_index", lambda: lax.index_in_dim(m23(), 1, axis=0, keepdims=False))
C(G + "psum_vmap", lambda: jax.vmap(lambda x: lax.psum(x, "i"), axis_name="i")(f3()))
C(G + "pmean_vmap", lambda: jax.vmap(lambda x: lax.pmean(x, "i"), axis_name="i")(f3()))
C(G + "axis_index_vmap", lambda: jax.vmap(lambda x: lax.axis_index("i"), axis_name="i")(f3()))
C(G + "cond_jit_pred_tracer", lambda: jax.jit(lambda x: lax.cond(x > 0, lambda: x, lambda: -x))(
    -2.0))
C(G + "fori_loop_weak_carry_jit", lambda: jax.jit(lambda: lax.fori_loop(0, 3, lambda i, c: c * 2,
                                                                        1.0))())
C(G + "max_mixed_err", lambda: lax.max(jnp.ones(2), jnp.ones(2, jnp.float16)))
C(G + "lax_sub_weak", lambda: lax.sub(2.0, 1.0))
C(G + "tanh_int_err", lambda: lax.tanh(jnp.array([1, 2])))

# ---- tree_util ------------------------------------------------------------------------------
G = "tree/"
tu = lambda: jax.tree_util  # noqa: E731
NT = collections.namedtuple("NT", ["x", "y"])
C(G + "flatten_dict_none", lambda: tu().tree_flatten({"b": 1, "a": None, "c": (2, [3])})[0])
C(G + "leaves_dict_order", lambda: tu().tree_leaves({"b": 1, "a": 2}))
C(G + "structure_str", lambda: str(tu().tree_structure({"b": 1, "a": (2, None)})))
C(G + "structure_namedtuple_str", lambda: str(tu().tree_structure(NT(1, 2))))
C(G + "structure_list_str", lambda: str(tu().tree_structure([1, [2, 3], ()])))
C(G + "num_leaves", lambda: tu().tree_structure({"a": [1, 2], "b": None}).num_leaves)
C(G + "map_multi", lambda: tu().tree_map(lambda a, b: a + b, {"a": 1, "b": (2, 3)},
                                         {"a": 10, "b": (20, 30)}))
C(G + "map_none", lambda: tu().tree_map(lambda a: a * 2, {"a": 1, "b": None}))
C(G + "map_is_leaf", lambda: tu().tree_map(lambda a: len(a), [[1, 2], [3]],
                                           is_leaf=lambda x: isinstance(x, list) and
                                           all(not isinstance(e, list) for e in x)))
C(G + "map_mismatch_err", lambda: tu().tree_map(lambda a, b: a + b, [1, 2], (1, 2)))
C(G + "map_mismatch_len_err", lambda: tu().tree_map(lambda a, b: a + b, [1, 2], [1]))
C(G + "unflatten", lambda: tu().tree_unflatten(tu().tree_structure((1, {"a": 2})), [5, 6]))
C(G + "namedtuple_roundtrip", lambda: tu().tree_map(lambda v: v + 1, NT(1, 2)))
C(G + "reduce", lambda: tu().tree_reduce(lambda a, b: a + b, [1, (2, 3)]))
C(G + "reduce_initial", lambda: tu().tree_reduce(lambda a, b: a + b, [], 0))
C(G + "all", lambda: tu().tree_all([True, (True, False)]))
C(G + "flatten_with_path", lambda: [(tu().keystr(p), v) for p, v in
                                    tu().tree_flatten_with_path({"a": [1, 2], "b": NT(3, 4)})[0]])
C(G + "leaves_with_path", lambda: [str(p) for p, _ in tu().tree_leaves_with_path((1, [2]))])
C(G + "transpose", lambda: tu().tree_transpose(tu().tree_structure([0, 0]),
                                               tu().tree_structure((0, 0)),
                                               [(1, 2), (3, 4)]))
C(G + "register_pytree_node", lambda: _register_node())
C(G + "register_dataclass", lambda: _register_dataclass())
C(G + "Partial", lambda: tu().Partial(lambda a, b: a - b, 10)(3))
C(G + "Partial_jit", lambda: jax.jit(lambda f, x: f(x))(tu().Partial(jnp.add, 1.0), 2.0))
C(G + "jax_tree_map", lambda: jax.tree.map(lambda a: a * 2, (1, {"a": 2.0})))
C(G + "jax_tree_leaves", lambda: jax.tree.leaves([1, None, (2, 3)]))
C(G + "jax_tree_structure_eq", lambda: jax.tree.structure([1, 2]) == jax.tree.structure([3, 4]))
C(G + "jax_tree_flatten", lambda: jax.tree.flatten({"x": 1, "y": [2]})[0])
C(G + "jax_tree_leaves_none_is_leaf", lambda: jax.tree.leaves([1, None],
                                                             is_leaf=lambda x: x is None))
C(G + "leaves_array", lambda: len(tu().tree_leaves({"a": jnp.ones(3)})))
C(G + "treedef_children", lambda: len(tu().tree_structure((1, (2, 3))).children()))
C(G + "treedef_repr", lambda: repr(tu().tree_structure((1, {"k": 2}))))
C(G + "all_leaves", lambda: tu().all_leaves([1, 2]))
C(G + "map_with_path", lambda: tu().tree_map_with_path(lambda p, v: (tu().keystr(p), v),
                                                       {"a": 1}))
C(G + "ordered_dict", lambda: tu().tree_leaves(collections.OrderedDict([("b", 1), ("a", 2)])))
C(G + "tree_util_tree_map_list_none", lambda: tu().tree_map(lambda x: x, [None, 1]))


def _register_node():
  class Box:
    def __init__(self, v, tag):
      self.v, self.tag = v, tag
  tu().register_pytree_node(Box, lambda b: ((b.v,), b.tag), lambda tag, ch: Box(ch[0], tag))
  out = jax.jit(lambda b: Box(b.v * 2, b.tag))(Box(jnp.ones(2), "t"))
  return (out.v, out.tag, len(tu().tree_leaves(Box(1, "x"))))


def _register_dataclass():
  import dataclasses

  @dataclasses.dataclass
  class P:
    a: object
    b: object
  tu().register_dataclass(P, data_fields=["a", "b"], meta_fields=[])
  return tu().tree_leaves(P(1, [2, 3]))


# ---- make_jaxpr text (exact) -------------------------------------------------------------------
G = "jaxpr/"
JP = lambda f, *a: str(jax.make_jaxpr(f)(*a))  # noqa: E731
C(G + "sin_mul_add", lambda: JP(lambda a, b: jnp.sin(a) * b + 1.0, jnp.ones(3), jnp.ones(3)))
C(G + "sum_sq", lambda: JP(lambda x: jnp.sum(x ** 2), jnp.ones(3)))
C(G + "weak_scalar", lambda: JP(lambda x: x * 2, 1.0))
C(G + "int_add", lambda: JP(lambda x: x + 1, jnp.arange(3)))
C(G + "promote_int_float", lambda: JP(lambda x: x + 1.5, jnp.arange(3)))
C(G + "dot", lambda: JP(jnp.dot, jnp.ones((2, 3)), jnp.ones(3)))
C(G + "matmul", lambda: JP(lambda a, b: a @ b, jnp.ones((2, 3)), jnp.ones((3, 4))))
C(G + "reshape_transpose", lambda: JP(lambda x: x.reshape(3, 2).T, jnp.ones(6)))
C(G + "mean", lambda: JP(jnp.mean, jnp.ones((2, 3))))
C(G + "max_axis", lambda: JP(lambda x: jnp.max(x, axis=1), jnp.ones((2, 3))))
C(G + "where", lambda: JP(lambda x: jnp.where(x > 0, x, 0.0), jnp.ones(3)))
C(G + "relu", lambda: JP(jax.nn.relu, jnp.ones(3)))
C(G + "exp_log", lambda: JP(lambda x: jnp.log(jnp.exp(x)), jnp.ones(3)))
C(G + "broadcast_add", lambda: JP(lambda a, b: a + b, jnp.ones((2, 3)), jnp.ones(3)))
C(G + "convert", lambda: JP(lambda x: x.astype(jnp.float32), jnp.arange(3)))
C(G + "grad_square", lambda: JP(jax.grad(lambda x: x * x), 1.0))
C(G + "jit_inner", lambda: JP(lambda x: jax.jit(jnp.sin)(x), jnp.ones(2)))
C(G + "cond", lambda: JP(lambda p, x: lax.cond(p, jnp.sin, jnp.cos, x), True, 1.0))
C(G + "while", lambda: JP(lambda x: lax.while_loop(lambda c: c < 10.0, lambda c: c * 2, x), 1.0))
C(G + "fori", lambda: JP(lambda x: lax.fori_loop(0, 3, lambda i, c: c + i, x), 1.0))
C(G + "scan", lambda: JP(lambda xs: lax.scan(lambda c, x: (c + x, c), 0.0, xs), jnp.ones(3)))
C(G + "index_static", lambda: JP(lambda x: x[1], jnp.ones(3)))
C(G + "slice_static", lambda: JP(lambda x: x[1:], jnp.ones(3)))
C(G + "concatenate", lambda: JP(lambda a: jnp.concatenate([a, a]), jnp.ones(2)))
C(G + "vmap_mul", lambda: JP(jax.vmap(lambda a: a * 2.0), jnp.ones(3)))
C(G + "softmax", lambda: JP(jax.nn.softmax, jnp.ones(3)))
C(G + "pytree_in", lambda: JP(lambda d: d["a"] + d["b"], {"a": 1.0, "b": 2.0}))
C(G + "const_array", lambda: JP(lambda x: x + np.ones(3, np.float32), jnp.ones(3)))
C(G + "stop_gradient", lambda: JP(lax.stop_gradient, 1.0))
C(G + "int_pow", lambda: JP(lambda x: x ** 3, 2.0))
C(G + "iota", lambda: JP(lambda: jnp.arange(4)))
C(G + "squeeze_expand", lambda: JP(lambda x: jnp.expand_dims(jnp.squeeze(x), 0),
                                   jnp.ones((1, 3))))
C(G + "jaxpr_eqns_count", lambda: len(jax.make_jaxpr(lambda x: x * 2 + 1)(1.0).jaxpr.eqns))
C(G + "jaxpr_invars_aval", lambda: str(jax.make_jaxpr(lambda x: x)(jnp.ones(2)).in_avals[0]))
C(G + "jaxpr_out_avals_weak", lambda: str(jax.make_jaxpr(lambda x: x)(1.0).out_avals[0]))

# ---- errors ---------------------------------------------------------------------------------
G = "errors/"
C(G + "add_shape_mismatch", lambda: jnp.ones((2, 3)) + jnp.ones((3, 2)))
C(G + "grad_nonscalar", lambda: jax.grad(lambda x: x)(f3()))
C(G + "bool_tracer", lambda: jax.jit(lambda x: bool(x))(1.0))
C(G + "bool_tracer_is_concretization", lambda: _catch(
    lambda: jax.jit(lambda x: bool(x))(1.0), jax.errors.ConcretizationTypeError))
C(G + "int_tracer", lambda: jax.jit(lambda x: int(x))(1.0))
C(G + "reshape_bad", lambda: jnp.ones(6).reshape(5))
C(G + "zeros_bad_dtype", lambda: jnp.zeros(3, dtype="foo"))
C(G + "zeros_object_dtype", lambda: jnp.zeros(3, dtype=object))
C(G + "array_string", lambda: jnp.array(["a"]))
C(G + "array_ragged", lambda: jnp.array([[1, 2], [3]]))
C(G + "array_none", lambda: jnp.array(None))
C(G + "vmap_size_mismatch", lambda: jax.vmap(jnp.add)(jnp.ones(2), jnp.ones(3)))
C(G + "axis_oob_sum", lambda: jnp.sum(jnp.ones(3), axis=1))
C(G + "axis_oob_concat", lambda: jnp.concatenate([jnp.ones(3)], axis=1))
C(G + "axis_oob_expand_dims", lambda: jnp.expand_dims(jnp.ones(3), 3))
C(G + "axis_oob_argmax", lambda: jnp.argmax(jnp.ones(3), axis=2))
C(G + "axis_oob_cumsum", lambda: jnp.cumsum(jnp.ones(3), axis=1))
C(G + "axis_oob_softmax", lambda: jax.nn.softmax(jnp.ones(3), axis=2))
C(G + "transpose_bad_perm", lambda: jnp.transpose(jnp.ones((2, 3)), (0, 0)))
C(G + "matmul_mismatch", lambda: jnp.ones((2, 3)) @ jnp.ones((2, 3)))
C(G + "dot_mismatch", lambda: jnp.dot(jnp.ones(3), jnp.ones(4)))
C(G + "einsum_bad", lambda: jnp.einsum("ij,jk->ik", jnp.ones((2, 3)), jnp.ones((4, 5))))
C(G + "index_oob_static_2d", lambda: jnp.ones((2, 3))[0, 0, 0])
C(G + "hash_array", lambda: hash(jnp.ones(2)))
C(G + "setitem", lambda: _setitem())
C(G + "len_scalar", lambda: len(jnp.array(1.0)))
C(G + "iter_scalar", lambda: list(iter(jnp.array(1.0))))
C(G + "float_of_array", lambda: float(jnp.ones(2)))
C(G + "bool_of_array", lambda: bool(jnp.ones(2)))
C(G + "index_float_array", lambda: [1, 2, 3][jnp.array(1.0)])
C(G + "jit_non_array_arg", lambda: jax.jit(lambda x: x)("abc"))
C(G + "jit_list_ok", lambda: jax.jit(lambda x: x[0] + x[1])([1.0, 2.0]))
C(G + "grad_str_arg", lambda: jax.grad(lambda x: 1.0)("a"))
C(G + "cond_branch_out_mismatch", lambda: lax.cond(True, lambda: (1.0, 2.0), lambda: 1.0))
C(G + "scan_nonarray_xs", lambda: lax.scan(lambda c, x: (c, x), 0.0, [1.0, 2.0]))
C(G + "fori_loop_float_bounds", lambda: lax.fori_loop(0.0, 3.0, lambda i, c: c, 0))
C(G + "random_bad_key", lambda: jax.random.normal(jnp.ones(3), ()))
C(G + "split_bad_num", lambda: jax.random.split(K(), -1))
C(G + "where_bad_shapes", lambda: jnp.where(jnp.ones(2) > 0, jnp.ones(3), 0))
C(G + "stack_mismatch", lambda: jnp.stack([jnp.ones(2), jnp.ones(3)]))
C(G + "broadcast_to_smaller", lambda: jnp.broadcast_to(jnp.ones(3), (2,)))
C(G + "split_bad", lambda: jnp.split(jnp.ones(5), 3))
C(G + "tracer_leak", lambda: _leak())
C(G + "UnexpectedTracerError_exists", lambda: issubclass(jax.errors.UnexpectedTracerError,
                                                         Exception))
C(G + "TracerIntegerConversionError_mro", lambda: [c.__name__ for c in
                                                   jax.errors.TracerIntegerConversionError.__mro__
                                                   if c.__module__ == "builtins"])
C(G + "ConcretizationTypeError_mro", lambda: [c.__name__ for c in
                                              jax.errors.ConcretizationTypeError.__mro__
                                              if c.__module__ == "builtins"])
C(G + "jit_kwarg_static_missing", lambda: jax.jit(lambda x, n: x * n,
                                                  static_argnames="n")(f3(), 2))
C(G + "argnums_oob", lambda: jax.grad(lambda x: x, argnums=1)(1.0))
C(G + "vmap_in_axes_tree_mismatch", lambda: jax.vmap(lambda a, b: a, in_axes=(0,))(f3(), f3()))
C(G + "dynamic_slice_rank", lambda: lax.dynamic_slice(jnp.ones(3), (0, 0), (1, 1)))
C(G + "nonzero_in_jit", lambda: jax.jit(jnp.nonzero)(f3()))
C(G + "x64_float64_warn_value", lambda: jnp.zeros(2, jnp.float64))
C(G + "astype_bad", lambda: f3().astype("notadtype"))


def _catch(fn, cls):
  try:
    fn()
  except cls:
    return "caught"
  return "not raised"


def _setitem():
  x = jnp.ones(3)
  x[0] = 2.0
  return x


def _leak():
  saved = []

  def f(x):
    saved.append(x)
    return x
  jax.jit(f)(1.0)
  return jnp.sin(saved[0]) + 1


# ---- array API: repr/str, conversions, protocols -------------------------------------------------
G = "api/"
C(G + "repr_arange", lambda: repr(jnp.arange(3)))
C(G + "repr_float", lambda: repr(jnp.array([1.0, 2.5])))
C(G + "repr_weak_scalar", lambda: repr(jnp.asarray(1.0)))
C(G + "repr_weak_int", lambda: repr(jnp.asarray(3)))
C(G + "repr_0d_strong", lambda: repr(jnp.float32(1.5)))
C(G + "repr_bf16", lambda: repr(jnp.array([1.0, 2.0], jnp.bfloat16)))
C(G + "repr_f16", lambda: repr(jnp.array([1.0, 2.0], jnp.float16)))
C(G + "repr_bool", lambda: repr(jnp.array([True, False])))
C(G + "repr_2d", lambda: repr(jnp.arange(6).reshape(2, 3)))
C(G + "repr_empty", lambda: repr(jnp.zeros((0,))))
C(G + "repr_empty_2d", lambda: repr(jnp.zeros((0, 3))))
C(G + "repr_uint8", lambda: repr(jnp.array([1, 2], jnp.uint8)))
C(G + "repr_complex", lambda: repr(jnp.array([1 + 2j])))
C(G + "repr_large", lambda: repr(jnp.arange(2000)))
C(G + "repr_nan_inf", lambda: repr(jnp.array([jnp.nan, jnp.inf, -1.0])))
C(G + "repr_small_floats", lambda: repr(jnp.array([1e-8, 1.0])))
C(G + "str_arange", lambda: str(jnp.arange(3)))
C(G + "str_scalar", lambda: str(jnp.float32(1.5)))
C(G + "str_bool_scalar", lambda: str(jnp.array(True)))
C(G + "format_scalar", lambda: f"{jnp.float32(1.5):.3f}")
C(G + "isinstance_Array", lambda: isinstance(jnp.ones(2), jax.Array))
C(G + "isinstance_ndarray", lambda: isinstance(jnp.ones(2), jnp.ndarray))
C(G + "isinstance_np_not_Array", lambda: isinstance(np.ones(2), jax.Array))
C(G + "isinstance_tracer_Array", lambda: jax.jit(lambda x: isinstance(x, jax.Array))(1.0))
C(G + "T", lambda: m23().T)
C(G + "item_int", lambda: jnp.array(3).item())
C(G + "item_float", lambda: jnp.array(3.5).item())
C(G + "item_bool", lambda: jnp.array(True).item())
C(G + "item_index", lambda: jnp.arange(3).item(1))
C(G + "item_multi_err", lambda: jnp.arange(3).item())
C(G + "float", lambda: float(jnp.array(2.5)))
C(G + "float_1elem", lambda: float(jnp.array([2.5])))
C(G + "int", lambda: int(jnp.array(2.7)))
C(G + "complex", lambda: complex(jnp.array(2.0)))
C(G + "index_op", lambda: [10, 20, 30][jnp.array(1)])
C(G + "range_array", lambda: list(range(jnp.array(3))))
C(G + "tolist", lambda: jnp.arange(6).reshape(2, 3).tolist())
C(G + "tolist_float", lambda: jnp.array([1.5]).tolist())
C(G + "tolist_scalar", lambda: jnp.array(2).tolist())
C(G + "np_asarray_dtype", lambda: np.asarray(jnp.arange(3)))
C(G + "np_asarray_f16", lambda: np.asarray(jnp.ones(2, jnp.float16)))
C(G + "np_asarray_bf16_dtype", lambda: str(np.asarray(jnp.ones(2, jnp.bfloat16)).dtype))
C(G + "np_asarray_scalar", lambda: np.asarray(jnp.float32(2)))
C(G + "np_array_dtype_arg", lambda: np.array(jnp.arange(3), dtype=np.float64))
C(G + "np_sum_of_array", lambda: np.sum(jnp.arange(3)))
C(G + "np_add_array", lambda: type(np.float32(1) + jnp.ones(2)).__name__)
C(G + "np_ndarray_plus_array", lambda: np.ones(2) + jnp.ones(2))
C(G + "iteration", lambda: [x for x in jnp.arange(3)])
C(G + "iteration_2d", lambda: [x for x in jnp.arange(4).reshape(2, 2)])
C(G + "len", lambda: len(jnp.zeros((4, 2))))
C(G + "isscalar_pyfloat", lambda: jnp.isscalar(1.0))
C(G + "isscalar_0d", lambda: jnp.isscalar(jnp.array(1.0)))
C(G + "isscalar_1d", lambda: jnp.isscalar(jnp.ones(1)))
C(G + "isscalar_np", lambda: jnp.isscalar(np.float32(1)))
C(G + "jnp_shape", lambda: jnp.shape(jnp.ones((2, 3))))
C(G + "jnp_shape_scalar", lambda: jnp.shape(1.0))
C(G + "device_get", lambda: jax.device_get(jnp.arange(3)))
C(G + "device_get_tree", lambda: jax.device_get({"a": jnp.ones(2), "b": 1}))
C(G + "device_put", lambda: jax.device_put(np.arange(3.0)))
C(G + "device_put_weak", lambda: jax.device_put(1.0))
C(G + "block_until_ready", lambda: jax.block_until_ready(jnp.ones(2)))
C(G + "block_until_ready_tree", lambda: jax.block_until_ready((jnp.ones(2), 1.0)))
C(G + "method_block", lambda: jnp.ones(2).block_until_ready())
C(G + "dtype_attrs", lambda: (jnp.ones(2).dtype, jnp.ones((2, 3)).shape, jnp.ones((2, 3)).size,
                              jnp.ones((2, 3)).ndim, jnp.ones((2, 3)).nbytes))
C(G + "itemsize", lambda: jnp.ones(2, jnp.int8).itemsize)
C(G + "dtype_eq", lambda: (jnp.ones(2).dtype == jnp.float32, jnp.ones(2).dtype == "float32"))
C(G + "dtype_type", lambda: type(jnp.ones(2).dtype).__name__)
C(G + "jnp_float32_dtype", lambda: jnp.dtype(jnp.float32))
C(G + "issubdtype", lambda: (jnp.issubdtype(jnp.float32, jnp.floating),
                             jnp.issubdtype(jnp.int32, jnp.integer),
                             jnp.issubdtype(jnp.bfloat16, jnp.floating),
                             jnp.issubdtype(jnp.int32, jnp.floating)))
C(G + "finfo", lambda: (float(jnp.finfo(jnp.float32).eps), jnp.finfo(jnp.bfloat16).bits,
                        float(jnp.finfo(jnp.float16).max)))
C(G + "iinfo", lambda: (int(jnp.iinfo(jnp.int8).min), int(jnp.iinfo(jnp.uint32).max)))
C(G + "dtypes_canonicalize", lambda: jax.dtypes.canonicalize_dtype(np.float64))
C(G + "dtypes_result_type", lambda: jax.dtypes.result_type(np.int32, 1.0))
C(G + "dtypes_issubdtype_float0", lambda: jax.dtypes.issubdtype(jax.dtypes.float0,
                                                                np.floating))
C(G + "weak_type_attr", lambda: jnp.asarray(1.0).weak_type)
C(G + "array_eq_pylist", lambda: jnp.arange(3) == jnp.array([0, 5, 2]))
C(G + "contains", lambda: 2 in jnp.arange(3))
C(G + "copy_method", lambda: jnp.arange(3).copy())
C(G + "astype_method_weak", lambda: jnp.asarray(1).astype(jnp.float32))
C(G + "view_conj", lambda: jnp.arange(3).conj())
C(G + "real_attr", lambda: jnp.array([1 + 2j]).real)
C(G + "imag_attr_float", lambda: jnp.ones(2).imag)
C(G + "round_method", lambda: jnp.array([1.26]).round(1))
C(G + "clip_method", lambda: jnp.arange(5).clip(1, 3))
C(G + "nonzero_method", lambda: jnp.array([0, 1, 2]).nonzero())
C(G + "ravel_method", lambda: m23().ravel())
C(G + "pickle_roundtrip", lambda: pickle.loads(pickle.dumps(jnp.arange(3))))
C(G + "bool_scalar_true", lambda: bool(jnp.array(2.0)))
C(G + "jnp_array_of_tracer_list_jit", lambda: jax.jit(lambda a, b: jnp.array([a, b]))(1.0, 2))
C(G + "jnp_asarray_list_of_arrays", lambda: jnp.asarray([jnp.float32(1), 2.0]))
C(G + "devices", lambda: len(jax.devices()) >= 1)
C(G + "default_backend", lambda: jax.default_backend())
C(G + "Array_shape_tuple_type", lambda: type(jnp.ones((2, 3)).shape).__name__)
C(G + "array_dunder_array_priority", lambda: type(np.ones(2) * jnp.ones(2)).__name__)
C(G + "numpy_ufunc_on_array", lambda: type(np.sin(jnp.ones(2))).__name__)
C(G + "at_repr_type", lambda: type(jnp.ones(2).at).__name__)
C(G + "enable_x64_flag", lambda: jax.config.jax_enable_x64)
C(G + "jnp_pi", lambda: jnp.pi)
C(G + "jnp_newaxis", lambda: jnp.newaxis)
C(G + "jnp_inf", lambda: jnp.inf)
C(G + "sort_complex_type", lambda: jnp.iscomplexobj(jnp.array([1j])))
C(G + "shape_of_scalar_array", lambda: jnp.array(1.0).shape)
C(G + "size_attr_scalar", lambda: jnp.array(1.0).size)


# ---- weak-type matrix: elementwise functions on Python scalars, weak 0-d and strong arrays --------
UNARY = ["abs", "absolute", "negative", "positive", "sign", "floor", "ceil", "trunc", "rint",
         "round", "sqrt", "cbrt", "square", "exp", "exp2", "expm1", "log", "log2", "log10",
         "log1p", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
         "arcsinh", "arccosh", "arctanh", "deg2rad", "rad2deg", "degrees", "radians", "reciprocal",
         "isfinite", "isinf", "isnan", "signbit", "logical_not", "invert", "bitwise_not", "conj",
         "real", "imag", "angle", "sinc", "i0", "nan_to_num", "fabs", "iscomplex", "isreal",
         "isneginf", "isposinf", "spacing", "frexp", "modf", "bitwise_count", "cumsum", "sum",
         "mean", "max", "argmax", "prod", "all", "any", "var", "ravel", "atleast_1d",
         "zeros_like", "ones_like", "copy", "asarray", "array", "sort", "flip", "exp2"]
BINARY = ["add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "remainder",
          "mod", "fmod", "power", "pow", "float_power", "maximum", "minimum", "fmax", "fmin",
          "hypot", "arctan2", "logaddexp", "logaddexp2", "copysign", "nextafter", "heaviside",
          "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
          "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift",
          "right_shift", "gcd", "lcm", "ldexp", "divmod", "isclose", "dot", "outer", "inner",
          "kron", "where1", "arctan2", "polyval", "cross2"]
UN_INPUTS = {
    "pyfloat": lambda: 1.5, "pyint": lambda: 3, "pybool": lambda: True,
    "pycomplex": lambda: 1 + 1j, "weakf": lambda: jnp.asarray(0.5),
    "weaki": lambda: jnp.asarray(2), "f16": lambda: jnp.float16(0.5),
    "i8vec": lambda: jnp.array([1, -2], jnp.int8), "u8vec": lambda: jnp.array([1, 2], jnp.uint8),
    "boolvec": lambda: jnp.array([True, False]), "bf16vec": lambda: jnp.array([0.5], jnp.bfloat16),
}
BIN_INPUTS = {
    "int_int": lambda: (7, 2), "float_int": lambda: (7.5, 2), "int_float": lambda: (7, 2.0),
    "weakf_pyint": lambda: (jnp.asarray(7.0), 2), "i32_pyfloat": lambda: (jnp.array([7, -7]), 2.0),
    "f16_pyint": lambda: (jnp.array([7.0], jnp.float16), 3),
    "i8_pyint": lambda: (jnp.array([7, -7], jnp.int8), 3),
    "u8_i8": lambda: (jnp.array([7], jnp.uint8), jnp.array([3], jnp.int8)),
    "bool_bool": lambda: (jnp.array([True, False]), jnp.array([True, True])),
    "f32_i32": lambda: (jnp.array([7.0, -7.0]), jnp.array([2, 3])),
    "pybool_pyint": lambda: (True, 2), "bf16_f16": lambda: (jnp.bfloat16(1), jnp.float16(2)),
    "c64_pyfloat": lambda: (jnp.array([1 + 1j], jnp.complex64), 2.0),
}


def _unary(name, inp):
  return getattr(jnp, name)(UN_INPUTS[inp]())


def _binary(name, inp):
  a, b = BIN_INPUTS[inp]()
  if name == "where1":
    return jnp.where(True, a, b)
  if name == "cross2":
    return jnp.cross(jnp.array([a, a, a]) if np.ndim(a) == 0 else a,
                     jnp.array([b, b, b]) if np.ndim(b) == 0 else b)
  if name == "polyval":
    return jnp.polyval(jnp.atleast_1d(a), b)
  return getattr(jnp, name)(a, b)


for _n in dict.fromkeys(UNARY):
  for _i in UN_INPUTS:
    C(f"weak/unary/{_n}/{_i}", functools.partial(_unary, _n, _i))
for _n in dict.fromkeys(BINARY):
  for _i in BIN_INPUTS:
    C(f"weak/binary/{_n}/{_i}", functools.partial(_binary, _n, _i))

# ---- Python ints out of the target dtype's range -------------------------------------------
G = "intrange/"
C(G + "i8_plus_300", lambda: jnp.ones(2, jnp.int8) + 300)
C(G + "i8_plus_2p31m1", lambda: jnp.ones(2, jnp.int8) + (2 ** 31 - 1))
C(G + "i8_plus_2p31", lambda: jnp.ones(2, jnp.int8) + 2 ** 31)
C(G + "u32_plus_2p32m1", lambda: jnp.ones(2, jnp.uint32) + (2 ** 32 - 1))
C(G + "u32_plus_neg1", lambda: jnp.ones(2, jnp.uint32) + (-1))
C(G + "i32_plus_2p31", lambda: jnp.ones(2, jnp.int32) + 2 ** 31)
C(G + "i8_mul_300_jit", lambda: jax.jit(lambda x: x * 300)(jnp.ones(2, jnp.int8)))
C(G + "full_i8_300", lambda: jnp.full(2, 300, jnp.int8))
C(G + "array_300_i8", lambda: jnp.array(300, jnp.int8))
C(G + "maximum_i8_300", lambda: jnp.maximum(jnp.int8(1), 300))
C(G + "eq_i8_300", lambda: jnp.int8(1) == 300)
C(G + "at_set_i8_300", lambda: jnp.zeros(2, jnp.int8).at[0].set(300))
C(G + "where_i8_300", lambda: jnp.where(jnp.array([True, False]), jnp.int8(1), 300))
C(G + "clip_u8", lambda: jnp.clip(jnp.array([1, 200], jnp.uint8), 0, 300))
C(G + "asarray_big", lambda: jnp.asarray(2 ** 33))
C(G + "jit_big_int_arg", lambda: jax.jit(lambda x: x)(2 ** 31))

# ---- more jnp behaviours ----------------------------------------------------------------------
G = "more/"
C(G + "interp", lambda: jnp.interp(jnp.array([0.5, 2.0]), jnp.array([0.0, 1.0]),
                                   jnp.array([0.0, 2.0])))
C(G + "polyval", lambda: jnp.polyval(jnp.array([1, 2]), jnp.array([2.0])))
C(G + "vander", lambda: jnp.vander(jnp.array([1, 2, 3]), 3))
C(G + "convolve", lambda: jnp.convolve(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 1.0])))
C(G + "convolve_same", lambda: jnp.convolve(jnp.array([1.0, 2.0, 3.0]), jnp.array([1.0, 1.0]),
                                            mode="same"))
C(G + "correlate", lambda: jnp.correlate(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 1.0])))
C(G + "cov", lambda: jnp.cov(jnp.array([[1.0, 2.0, 4.0], [1.0, 0.0, 2.0]])))
C(G + "corrcoef", lambda: jnp.corrcoef(jnp.array([[1.0, 2.0, 4.0], [1.0, 0.0, 2.0]])))
C(G + "trapezoid", lambda: jnp.trapezoid(jnp.array([1.0, 2.0, 3.0])))
C(G + "gradient", lambda: jnp.gradient(jnp.array([1.0, 4.0, 9.0])))
C(G + "tril_indices_from", lambda: jnp.tril_indices_from(jnp.ones((3, 3)), k=-1))
C(G + "nanargmax", lambda: jnp.nanargmax(jnp.array([1.0, jnp.nan, 3.0])))
C(G + "nanstd", lambda: jnp.nanstd(jnp.array([1.0, jnp.nan, 3.0])))
C(G + "cumulative_sum", lambda: jnp.cumulative_sum(jnp.array([1, 2, 3]), include_initial=True))
C(G + "argpartition_kth", lambda: jnp.sort(jnp.partition(jnp.array([3, 1, 2, 5]), 2)[2:]))
C(G + "isin_invert", lambda: jnp.isin(a3(), jnp.array([1]), invert=True))
C(G + "array_equiv", lambda: jnp.array_equiv(jnp.ones(3), 1))
C(G + "allclose_nan", lambda: jnp.allclose(jnp.nan, jnp.nan, equal_nan=True))
C(G + "ufunc_reduce", lambda: jnp.add.reduce(jnp.arange(4)))
C(G + "ufunc_outer", lambda: jnp.multiply.outer(a3(), a3()))
C(G + "ufunc_accumulate", lambda: jnp.add.accumulate(jnp.arange(4)))
C(G + "ufunc_at", lambda: jnp.add.at(jnp.zeros(3), jnp.array([0, 0]), 1.0, inplace=False))
C(G + "vectorize", lambda: jnp.vectorize(lambda a, b: a + b)(a3(), 1.0))
C(G + "einsum_path_type", lambda: type(jnp.einsum_path("ij,jk", jnp.ones((2, 2)),
                                                       jnp.ones((2, 2)))).__name__)
C(G + "fill_diagonal", lambda: jnp.fill_diagonal(jnp.zeros((2, 2)), 5.0, inplace=False))
C(G + "resize", lambda: jnp.resize(a3(), (2, 2)))
C(G + "rollaxis", lambda: jnp.rollaxis(jnp.zeros((2, 3, 4)), 2).shape)
C(G + "expand_dims_neg", lambda: jnp.expand_dims(jnp.zeros((2, 3)), -1).shape)
C(G + "apply_along_axis", lambda: jnp.apply_along_axis(jnp.sum, 1, m23()))
C(G + "searchsorted_sorter", lambda: jnp.searchsorted(jnp.array([3, 1, 2]), 2,
                                                      sorter=jnp.array([1, 2, 0])))
C(G + "histogram_bin_edges", lambda: jnp.histogram_bin_edges(jnp.array([0.0, 1.0]), bins=2))
C(G + "logspace_base", lambda: jnp.logspace(0, 3, 4, base=2.0))
C(G + "geomspace", lambda: jnp.geomspace(1, 8, 4))
C(G + "split_axis1", lambda: jnp.split(i23(), [1], axis=1))
C(G + "mean_int_axis_tuple", lambda: jnp.mean(jnp.arange(24).reshape(2, 3, 4), axis=(0, 2)))
C(G + "max_axis_neg_keep", lambda: jnp.max(jnp.arange(24).reshape(2, 3, 4), axis=-2,
                                           keepdims=True).shape)
C(G + "sum_bool_axis", lambda: jnp.sum(i23() > 2, axis=0))
C(G + "mean_bool_axis", lambda: jnp.mean(i23() > 2, axis=0))
C(G + "var_f16", lambda: jnp.var(jnp.ones(3, jnp.float16)))
C(G + "cumsum_f16", lambda: jnp.cumsum(jnp.ones(3, jnp.float16)))
C(G + "prod_bool", lambda: jnp.prod(jnp.array([True, False])))
C(G + "sum_u32", lambda: jnp.sum(jnp.ones(3, jnp.uint32)))
C(G + "sum_u16", lambda: jnp.sum(jnp.ones(3, jnp.uint16)))
C(G + "argmax_empty_err", lambda: jnp.argmax(jnp.zeros((0,))))
C(G + "min_int_initial_where", lambda: jnp.min(a3(), initial=5, where=a3() > 0))
C(G + "sum_promote_integers_false", lambda: jnp.sum(jnp.ones(3, jnp.int8),
                                                    promote_integers=False))
C(G + "astype_copy_kw", lambda: a3().astype(jnp.float32, copy=True))
C(G + "clip_min_max_kw", lambda: jnp.clip(a3(), min=1, max=1))
C(G + "round_f16", lambda: jnp.round(jnp.array([1.25], jnp.float16), 1))
C(G + "matmul_bool", lambda: jnp.ones((2, 2), bool) @ jnp.ones((2, 2), bool))
C(G + "dot_preferred", lambda: jnp.dot(jnp.ones(2, jnp.int8), jnp.ones(2, jnp.int8),
                                       preferred_element_type=jnp.float32))
C(G + "matmul_f16_f32", lambda: jnp.ones((2, 2), jnp.float16) @ jnp.ones((2, 2)))
C(G + "tensordot_int", lambda: jnp.tensordot(i23(), i23(), axes=([0, 1], [0, 1])))
C(G + "einsum_preferred", lambda: jnp.einsum("i,i", jnp.ones(2, jnp.float16),
                                             jnp.ones(2, jnp.float16),
                                             preferred_element_type=jnp.float32))
C(G + "reshape_copy_kw", lambda: jnp.reshape(a3(), (3, 1), copy=True).shape)
C(G + "jnp_sum_of_tuple_err", lambda: jnp.sum((1, 2)))
C(G + "jnp_sin_list_err", lambda: jnp.sin([1.0, 2.0]))
C(G + "jnp_array_list_of_tuples", lambda: jnp.array([(1, 2), (3, 4)]))
C(G + "jnp_asarray_dtype", lambda: jnp.asarray([1, 2], dtype=jnp.float16))
C(G + "jnp_array_dtype_none_f64", lambda: jnp.array(np.float64(1.5)))
C(G + "jnp_array_np_bool", lambda: jnp.array(np.bool_(True)))
C(G + "jnp_zeros_float_shape_err", lambda: jnp.zeros(2.0))
C(G + "jnp_zeros_np_int_shape", lambda: jnp.zeros(np.int64(2)))
C(G + "jnp_ones_list_shape", lambda: jnp.ones([2, 1]))
C(G + "jnp_arange_float_dtype_int", lambda: jnp.arange(0.5, 3, dtype=jnp.int32))
C(G + "jnp_arange_bf16", lambda: jnp.arange(3, dtype=jnp.bfloat16))
C(G + "jnp_linspace_axis", lambda: jnp.linspace(jnp.zeros(2), jnp.ones(2), 3, axis=1))
C(G + "jnp_eye_k_neg", lambda: jnp.eye(3, k=-2, dtype=int))
C(G + "indices_sparse", lambda: jnp.indices((2, 3), sparse=True))
C(G + "meshgrid_sparse", lambda: jnp.meshgrid(a3(), a3(), sparse=True))
C(G + "empty_like_shape", lambda: jnp.empty_like(m23(), shape=(4,)).shape)
C(G + "full_like_shape", lambda: jnp.full_like(m23(), 7, shape=(2,)))
C(G + "ones_like_list", lambda: jnp.ones_like([1, 2]))

# ---- lax promotion of loop carries, weak types in control flow ------------------------------
G = "carry/"
C(G + "while_int_to_float", lambda: lax.while_loop(lambda c: c < 5, lambda c: c + 1.5, 0))
C(G + "while_weak_to_strong", lambda: lax.while_loop(lambda c: c < 5, lambda c: c + jnp.float32(1),
                                                     0.0))
C(G + "while_strong_to_weak_ok", lambda: lax.while_loop(lambda c: c < 5, lambda c: c + 1,
                                                        jnp.float32(0)))
C(G + "while_f16_err", lambda: lax.while_loop(lambda c: c < 5, lambda c: c + jnp.float32(1),
                                              jnp.float16(0)))
C(G + "fori_weak_int", lambda: lax.fori_loop(0, 3, lambda i, c: c + i, 0))
C(G + "fori_weak_float_strong_body", lambda: lax.fori_loop(0, 3, lambda i, c: c + jnp.ones(()),
                                                           0.0))
C(G + "scan_weak_ys", lambda: lax.scan(lambda c, x: (c + x, c), 0.0, f3()))
C(G + "scan_int_init_float_xs", lambda: lax.scan(lambda c, x: (c + x, c), 0, f3()))
C(G + "scan_carry_pytree_weak", lambda: lax.scan(lambda c, x: ((c[0] + x, c[1]), c[0]),
                                                 (0.0, 1), f3()))
C(G + "cond_weak_branches", lambda: lax.cond(True, lambda: 1.0, lambda: 2.0))
C(G + "cond_weak_strong", lambda: lax.cond(False, lambda: 1.0, lambda: jnp.float32(2)))
C(G + "switch_weak_strong", lambda: lax.switch(0, [lambda: 1.0, lambda: jnp.float32(2)]))
C(G + "cond_int_float_err", lambda: lax.cond(True, lambda: 1, lambda: 2.0))
C(G + "map_weak", lambda: lax.map(lambda x: x * 2, jnp.asarray([1.0, 2.0])))
C(G + "fori_float_bounds", lambda: lax.fori_loop(0.0, 3.0, lambda i, c: c + i, 0))
C(G + "fori_np_int_bounds", lambda: lax.fori_loop(np.int32(0), np.int32(3), lambda i, c: c + i,
                                                  0))
C(G + "fori_int_float_mix", lambda: lax.fori_loop(0, 3, lambda i, c: c + i, 0.5))

# ---- transformations, weak types of derivatives ---------------------------------------------------
G = "adweak/"
C(G + "jvp_square", lambda: jax.jvp(lambda x: x ** 2, (3.0,), (1.0,)))
C(G + "jvp_mul", lambda: jax.jvp(lambda x: x * x, (3.0,), (1.0,)))
C(G + "jvp_sin", lambda: jax.jvp(jnp.sin, (3.0,), (1.0,)))
C(G + "jvp_exp_strong_tangent", lambda: jax.jvp(jnp.exp, (1.0,), (jnp.float32(1),)))
C(G + "jvp_strong_primal_weak_tangent", lambda: jax.jvp(jnp.exp, (jnp.float32(1),), (1.0,)))
C(G + "grad_sin", lambda: jax.grad(jnp.sin)(1.0))
C(G + "grad_exp", lambda: jax.grad(jnp.exp)(1.0))
C(G + "grad_tanh", lambda: jax.grad(jnp.tanh)(1.0))
C(G + "grad_log", lambda: jax.grad(jnp.log)(1.0))
C(G + "grad_sqrt", lambda: jax.grad(jnp.sqrt)(4.0))
C(G + "grad_cube", lambda: jax.grad(lambda x: x ** 3)(2.0))
C(G + "grad_pow_float", lambda: jax.grad(lambda x: x ** 2.5)(2.0))
C(G + "grad_pow_float_int_valued", lambda: jax.grad(lambda x: x ** 2.0)(2.0))
C(G + "grad_div", lambda: jax.grad(lambda x: 1.0 / x)(2.0))
C(G + "grad_add_const", lambda: jax.grad(lambda x: x + 1.0)(2.0))
C(G + "grad_relu", lambda: jax.grad(jax.nn.relu)(2.0))
C(G + "grad_sigmoid", lambda: jax.grad(jax.nn.sigmoid)(2.0))
C(G + "grad_abs", lambda: jax.grad(jnp.abs)(-2.0))
C(G + "grad_maximum", lambda: jax.grad(lambda x: jnp.maximum(x, 0.0))(2.0))
C(G + "grad_where", lambda: jax.grad(lambda x: jnp.where(x > 0, x, 0.0))(2.0))
C(G + "grad_mean_strong", lambda: jax.grad(lambda x: jnp.mean(x ** 2))(f3()))
C(G + "grad_sum_weak_scalar", lambda: jax.grad(lambda x: jnp.sum(x))(2.0))
C(G + "grad_array_of_weak", lambda: jax.grad(lambda x: jnp.sum(x * 2))(jnp.asarray(2.0)))
C(G + "grad_stop_gradient_only", lambda: jax.grad(lambda x: lax.stop_gradient(x) * 0.0)(2.0))
C(G + "grad_unused", lambda: jax.grad(lambda x, y: y * 2.0)(1.0, 2.0))
C(G + "grad_const_fn", lambda: jax.grad(lambda x: 3.0)(1.0))
C(G + "grad_f16_weak_mix", lambda: jax.grad(lambda x: x * 2.0)(jnp.float16(1)))
C(G + "vjp_weak", lambda: jax.vjp(jnp.sin, 1.0)[1](1.0))
C(G + "jacfwd_weak", lambda: jax.jacfwd(jnp.sin)(1.0))
C(G + "jacrev_weak", lambda: jax.jacrev(jnp.sin)(1.0))
C(G + "hessian_weak", lambda: jax.hessian(jnp.sin)(1.0))
C(G + "value_and_grad_weak_value", lambda: jax.value_and_grad(jnp.sin)(1.0))
C(G + "vmap_grad_weak", lambda: jax.vmap(jax.grad(jnp.sin))(jnp.asarray([1.0, 2.0])))
C(G + "linearize_weak", lambda: jax.linearize(jnp.sin, 1.0)[1](1.0))
C(G + "grad_int_pow_weak", lambda: jax.grad(lambda x: jnp.power(x, 3))(2.0))
C(G + "grad_x_times_int", lambda: jax.grad(lambda x: x * 3)(2.0))
C(G + "grad_jit_weak", lambda: jax.grad(jax.jit(lambda x: x * 3.0))(2.0))
C(G + "grad_cond_weak", lambda: jax.grad(lambda x: lax.cond(x > 0, lambda: x * 2.0,
                                                            lambda: x))(2.0))
C(G + "grad_scan_weak", lambda: jax.grad(lambda x: lax.scan(lambda c, _: (c * x, None), 1.0,
                                                            None, length=2)[0])(2.0))

# ---- misc API -----------------------------------------------------------------------------------
G = "misc/"
C(G + "lax_select", lambda: lax.select(jnp.array([True, False]), jnp.ones(2), jnp.zeros(2)))
C(G + "lax_top_k_type", lambda: type(lax.top_k(jnp.array([1.0, 5.0, 3.0]), 2)).__name__)
C(G + "random_int_shape", lambda: jax.random.uniform(K(), 2))
C(G + "jit_lower_as_text_type", lambda: type(jax.jit(lambda x: x).lower(1.0).as_text()).__name__)
C(G + "jit_lower_compile_call", lambda: jax.jit(lambda x: x * 2).lower(1.0).compile()(3.0))
C(G + "jit_wrapped_name", lambda: jax.jit(_named_fn).__name__)
C(G + "grad_wrapped_name", lambda: jax.grad(_named_fn).__name__)
C(G + "vmap_wrapped_name", lambda: jax.vmap(_named_fn).__name__)
C(G + "jit_decorator_kwargs", lambda: jax.jit(static_argnums=(1,))(lambda x, n: x * n)(2.0, 3))
C(G + "partial_jit", lambda: functools.partial(jax.jit, static_argnums=1)(
    lambda x, n: x + n)(1.0, 2))
C(G + "tree_map_arrays", lambda: jax.tree.map(jnp.sum, {"a": jnp.ones(2), "b": [jnp.ones(3)]}))
C(G + "tree_leaves_arrays_none", lambda: len(jax.tree.leaves({"a": None, "b": jnp.ones(2)})))
C(G + "device_get_scalar", lambda: jax.device_get(jnp.float32(2)))
C(G + "device_get_type", lambda: type(jax.device_get(jnp.ones(2))).__name__)
C(G + "np_asarray_weak_scalar", lambda: np.asarray(jnp.asarray(2.0)))
C(G + "float_weak", lambda: float(jnp.asarray(2.0)))
C(G + "item_f16_type", lambda: type(jnp.float16(2).item()).__name__)
C(G + "item_bf16_type", lambda: type(jnp.bfloat16(2).item()).__name__)
C(G + "tolist_bf16", lambda: jnp.array([1.5], jnp.bfloat16).tolist())
C(G + "iter_0d_err_type", lambda: iter(jnp.array(1.0)))
C(G + "array_len_0d_err", lambda: len(jnp.float32(1)))
C(G + "array_reversed", lambda: list(reversed(jnp.arange(3))))
C(G + "array_in_list_sum", lambda: sum([jnp.ones(2), jnp.ones(2)]))
C(G + "abs_builtin", lambda: abs(jnp.array(-2)))
C(G + "round_builtin", lambda: round(jnp.array(2.6)))
C(G + "divmod_builtin", lambda: divmod(jnp.array(7), 2))
C(G + "matmul_rmatmul_np", lambda: np.ones((2, 2)) @ jnp.ones((2, 2)))
C(G + "rtruediv", lambda: 1 / jnp.array([2, 4]))
C(G + "rfloordiv", lambda: 7 // jnp.array([2, -2]))
C(G + "rmod", lambda: 7 % jnp.array([2, -3]))
C(G + "rsub_weak", lambda: 1 - jnp.asarray(2.0))
C(G + "lshift_op", lambda: jnp.array([1]) << 2)
C(G + "eq_none", lambda: jnp.ones(2) == None)  # noqa: E711
C(G + "eq_str", lambda: jnp.ones(2) == "a")
C(G + "add_str_err", lambda: jnp.ones(2) + "a")
C(G + "add_list", lambda: jnp.ones(2) + [1, 2])
C(G + "add_tuple", lambda: jnp.ones(2) + (1, 2))
C(G + "neg_bool_err", lambda: jnp.negative(jnp.array([True])))
C(G + "at_add_list_idx", lambda: jnp.zeros(4).at[[0, 2]].add(jnp.array([1.0, 2.0])))
C(G + "at_set_tuple_idx", lambda: jnp.zeros((2, 2)).at[0, 1].set(3.0))
C(G + "at_set_ellipsis", lambda: jnp.zeros((2, 2)).at[..., 0].set(3.0))
C(G + "at_apply", lambda: jnp.arange(3.0).at[1].apply(jnp.sin))
C(G + "at_set_wrong_dtype", lambda: jnp.zeros(2, jnp.int32).at[0].set(2.7))
C(G + "at_set_indices_are_sorted", lambda: jnp.zeros(3).at[jnp.array([0, 1])].set(
    1.0, indices_are_sorted=True, unique_indices=True))
C(G + "at_get_clip", lambda: jnp.arange(3.0).at[jnp.array([5])].get(mode="clip"))
C(G + "at_set_promise_in_bounds", lambda: jnp.arange(3.0).at[1].set(9.0,
                                                                   mode="promise_in_bounds"))
C(G + "index_neg_array", lambda: jnp.arange(5)[jnp.array([-1, -5])])
C(G + "index_bool_scalar", lambda: jnp.arange(3)[True].shape)
C(G + "index_np_array", lambda: jnp.arange(5)[np.array([1, 3])])
C(G + "index_list_of_lists", lambda: i23()[[[0], [1]], [[1, 2]]])
C(G + "index_slice_none_none", lambda: i23()[None, :, None].shape)
C(G + "index_step_neg2", lambda: jnp.arange(10)[8:1:-2])
C(G + "index_empty_slice", lambda: jnp.arange(10)[5:2])
C(G + "index_tracer_slice_err", lambda: jax.jit(lambda x, i: x[i:])(jnp.arange(5), 2))
C(G + "dynamic_update_index_in_dim", lambda: lax.dynamic_update_index_in_dim(
    jnp.zeros((3, 2)), jnp.ones(2), 1, 0))
C(G + "scatter_add_lax", lambda: jnp.zeros(3).at[jnp.array([[0], [2]])].add(1.0))


# ---- realistic small programs --------------------------------------------------------------------
G = "prog/"


def _mlp_params(key, sizes=(4, 8, 3)):
  keys = jax.random.split(key, len(sizes) - 1)
  return [(jax.random.normal(k, (m, n)) * (1.0 / np.sqrt(m)), jnp.zeros(n))
          for k, m, n in zip(keys, sizes[:-1], sizes[1:])]


def _mlp(params, x):
  for w, b in params[:-1]:
    x = jnp.tanh(x @ w + b)
  w, b = params[-1]
  return x @ w + b


def _xent(params, x, y):
  logits = _mlp(params, x)
  return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 3), axis=-1))


def _data():
  x = jax.random.normal(jax.random.PRNGKey(1), (16, 4))
  y = jax.random.randint(jax.random.PRNGKey(2), (16,), 0, 3)
  return x, y


@case(G + "mlp_train_steps")
def _prog_mlp():
  params = _mlp_params(jax.random.PRNGKey(0))
  x, y = _data()

  @jax.jit
  def step(p, x, y):
    l, g = jax.value_and_grad(_xent)(p, x, y)
    return jax.tree_util.tree_map(lambda a, b: a - 0.5 * b, p, g), l
  losses = []
  for _ in range(5):
    params, l = step(params, x, y)
    losses.append(l)
  acc = jnp.mean(jnp.argmax(_mlp(params, x), -1) == y)
  return jnp.stack(losses), acc, params


@case(G + "per_example_grads")
def _prog_pe():
  params = _mlp_params(jax.random.PRNGKey(0))
  x, y = _data()
  g = jax.vmap(jax.grad(_xent), in_axes=(None, 0, 0))(params, x[:, None], y[:, None])
  return jax.tree_util.tree_map(lambda a: a.shape, g), g[0][0][:2]


@case(G + "adam_optimizer")
def _prog_adam():
  from importlib import import_module
  opt = import_module(jax.__name__ + ".example_libraries.optimizers")
  init, update, get = opt.adam(1e-2)
  params = _mlp_params(jax.random.PRNGKey(0))
  x, y = _data()
  state = init(params)
  for i in range(3):
    g = jax.grad(_xent)(get(state), x, y)
    state = update(i, g, state)
  return get(state)


@case(G + "layernorm")
def _prog_ln():
  x = jax.random.normal(jax.random.PRNGKey(3), (2, 5))
  mean = jnp.mean(x, -1, keepdims=True)
  var = jnp.var(x, -1, keepdims=True)
  y = (x - mean) * jax.lax.rsqrt(var + 1e-5)
  return y, jax.grad(lambda x: jnp.sum(((x - x.mean(-1, keepdims=True)) /
                                        jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)) ** 3))(x)


@case(G + "attention")
def _prog_attn():
  k1, k2, k3 = jax.random.split(jax.random.PRNGKey(4), 3)
  q = jax.random.normal(k1, (2, 4, 8))
  k = jax.random.normal(k2, (2, 4, 8))
  v = jax.random.normal(k3, (2, 4, 8))
  s = jnp.einsum("bqd,bkd->bqk", q, k) / jnp.sqrt(8.0)
  mask = jnp.tril(jnp.ones((4, 4), bool))
  s = jnp.where(mask, s, -jnp.inf)
  w = jax.nn.softmax(s, axis=-1)
  return jnp.einsum("bqk,bkd->bqd", w, v)


@case(G + "rnn_scan")
def _prog_rnn():
  key = jax.random.PRNGKey(5)
  wx = jax.random.normal(key, (3, 4)) * 0.5
  wh = jax.random.normal(jax.random.fold_in(key, 1), (4, 4)) * 0.5
  xs = jax.random.normal(jax.random.fold_in(key, 2), (6, 3))

  def loss(wx, wh):
    def cell(h, x):
      h = jnp.tanh(x @ wx + h @ wh)
      return h, h.sum()
    h, ys = jax.lax.scan(cell, jnp.zeros(4), xs)
    return jnp.sum(h) + jnp.sum(ys)
  return loss(wx, wh), jax.grad(loss, argnums=(0, 1))(wx, wh)


@case(G + "conv_net")
def _prog_conv():
  key = jax.random.PRNGKey(6)
  x = jax.random.normal(key, (2, 1, 8, 8))
  w1 = jax.random.normal(jax.random.fold_in(key, 1), (4, 1, 3, 3)) * 0.3
  w2 = jax.random.normal(jax.random.fold_in(key, 2), (4 * 4 * 4, 2)) * 0.1

  def f(w1, w2):
    h = jax.lax.conv_general_dilated(x, w1, (2, 2), "SAME")
    h = jax.nn.relu(h)
    return jnp.sum(jax.nn.log_softmax(h.reshape(2, -1) @ w2))
  return f(w1, w2), jax.grad(f, argnums=(0, 1))(w1, w2)


@case(G + "newton_while")
def _prog_newton():
  def solve(a):
    def body(c):
      x, i = c
      return x - (x * x - a) / (2 * x), i + 1
    return jax.lax.while_loop(lambda c: (jnp.abs(c[0] * c[0] - a) > 1e-6) & (c[1] < 50),
                              body, (a, 0))
  return jax.jit(solve)(2.0), jax.vmap(solve)(jnp.array([2.0, 9.0]))


@case(G + "gradient_clipping")
def _prog_clip():
  params = _mlp_params(jax.random.PRNGKey(0))
  x, y = _data()
  g = jax.grad(_xent)(params, x, y)
  norm = jnp.sqrt(sum(jnp.sum(l ** 2) for l in jax.tree_util.tree_leaves(g)))
  scale = jnp.minimum(1.0, 0.1 / norm)
  return norm, jax.tree_util.tree_map(lambda l: l * scale, g)[0][1]


@case(G + "dropout")
def _prog_dropout():
  key = jax.random.PRNGKey(7)
  x = jnp.ones((4, 5))
  keep = jax.random.bernoulli(key, 0.8, x.shape)
  return jnp.where(keep, x / 0.8, 0.0)


@case(G + "kmeans_step")
def _prog_kmeans():
  pts = jax.random.normal(jax.random.PRNGKey(8), (20, 2))
  cent = pts[:3]
  d = jnp.sum((pts[:, None, :] - cent[None, :, :]) ** 2, -1)
  a = jnp.argmin(d, axis=1)
  oh = jax.nn.one_hot(a, 3)
  new = (oh.T @ pts) / jnp.maximum(oh.sum(0)[:, None], 1)
  return a, new


@case(G + "logistic_regression_newton")
def _prog_logreg():
  x, y = _data()
  yb = (y > 0).astype(jnp.float32)

  def nll(w):
    z = x @ w
    return jnp.sum(jnp.logaddexp(0.0, z) - yb * z)
  w = jnp.zeros(4)
  for _ in range(3):
    w = w - jnp.dot(jnp.linalg.inv(jax.hessian(nll)(w)), jax.grad(nll)(w)) \
        if hasattr(jnp, "linalg") else w - 0.1 * jax.grad(nll)(w)
  return w


@case(G + "cumsum_argsort_topk")
def _prog_sort():
  x = jax.random.uniform(jax.random.PRNGKey(9), (10,))
  idx = jnp.argsort(-x)[:3]
  return idx, jnp.cumsum(x[idx]), jax.lax.top_k(x, 3)[1]


@case(G + "heat_equation_fori")
def _prog_heat():
  u = jnp.zeros(16).at[8].set(1.0)

  def step(i, u):
    return u + 0.1 * (jnp.roll(u, 1) - 2 * u + jnp.roll(u, -1))
  return jax.lax.fori_loop(0, 20, step, u)


@case(G + "jit_static_shapes")
def _prog_static():
  @functools.partial(jax.jit, static_argnums=(1,))
  def f(x, n):
    return jnp.sum(jnp.stack([x ** i for i in range(n)]), 0)
  return f(jnp.arange(3.0), 3), f(jnp.arange(3.0), 4)


@case(G + "vmap_nested_in_axes")
def _prog_vmap_nested():
  def f(a, b):
    return jnp.dot(a, b)
  a = jnp.arange(24.0).reshape(2, 3, 4)
  b = jnp.arange(8.0).reshape(2, 4)
  return jax.vmap(jax.vmap(f, (0, None)), (0, 0))(a, b)


@case(G + "pytree_params_dict")
def _prog_dict_params():
  p = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2), "scale": 2.0}

  def f(p, x):
    return jnp.sum((x @ p["w"] + p["b"]) * p["scale"])
  return jax.grad(f)(p, jnp.arange(3.0))


@case(G + "random_init_shapes_dtypes")
def _prog_init():
  k = jax.random.PRNGKey(10)
  return (jax.nn.initializers.glorot_normal()(k, (3, 4)),
          jax.nn.initializers.he_uniform()(k, (3, 4)),
          jax.nn.initializers.lecun_normal()(k, (2, 2), jnp.float16),
          jax.nn.initializers.normal(0.1)(k, (3,)),
          jax.nn.initializers.uniform(0.5)(k, (3,)),
          jax.nn.initializers.ones(k, (2,), jnp.int32),
          jax.nn.initializers.constant(3.0)(k, (2,)),
          jax.nn.initializers.truncated_normal(1.0)(k, (3,)),
          jax.nn.initializers.orthogonal()(k, (3, 3)),
          jax.nn.initializers.variance_scaling(2.0, "fan_out", "uniform")(k, (4, 2)))


@case(G + "random_streams")
def _prog_streams():
  key = jax.random.PRNGKey(11)
  out = []
  for i in range(3):
    key, sub = jax.random.split(key)
    out.append(jax.random.normal(sub, (2,)))
  return jnp.stack(out), key


@case(G + "bfloat16_mixed_precision")
def _prog_bf16():
  x = jnp.arange(8.0).reshape(2, 4).astype(jnp.bfloat16)
  w = jnp.ones((4, 3), jnp.bfloat16) * 0.5
  y = x @ w
  return y, y.astype(jnp.float32).sum(), jax.grad(lambda w: jnp.sum((x @ w).astype(jnp.float32)))(w)


@case(G + "float16_loss_scaling")
def _prog_f16():
  x = jnp.linspace(-1, 1, 5, dtype=jnp.float16)
  return jax.grad(lambda x: jnp.sum(x * x * 1024.0).astype(jnp.float32))(x)


@case(G + "nan_safe_where_grad")
def _prog_nan_where():
  def f(x):
    safe = jnp.where(x > 0, x, 1.0)
    return jnp.sum(jnp.where(x > 0, jnp.log(safe), 0.0))
  return jax.grad(f)(jnp.array([-1.0, 0.0, 2.0]))


@case(G + "custom_vjp_clip_gradient")
def _prog_cvjp():
  @jax.custom_vjp
  def clip_grad(x):
    return x

  def fwd(x):
    return x, None

  def bwd(_, g):
    return (jnp.clip(g, -1.0, 1.0),)
  clip_grad.defvjp(fwd, bwd)
  return jax.grad(lambda x: jnp.sum(clip_grad(x) * 5.0))(jnp.ones(3))


@case(G + "custom_jvp_safe_log1pexp")
def _prog_cjvp():
  @jax.custom_jvp
  def f(x):
    return jnp.log1p(jnp.exp(x))

  @f.defjvp
  def f_jvp(p, t):
    x, = p
    tx, = t
    return f(x), tx * jax.nn.sigmoid(x)
  return jax.vmap(jax.grad(f))(jnp.array([-100.0, 0.0, 100.0])), f(100.0)


@case(G + "remat_scan")
def _prog_remat():
  @jax.checkpoint
  def layer(x):
    return jnp.sin(x) * 2.0
  return jax.grad(lambda x: jnp.sum(jax.lax.scan(lambda c, _: (layer(c), None), x, None,
                                                  length=3)[0]))(jnp.ones(2))


@case(G + "jacobian_of_vector_fn")
def _prog_jac():
  f = lambda x: jnp.array([x[0] * x[1], jnp.sin(x[2]), x.sum()])  # noqa: E731
  x = jnp.array([1.0, 2.0, 3.0])
  return jax.jacfwd(f)(x), jax.jacrev(f)(x), jax.hessian(lambda x: jnp.sum(f(x) ** 2))(x)


@case(G + "integer_arith_program")
def _prog_int():
  x = jnp.arange(10)
  return (x * 3 + 1) // 2 % 7, jnp.cumsum(x) ** 2, jnp.bincount(x % 3), (x << 2) | 1


@case(G + "mixed_dtype_program")
def _prog_mixed():
  a = jnp.arange(4, dtype=jnp.int8)
  b = jnp.ones(4, jnp.uint8)
  c = jnp.ones(4, jnp.float16)
  return a + b, a * c, (a + 1.5), a / 2, a.astype(jnp.bfloat16) + c.astype(jnp.bfloat16)


@case(G + "lax_cond_in_vmap_grad")
def _prog_cond():
  f = lambda x: jax.lax.cond(x > 0, lambda x: x ** 2, lambda x: -x, x)  # noqa: E731
  return jax.vmap(jax.grad(f))(jnp.array([-2.0, 3.0]))


@case(G + "segment_sum_via_at")
def _prog_segsum():
  data = jnp.arange(6.0)
  seg = jnp.array([0, 0, 1, 2, 2, 2])
  return jnp.zeros(3).at[seg].add(data), jax.grad(lambda d: jnp.sum(
      jnp.zeros(3).at[seg].add(d) ** 2))(data)


@case(G + "gather_embeddings")
def _prog_embed():
  table = jnp.arange(20.0).reshape(5, 4)
  ids = jnp.array([[0, 3], [4, 4]])
  return table[ids], jax.grad(lambda t: jnp.sum(t[ids] ** 2))(table)


@case(G + "softmax_cross_entropy_int_labels")
def _prog_xent2():
  logits = jnp.array([[2.0, 1.0, 0.1], [0.5, 2.5, 0.3]])
  labels = jnp.array([0, 1])
  lp = jax.nn.log_softmax(logits)
  return -jnp.take_along_axis(lp, labels[:, None], axis=1).mean()


@case(G + "piecewise_where_chain")
def _prog_pw():
  x = jnp.linspace(-2, 2, 9)
  return jnp.select([x < -1, x < 1], [x * 0, x], default=x ** 2), jnp.clip(x, -1, 1)


@case(G + "moving_average_convolve")
def _prog_ma():
  x = jnp.arange(10.0)
  return jnp.convolve(x, jnp.ones(3) / 3, mode="valid")


@case(G + "meshgrid_eval")
def _prog_mesh():
  xs, ys = jnp.meshgrid(jnp.linspace(0, 1, 3), jnp.linspace(0, 2, 2))
  return jnp.sin(xs) * ys


# ---- generated: reductions x dtypes x axis/keepdims ---------------------------------------------
RED_FUNS = ["sum", "prod", "mean", "var", "std", "max", "min", "argmax", "argmin", "any", "all",
            "cumsum", "cumprod", "median", "ptp", "count_nonzero", "nansum", "nanmean",
            "nanmax", "average", "logsumexp"]
RED_INPUTS = {
    "f32": lambda: jnp.array([[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]]),
    "i32": lambda: jnp.array([[1, -2, 3], [0, 4, -1]]),
    "i8": lambda: jnp.array([[1, -2, 3], [0, 4, -1]], jnp.int8),
    "u8": lambda: jnp.array([[1, 2, 3], [0, 4, 1]], jnp.uint8),
    "bool": lambda: jnp.array([[True, False, True], [False, False, True]]),
    "f16": lambda: jnp.array([[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]], jnp.float16),
    "bf16": lambda: jnp.array([[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]], jnp.bfloat16),
    "nan": lambda: jnp.array([[1.0, jnp.nan, 3.0], [0.5, 4.0, -1.0]]),
}
RED_AXES = {"none": dict(), "ax0": dict(axis=0), "ax1k": dict(axis=1, keepdims=True),
            "axneg": dict(axis=-1)}


def _red(fn, inp, ax):
  x = RED_INPUTS[inp]()
  kw = dict(RED_AXES[ax])
  if fn in ("cumsum", "cumprod"):
    kw.pop("keepdims", None)
  if fn == "logsumexp":
    return jax.nn.logsumexp(x, **kw)
  return getattr(jnp, fn)(x, **kw)


for _f in RED_FUNS:
  for _i in RED_INPUTS:
    for _a in RED_AXES:
      C(f"red/{_f}/{_i}/{_a}", functools.partial(_red, _f, _i, _a))

# ---- generated: indexing patterns (getitem, .at[].set/add, under jit) -----------------------------
IDX = {
    "int": lambda: 1, "neg": lambda: -1, "slice": lambda: slice(1, None),
    "rev": lambda: slice(None, None, -1), "step2": lambda: slice(None, None, 2),
    "none_int": lambda: (None, 1), "ell_int": lambda: (Ellipsis, 1),
    "list": lambda: [0, 2], "arr": lambda: jnp.array([2, 0]), "negarr": lambda: jnp.array([-1, 0]),
    "oob_arr": lambda: jnp.array([5, 1]), "bool1d": lambda: jnp.array([True, False, True]),
    "int_slice": lambda: (1, slice(0, 2)), "arr_arr": lambda: (jnp.array([0, 1]),
                                                               jnp.array([2, 0])),
    "slice_arr": lambda: (slice(None), jnp.array([0, 2])), "arr2d": lambda: jnp.array([[0], [1]]),
    "empty_slice": lambda: slice(2, 1), "np_int": lambda: np.int64(1),
    "jnp_int": lambda: jnp.int32(1), "tuple_ints": lambda: (1, 2),
    "none_slice_none": lambda: (None, slice(None), None),
}


def _idx_x():
  return jnp.arange(12.0).reshape(3, 4) if False else jnp.arange(9.0).reshape(3, 3)


def _getitem(k):
  return _idx_x()[IDX[k]()]


def _getitem_jit(k):
  i = IDX[k]()
  if isinstance(i, (list, tuple, slice)) or i is None or i is Ellipsis:
    return jax.jit(lambda x: x[i])(_idx_x())
  return jax.jit(lambda x, i: x[i])(_idx_x(), i)


def _at_set(k):
  return _idx_x().at[IDX[k]()].set(-1.0)


def _at_add(k):
  return _idx_x().at[IDX[k]()].add(10.0)


def _at_grad(k):
  return jax.grad(lambda x: jnp.sum(x[IDX[k]()] ** 2))(_idx_x())


for _k in IDX:
  for _nm, _fn in (("get", _getitem), ("get_jit", _getitem_jit), ("set", _at_set),
                   ("add", _at_add), ("grad", _at_grad)):
    C(f"idx/{_nm}/{_k}", functools.partial(_fn, _k))

# ---- NaN / inf handling ---------------------------------------------------------------------
G = "nan/"
NANX = lambda: jnp.array([3.0, jnp.nan, 1.0, -jnp.inf, 2.0])  # noqa: E731
for _f in ("sort", "argsort", "max", "min", "argmax", "argmin", "median", "cumsum", "unique",
           "nanmedian", "nanargmin", "nanmin", "nanstd", "nanvar", "nancumsum", "nanprod",
           "isnan", "nan_to_num", "maximum_scalar", "fmax_scalar", "clip", "round", "sign",
           "floor", "searchsorted", "quantile", "nanquantile", "percentile", "histogram_auto"):
  def _nanf(f=_f):
    x = NANX()
    if f == "maximum_scalar":
      return jnp.maximum(x, 0.0)
    if f == "fmax_scalar":
      return jnp.fmax(x, 0.0)
    if f == "clip":
      return jnp.clip(x, 0.0, 2.5)
    if f == "searchsorted":
      return jnp.searchsorted(jnp.array([1.0, 2.0, jnp.nan]), x)
    if f in ("quantile", "nanquantile"):
      return getattr(jnp, f)(x, 0.5)
    if f == "percentile":
      return jnp.percentile(x, 50.0)
    if f == "histogram_auto":
      return jnp.histogram(jnp.array([0.0, 1.0, 2.0]), bins=3)
    return getattr(jnp, f)(x)
  C(G + _f, _nanf)

# ---- newer modules: linalg, scipy.special/stats, debug --------------------------------------------
G = "mods/"
SPD = lambda: jnp.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])  # noqa: E731
C(G + "linalg_norm", lambda: jnp.linalg.norm(jnp.array([3.0, 4.0])))
C(G + "linalg_norm_ord1", lambda: jnp.linalg.norm(jnp.array([3.0, -4.0]), ord=1))
C(G + "linalg_norm_inf", lambda: jnp.linalg.norm(jnp.array([3.0, -4.0]), ord=jnp.inf))
C(G + "linalg_norm_fro", lambda: jnp.linalg.norm(SPD()))
C(G + "linalg_norm_axis_keep", lambda: jnp.linalg.norm(SPD(), axis=0, keepdims=True))
C(G + "linalg_norm_mat2", lambda: jnp.linalg.norm(SPD(), ord=2))
C(G + "linalg_norm_int", lambda: jnp.linalg.norm(jnp.array([3, 4])))
C(G + "linalg_det", lambda: jnp.linalg.det(SPD()))
C(G + "linalg_slogdet", lambda: jnp.linalg.slogdet(SPD()))
C(G + "linalg_inv", lambda: jnp.linalg.inv(SPD()))
C(G + "linalg_solve_vec", lambda: jnp.linalg.solve(SPD(), jnp.ones(3)))
C(G + "linalg_solve_mat", lambda: jnp.linalg.solve(SPD(), jnp.eye(3)))
C(G + "linalg_cholesky", lambda: jnp.linalg.cholesky(SPD()))
C(G + "linalg_eigh_vals", lambda: jnp.linalg.eigh(SPD())[0])
C(G + "linalg_eigvalsh", lambda: jnp.linalg.eigvalsh(SPD()))
C(G + "linalg_svd_vals", lambda: jnp.linalg.svd(SPD(), compute_uv=False))
C(G + "linalg_qr_abs", lambda: jnp.abs(jnp.linalg.qr(SPD())[1]))
C(G + "linalg_pinv", lambda: jnp.linalg.pinv(jnp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])))
C(G + "linalg_matrix_power", lambda: jnp.linalg.matrix_power(SPD(), 3))
C(G + "linalg_matrix_rank", lambda: jnp.linalg.matrix_rank(jnp.ones((3, 3))))
C(G + "linalg_lstsq", lambda: jnp.linalg.lstsq(jnp.array([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]]),
                                               jnp.array([1.0, 2.0, 2.0]))[0])
C(G + "linalg_det_grad", lambda: jax.grad(jnp.linalg.det)(SPD()))
C(G + "linalg_inv_batched", lambda: jnp.linalg.inv(jnp.stack([SPD(), 2 * SPD()])))
C(G + "linalg_det_int", lambda: jnp.linalg.det(jnp.array([[1, 2], [3, 4]])))
C(G + "linalg_solve_jit", lambda: jax.jit(jnp.linalg.solve)(SPD(), jnp.ones(3)))
C(G + "special_logsumexp", lambda: jax.scipy.special.logsumexp(jnp.array([1.0, 2.0, 3.0])))
C(G + "special_logsumexp_b", lambda: jax.scipy.special.logsumexp(
    jnp.array([1.0, 2.0]), b=jnp.array([1.0, -1.0]), return_sign=True))
C(G + "special_erf", lambda: jax.scipy.special.erf(jnp.array([0.5, -1.0])))
C(G + "special_erfinv", lambda: jax.scipy.special.erfinv(jnp.array([0.5, -0.2])))
C(G + "special_expit_logit", lambda: (jax.scipy.special.expit(jnp.array([0.0, 2.0])),
                                      jax.scipy.special.logit(jnp.array([0.25, 0.5]))))
C(G + "special_gammaln", lambda: jax.scipy.special.gammaln(jnp.array([0.5, 3.0, 10.0])))
C(G + "special_digamma", lambda: jax.scipy.special.digamma(jnp.array([0.5, 3.0])))
C(G + "special_xlogy", lambda: jax.scipy.special.xlogy(jnp.array([0.0, 2.0]), jnp.array([0.0, 3.0])))
C(G + "special_xlog1py", lambda: jax.scipy.special.xlog1py(jnp.array([0.0, 2.0]),
                                                          jnp.array([-1.0, 3.0])))
C(G + "special_softmax", lambda: jax.scipy.special.softmax(jnp.array([1.0, 2.0])))
C(G + "special_ndtr_ndtri", lambda: (jax.scipy.special.ndtr(jnp.array([0.0, 1.0])),
                                     jax.scipy.special.ndtri(jnp.array([0.5, 0.9]))))
C(G + "special_log_ndtr", lambda: jax.scipy.special.log_ndtr(jnp.array([-10.0, 0.0, 3.0])))
C(G + "special_betaln", lambda: jax.scipy.special.betaln(jnp.array([1.0, 2.5]), jnp.array([2.0, 0.5])))
C(G + "special_entr", lambda: jax.scipy.special.entr(jnp.array([0.0, 0.5, 1.0])))
C(G + "special_gamma", lambda: jax.scipy.special.gamma(jnp.array([0.5, 5.0])))
C(G + "special_multigammaln", lambda: jax.scipy.special.multigammaln(jnp.array(3.0), 2))
C(G + "special_weak", lambda: jax.scipy.special.erf(0.5))
C(G + "stats_norm_logpdf", lambda: jax.scipy.stats.norm.logpdf(jnp.array([0.0, 1.0]), 0.5, 2.0))
C(G + "stats_norm_pdf_cdf", lambda: (jax.scipy.stats.norm.pdf(1.0), jax.scipy.stats.norm.cdf(
    jnp.array([-1.0, 0.0, 2.0]))))
C(G + "stats_norm_ppf", lambda: jax.scipy.stats.norm.ppf(jnp.array([0.1, 0.5])))
C(G + "stats_norm_logcdf", lambda: jax.scipy.stats.norm.logcdf(jnp.array([-5.0, 0.0])))
C(G + "stats_logistic", lambda: jax.scipy.stats.logistic.logpdf(jnp.array([0.0, 1.0])))
C(G + "stats_bernoulli", lambda: jax.scipy.stats.bernoulli.logpmf(jnp.array([0, 1]), 0.3))
C(G + "debug_print_jit", lambda: jax.jit(lambda x: (jax.debug.print("x={x}", x=x), x * 2)[1])(1.0))
C(G + "named_scope", lambda: _named_scope())
C(G + "ensure_compile_time_eval", lambda: _ectc())


def _named_scope():
  with jax.named_scope("blk"):
    return jnp.ones(2) * 2


def _ectc():
  with jax.ensure_compile_time_eval():
    return jnp.arange(3) + 1

# ---- more tree_util / API -------------------------------------------------------------------------
G = "tree2/"
C(G + "tree_map_none_leaf", lambda: jax.tree_util.tree_map(lambda x: x, {"a": None, "b": 1}))
C(G + "tree_leaves_is_leaf_tuple", lambda: jax.tree_util.tree_leaves(
    [(1, 2), (3, 4)], is_leaf=lambda x: isinstance(x, tuple)))
C(G + "tree_structure_num_nodes", lambda: jax.tree_util.tree_structure(
    {"a": [1, 2], "b": (3,)}).num_nodes)
C(G + "tree_flatten_up_to", lambda: jax.tree_util.tree_structure([0, 0]).flatten_up_to(
    [(1, 2), {"a": 3}]))
C(G + "tree_map_with_path_keys", lambda: jax.tree_util.tree_map_with_path(
    lambda p, x: jax.tree_util.keystr(p), {"w": [1, 2], "b": {"c": 3}}))
C(G + "keystr_simple", lambda: [jax.tree_util.keystr(p, simple=True, separator="/")
                                for p, _ in jax.tree_util.tree_flatten_with_path(
                                    {"w": [1, 2]})[0]])
C(G + "tree_all_empty", lambda: jax.tree_util.tree_all([]))
C(G + "tree_leaves_dict_int_keys", lambda: jax.tree_util.tree_leaves({2: "b", 1: "a"}))
C(G + "tree_map_dict_mixed_keys_err", lambda: jax.tree_util.tree_leaves({1: 1, "a": 2}))
C(G + "tree_unflatten_wrong_count", lambda: jax.tree_util.tree_unflatten(
    jax.tree_util.tree_structure([0, 0]), [1]))
C(G + "jax_tree_map_multi", lambda: jax.tree.map(lambda a, b: a * b, [1, 2], [3, 4]))
C(G + "jax_tree_reduce", lambda: jax.tree.reduce(lambda a, b: a + b, {"a": 1, "b": [2, 3]}))
C(G + "jax_tree_transpose", lambda: jax.tree.transpose(jax.tree.structure([0, 0]),
                                                       jax.tree.structure((0, 0)),
                                                       [(1, 2), (3, 4)]))
C(G + "jax_tree_leaves_with_path", lambda: [str(p) for p, _ in jax.tree.leaves_with_path(
    {"a": [1]})])
C(G + "partial_pytree_leaves", lambda: len(jax.tree_util.tree_leaves(
    jax.tree_util.Partial(jnp.add, jnp.ones(2)))))
C(G + "dataclass_static_field", lambda: _dc_static())


def _dc_static():
  import dataclasses

  @functools.partial(jax.tree_util.register_dataclass, data_fields=["x"], meta_fields=["n"])
  @dataclasses.dataclass
  class S:
    x: object
    n: int
  out = jax.jit(lambda s: S(s.x * s.n, s.n))(S(jnp.ones(2), 3))
  return out.x, out.n


# ---- set operations, unique_*, and other late additions to jnp (named after the function) ---------
G = "setops/"
SA = lambda: jnp.array([3, 1, 4, 1, 5, 9, 2, 6])  # noqa: E731
SB = lambda: jnp.array([2, 7, 1, 8, 2, 8])  # noqa: E731
SF = lambda: jnp.array([1.5, jnp.nan, -0.5, 1.5, jnp.nan, 3.0])  # noqa: E731
SG = lambda: jnp.array([jnp.nan, 3.0, 2.0])  # noqa: E731
for _f in ("union1d", "intersect1d", "setdiff1d", "setxor1d"):
  def _set_cases(f=_f):
    fn = lambda *a, **k: getattr(jnp, f)(*a, **k)  # noqa: E731
    C(G + f, lambda: fn(SA(), SB()))
    C(G + f + "_nan", lambda: fn(SF(), SG()))
    C(G + f + "_mixed_dtype", lambda: fn(SA(), jnp.array([1.0, 2.5, 9.0])))
    C(G + f + "_mixed_dtype_rev", lambda: fn(jnp.array([1.0, 2.5, 9.0]), SA()))
    C(G + f + "_weak_scalar", lambda: fn(SA(), 4))
    C(G + f + "_int8_weak", lambda: fn(jnp.array([1, 2, 3], jnp.int8), 2))
    C(G + f + "_bool", lambda: fn(jnp.array([True, True]), jnp.array([False, True])))
    C(G + f + "_2d", lambda: fn(jnp.array([[5, 1], [3, 1]]), jnp.array([[1, 2, 3]])))
    C(G + f + "_empty", lambda: fn(jnp.zeros(0, jnp.int32), SB()))
    C(G + f + "_both_empty", lambda: fn(jnp.zeros(0), jnp.zeros(0)))
    C(G + f + "_size_pad", lambda: fn(SA(), SB(), size=12))
    C(G + f + "_size_cut", lambda: fn(SA(), SB(), size=2))
    C(G + f + "_size_fill", lambda: fn(SA(), SB(), size=12, fill_value=-1))
    C(G + f + "_size_fill_float", lambda: fn(SA(), SB(), size=12, fill_value=2.5))
    C(G + f + "_size_empty", lambda: fn(jnp.zeros(0, jnp.int32), jnp.zeros(0, jnp.int32),
                                        size=3))
    C(G + f + "_size_empty_fill", lambda: fn(jnp.zeros(0, jnp.int32), jnp.zeros(0, jnp.int32),
                                             size=3, fill_value=7))
    C(G + f + "_size_nan", lambda: fn(SF(), SG(), size=8))
    C(G + f + "_jit_err", lambda: jax.jit(fn)(SA(), SB()))
    C(G + f + "_jit_size", lambda: jax.jit(lambda a, b: fn(a, b, size=10))(SA(), SB()))
    C(G + f + "_jit_size_fill", lambda: jax.jit(lambda a, b: fn(a, b, size=10, fill_value=0))(
        SA(), SB()))
    C(G + f + "_vmap_size", lambda: jax.vmap(lambda a, b: fn(a, b, size=6))(
        jnp.array([[1, 2, 3], [3, 3, 0]]), jnp.array([[2, 5], [0, 4]])))
    C(G + f + "_list_err", lambda: fn([1, 2], SB()))
    C(G + f + "_size_traced_err", lambda: jax.jit(lambda a, n: fn(a, a, size=n))(SA(), 3))
    if f != "union1d":
      C(G + f + "_assume_unique", lambda: fn(jnp.array([5, 1, 3]), jnp.array([3, 2, 6, 5]),
                                             assume_unique=True))
      C(G + f + "_assume_unique_size", lambda: fn(jnp.array([5, 1, 3]), jnp.array([3, 2, 6, 5]),
                                                  True, size=5))
      C(G + f + "_assume_unique_jit_err", lambda: jax.jit(lambda a, b: fn(
          a, b, assume_unique=True))(jnp.array([5, 1, 3]), jnp.array([3, 2, 6, 5])))
  _set_cases()
C(G + "intersect1d_indices", lambda: jnp.intersect1d(SA(), SB(), return_indices=True))
C(G + "intersect1d_indices_2d", lambda: jnp.intersect1d(jnp.array([[5, 1], [3, 1]]),
                                                        jnp.array([[1, 2, 3]]),
                                                        return_indices=True))
C(G + "intersect1d_indices_unique", lambda: jnp.intersect1d(
    jnp.array([5, 1, 3]), jnp.array([3, 2, 6, 5]), assume_unique=True, return_indices=True))
C(G + "intersect1d_indices_size", lambda: jnp.intersect1d(SA(), SB(), return_indices=True,
                                                          size=5))
C(G + "intersect1d_indices_size_unique", lambda: jnp.intersect1d(
    jnp.array([5, 1, 3]), jnp.array([3, 2, 6, 5]), True, True, size=4, fill_value=-2))
C(G + "intersect1d_indices_jit_size", lambda: jax.jit(lambda a, b: jnp.intersect1d(
    a, b, return_indices=True, size=4))(SA(), SB()))
C(G + "intersect1d_indices_nan", lambda: jnp.intersect1d(SF(), SG(), return_indices=True))
C(G + "intersect1d_indices_empty", lambda: jnp.intersect1d(jnp.zeros(0), SG(),
                                                           return_indices=True))
C(G + "intersect1d_indices_f16", lambda: jnp.intersect1d(jnp.array([1, 2], jnp.float16),
                                                         jnp.array([2.0, 3.0]),
                                                         return_indices=True))
UX = lambda: jnp.array([[2.0, jnp.nan, 1.0], [2.0, jnp.nan, 0.5]])  # noqa: E731
for _f in ("unique_values", "unique_counts", "unique_inverse", "unique_all"):
  def _uniq_cases(f=_f):
    fn = lambda *a, **k: getattr(jnp, f)(*a, **k)  # noqa: E731
    C(G + f, lambda: fn(SA()))
    C(G + f + "_2d_nan", lambda: fn(UX()))
    C(G + f + "_scalar", lambda: fn(3))
    C(G + f + "_bool", lambda: fn(jnp.array([True, False, True])))
    C(G + f + "_weak", lambda: fn(jnp.asarray(2.0)))
    C(G + f + "_empty", lambda: fn(jnp.zeros((0, 2))))
    C(G + f + "_size", lambda: fn(SA(), size=9))
    C(G + f + "_size_cut", lambda: fn(SA(), size=3))
    C(G + f + "_size_fill", lambda: fn(SA(), size=9, fill_value=-1))
    C(G + f + "_size_empty_err", lambda: fn(jnp.zeros(0), size=2))
    C(G + f + "_jit_err", lambda: jax.jit(fn)(SA()))
    C(G + f + "_jit_size", lambda: jax.jit(lambda a: fn(a, size=9))(SA()))
    C(G + f + "_positional_size_err", lambda: fn(SA(), 9))
    C(G + f + "_list_err", lambda: fn([1, 2]))
  _uniq_cases()

PA = lambda: jnp.arange(12.0).reshape(3, 4)  # noqa: E731
G = "misc2/"
C(G + "put_along_axis", lambda: jnp.put_along_axis(PA(), jnp.array([[1], [0], [3]]), -1.0, 1,
                                                   inplace=False))
C(G + "put_along_axis_axis0", lambda: jnp.put_along_axis(PA(), jnp.array([[2, 0, 1, 1]]),
                                                         jnp.array([[7.0, 8.0, 9.0, 10.0]]),
                                                         axis=0, inplace=False))
C(G + "put_along_axis_none", lambda: jnp.put_along_axis(PA(), jnp.array([0, 5, 11]),
                                                        jnp.array([1.0, 2.0, 3.0]), None,
                                                        inplace=False))
C(G + "put_along_axis_int_values_float", lambda: jnp.put_along_axis(
    jnp.arange(6).reshape(2, 3), jnp.array([[0], [2]]), 2.7, 1, inplace=False))
C(G + "put_along_axis_neg_idx", lambda: jnp.put_along_axis(PA(), jnp.array([[-1], [0], [-4]]),
                                                           0.0, -1, inplace=False))
C(G + "put_along_axis_oob", lambda: jnp.put_along_axis(PA(), jnp.array([[9], [0], [1]]), 0.0,
                                                       1, inplace=False))
C(G + "put_along_axis_mode_clip", lambda: jnp.put_along_axis(
    PA(), jnp.array([[9], [0], [1]]), 0.0, 1, inplace=False, mode="clip"))
C(G + "put_along_axis_inplace_err", lambda: jnp.put_along_axis(PA(), jnp.array([[1], [0], [3]]),
                                                               -1.0, 1))
C(G + "put_along_axis_ndim_err", lambda: jnp.put_along_axis(PA(), jnp.array([1, 0, 3]), -1.0,
                                                            1, inplace=False))
C(G + "put_along_axis_values_err", lambda: jnp.put_along_axis(
    PA(), jnp.array([[1], [0], [3]]), jnp.ones(2), 1, inplace=False))
C(G + "put_along_axis_float_idx_err", lambda: jnp.put_along_axis(
    PA(), jnp.array([[1.0], [0.0], [3.0]]), 0.0, 1, inplace=False))
C(G + "put_along_axis_jit", lambda: jax.jit(lambda a, i, v: jnp.put_along_axis(
    a, i, v, 1, inplace=False))(PA(), jnp.array([[1, 2], [0, 0], [3, 3]]), jnp.float32(5)))
C(G + "put_along_axis_grad", lambda: jax.grad(lambda a, v: jnp.sum(jnp.put_along_axis(
    a, jnp.array([[1], [0], [3]]), v, 1, inplace=False) ** 2), argnums=(0, 1))(PA(), 2.0))
C(G + "put_along_axis_broadcast", lambda: jnp.put_along_axis(
    jnp.zeros((2, 3, 4)), jnp.array([[[1]], [[2]]]), 1.0, 2, inplace=False))
C(G + "place", lambda: jnp.place(PA(), PA() > 5, jnp.array([-1.0, -2.0]), inplace=False))
C(G + "place_int_mask", lambda: jnp.place(jnp.arange(5), jnp.array([0, 1, 0, 2, 0]), 9,
                                          inplace=False))
C(G + "place_inplace_err", lambda: jnp.place(PA(), PA() > 5, jnp.array([-1.0])))
C(G + "place_size_err", lambda: jnp.place(PA(), jnp.array([True]), 1.0, inplace=False))
C(G + "place_empty_vals_err", lambda: jnp.place(PA(), PA() > 5, jnp.zeros(0), inplace=False))
C(G + "place_jit", lambda: jax.jit(lambda a, m: jnp.place(a, m, jnp.array([7.0, 8.0]),
                                                         inplace=False))(PA(), PA() < 3))
C(G + "place_weak", lambda: jnp.place(jnp.asarray(1.0), jnp.asarray(True), 2, inplace=False))
C(G + "piecewise", lambda: jnp.piecewise(jnp.linspace(-2, 2, 5), [jnp.linspace(-2, 2, 5) < 0,
                                                                  jnp.linspace(-2, 2, 5) >= 0],
                                         [lambda x: -x, lambda x: x ** 2]))
C(G + "piecewise_default", lambda: jnp.piecewise(jnp.arange(5.0), [jnp.arange(5.0) < 2],
                                                 [lambda x: x * 10, 7.0]))
C(G + "piecewise_consts", lambda: jnp.piecewise(jnp.arange(5), [jnp.arange(5) < 2,
                                                                jnp.arange(5) > 3], [1.5, 2]))
C(G + "piecewise_args", lambda: jnp.piecewise(jnp.arange(4.0), [jnp.arange(4.0) > 1],
                                              [lambda x, a, b=0: x * a + b], 3.0, b=1.0))
C(G + "piecewise_count_err", lambda: jnp.piecewise(jnp.arange(4.0), [jnp.arange(4.0) > 1],
                                                   [1, 2, 3]))
C(G + "piecewise_jit", lambda: jax.jit(lambda x: jnp.piecewise(
    x, [x < 1, x > 2], [jnp.sin, jnp.cos, 0.5]))(jnp.arange(4.0)))
C(G + "piecewise_grad", lambda: jax.grad(lambda x: jnp.piecewise(
    x, [x < 1], [lambda x: x ** 3, lambda x: 2 * x]))(0.5))
C(G + "piecewise_scalar", lambda: jnp.piecewise(2.0, [True], [lambda x: x + 1]))
C(G + "trim_zeros", lambda: jnp.trim_zeros(jnp.array([0, 0, 1, 0, 2, 0])))
C(G + "trim_zeros_f", lambda: jnp.trim_zeros(jnp.array([0, 0, 1, 0, 2, 0]), "f"))
C(G + "trim_zeros_b", lambda: jnp.trim_zeros(jnp.array([0.0, 1.0, 0.0]), trim="B"))
C(G + "trim_zeros_all_zero", lambda: jnp.trim_zeros(jnp.zeros(3)))
C(G + "trim_zeros_2d", lambda: jnp.trim_zeros(jnp.array([[0, 0, 0], [0, 1, 0], [0, 0, 2]])))
C(G + "trim_zeros_2d_axis", lambda: jnp.trim_zeros(jnp.array([[0, 0, 0], [0, 1, 0]]),
                                                   axis=1))
C(G + "trim_zeros_jit_err", lambda: jax.jit(jnp.trim_zeros)(jnp.array([0, 1, 0])))
C(G + "trim_zeros_empty", lambda: jnp.trim_zeros(jnp.zeros(0)))
C(G + "mask_indices", lambda: jnp.mask_indices(3, jnp.triu))
C(G + "mask_indices_k", lambda: jnp.mask_indices(4, jnp.tril, -1))
C(G + "mask_indices_size", lambda: jnp.mask_indices(3, jnp.triu, 1, size=5))
PB = lambda: jnp.array([[1, 0, 1, 1, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0, 0, 1]])  # noqa
C(G + "packbits", lambda: jnp.packbits(PB()))
C(G + "packbits_axis", lambda: jnp.packbits(PB(), axis=1))
C(G + "packbits_axis0", lambda: jnp.packbits(PB(), axis=0))
C(G + "packbits_little", lambda: jnp.packbits(PB(), axis=-1, bitorder="little"))
C(G + "packbits_bool", lambda: jnp.packbits(PB() > 0))
C(G + "packbits_nonbinary", lambda: jnp.packbits(jnp.array([0, 2, -1, 0, 0, 0, 0, 0, 3])))
C(G + "packbits_float_err", lambda: jnp.packbits(jnp.ones(3)))
C(G + "packbits_order_err", lambda: jnp.packbits(PB(), bitorder="middle"))
C(G + "packbits_jit", lambda: jax.jit(jnp.packbits, static_argnames="axis")(PB(), axis=1))
C(G + "packbits_scalar", lambda: jnp.packbits(1))
UP = lambda: jnp.array([[2, 7], [255, 128]], jnp.uint8)  # noqa: E731
C(G + "unpackbits", lambda: jnp.unpackbits(UP()))
C(G + "unpackbits_axis", lambda: jnp.unpackbits(UP(), axis=1))
C(G + "unpackbits_axis0_little", lambda: jnp.unpackbits(UP(), axis=0, bitorder="little"))
C(G + "unpackbits_count", lambda: jnp.unpackbits(UP(), axis=1, count=5))
C(G + "unpackbits_count_pad", lambda: jnp.unpackbits(UP(), axis=1, count=20))
C(G + "unpackbits_count_neg", lambda: jnp.unpackbits(UP(), axis=1, count=-3))
C(G + "unpackbits_int_err", lambda: jnp.unpackbits(jnp.array([1, 2])))
C(G + "unpackbits_order_err", lambda: jnp.unpackbits(UP(), bitorder="x"))
C(G + "unpackbits_roundtrip", lambda: jnp.unpackbits(jnp.packbits(PB(), axis=1), axis=1,
                                                     count=10))
C(G + "spacing", lambda: jnp.spacing(jnp.array([0.0, 1.0, -1.0, 1e30, -0.0, jnp.inf, jnp.nan,
                                                1e-40])))
C(G + "spacing_f16", lambda: jnp.spacing(jnp.array([0.0, 1.0, -2.0, 65504.0], jnp.float16)))
C(G + "spacing_bf16", lambda: jnp.spacing(jnp.array([0.0, 1.0, -2.0], jnp.bfloat16)))
C(G + "spacing_int", lambda: jnp.spacing(jnp.array([1, -4])))
C(G + "spacing_weak", lambda: jnp.spacing(1.0))
C(G + "spacing_complex_err", lambda: jnp.spacing(jnp.array([1j])))
C(G + "spacing_jit", lambda: jax.jit(jnp.spacing)(jnp.array([0.0, 1.0, -3.0])))
UW = lambda: jnp.array([0.0, 3.0, 6.5, -0.5, 1.0, 8.0])  # noqa: E731
C(G + "unwrap", lambda: jnp.unwrap(UW()))
C(G + "unwrap_discont", lambda: jnp.unwrap(UW(), discont=4.0))
C(G + "unwrap_period", lambda: jnp.unwrap(UW(), period=4.0))
C(G + "unwrap_int", lambda: jnp.unwrap(jnp.array([0, 5, 9, 1, 13]), period=8))
C(G + "unwrap_2d_axis0", lambda: jnp.unwrap(jnp.stack([UW(), -UW()]), axis=0))
C(G + "unwrap_complex_err", lambda: jnp.unwrap(jnp.array([1j, 2j])))
C(G + "unwrap_empty", lambda: jnp.unwrap(jnp.zeros(0)))
C(G + "unwrap_grad", lambda: jax.grad(lambda p: jnp.sum(jnp.unwrap(p) ** 2))(UW()))
C(G + "unwrap_jit", lambda: jax.jit(jnp.unwrap)(UW()))
C(G + "unwrap_weak", lambda: jnp.unwrap(jnp.asarray(2.0) * jnp.ones(3)))
C(G + "matvec", lambda: jnp.matvec(m23(), f3()))
C(G + "matvec_batch", lambda: jnp.matvec(jnp.ones((4, 1, 2, 3)), jnp.arange(15.0).reshape(5, 3)))
C(G + "matvec_int", lambda: jnp.matvec(i23(), a3()))
C(G + "matvec_complex", lambda: jnp.matvec(m23() * 1j, f3() + 1j))
C(G + "matvec_err", lambda: jnp.matvec(f3(), f3()))
C(G + "matvec_mismatch_err", lambda: jnp.matvec(m23(), jnp.ones(2)))
C(G + "vecmat", lambda: jnp.vecmat(jnp.ones(2), m23()))
C(G + "vecmat_batch", lambda: jnp.vecmat(jnp.arange(6.0).reshape(3, 1, 2), jnp.ones((4, 2, 5))))
C(G + "vecmat_complex", lambda: jnp.vecmat(jnp.array([1j, 2.0]), m23() + 1j))
C(G + "vecmat_err", lambda: jnp.vecmat(f3(), m23()))
C(G + "vecmat_grad", lambda: jax.grad(lambda v: jnp.sum(jnp.vecmat(v, m23())))(jnp.ones(2)))
C(G + "vecmat_jit", lambda: jax.jit(jnp.vecmat)(jnp.ones(2), m23()))
HX = lambda: jnp.array([0.0, 0.5, 1.0, 2.5, 3.0, 1.2])  # noqa: E731
HY = lambda: jnp.array([1.0, -1.0, 0.0, 0.5, 2.0, 1.9])  # noqa: E731
C(G + "histogram2d", lambda: jnp.histogram2d(HX(), HY()))
C(G + "histogram2d_bins", lambda: jnp.histogram2d(HX(), HY(), bins=3))
C(G + "histogram2d_bins_pair", lambda: jnp.histogram2d(HX(), HY(), bins=[2, 4]))
C(G + "histogram2d_edges", lambda: jnp.histogram2d(HX(), HY(), bins=jnp.array([0.0, 1.0, 3.0])))
C(G + "histogram2d_range", lambda: jnp.histogram2d(HX(), HY(), bins=2, range=[[0, 2], [-1, 1]]))
C(G + "histogram2d_weights", lambda: jnp.histogram2d(HX(), HY(), bins=2, weights=HX()))
C(G + "histogram2d_density", lambda: jnp.histogram2d(HX(), HY(), bins=2, density=True))
C(G + "histogram2d_int", lambda: jnp.histogram2d(jnp.array([0, 1, 2]), jnp.array([2, 1, 1]),
                                                  bins=2))
C(G + "histogram2d_jit", lambda: jax.jit(lambda x, y: jnp.histogram2d(x, y, bins=3))(HX(), HY()))
C(G + "histogramdd", lambda: jnp.histogramdd(jnp.stack([HX(), HY(), HX() * HY()], 1), bins=2))
C(G + "histogramdd_bins_list", lambda: jnp.histogramdd(jnp.stack([HX(), HY()], 1),
                                                       bins=[2, jnp.array([-1.0, 0.0, 5.0])]))
C(G + "histogramdd_range_none", lambda: jnp.histogramdd(jnp.stack([HX(), HY()], 1), bins=2,
                                                        range=[None, (0.0, 1.0)]))
C(G + "histogramdd_weights_err", lambda: jnp.histogramdd(jnp.stack([HX(), HY()], 1),
                                                         weights=jnp.ones(2)))
C(G + "histogramdd_bins_err", lambda: jnp.histogramdd(jnp.stack([HX(), HY()], 1), bins=[2]))
C(G + "histogramdd_range_err", lambda: jnp.histogramdd(jnp.stack([HX(), HY()], 1),
                                                       range=[(0, 1)]))
C(G + "histogramdd_density", lambda: jnp.histogramdd(jnp.stack([HX(), HY()], 1), bins=3,
                                                     density=True))
C(G + "array_str", lambda: jnp.array_str(jnp.array([1.5, 2.0])))
C(G + "array_str_precision", lambda: jnp.array_str(jnp.array([1 / 3]), precision=2))
C(G + "array_repr_int", lambda: jnp.array_repr(jnp.arange(3)).split("(", 1)[1])
C(G + "ComplexWarning", lambda: issubclass(jnp.ComplexWarning, Warning))
for _t in ("int4", "uint4", "int2", "uint2"):
  C(G + f"dtype_{_t}", (lambda t: lambda: (getattr(jnp, t)(1), jnp.dtype(getattr(jnp, t)),
                                           jnp.array([1, 0], getattr(jnp, t)),
                                           jnp.issubdtype(getattr(jnp, t), jnp.integer),
                                           jnp.iinfo(getattr(jnp, t)).max))(_t))
C(G + "dtype_int4_weak", lambda: jnp.int4(1) + 1)
C(G + "dtype_int4_promote", lambda: jnp.int4(1) * jnp.int8(2))
C(G + "dtype_int4_promote_err", lambda: jnp.int4(1) + jnp.float32(1))
C(G + "dtype_uint4_isinstance", lambda: (isinstance(np.array(1, jnp.uint4.dtype)[()], jnp.uint4),
                                         jnp.uint4 == jnp.uint4.dtype.type))


# ---- lax.reduce_window (pooling) ----------------------------------------------------------------
G = "window/"
WX = lambda: jnp.arange(12.0).reshape(3, 4) * jnp.array([1.0, -0.5, 2.0, 0.25])  # noqa: E731
W4 = lambda: jnp.sin(jnp.arange(32.0)).reshape(1, 4, 4, 2)  # noqa: E731 (NHWC)
C(G + "sum_valid", lambda: lax.reduce_window(WX(), 0.0, lax.add, (2, 2), (1, 1), "VALID"))
C(G + "sum_same_strided", lambda: lax.reduce_window(WX(), 0.0, lax.add, (2, 3), (2, 1), "SAME"))
C(G + "sum_same_lower", lambda: lax.reduce_window(WX(), 0.0, lax.add, (2, 3), (1, 1),
                                                  "SAME_LOWER"))
C(G + "sum_explicit_pad", lambda: lax.reduce_window(WX(), 0.0, lax.add, (2, 2), (1, 2),
                                                    ((1, 0), (-1, 2))))
C(G + "sum_dilations", lambda: lax.reduce_window(WX(), 0.0, lax.add, (2, 2), (2, 1),
                                                 ((1, 0), (0, 1)), (2, 1), (1, 2)))
C(G + "sum_init_not_identity", lambda: lax.reduce_window(WX(), 1.0, lax.add, (2, 2), (1, 1),
                                                         ((1, 0), (0, 1))))
C(G + "max_pool", lambda: lax.reduce_window(W4(), -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1),
                                            "VALID"))
C(G + "max_pool_same", lambda: lax.reduce_window(W4(), -jnp.inf, lax.max, (1, 3, 3, 1),
                                                 (1, 2, 2, 1), "SAME"))
C(G + "min_base_dilation", lambda: lax.reduce_window(WX(), jnp.inf, lax.min, (2, 2), (1, 1),
                                                     "VALID", (2, 2)))
C(G + "avg_pool", lambda: lax.reduce_window(W4(), 0.0, lax.add, (1, 2, 2, 1), (1, 1, 1, 1),
                                            "SAME") / 4.0)
C(G + "product_general", lambda: lax.reduce_window(WX(), 1.0, lax.mul, (2, 2), (1, 1), "VALID"))
# (XLA leaves the order in which a window's elements are combined unspecified: computations
# here are associative and commutative)
C(G + "lambda_general", lambda: lax.reduce_window(WX(), 0.5, lambda a, b: jnp.maximum(a, b),
                                                  (2, 2), (1, 1), "SAME"))
C(G + "padding_skipped", lambda: lax.reduce_window(jnp.array([1.0, 2.0, 3.0]), 5.0, lax.add,
                                                   (3,), (1,), ((1, 1),)))
C(G + "holes_skipped", lambda: lax.reduce_window(jnp.array([1.0, 2.0, 3.0]), 5.0, lax.add, (2,),
                                                 (1,), ((0, 0),), (2,)))
C(G + "two_operands", lambda: lax.reduce_window(
    (WX(), jnp.arange(12).reshape(3, 4) % 5), (0.0, 0),
    lambda a, b: (a[0] + b[0], lax.max(a[1], b[1])), (2, 2), (1, 1), "VALID"))
C(G + "int_sum", lambda: lax.reduce_window(jnp.arange(6), 0, lax.add, (2,), (1,), "VALID"))
C(G + "int_max_float_init", lambda: lax.reduce_window(jnp.arange(6), -jnp.inf, lax.max, (2,),
                                                      (1,), "SAME"))
C(G + "bool_max", lambda: lax.reduce_window(jnp.array([True, False, False]), False, lax.max,
                                            (2,), (1,), "SAME"))
C(G + "f16_sum", lambda: lax.reduce_window(jnp.arange(6.0, dtype=jnp.float16), 0.0, lax.add,
                                           (2,), (1,), "VALID"))
C(G + "complex_sum", lambda: lax.reduce_window(jnp.ones(3, jnp.complex64), 0.0, lax.add, (2,),
                                               (1,), "VALID"))
C(G + "weak_operand", lambda: lax.reduce_window(jnp.full((3,), 1.0), 0.0, lax.add, (2,), (1,),
                                                "SAME"))
C(G + "empty_output", lambda: lax.reduce_window(WX(), 0.0, lax.add, (5, 2), (1, 1), "VALID"))
C(G + "crop_to_empty", lambda: lax.reduce_window(jnp.ones(3), 0.0, lax.add, (2,), (1,),
                                                 ((-5, 0),)))
C(G + "shape_tuple", lambda: lax.reduce_window_shape_tuple((5, 6), (2, 3), (2, 1),
                                                           ((1, 0), (0, 2)), (1, 2), (1, 2)))
C(G + "jit_max_pool", lambda: jax.jit(lambda x: lax.reduce_window(
    x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "SAME"))(W4()))
C(G + "jit_general", lambda: jax.jit(lambda x: lax.reduce_window(x, 2.0, lambda a, b: a * b,
                                                                 (2, 2), (1, 1), "SAME"))(WX()))
C(G + "jaxpr_sum", lambda: str(jax.make_jaxpr(lambda x: lax.reduce_window(
    x, 0.0, lax.add, (2, 2), (1, 1), "VALID"))(WX())))
C(G + "grad_sum", lambda: jax.grad(lambda x: (lax.reduce_window(
    x, 0.0, lax.add, (2, 2), (2, 1), ((1, 0), (0, 1)), (2, 1), (1, 2)) ** 2).sum())(WX()))
C(G + "grad_avg_pool", lambda: jax.grad(lambda x: jnp.sum(lax.reduce_window(
    x, 0.0, lax.add, (1, 3, 3, 1), (1, 2, 2, 1), "SAME") ** 2))(W4()))
C(G + "grad_max_pool", lambda: jax.grad(lambda x: jnp.sum(lax.reduce_window(
    x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME") ** 2))(W4()))
C(G + "grad_max_ties", lambda: jax.grad(lambda x: lax.reduce_window(
    x, -jnp.inf, lax.max, (2, 2), (1, 1), "VALID").sum())(jnp.ones((3, 3))))
C(G + "grad_max_neg_inf", lambda: jax.grad(lambda x: lax.reduce_window(
    x, -jnp.inf, lax.max, (2,), (1,), "SAME").sum())(jnp.array([-jnp.inf, -jnp.inf, 2.0])))
C(G + "grad_max_nan", lambda: jax.grad(lambda x: lax.reduce_window(
    x, -jnp.inf, lax.max, (3,), (1,), "SAME").sum())(jnp.array([1.0, jnp.nan, 2.0, 0.0])))
C(G + "grad_max_base_dilation", lambda: jax.grad(lambda x: (lax.reduce_window(
    x, -jnp.inf, lax.max, (3,), (1,), ((1, 2),), (2,)) * jnp.arange(1.0, 7.0)).sum())(
        jnp.array([3.0, 1.0, 2.0])))
C(G + "grad_min", lambda: jax.grad(lambda x: (lax.reduce_window(
    x, jnp.inf, lax.min, (2, 2), (1, 2), "SAME") ** 2).sum())(WX()))
C(G + "jvp_max", lambda: jax.jvp(lambda x: lax.reduce_window(
    x, -jnp.inf, lax.max, (2, 2), (1, 1), "SAME"), (WX(),), (WX() * 0.5 + 1,)))
C(G + "jvp_general", lambda: jax.jvp(lambda x: lax.reduce_window(
    x, 1.0, lax.mul, (2, 2), (1, 1), "VALID"), (WX(),), (WX(),)))
C(G + "jvp_two_operands", lambda: jax.jvp(lambda x: lax.reduce_window(
    (x, x * 2), (0.0, 0.0), lambda a, b: (a[0] + b[0], a[1] * b[1]), (2,), (1,), "VALID"),
    (jnp.array([1.0, 2.0, 3.0]),), (jnp.array([1.0, 1.0, 1.0]),)))
C(G + "hessian_max", lambda: jax.hessian(lambda x: (lax.reduce_window(
    x, -jnp.inf, lax.max, (2,), (1,), "VALID") ** 2).sum())(jnp.array([1.0, 3.0, 2.0])))
C(G + "vmap_sum", lambda: jax.vmap(lambda x: lax.reduce_window(
    x, 0.0, lax.add, (2,), (1,), "VALID"), in_axes=1)(WX()))
C(G + "vmap_general", lambda: jax.vmap(lambda x: lax.reduce_window(
    x, 1.0, lax.mul, (2,), (1,), "VALID"))(WX()))
C(G + "vmap_grad_max_pool", lambda: jax.vmap(jax.grad(lambda x: lax.reduce_window(
    x, -jnp.inf, lax.max, (2, 2), (2, 2), "VALID").sum()))(jnp.sin(jnp.arange(32.0)).reshape(
        2, 4, 4)))
C(G + "err_window_rank", lambda: lax.reduce_window(WX(), 0.0, lax.add, (2,), (1,), "VALID"))
C(G + "err_strides_len", lambda: lax.reduce_window(WX(), 0.0, lax.add, (2, 2), (1,), "VALID"))
C(G + "err_zero_window", lambda: lax.reduce_window(WX(), 0.0, lax.add, (0, 2), (1, 1), "VALID"))
C(G + "err_zero_stride", lambda: lax.reduce_window(WX(), 0.0, lax.add, (1, 2), (0, 1), "VALID"))
C(G + "err_zero_dilation", lambda: lax.reduce_window(WX(), 0.0, lax.add, (1, 2), (1, 1),
                                                     "VALID", (0, 1)))
C(G + "err_base_dilation_len", lambda: lax.reduce_window(WX(), 0.0, lax.add, (1, 2), (1, 1),
                                                         "VALID", (1, 1, 1)))
C(G + "err_bool_sum", lambda: lax.reduce_window(jnp.array([True, False]), False, lax.add, (2,),
                                                (1,), "SAME"))
C(G + "err_init_dtype", lambda: lax.reduce_window(WX(), jnp.int32(1), lax.mul, (2, 2), (1, 1),
                                                  "VALID"))
C(G + "err_init_python_f16", lambda: lax.reduce_window(jnp.ones(3, jnp.float16), 0.0,
                                                       lambda a, b: a * b + b, (2,), (1,),
                                                       "VALID"))
C(G + "err_init_shape", lambda: lax.reduce_window(WX(), jnp.zeros(2), lax.add, (2, 2), (1, 1),
                                                  "VALID"))
C(G + "err_tree", lambda: lax.reduce_window((WX(),), 0.0, lax.add, (2, 2), (1, 1), "VALID"))
C(G + "err_out_tree", lambda: lax.reduce_window((WX(), WX()), (0.0, 0.0),
                                                lambda a, b: (a[0] + b[0],), (2, 2), (1, 1),
                                                "VALID"))
C(G + "err_no_operand", lambda: lax.reduce_window((), (), lax.add, (2,), (1,), "VALID"))
C(G + "err_vmap_init", lambda: jax.vmap(lambda x, i: lax.reduce_window(
    x, i, lax.mul, (2,), (1,), "VALID"))(jnp.ones((2, 3)), jnp.ones(2)))

# ---- lax.fft and jnp.fft -----------------------------------------------------------------------
G = "fft/"
FX = lambda: jnp.array([1.0, 2.0, 0.5, -1.0, 3.0])  # noqa: E731
FC = lambda: (FX() + 1j * FX()[::-1]).astype(jnp.complex64)  # noqa: E731
FM = lambda: jnp.arange(12.0).reshape(3, 4) * jnp.array([1.0, -0.5, 2.0, 0.25])  # noqa: E731
for _name in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft"):
  C(G + f"{_name}_real", (lambda n: lambda: getattr(jnp.fft, n)(FX()))(_name))
  C(G + f"{_name}_int", (lambda n: lambda: getattr(jnp.fft, n)(jnp.arange(6)))(_name))
  C(G + f"{_name}_n", (lambda n: lambda: getattr(jnp.fft, n)(FM(), n=7, axis=0))(_name))
  for _norm in ("backward", "ortho", "forward"):
    C(G + f"{_name}_{_norm}", (lambda n, m: lambda: getattr(jnp.fft, n)(FM(), norm=m))(
        _name, _norm))
  if _name not in ("rfft", "ihfft"):
    C(G + f"{_name}_complex", (lambda n: lambda: getattr(jnp.fft, n)(FC()))(_name))
for _name in ("fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn"):
  C(G + f"{_name}", (lambda n: lambda: getattr(jnp.fft, n)(FM()))(_name))
  C(G + f"{_name}_s", (lambda n: lambda: getattr(jnp.fft, n)(FM(), s=(2, 5)))(_name))
  C(G + f"{_name}_axes", (lambda n: lambda: getattr(jnp.fft, n)(
      jnp.sin(jnp.arange(24.0)).reshape(2, 3, 4), axes=(2, 0), norm="ortho"))(_name))
C(G + "fftn_4d", lambda: jnp.fft.fftn(jnp.sin(jnp.arange(16.0)).reshape(2, 2, 2, 2)))
C(G + "irfftn_4d", lambda: jnp.fft.irfftn(jnp.sin(jnp.arange(24.0)).reshape(2, 2, 2, 3)))
C(G + "fftn_s_only", lambda: jnp.fft.fftn(FM(), s=(2,)))
C(G + "fftn_scalar", lambda: jnp.fft.fftn(jnp.float32(2.0)))
C(G + "fft_empty", lambda: jnp.fft.fft(jnp.zeros((0,))))
C(G + "irfft_one", lambda: jnp.fft.irfft(FC()[:1]))
C(G + "fft_bool", lambda: jnp.fft.fft(jnp.array([True, False])))
C(G + "fft_f16", lambda: jnp.fft.fft(jnp.ones(4, jnp.float16)))
C(G + "fft_weak", lambda: jnp.fft.fft(lax.broadcast_in_dim(2.0, (3,), ())))
C(G + "fftfreq", lambda: (jnp.fft.fftfreq(5), jnp.fft.fftfreq(6, 0.5), jnp.fft.fftfreq(4, 2)))
C(G + "fftfreq_dtype", lambda: (jnp.fft.fftfreq(4, dtype=jnp.float16),
                                jnp.fft.fftfreq(4, dtype=jnp.int32)))
C(G + "fftfreq_d_array", lambda: jnp.fft.fftfreq(4, jnp.float32(2.0)))
C(G + "rfftfreq", lambda: (jnp.fft.rfftfreq(5), jnp.fft.rfftfreq(6, 0.1),
                           jnp.fft.rfftfreq(6, dtype=jnp.float16)))
C(G + "fftshift", lambda: (jnp.fft.fftshift(FM()), jnp.fft.fftshift(FM(), axes=1),
                           jnp.fft.fftshift(FM(), axes=(0,))))
C(G + "ifftshift", lambda: (jnp.fft.ifftshift(FM()), jnp.fft.ifftshift(FX())))
C(G + "lax_fft", lambda: (lax.fft(FC(), "fft", (5,)), lax.fft(FC(), lax.FftType.IFFT, (5,)),
                          lax.fft(FX(), "rfft", (5,)), lax.fft(FC()[:3], "irfft", (5,))))
C(G + "lax_fft_2d", lambda: (lax.fft(FM().astype(jnp.complex64), "fft", (3, 4)),
                             lax.fft(FM().astype(jnp.complex64)[:, :3], "irfft", (3, 4))))
C(G + "lax_fft_no_lengths", lambda: lax.fft(FX(), "fft", ()))
C(G + "lax_fft_type_enum", lambda: [int(t) for t in lax.FftType])
C(G + "jit_fftn", lambda: jax.jit(jnp.fft.fftn)(FM()))
C(G + "jit_irfft", lambda: jax.jit(lambda x: jnp.fft.irfft(x, n=6))(FC()))
C(G + "vmap_fft", lambda: jax.vmap(jnp.fft.fft, in_axes=1)(FM()))
C(G + "vmap_irfft", lambda: jax.vmap(lambda a: jnp.fft.irfft(a, n=4))(FM().astype(jnp.complex64)))
C(G + "jvp_fft", lambda: jax.jvp(jnp.fft.fft, (FX(),), (FX() * 2,)))
C(G + "grad_fft", lambda: jax.grad(lambda x: jnp.real(jnp.fft.fft(x) * jnp.arange(5)).sum())(FX()))
C(G + "grad_ifft", lambda: jax.grad(lambda x: jnp.imag(jnp.fft.ifft(x, norm="ortho")
                                                       * jnp.arange(5)).sum())(FX()))
C(G + "grad_rfft", lambda: jax.grad(lambda x: jnp.abs(jnp.fft.rfft(x)).sum())(FX()))
C(G + "grad_irfft", lambda: jax.grad(lambda x: (jnp.fft.irfft(x * (1 + 2j))
                                                * jnp.arange(8)).sum())(FX()))
C(G + "grad_irfft_odd", lambda: jax.grad(lambda x: (jnp.fft.irfft(x * (1 + 2j), n=9) ** 2).sum())(
    FX()))
C(G + "grad_complex", lambda: jax.grad(lambda c: jnp.abs(jnp.fft.fft(c)).sum())(FC()))
C(G + "grad_rfft2", lambda: jax.grad(lambda m: (jnp.abs(jnp.fft.rfft2(m)) ** 2).sum())(FM()))
C(G + "grad_irfft2", lambda: jax.grad(lambda m: (jnp.fft.irfft2(m * (1 - 1j)) ** 3).sum())(FM()))
C(G + "grad_hfft", lambda: jax.grad(lambda x: (jnp.fft.hfft(x) ** 2).sum())(FX()))
C(G + "grad_ihfft", lambda: jax.grad(lambda x: jnp.abs(jnp.fft.ihfft(x)).sum())(FX()))
C(G + "err_n0", lambda: jnp.fft.fft(FX(), n=0))
C(G + "err_axis_tuple", lambda: jnp.fft.fft(FM(), axis=(0, 1)))
C(G + "err_norm", lambda: jnp.fft.fft(FX(), norm="bad"))
C(G + "err_rfft_complex", lambda: jnp.fft.rfft(FC()))
C(G + "err_s_axes", lambda: jnp.fft.fftn(FM(), s=(2,), axes=(0, 1)))
C(G + "err_repeated_axes", lambda: jnp.fft.fftn(FM(), axes=(0, 0)))
C(G + "err_fft2_axes", lambda: jnp.fft.fft2(FM(), axes=(0,)))
C(G + "err_s_negative", lambda: jnp.fft.fftn(FM(), s=(-1,)))
C(G + "err_fftfreq_list", lambda: jnp.fft.fftfreq([4]))
C(G + "err_fftfreq_d_list", lambda: jnp.fft.fftfreq(4, [1.0]))
C(G + "err_lax_length", lambda: lax.fft(FC(), "fft", (4,)))
C(G + "err_lax_rank", lambda: lax.fft(FC(), "fft", (1, 5)))
C(G + "err_lax_type", lambda: lax.fft(FC(), "foo", (5,)))
C(G + "err_lax_type_value", lambda: lax.fft(FC(), 3.0, (5,)))
C(G + "err_lax_rfft_f16", lambda: lax.fft(FX().astype(jnp.float16), "rfft", (5,)))
C(G + "err_lax_irfft_lengths", lambda: lax.fft(FM().astype(jnp.complex64)[:, :3], "irfft",
                                               (2, 4)))


# ---- generated: every callable of jax.numpy applied to standard arguments -------------------------
# (names listed from JAX 0.10.2's jax.numpy; an AttributeError on our side is a missing function)
JNP_NAMES = ['ComplexWarning', 'abs', 'absolute', 'acos', 'acosh', 'add', 'all', 'allclose', 'amax', 'amin', 'angle', 'any', 'append', 'apply_along_axis', 'apply_over_axes', 'arange', 'arccos', 'arccosh', 'arcsin', 'arcsinh', 'arctan', 'arctan2', 'arctanh', 'argmax', 'argmin', 'argpartition', 'argsort', 'argwhere', 'around', 'array', 'array_equal', 'array_equiv', 'array_repr', 'array_split', 'array_str', 'asarray', 'asin', 'asinh', 'astype', 'atan', 'atan2', 'atanh', 'atleast_1d', 'atleast_2d', 'atleast_3d', 'average', 'bartlett', 'bfloat16', 'bincount', 'bitwise_and', 'bitwise_count', 'bitwise_invert', 'bitwise_left_shift', 'bitwise_not', 'bitwise_or', 'bitwise_right_shift', 'bitwise_xor', 'blackman', 'block', 'bool', 'bool_', 'broadcast_arrays', 'broadcast_shapes', 'broadcast_to', 'can_cast', 'cbrt', 'cdouble', 'ceil', 'character', 'choose', 'clip', 'column_stack', 'complex128', 'complex64', 'complex_', 'complexfloating', 'compress', 'concat', 'concatenate', 'conj', 'conjugate', 'convolve', 'copy', 'copysign', 'corrcoef', 'correlate', 'cos', 'cosh', 'count_nonzero', 'cov', 'cross', 'csingle', 'cumprod', 'cumsum', 'cumulative_prod', 'cumulative_sum', 'deg2rad', 'degrees', 'delete', 'diag', 'diag_indices', 'diag_indices_from', 'diagflat', 'diagonal', 'diff', 'digitize', 'divide', 'divmod', 'dot', 'double', 'dsplit', 'dstack', 'ediff1d', 'einsum', 'empty', 'empty_like', 'equal', 'exp', 'exp2', 'expand_dims', 'expm1', 'extract', 'eye', 'fabs', 'fill_diagonal', 'flatnonzero', 'flexible', 'flip', 'fliplr', 'flipud', 'float16', 'float32', 'float4_e2m1fn', 'float64', 'float6_e2m3fn', 'float6_e3m2fn', 'float8_e3m4', 'float8_e4m3', 'float8_e4m3b11fnuz', 'float8_e4m3fn', 'float8_e4m3fnuz', 'float8_e5m2', 'float8_e5m2fnuz', 'float8_e8m0fnu', 'float_', 'float_power', 'floating', 'floor', 'floor_divide', 'fmax', 'fmin', 'fmod', 'frexp', 'fromfunction', 'full', 'full_like', 'gcd', 'generic', 'geomspace', 'gradient', 'greater', 'greater_equal', 'hamming', 'hanning', 'heaviside', 'histogram', 'histogram2d', 'histogram_bin_edges', 'histogramdd', 'hsplit', 'hstack', 'hypot', 'i0', 'identity', 'imag', 'indices', 'inexact', 'inner', 'insert', 'int1', 'int16', 'int2', 'int32', 'int4', 'int64', 'int8', 'int_', 'integer', 'interp', 'intersect1d', 'invert', 'isclose', 'iscomplex', 'iscomplexobj', 'isdtype', 'isfinite', 'isin', 'isinf', 'isnan', 'isneginf', 'isposinf', 'isreal', 'isrealobj', 'isscalar', 'issubdtype', 'iterable', 'ix_', 'kaiser', 'kron', 'lcm', 'ldexp', 'left_shift', 'less', 'less_equal', 'lexsort', 'linspace', 'log', 'log10', 'log1p', 'log2', 'logaddexp', 'logaddexp2', 'logical_and', 'logical_not', 'logical_or', 'logical_xor', 'logspace', 'mask_indices', 'matmul', 'matrix_transpose', 'matvec', 'max', 'maximum', 'mean', 'median', 'meshgrid', 'min', 'minimum', 'mod', 'modf', 'moveaxis', 'multiply', 'nan_to_num', 'nanargmax', 'nanargmin', 'nancumprod', 'nancumsum', 'nanmax', 'nanmean', 'nanmedian', 'nanmin', 'nanpercentile', 'nanprod', 'nanquantile', 'nanstd', 'nansum', 'nanvar', 'ndim', 'negative', 'nextafter', 'nonzero', 'not_equal', 'number', 'object_', 'ones', 'ones_like', 'outer', 'packbits', 'pad', 'partition', 'percentile', 'permute_dims', 'piecewise', 'place', 'poly', 'polyadd', 'polyder', 'polydiv', 'polyfit', 'polyint', 'polymul', 'polysub', 'polyval', 'positive', 'pow', 'power', 'prod', 'promote_types', 'ptp', 'put', 'put_along_axis', 'quantile', 'rad2deg', 'radians', 'ravel', 'ravel_multi_index', 'real', 'reciprocal', 'remainder', 'repeat', 'reshape', 'resize', 'result_type', 'right_shift', 'rint', 'roll', 'rollaxis', 'roots', 'rot90', 'round', 'searchsorted', 'select', 'setdiff1d', 'setxor1d', 'shape', 'sign', 'signbit', 'signedinteger', 'sin', 'sinc', 'single', 'sinh', 'size', 'sort', 'sort_complex', 'spacing', 'split', 'sqrt', 'square', 'squeeze', 'stack', 'std', 'subtract', 'sum', 'swapaxes', 'take', 'take_along_axis', 'tan', 'tanh', 'tensordot', 'tile', 'trace', 'transpose', 'trapezoid', 'tri', 'tril', 'tril_indices', 'tril_indices_from', 'trim_zeros', 'triu', 'triu_indices', 'triu_indices_from', 'true_divide', 'trunc', 'ufunc', 'uint', 'uint1', 'uint16', 'uint2', 'uint32', 'uint4', 'uint64', 'uint8', 'union1d', 'unique', 'unique_all', 'unique_counts', 'unique_inverse', 'unique_values', 'unpackbits', 'unravel_index', 'unsignedinteger', 'unstack', 'unwrap', 'vander', 'var', 'vdot', 'vecdot', 'vecmat', 'vsplit', 'vstack', 'where', 'zeros', 'zeros_like']
AUTO_ARGS = {
    "x": lambda: (jnp.array([[1.5, -2.0, 0.5], [0.25, 3.0, -1.0]]),),
    "i": lambda: (jnp.array([[3, 1, 2], [0, 5, 4]]),),
    "xy": lambda: (jnp.array([[1.5, -2.0, 0.5], [0.25, 3.0, -1.0]]),
                   jnp.array([[0.5, 1.0, 2.0], [2.0, -1.0, 1.0]])),
    "ii": lambda: (jnp.array([[3, 1, 2], [0, 5, 4]]), jnp.array([[1, 2, 3], [4, 1, 2]])),
    "v": lambda: (jnp.array([0.5, 2.0, -1.0, 3.0]),),
    "s": lambda: (2.5,),
}


def _auto(name, args):
  return getattr(jnp, name)(*AUTO_ARGS[args]())


for _n in JNP_NAMES:
  for _a in AUTO_ARGS:
    C(f"auto/{_n}/{_a}", functools.partial(_auto, _n, _a))


def _autojit(name, args):
  return jax.jit(getattr(jnp, name))(*AUTO_ARGS[args]())


def _autovmap(name, args):
  return jax.vmap(getattr(jnp, name))(*AUTO_ARGS[args]())


# narrow float / sub-byte scalar types can crash XLA's compiler under jit (a segfault in JAX)
_NO_JIT = tuple(n for n in JNP_NAMES if n.startswith(("float4", "float6", "float8", "int1",
                                                      "int2", "int4", "uint1", "uint2", "uint4"))) + (
    "array_repr", "array_str", "iterable", "isscalar", "ndim", "shape", "size", "result_type",
    "promote_types", "can_cast", "issubdtype", "isdtype", "iscomplexobj", "isrealobj",
    "broadcast_shapes", "einsum_path", "printoptions", "load", "save", "savez", "mask_indices",
    "frompyfunc", "fromfunction", "ufunc", "vectorize")
for _n in JNP_NAMES:
  if _n in _NO_JIT:
    continue
  for _a in ("x", "i", "xy", "v"):
    C(f"autojit/{_n}/{_a}", functools.partial(_autojit, _n, _a))
  for _a in ("x", "xy", "ii"):
    C(f"autovmap/{_n}/{_a}", functools.partial(_autovmap, _n, _a))


# ---- repr / str / format of arrays (exact text) ---------------------------------------------------
REPR_VALUES = {
    "f32_small": lambda: jnp.array([0.1, 0.2, 0.3]),
    "f32_mixed_mag": lambda: jnp.array([1e-5, 1.0, 1e5]),
    "f32_big": lambda: jnp.array([1e10, 2.5]),
    "f32_ints": lambda: jnp.array([1.0, 2.0, 3.0]),
    "f32_neg0": lambda: jnp.array([-0.0, 0.0]),
    "f32_2d": lambda: jnp.arange(6.0).reshape(2, 3) / 7,
    "f32_3d": lambda: jnp.arange(8.0).reshape(2, 2, 2),
    "f32_long": lambda: jnp.arange(1001.0),
    "f32_long_2d": lambda: jnp.arange(2000.0).reshape(40, 50),
    "f32_scalar": lambda: jnp.float32(3.14159),
    "f32_scalar_weak": lambda: jnp.asarray(2.5),
    "f32_nan_inf": lambda: jnp.array([jnp.nan, -jnp.inf, 1.5]),
    "f16": lambda: jnp.array([0.1, 1000.0], jnp.float16),
    "bf16": lambda: jnp.array([0.1, 3.0], jnp.bfloat16),
    "bf16_scalar": lambda: jnp.bfloat16(0.1),
    "i32": lambda: jnp.array([1, -20, 300]),
    "i32_2d": lambda: jnp.arange(12).reshape(3, 4),
    "i8": lambda: jnp.array([1, -2], jnp.int8),
    "u32": lambda: jnp.array([1, 2], jnp.uint32),
    "i32_scalar": lambda: jnp.int32(7),
    "i32_weak_scalar": lambda: jnp.asarray(7),
    "bool": lambda: jnp.array([True, False]),
    "bool_scalar": lambda: jnp.bool_(True),
    "c64": lambda: jnp.array([1 + 2j, -0.5j]),
    "empty_f32": lambda: jnp.zeros((0,)),
    "empty_2d": lambda: jnp.zeros((2, 0), jnp.int32),
    "weak_vec": lambda: jnp.broadcast_to(1.0, (3,)),
    "f32_exp_format": lambda: jnp.array([1e-10, 1.0]),
    "f32_precision": lambda: jnp.array([1 / 3, 2 / 3]),
    "grad_result": lambda: jax.grad(lambda x: x ** 2)(3.0),
    "jit_result": lambda: jax.jit(lambda x: x + 1)(jnp.arange(3)),
    "random_key": lambda: jax.random.PRNGKey(0),
}
for _k in REPR_VALUES:
  C(f"text/repr/{_k}", (lambda k: lambda: repr(REPR_VALUES[k]()))(_k))
  C(f"text/str/{_k}", (lambda k: lambda: str(REPR_VALUES[k]()))(_k))
C("text/format_f", lambda: f"{jnp.float32(1.23456):.2f}")
C("text/format_d", lambda: f"{jnp.int32(42):5d}")
C("text/format_array_err", lambda: f"{jnp.ones(2):.2f}")
C("text/format_plain", lambda: f"{jnp.ones(2)}")
C("text/print_list_of_arrays", lambda: str([jnp.float32(1), jnp.int32(2)]))
C("text/print_dict_of_arrays", lambda: str({"a": jnp.arange(2)}))
C("text/print_tuple_scalar", lambda: str((jnp.asarray(1.0),)))
C("text/tracer_str", lambda: _tracer_text(str))
C("text/tracer_repr", lambda: _tracer_text(repr))
C("text/dtype_str", lambda: str(jnp.ones(2).dtype))
C("text/dtype_repr", lambda: repr(jnp.ones(2).dtype))
C("text/shape_dtype_struct_repr", lambda: repr(jax.ShapeDtypeStruct((2, 3), jnp.float32)))
C("text/jaxpr_repr_type", lambda: type(jax.make_jaxpr(lambda x: x)(1.0)).__name__)
C("text/treedef_dict", lambda: str(jax.tree_util.tree_structure({"b": [1], "a": None})))
C("text/np_printoptions", lambda: _with_printoptions())


def _tracer_text(fn):
  out = []
  jax.jit(lambda x: out.append(fn(x)) or x)(jnp.ones(3))
  return out[0]


def _with_printoptions():
  with np.printoptions(precision=2):
    return repr(jnp.array([1 / 3, 2 / 3]))


# ---- derivatives at special points (first, second, jvp-of-grad) -------------------------------------
D_FUNS = {
    "softplus": lambda: jax.nn.softplus, "sigmoid": lambda: jax.nn.sigmoid,
    "log_sigmoid": lambda: jax.nn.log_sigmoid, "gelu": lambda: jax.nn.gelu,
    "gelu_exact": lambda: functools.partial(jax.nn.gelu, approximate=False),
    "silu": lambda: jax.nn.silu, "elu": lambda: jax.nn.elu, "selu": lambda: jax.nn.selu,
    "celu": lambda: jax.nn.celu, "relu": lambda: jax.nn.relu, "relu6": lambda: jax.nn.relu6,
    "leaky_relu": lambda: jax.nn.leaky_relu, "mish": lambda: jax.nn.mish,
    "soft_sign": lambda: jax.nn.soft_sign, "hard_tanh": lambda: jax.nn.hard_tanh,
    "tanh": lambda: jnp.tanh, "abs": lambda: jnp.abs, "sqrt_abs": lambda: lambda x: jnp.sqrt(
        jnp.abs(x) + 1.0), "sinc": lambda: jnp.sinc, "exp": lambda: jnp.exp,
    "log1p_abs": lambda: lambda x: jnp.log1p(jnp.abs(x)), "cube": lambda: lambda x: x ** 3,
    "pow_2_5": lambda: lambda x: jnp.abs(x) ** 2.5, "max0": lambda: lambda x: jnp.maximum(x, 0.0),
    "min0": lambda: lambda x: jnp.minimum(x, 0.0), "clip": lambda: lambda x: jnp.clip(x, -1, 1),
    "where": lambda: lambda x: jnp.where(x > 0, x ** 2, -x), "sign": lambda: jnp.sign,
    "floor": lambda: jnp.floor, "round": lambda: jnp.round, "logaddexp2": lambda: lambda x:
        jnp.logaddexp2(x, 0.0), "arctan2": lambda: lambda x: jnp.arctan2(x, 1.0),
    "hypot": lambda: lambda x: jnp.hypot(x, 1.0), "erf": lambda: jax.scipy.special.erf,
    "erfinv": lambda: lambda x: jax.scipy.special.erfinv(x * 0.5),
    "logsumexp_tie": lambda: lambda x: jax.nn.logsumexp(jnp.stack([x, x, 0.0 * x])),
    "softmax0": lambda: lambda x: jax.nn.softmax(jnp.stack([x, 0.0 * x]))[0],
    "norm_vec": lambda: lambda x: jnp.linalg.norm(jnp.stack([x, 1.0 + 0.0 * x])),
    "prod_zero": lambda: lambda x: jnp.prod(jnp.stack([x, 0.0 * x + 2.0, x])),
    "cumprod": lambda: lambda x: jnp.cumprod(jnp.stack([x, x, 2.0 + 0 * x]))[-1],
    "std_equal": lambda: lambda x: jnp.std(jnp.stack([x, 0.0 * x + 1.0])),
    "var": lambda: lambda x: jnp.var(jnp.stack([x, 0.0 * x + 1.0, 2 * x])),
    "sort_tie": lambda: lambda x: jnp.sort(jnp.stack([x, 0.0 * x]))[0] * 3.0,
    "max_tie": lambda: lambda x: jnp.max(jnp.stack([x, 0.0 * x])),
    "argmax_take": lambda: lambda x: jnp.stack([x, x * 2])[jnp.argmax(jnp.stack([x, x * 2]))],
    "xlogy": lambda: lambda x: jax.scipy.special.xlogy(x, x * x + 1.0),
    "logit_sigmoid": lambda: lambda x: jax.scipy.special.logit(jax.nn.sigmoid(x)),
    "cond": lambda: lambda x: lax.cond(x > 0, lambda x: x ** 2, lambda x: x ** 3, x),
    "while_fixed": lambda: lambda x: lax.fori_loop(0, 3, lambda i, c: c * x + 1.0, x),
    "scan_cumsum": lambda: lambda x: lax.scan(lambda c, _: (c * x + jnp.sin(c), None), x,
                                              None, length=3)[0],
    "remat_sin": lambda: jax.checkpoint(lambda x: jnp.sin(x) * x),
    "stop_gradient": lambda: lambda x: x * lax.stop_gradient(x) + x ** 2,
    "log_softmax0": lambda: lambda x: jax.nn.log_softmax(jnp.stack([x, 0.0 * x]))[0],
    "standardize": lambda: lambda x: jax.nn.standardize(jnp.stack([x, 1.0 + 0 * x, 2 * x]))[0],
}
D_POINTS = {"0": 0.0, "1": 1.0, "neg": -0.7, "big": 30.0}


def _deriv(fname, pt, order):
  f = D_FUNS[fname]()
  x = jnp.float32(D_POINTS[pt])
  if order == 1:
    return jax.grad(f)(x)
  if order == 2:
    return jax.grad(jax.grad(f))(x)
  return jax.jvp(jax.grad(f), (x,), (jnp.float32(1),))[1]


for _f in D_FUNS:
  for _p in D_POINTS:
    for _o in (1, 2, 3):
      C(f"deriv/{_f}/{_p}/d{_o}", functools.partial(_deriv, _f, _p, _o))


def _named_fn(x):
  return x * 2


# ---------------------------------------------------------------------------------------------

def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--side", choices=("jax", "ourjax"))
  p.add_argument("--out")
  p.add_argument("--compare", nargs=2, metavar=("JAX_PKL", "OURS_PKL"))
  p.add_argument("--both", action="store_true", help="run both sides then compare")
  p.add_argument("--jax-python", default="/work/benchvenv/bin/python")
  p.add_argument("--ours-python", default=os.path.join(ROOT, ".venv", "bin", "python"))
  p.add_argument("-k", action="append", dest="filt", help="keep cases whose name contains this")
  p.add_argument("--list", action="store_true")
  p.add_argument("--x64", action="store_true", help="run with jax_enable_x64 on (both sides)")
  p.add_argument("--no-soft", action="store_true", help="omit the soft differences")
  p.add_argument("-v", "--verbose", action="store_true", help="print tracebacks of exceptions")
  a = p.parse_args(argv)
  if a.list:
    for n, _ in CASES:
      print(n)
    print(len(CASES), "cases")
    return 0
  if a.side:
    run_side(a.side, a.out or f"/tmp/jaxdiff_{a.side}.pkl", a.filt, a.verbose, a.x64)
    return 0
  if a.compare:
    compare(*a.compare, show_soft=not a.no_soft)
    return 0
  if a.both:
    extra = sum((["-k", f] for f in (a.filt or [])), []) + (["--x64"] if a.x64 else [])
    jp, op = "/tmp/jaxdiff_jax.pkl", "/tmp/jaxdiff_ourjax.pkl"
    subprocess.run([a.jax_python, __file__, "--side", "jax", "--out", jp] + extra, check=True)
    subprocess.run([a.ours_python, __file__, "--side", "ourjax", "--out", op] + extra,
                   check=True)
    compare(jp, op, show_soft=not a.no_soft)
    return 0
  p.print_help()
  return 1


if __name__ == "__main__":
  sys.exit(main())
