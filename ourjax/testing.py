"""``ourjax.testing``: helpers for testing code written with ourjax.

* Hypothesis strategies, built on ``hypothesis.extra.numpy``: ``dtypes(...)``, ``shapes(...)``
  and ``arrays(dtype, shape, elements=...)``.  ``arrays`` draws NumPy arrays (so they shrink and
  print well, and serve as the reference); by default floats are finite and of moderate size,
  which is what most numerical properties want.  ``jnp.asarray`` turns a draw into an ourjax
  array; ``arrays(..., as_ourjax=True)`` does it for you.
* ``check_jit_matches_eager(f, *args)``: ``f``'s compiled result equals its op-by-op result
  (same tree, shapes and dtypes; values within tolerances for the dtype), optionally its
  gradients too.
* ``check_grads(f, args)``: forward- and reverse-mode derivatives agree with central finite
  differences along random directions (JAX's ``jax.test_util.check_grads`` idea).

Example::

    from hypothesis import given
    import ourjax.numpy as jnp
    from ourjax import testing

    @given(testing.arrays(np.float32, testing.shapes(max_dims=2)))
    def test_softplus_compiles(x):
      testing.check_jit_matches_eager(ourjax.nn.softplus, x)
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

try:
  import hypothesis.extra.numpy as _hnp
  from hypothesis import strategies as st
except ImportError as e:  # pragma: no cover - hypothesis is in the test extra
  raise ImportError("ourjax.testing needs hypothesis (pip install hypothesis)") from e

from ourjax import dtypes as _dtypes

__all__ = ["dtypes", "shapes", "arrays", "scalars", "broadcastable_shapes",
           "mutually_broadcastable_shapes", "check_jit_matches_eager", "check_grads",
           "default_tolerance"]

broadcastable_shapes = _hnp.broadcastable_shapes
mutually_broadcastable_shapes = _hnp.mutually_broadcastable_shapes

_KIND_DTYPES = {
    "bool": ("bool",),
    "int": ("int8", "int16", "int32", "int64"),
    "uint": ("uint8", "uint16", "uint32", "uint64"),
    "float": ("float16", "bfloat16", "float32", "float64"),
    "complex": ("complex64", "complex128"),
}


# ---------------------------------------------------------------------------------------------
# Strategies


def dtypes(kinds=("float",), *, narrow: bool = True, x64: bool | None = None):
  """A strategy for dtypes ourjax computes in.

  ``kinds``: any of "bool", "int", "uint", "float", "complex" (a string or a sequence).
  ``narrow=False`` leaves out float16 and bfloat16.  64-bit types are included only when x64
  is enabled (``x64=None`` reads the flag when the strategy is built)."""
  if isinstance(kinds, str):
    kinds = (kinds,)
  if x64 is None:
    from ourjax.config import config
    x64 = config.x64_enabled
  out = []
  for k in kinds:
    if k not in _KIND_DTYPES:
      raise ValueError(f"dtypes: unknown kind {k!r}; expected one of {sorted(_KIND_DTYPES)}")
    for name in _KIND_DTYPES[k]:
      dt = _dtypes.dtype(name)
      if not x64 and dt.name in ("int64", "uint64", "float64", "complex128"):
        continue
      if not narrow and name in ("float16", "bfloat16"):
        continue
      out.append(dt)
  if not out:
    raise ValueError(f"dtypes: no dtype of kinds {kinds} is available")
  return st.sampled_from(out)


def shapes(*, min_dims: int = 0, max_dims: int = 3, min_side: int = 1, max_side: int = 5):
  """A strategy for array shapes (tuples of ``min_dims..max_dims`` sizes in
  ``min_side..max_side``)."""
  return _hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                           max_side=max_side)


def _default_bounds(dt: np.dtype):
  if dt.kind == "f" or dt.name == "bfloat16":
    return -1e3, 1e3
  if dt.kind in "iu":
    info = np.iinfo(dt)
    return int(max(info.min, -1000)), int(min(info.max, 1000))
  return None, None


def scalars(dtype, *, min_value=None, max_value=None, allow_nan: bool = False,
            allow_infinity: bool = False, allow_subnormal: bool = True):
  """A strategy for single values of ``dtype`` (floats finite and within ±1e3 unless told
  otherwise; integers within ±1000)."""
  dt = _dtypes.dtype(dtype)
  lo, hi = _default_bounds(dt)
  lo = lo if min_value is None else min_value
  hi = hi if max_value is None else max_value
  if dt == np.bool_:
    return st.booleans()
  if dt.kind in "iu":
    return st.integers(min_value=lo, max_value=hi)
  if dt.kind == "c":
    part = np.float32 if dt == np.complex64 else np.float64
    r = scalars(part, min_value=min_value, max_value=max_value, allow_nan=allow_nan,
                allow_infinity=allow_infinity)
    return st.builds(complex, r, r)
  if dt.kind == "f" or dt.name == "bfloat16":
    width = {2: 16, 4: 32, 8: 64}[dt.itemsize] if dt.name != "bfloat16" else 32
    if allow_infinity or allow_nan:  # bounds exclude inf
      lo = None if min_value is None else lo
      hi = None if max_value is None else hi
    floats = st.floats(min_value=lo, max_value=hi, allow_nan=allow_nan,
                       allow_infinity=allow_infinity, width=width,
                       allow_subnormal=allow_subnormal)
    if dt.name == "bfloat16":  # round to the narrow type; rounding may step over a bound
      rounded = floats.map(lambda v: float(np.asarray(v, np.float32).astype(dt)))
      return rounded.filter(lambda v: (lo is None or not v < lo) and (hi is None or not v > hi))
    return floats
  raise TypeError(f"scalars: unsupported dtype {dt}")


def arrays(dtype=np.float32, shape=None, *, elements=None, min_value=None, max_value=None,
           allow_nan: bool = False, allow_infinity: bool = False, unique: bool = False,
           as_ourjax: bool = False):
  """A strategy for arrays of ``dtype`` (a dtype or a strategy of dtypes) and ``shape`` (a
  tuple, an int or a strategy; default ``shapes()``).

  ``elements`` overrides the element strategy; otherwise ``scalars(dtype, ...)`` with the
  given bounds.  Draws are NumPy arrays, or ourjax arrays with ``as_ourjax=True``."""
  if shape is None:
    shape = shapes()
  if isinstance(dtype, st.SearchStrategy):
    return dtype.flatmap(lambda dt: arrays(
        dt, shape, elements=elements, min_value=min_value, max_value=max_value,
        allow_nan=allow_nan, allow_infinity=allow_infinity, unique=unique,
        as_ourjax=as_ourjax))
  dt = _dtypes.dtype(dtype)
  if elements is None:
    elements = scalars(dt, min_value=min_value, max_value=max_value, allow_nan=allow_nan,
                       allow_infinity=allow_infinity)
  if dt.name == "bfloat16":  # hypothesis knows no bfloat16: draw float32, then round
    strat = _hnp.arrays(np.float32, shape, elements=elements, unique=unique)
    strat = strat.map(lambda a: a.astype(dt))
  else:
    strat = _hnp.arrays(dt, shape, elements=elements, unique=unique)
  if as_ourjax:
    from ourjax import numpy as jnp
    strat = strat.map(jnp.asarray)
  return strat


# ---------------------------------------------------------------------------------------------
# Checks


_TOLERANCES = {
    "bfloat16": (2e-2, 1e-2), "float16": (4e-3, 1e-3), "float32": (2e-5, 1e-6),
    "float64": (1e-12, 1e-14), "complex64": (2e-5, 1e-6), "complex128": (1e-12, 1e-14),
}


def default_tolerance(dtype) -> tuple[float, float]:
  """``(rtol, atol)`` used to compare compiled and eager results of ``dtype`` (0 for exact
  types: integers and bools must match exactly)."""
  return _TOLERANCES.get(np.dtype(dtype).name, (0.0, 0.0))


def _describe(x) -> str:
  a = np.asarray(x)
  return f"{a.dtype.name}{list(a.shape)}"


def _compare_leaf(what: str, path: str, expected, actual, rtol, atol):
  e = np.asarray(expected)
  a = np.asarray(actual)
  where = f"{what}{path}"
  if e.shape != a.shape or e.dtype != a.dtype:
    raise AssertionError(f"{where}: eager gives {_describe(e)} but jit gives {_describe(a)}")
  r, t = default_tolerance(e.dtype)
  r = r if rtol is None else rtol
  t = t if atol is None else atol
  if e.dtype.kind in "biu" or (r == 0 and t == 0):
    bad = ~((e == a) | (_isnan(e) & _isnan(a)))
  else:
    e64 = e.astype(np.complex128 if e.dtype.kind == "c" else np.float64)
    a64 = a.astype(e64.dtype)
    with np.errstate(invalid="ignore"):
      close = np.isclose(a64, e64, rtol=r, atol=t, equal_nan=True)
    bad = ~close
  if bad.any():
    idx = np.argwhere(bad)
    first = tuple(int(i) for i in idx[0]) if e.ndim else ()
    err = ""
    if e.dtype.kind in "fc" or e.dtype.name == "bfloat16":
      with np.errstate(invalid="ignore"):
        diff = np.abs(a.astype(np.complex128) - e.astype(np.complex128))
        err = f"; max abs error {np.nanmax(np.where(bad, diff, 0)):.3g} (rtol={r}, atol={t})"
    raise AssertionError(
        f"{where}: jit and eager differ at {int(bad.sum())} of {e.size} elements{err}; first "
        f"at index {first}: eager {e[first]!r}, jit {a[first]!r}")


def _isnan(x):
  try:
    return np.isnan(x)
  except TypeError:
    return np.zeros(np.shape(x), bool)


def _compare_trees(what, expected, actual, rtol, atol):
  from ourjax import _pytree as tree_util
  e_leaves, e_tree = tree_util.tree_flatten_with_path(expected)
  a_leaves, a_tree = tree_util.tree_flatten_with_path(actual)
  if e_tree != a_tree:
    raise AssertionError(f"{what}: eager returns {e_tree} but jit returns {a_tree}")
  for (path, e), (_, a) in zip(e_leaves, a_leaves):
    _compare_leaf(what, tree_util.keystr(path), e, a, rtol, atol)


def check_jit_matches_eager(f: Callable, *args, rtol: float | None = None,
                            atol: float | None = None, check_grads: bool = False,
                            static_argnums=(), **kwargs) -> Any:
  """Assert that ``ourjax.jit(f)(*args)`` equals ``f(*args)`` evaluated op by op.

  Outputs must have the same pytree structure, shapes and dtypes; integer and boolean values
  must be equal, floating values within ``rtol``/``atol`` (defaults per dtype, see
  ``default_tolerance``; NaNs must sit in the same places).  With ``check_grads=True`` the
  gradient of the sum of all floating outputs, with respect to every floating argument, is
  compared the same way (eager ``grad`` against ``jit(grad)``).  Returns the eager result.
  """
  import ourjax
  from ourjax import _pytree as tree_util
  with ourjax.disable_jit():
    expected = f(*args, **kwargs)
  jitted = ourjax.jit(f, static_argnums=static_argnums)
  actual = jitted(*args, **kwargs)
  _compare_trees("output", expected, actual, rtol, atol)
  if check_grads:
    float_argnums = tuple(
        i for i, a in enumerate(args) if i not in _as_tuple(static_argnums) and all(
            _dtypes.issubdtype(_dtypes.dtype(leaf), np.floating)
            for leaf in tree_util.tree_leaves(a)) and tree_util.tree_leaves(a))
    if float_argnums:
      def total(*a):
        out = f(*a, **kwargs)
        leaves = [x for x in tree_util.tree_leaves(out)
                  if _dtypes.issubdtype(_dtypes.dtype(x), np.floating)]
        return sum(ourjax.numpy.sum(x) for x in leaves)
      g = ourjax.grad(total, argnums=float_argnums)
      with ourjax.disable_jit():
        g_expected = g(*args)
      g_actual = ourjax.jit(g, static_argnums=static_argnums)(*args)
      _compare_trees("gradient", g_expected, g_actual, rtol, atol)
  return expected


def _as_tuple(x):
  return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def check_grads(f: Callable, args, order: int = 1, modes=("fwd", "rev"), *,
                eps: float | None = None, rtol: float | None = None,
                atol: float | None = None, seed: int = 0) -> None:
  """Check ``f``'s derivatives (up to ``order``) against central finite differences.

  Along a random direction ``v`` (fixed by ``seed``): forward mode compares ``jvp(f)`` with
  ``(f(x + eps v) - f(x - eps v)) / (2 eps)``; reverse mode checks ``<J^T u, v>`` from ``vjp``
  against ``<u, J v>`` from the same differences, for a random ``u``.  Higher orders repeat
  the check on the derivative function.  Tolerances default to ones suited to the dtype of
  the arguments (finite differences in float32 are good to about 1e-2)."""
  import ourjax
  from ourjax import numpy as jnp
  from ourjax import _pytree as tree_util
  args = tuple(args)
  rng = np.random.default_rng(seed)
  leaves = tree_util.tree_leaves(args)
  wide = all(np.asarray(x).dtype in (np.float64, np.complex128) for x in leaves)
  eps = eps if eps is not None else (1e-6 if wide else 1e-3)
  rtol = rtol if rtol is not None else (1e-5 if wide else 2e-2)
  atol = atol if atol is not None else (1e-6 if wide else 2e-2)

  def rand_like(tree):
    return tree_util.tree_map(
        lambda x: jnp.asarray(rng.standard_normal(np.shape(x)).astype(np.asarray(x).dtype)),
        tree)

  def add(tree, v, scale):
    return tree_util.tree_map(lambda x, d: x + scale * d, tree, v)

  def effective_direction(hi, lo):
    # x + eps v and x - eps v are rounded; the difference quotient measures J along the
    # direction actually stepped, (hi - lo) / (2 eps), computed exactly in float64
    return tree_util.tree_map(
        lambda a, b: jnp.asarray(((np.asarray(a, np.float64) - np.asarray(b, np.float64))
                                  / (2 * eps)).astype(np.asarray(a).dtype)), hi, lo)

  def vdot(a, b):
    la, lb = tree_util.tree_leaves(a), tree_util.tree_leaves(b)
    return sum(float(np.vdot(np.asarray(x, np.float64), np.asarray(y, np.float64)))
               for x, y in zip(la, lb))

  def check(fun, primals, k):
    v = rand_like(primals)
    x_hi, x_lo = add(primals, v, eps), add(primals, v, -eps)
    v = effective_direction(x_hi, x_lo)
    hi, lo = fun(*x_hi), fun(*x_lo)
    fd = tree_util.tree_map(lambda a, b: (np.asarray(a, np.float64) - np.asarray(b, np.float64))
                            / (2 * eps), hi, lo)
    if "fwd" in modes:
      _, tangent = ourjax.jvp(fun, primals, v)
      for i, (t, d) in enumerate(zip(tree_util.tree_leaves(tangent), tree_util.tree_leaves(fd))):
        t = np.asarray(t, np.float64)
        if not np.allclose(t, d, rtol=rtol, atol=atol):
          raise AssertionError(
              f"check_grads (order {k}, forward mode): JVP output {i} differs from central "
              f"finite differences by up to {np.max(np.abs(t - d)):.3g} (rtol={rtol}, "
              f"atol={atol})\njvp: {t}\nfd:  {d}")
    if "rev" in modes:
      out, f_vjp = ourjax.vjp(fun, *primals)
      u = rand_like(out)
      ct = f_vjp(u)
      # <u, J v> from finite differences must equal <J^T u, v> from the VJP
      lhs, rhs = vdot(u, fd), vdot(ct, v)
      if not np.isclose(lhs, rhs, rtol=rtol, atol=atol * max(1.0, abs(lhs))):
        raise AssertionError(f"check_grads (order {k}, reverse mode): the VJP does not match "
                             f"finite differences: <u, J v> = {lhs} but <J^T u, v> = {rhs}")
    if k < order:
      if "fwd" in modes:
        def dfun(*p):
          return ourjax.jvp(fun, p, v)[1]
      else:
        u_fixed = rand_like(fun(*primals))

        def dfun(*p):
          return ourjax.vjp(fun, *p)[1](u_fixed)
      check(dfun, primals, k + 1)

  check(f, args, 1)
