"""The user-facing transformations: jit, grad, value_and_grad, vjp, jvp, linearize, vmap,
jacfwd, jacrev, hessian, make_jaxpr, eval_shape, device_put, block_until_ready.

Each flattens its arguments' pytrees, runs the flat transformation from ``interpreters/`` and
rebuilds the output pytree.  ``jit`` itself (``JitWrapped``, its caches and fast paths) is in
``_jit.py``, ``vmap`` (its axis-spec checks and errors) in ``_vmap.py``; both are this
module's names too."""
from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from ourjax import core, dtypes
from ourjax import _pytree as tree_util
from ourjax.array import Array
from ourjax.config import config
from ourjax.core import ShapedArray, get_aval
from ourjax.interpreters import ad
from ourjax.interpreters import partial_eval as pe
from ourjax._pytree import tree_flatten, tree_map, tree_structure, tree_unflatten


def _fun_name(f) -> str:
  return getattr(f, "__name__", None) or type(f).__name__


def flatten_fun(f: Callable, in_tree, check_outputs: str | None = None):
  """``flat(*leaves) -> out leaves`` for ``f(*args, **kwargs)`` with (args, kwargs) = in_tree;
  the output treedef is stored in the returned cell after a call.  ``check_outputs`` (the
  transformation's name) checks that every output leaf is an array or scalar."""
  out_tree_cell = []

  def flat(*leaves):
    args, kwargs = tree_unflatten(in_tree, leaves)
    out = f(*args, **kwargs)
    out_leaves, out_tree = tree_flatten(out)
    if check_outputs is not None:
      for i, x in enumerate(out_leaves):
        if not _is_jax_value(x):
          from ourjax.ref import check_no_refs
          check_no_refs([x], f"function {_fun_name(f)}{_fun_location(f).replace(' defined at', ' at')} "
                        f"traced for {check_outputs}")
          where = f" at output component [{i}]" if len(out_leaves) > 1 else ""
          raise TypeError(f"function {_fun_name(f)}{_fun_location(f).replace(' defined at', ' at')} "
                          f"traced for {check_outputs} returned a value of type {type(x)}{where}, "
                          "which is not a valid JAX type")
    out_tree_cell.clear()
    out_tree_cell.append(out_tree)
    return out_leaves

  flat.__name__ = _fun_name(f)
  return flat, out_tree_cell


_ARG_TYPES = (core.Tracer, Array, np.ndarray, np.generic, bool, int, float, complex)


def _is_jax_value(x) -> bool:
  return isinstance(x, _ARG_TYPES) or hasattr(x, "__jax_array__")


def _jax_array_error(fname) -> ValueError:
  return ValueError(
      "Triggering __jax_array__() during abstractification is no longer supported. To avoid "
      "this error, either explicitly convert your object using jax.numpy.array(), or register "
      f"your object as a pytree. (in {fname})")


def _check_arg(x, fname):
  """An argument of a transformation (jit, vjp, ...) must be an array or a scalar.  As in JAX,
  an object that only has ``__jax_array__`` is refused here: ``jnp.asarray(obj)`` converts it,
  or it can be registered as a pytree."""
  if isinstance(x, _ARG_TYPES):
    if isinstance(x, np.ndarray) and x.dtype == object:
      raise TypeError(f"Argument '{x}' of type {type(x)} is not a valid JAX type (in {fname}).")
    return
  if getattr(x, "__jax_array__", None) is not None:
    raise _jax_array_error(fname)
  if hasattr(x, "__jax_array__"):       # (set to None: not the array protocol)
    return
  raise TypeError(f"Argument '{x}' of type {type(x)} is not a valid JAX type (in {fname}).")


# ------------------------------------------------------------------------------------------------
# make_jaxpr / eval_shape


class ShapeDtypeStruct:
  """A shape and dtype without data (what ``eval_shape`` returns; also usable as an input)."""
  __slots__ = ("shape", "dtype", "weak_type", "sharding")

  def __init__(self, shape, dtype, weak_type: bool = False, sharding=None):
    if dtype is None:
      raise ValueError("ShapeDtypeStruct: dtype must be specified.")
    self.shape = tuple(shape)
    self.dtype = dtype if isinstance(dtype, dtypes.KeyDType) else np.dtype(dtype)
    self.weak_type = weak_type
    self.sharding = sharding

  ndim = property(lambda self: len(self.shape))

  def __len__(self):
    if not self.shape:
      raise TypeError("len() of unsized object")
    return self.shape[0]
  size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))

  @classmethod
  def like(cls, x):
    """The shape, dtype (and weak type, sharding) of ``x``."""
    return cls(x.shape, x.dtype, weak_type=getattr(x, "weak_type", False),
               sharding=getattr(x, "sharding", None))

  def __repr__(self):
    w = ", weak_type=True" if self.weak_type else ""
    return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name}{w})"

  def __eq__(self, other):
    return (isinstance(other, ShapeDtypeStruct) and self.shape == other.shape
            and self.dtype == other.dtype and self.weak_type == other.weak_type)

  def __hash__(self):
    return hash((self.shape, self.dtype, self.weak_type))


def _key_struct_in(x):
  """A ShapeDtypeStruct of a key dtype, as the key array over its data's struct."""
  if type(x) is ShapeDtypeStruct and isinstance(x.dtype, dtypes.KeyDType):
    from ourjax._keys import key_from_struct
    return key_from_struct(x)
  return x


def _abstractify(x) -> ShapedArray:
  if isinstance(x, ShapeDtypeStruct):
    return ShapedArray(x.shape, dtypes.canonicalize_dtype(x.dtype), x.weak_type)
  return core.get_aval(x)


def _split_static(f, args, kwargs, static_argnums, static_argnames, fname):
  """Bind the static arguments into ``f``; returns (f_dyn, dyn_args, dyn_kwargs, static_key)."""
  static_argnums = tuple(i % len(args) if i < 0 and len(args) else i for i in static_argnums)
  static_args = tuple((i, args[i]) for i in static_argnums if i < len(args))
  static_kw = tuple(sorted((k, v) for k, v in kwargs.items() if k in static_argnames))
  for _, v in static_args + static_kw:
    try:
      hash(v)
    except TypeError:
      raise ValueError(f"Non-hashable static arguments are not supported. An error occurred "
                       f"while trying to hash an object of type {type(v)}, {v!r}. The error "
                       f"was:\nTypeError: unhashable type: '{type(v).__name__}'\n") from None
  if not static_args and not static_kw:
    return f, args, kwargs, ()
  dyn_args = tuple(a for i, a in enumerate(args) if i not in static_argnums)
  dyn_kwargs = {k: v for k, v in kwargs.items() if k not in static_argnames}
  sa, sk = dict(static_args), dict(static_kw)

  def f_dyn(*dargs, **dkwargs):
    it = iter(dargs)
    full = [sa[i] if i in sa else next(it) for i in range(len(dargs) + len(sa))]
    return f(*full, **dkwargs, **sk)

  functools.update_wrapper(f_dyn, f)
  # each value's type is part of the key, as in JAX: 1, True and 1.0 are equal but are not
  # the same static argument (a cache hit would hand back the other's result)
  return f_dyn, dyn_args, dyn_kwargs, (static_args, static_kw,
                                       tuple(type(v) for _, v in static_args + static_kw))


def make_jaxpr(fun: Callable, static_argnums=(), axis_env=None, return_shape: bool = False,
               abstracted_axes=None):
  """``make_jaxpr(f)(*args)`` returns the ClosedJaxpr of f at the args' shapes and dtypes (an
  argument may be any object with ``shape`` and ``dtype``, as for ``eval_shape``).
  ``axis_env`` (a sequence of ``(axis_name, size)``) binds named axes for collectives
  (``lax.psum(x, 'i')``) while tracing, as an enclosing ``pmap`` would."""
  static_argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

  @functools.wraps(fun)
  def make(*args, **kwargs):
    import contextlib
    from ourjax.lax.parallel import spmd_axes
    f, dargs, dkwargs, _ = _split_static(fun, args, kwargs, static_argnums, (), "make_jaxpr")
    leaves, in_tree = tree_flatten((dargs, dkwargs))
    flat, out_tree = flatten_fun(f, in_tree)
    with spmd_axes(dict(axis_env)) if axis_env else contextlib.nullcontext():
      closed = pe.trace_to_jaxpr(flat, [_duck_abstractify(x) for x in leaves],
                                 _fun_name(fun))
    if return_shape:
      shapes = [ShapeDtypeStruct(a.shape, a.dtype, a.weak_type) for a in closed.out_avals]
      return closed, tree_unflatten(out_tree[0], shapes)
    return closed
  # named after the function it traces, as in JAX: make_jaxpr(f).__name__ == "make_jaxpr(f)"
  # (a partial keeps its function's name; a nameless callable gets "<unnamed function>"), and
  # belonging to the library (JAX's says "jax")
  make.__module__ = "ourjax"
  if hasattr(fun, "__qualname__"):
    make.__qualname__ = f"make_jaxpr({fun.__qualname__})"
  if hasattr(fun, "__name__"):
    make.__name__ = f"make_jaxpr({fun.__name__})"
  elif isinstance(fun, functools.partial):
    make.__name__ = getattr(fun.func, "__name__", "<unnamed function>")
  else:
    make.__name__ = "<unnamed function>"
  return make


def _duck_abstractify(x) -> ShapedArray:
  """As ``_abstractify``; besides, as JAX's ``eval_shape`` and ``make_jaxpr``, any object with ``shape`` and
  ``dtype`` attributes stands for an array of that type (only those are read)."""
  if not isinstance(x, (Array, core.Tracer, np.ndarray, np.generic, ShapeDtypeStruct)) and \
      hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, type):
    try:
      shape = tuple(int(d) for d in x.shape)
      dt = np.dtype(x.dtype)
    except TypeError:
      return _abstractify(x)
    return ShapedArray(shape, dtypes.canonicalize_dtype(dt), bool(getattr(x, "weak_type", False)))
  return _abstractify(x)


def eval_shape(fun: Callable, *args, **kwargs):
  args, kwargs = tree_map(_key_struct_in, (args, kwargs))
  leaves, in_tree = tree_flatten((args, kwargs))
  flat, out_tree = flatten_fun(fun, in_tree)
  closed = pe.trace_to_jaxpr(flat, [_duck_abstractify(x) for x in leaves], _fun_name(fun))
  return tree_unflatten(out_tree[0], [ShapeDtypeStruct(a.shape, a.dtype, a.weak_type)
                                      for a in closed.out_avals])


# (jit lives in _jit.py: JitWrapped, its caches and fast paths)
from ourjax._jit import (  # noqa: E402,F401  (api.jit, api.JitWrapped... stay its names)
    _JIT_CACHES, _PRIVATE_FAST, JitWrapped, _CacheEntry, _clear_fast_paths, _fun_location,
    _hoist_tracer_consts, jit)


# ------------------------------------------------------------------------------------------------
# Forward and reverse mode


def _wraps(fun):
  """functools.wraps without copying ``fun.__dict__`` (a custom_jvp's or jit's attributes must
  not land on the wrapper), as JAX's own ``wraps`` does."""
  return functools.wraps(fun, updated=())


def _dtype_str(dt) -> str:
  dt = np.dtype(dt)
  return "float0" if dt == dtypes.float0 else dt.name


def _dtype_name(a):
  return _dtype_str(a.dtype)


def jvp(fun: Callable, primals, tangents, has_aux: bool = False):
  """(fun(*primals), the directional derivative along tangents)."""
  if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
    raise TypeError("primal and tangent arguments to jax.jvp must be tuples or lists; found "
                    f"{type(primals).__name__} and {type(tangents).__name__}.")
  p_leaves, p_tree = tree_flatten(tuple(primals))
  t_leaves, t_tree = tree_flatten(tuple(tangents))
  if p_tree != t_tree or type(primals) is not type(tangents):   # (a tuple and a list differ)
    p_tree, t_tree = tree_structure(primals), tree_structure(tangents)
    raise TypeError(f"primal and tangent arguments to jax.jvp must have the same tree "
                    f"structure; primals have tree structure {p_tree} whereas tangents have "
                    f"tree structure {t_tree}.")
  tans = []
  for p, t in zip(p_leaves, t_leaves):
    pa, ta = get_aval(p), get_aval(t)
    expected = ad.tangent_dtype(pa.dtype)
    if ta.dtype != expected:
      raise TypeError(f"primal and tangent arguments to jax.jvp do not match; dtypes must be "
                      f"equal, or in case of int/bool primal dtype the tangent dtype must be "
                      f"float0. Got primal dtype {_dtype_name(pa)} and so expected tangent "
                      f"dtype {_dtype_str(expected)}, but got tangent dtype {_dtype_name(ta)} "
                      "instead.")
    if pa.shape != ta.shape:
      raise ValueError(f"jvp called with different primal and tangent shapes;Got primal shape "
                       f"{pa.shape} and tangent shape as {ta.shape}")
    tans.append(ad.Zero(ad.tangent_aval(pa)) if expected == dtypes.float0 else t)
  flat, out_tree = _flatten_positional(fun, p_tree)
  primals_out, tangents_out = ad.jvp_flat(flat, p_leaves, tans)
  tangents_out = [_float0_zeros(p) if get_aval(t).dtype == dtypes.float0 or
                  ad.tangent_dtype(get_aval(p).dtype) == dtypes.float0 else t
                  for p, t in zip(primals_out, tangents_out)]
  tree = out_tree[0]
  if has_aux:
    (out, aux), (tout, _) = (tree_unflatten(tree, primals_out),
                             tree_unflatten(tree, tangents_out))
    return out, tout, aux
  return tree_unflatten(tree, primals_out), tree_unflatten(tree, tangents_out)


def _flatten_positional(fun, in_tree):
  """flat(*leaves) for fun(*args) where args = unflatten(in_tree) is a tuple."""
  cell = []

  def flat(*leaves):
    args = tree_unflatten(in_tree, leaves)
    out = fun(*args)
    out_leaves, t = tree_flatten(out)
    cell.clear()
    cell.append(t)
    return out_leaves

  flat.__name__ = _fun_name(fun)
  return flat, cell


def _float0_zeros(x):
  return np.zeros(get_aval(x).shape, dtypes.float0)


def _lift_linearized(jaxpr, in_avals, trees, tangent_pvals, n_main, *consts_and_tangents):
  """The JVP of a linearized function at its point: ``consts_and_tangents`` are the linear
  jaxpr's constants, then the tangents (one tree of the primals' structure)."""
  p_tree, tree = trees
  consts, tangents = (consts_and_tangents[:len(jaxpr.constvars)],
                      consts_and_tangents[len(jaxpr.constvars):])
  t_leaves, t_tree = tree_flatten(tangents)
  if t_tree != p_tree:
    raise TypeError(f"linearized function called on tangents with tree structure {t_tree}, "
                    f"expected {p_tree}")
  for t, a in zip(t_leaves, in_avals):
    ta, expected = get_aval(t), ad.tangent_dtype(a.dtype)
    if ta.shape != a.shape or ta.dtype != expected:      # (as JAX: weak types too)
      raise ValueError(
          "linearized function called on tangent values inconsistent with the original primal "
          f"values:\nGot tangent aval {ta.str_short()} for primal aval {a.str_short()} but "
          f"expected {ShapedArray(a.shape, expected).str_short()}.")
  outs = iter(core.eval_jaxpr(jaxpr, consts, *t_leaves))
  res = [next(outs) if not p.is_known else p.const for p in tangent_pvals]
  return tree_unflatten(tree, res[:n_main])


def linearize(fun: Callable, *primals, has_aux: bool = False):
  """(fun(*primals), f_jvp[, aux]) where ``f_jvp(*tangents)`` evaluates the JVP at ``primals``
  from a linear jaxpr: the primal computation has run once, only the tangent map is kept."""
  p_leaves, p_tree = tree_flatten(primals)
  for x in p_leaves:
    _check_arg(x, "linearize")
  flat, out_tree = _flatten_positional(fun, p_tree)
  cell: list = []

  def flat_main_aux(*leaves):
    outs = flat(*leaves)
    if not has_aux:
      cell[:] = [out_tree[0], None, len(outs)]
      return outs
    out = tree_unflatten(out_tree[0], outs)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
      _aux_error(out)
    m_leaves, m_tree = tree_flatten(out[0])
    a_leaves, a_tree = tree_flatten(out[1])
    cell[:] = [m_tree, a_tree, len(m_leaves)]
    return m_leaves + a_leaves

  all_out, jaxpr, consts, tangent_pvals = ad.linearize_flat(flat_main_aux, p_leaves)
  tree, aux_tree, n_main = cell
  in_avals = [get_aval(p) for p in p_leaves]
  # As JAX's: a ``tree_util.Partial`` whose leaves are the linearization's constants (so the
  # linear function can be passed through jit/vmap as a pytree) and whose ``func.args[0]`` is
  # the linear jaxpr.
  f_jvp = tree_util.Partial(
      functools.partial(_lift_linearized, jaxpr, in_avals, (p_tree, tree), tangent_pvals, n_main),
      *consts)
  out = tree_unflatten(tree, all_out[:n_main])
  if has_aux:
    return out, f_jvp, tree_unflatten(aux_tree, all_out[n_main:])
  return out, f_jvp


def vjp(fun: Callable, *primals, has_aux: bool = False, reduce_axes=()):
  """(fun(*primals), vjp_fn) where ``vjp_fn(cotangent)`` returns one cotangent per primal."""
  p_leaves, p_tree = tree_flatten(primals)
  for x in p_leaves:
    _check_arg(x, "vjp")
  flat, out_tree = _flatten_positional(fun, p_tree)
  if has_aux:
    aux_cell = []

    def flat_aux(*leaves):
      outs = flat(*leaves)
      out = tree_unflatten(out_tree[0], outs)
      if not isinstance(out, (tuple, list)) or len(out) != 2:
        _aux_error(out)
      m_leaves, m_tree = tree_flatten(out[0])
      a_leaves, a_tree = tree_flatten(out[1])
      aux_cell[:] = [m_tree, a_tree, len(m_leaves)]
      # aux values leave as primal outputs (so they are not tracers of this transformation);
      # their cotangents are zero
      return m_leaves + a_leaves
    all_out, jaxpr, consts, t_pvals = ad.linearize_flat(flat_aux, p_leaves)
    tree, aux_tree, n_main = aux_cell
    primals_out, aux = all_out[:n_main], tree_unflatten(aux_tree, all_out[n_main:])
    aux_zeros = [ad.Zero(ad.tangent_aval(get_aval(a))) for a in all_out[n_main:]]
  else:
    primals_out, jaxpr, consts, t_pvals = ad.linearize_flat(flat, p_leaves)
    tree = out_tree[0]
    aux_zeros = []
  t_avals = [ad.tangent_aval(get_aval(p)) for p in p_leaves]

  # (the backward pass holds no values of the forward trace: the residuals come in as
  # ``consts``, so a VJP leaving a jit holds no tracer of it)
  t_known = [p.is_known for p in t_pvals]
  del t_pvals

  def f_vjp_flat(cts, consts):
    cts = list(cts) + aux_zeros
    unknown_cts = [c for c, k in zip(cts, t_known) if not k]
    return ad.backward_pass(jaxpr, consts, [ad.UndefinedPrimal(a) for a in t_avals],
                            unknown_cts)
  out_avals = [get_aval(o) for o in primals_out]
  in_avals = [get_aval(p) for p in p_leaves]
  fname = _fun_name(fun)

  def vjp_fn(ct, *extra, _consts):
    if extra:
      raise TypeError(
          f"The function returned by `jax.vjp` applied to {fname} was called with "
          f"{1 + len(extra)} arguments, but functions returned by `jax.vjp` must be called with "
          "a single argument corresponding to the single value returned by the function being "
          "differentiated (even if that returned value is a tuple or other container): for "
          "f(x) = (x, x), call f_vjp((2.0, 2.0)), not f_vjp(2.0, 2.0).")
    ct_leaves, ct_tree = tree_flatten(ct)
    if ct_tree != tree:      # (JAX's ValueError and message)
      raise ValueError(
          "unexpected tree structure.\n\nThe argument to a VJP function returned by `jax.vjp` "
          f"must match the pytree\nstructure of the differentiated function {fname}.\n\n"
          f"But the tree structures differ:\n  * the cotangent has tree structure {ct_tree} "
          f"but the output had {tree}.")
    cts = []
    for c, a in zip(ct_leaves, out_avals):
      _check_arg(c, "vjp")
      ca = get_aval(c)
      if ca.shape != a.shape:
        raise ValueError(
            f"unexpected JAX type (e.g. shape/dtype) for argument to VJP function: got "
            f"{ca.str_short(short_dtypes=False)}, but expected "
            f"{ad.tangent_aval(a).str_short(short_dtypes=False)} because the corresponding "
            f"output of the differentiated function had JAX type "
            f"{a.str_short(short_dtypes=False)} (the cotangent's shape must be the output's)")
      expected = ad.tangent_dtype(a.dtype)
      if expected == dtypes.float0:
        cts.append(ad.Zero(ad.tangent_aval(a)))
        continue
      if ca.dtype != expected:
        if not ca.weak_type:
          raise ValueError(
              f"unexpected JAX type (e.g. shape/dtype) for argument to vjp function: got "
              f"{ca.str_short()}, but expected {ad.tangent_aval(a).str_short()} because the "
              f"corresponding output of the function {fname} had JAX type {a.str_short()}")
        from ourjax import lax
        c = lax.convert_element_type(c, expected)
      cts.append(c)
    cts_in = f_vjp_flat(cts, _consts)
    outs = [_ct_to_primal_type(c, a) for c, a in zip(cts_in, in_avals)]
    return tree_unflatten(p_tree, outs)

  from ourjax import ad as _ad_api
  vjp_obj = _ad_api.make_vjp(vjp_fn, primals, p_leaves, p_tree, consts, tree, jaxpr, fname)
  out = tree_unflatten(tree, primals_out)
  return (out, vjp_obj, aux) if has_aux else (out, vjp_obj)


def fwd_and_bwd(fun: Callable, argnums: int | Sequence[int], has_aux: bool = False,
                jitted: bool = True):
  """``(fwd, bwd)``: ``fwd(*args)`` is ``vjp`` of ``fun`` with respect to the positional
  arguments ``argnums`` (``(out, residuals)``, or ``(out, residuals, aux)``), and
  ``bwd(residuals, cotangent)`` the cotangents of those arguments (one, for an int
  ``argnums``).  Both jitted by default, so a loop calling them compiles each once."""
  if not callable(fun):
    raise TypeError(f"fwd_and_bwd requires a callable, got {fun!r}")
  nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

  def fwd(*args, **kwargs):
    for i in nums:
      if not -len(args) <= i < len(args):
        raise TypeError(f"fwd_and_bwd: argnums {argnums} out of range for {len(args)} "
                        "positional arguments")
    pos = [i % len(args) for i in nums]

    def f_partial(*dyn):
      full = list(args)
      for i, v in zip(pos, dyn):
        full[i] = v
      return fun(*full, **kwargs)
    return vjp(f_partial, *[args[i] for i in pos], has_aux=has_aux)

  def bwd(f_vjp, outgrad):
    g = f_vjp(outgrad)
    return g[0] if isinstance(argnums, int) else g
  if jitted:
    fwd, bwd = jit(fwd), jit(bwd)
  return fwd, bwd


def _aux_error(out):
  raise TypeError("expected function with aux output to return a two-element tuple, but got "
                  f"type {type(out)} with value {out!r}")


def linear_transpose(fun: Callable, *primals, reduce_axes=()):
  """The transpose of the linear function ``fun``, at the shapes and dtypes of ``primals``
  (their values are not used).  ``linear_transpose(f, *xs)(ct)`` returns a tuple with one
  cotangent per primal."""
  p_leaves, p_tree = tree_flatten(primals)
  for x in p_leaves:
    if not isinstance(x, ShapeDtypeStruct):      # (only shapes and dtypes are used, as JAX)
      _check_arg(x, "linear_transpose")
  # traced with the primals' weak types (as JAX: 2. * x of a Python int x is a weak float,
  # which strict promotion allows), checked and transposed as the strong types
  flat, out_tree_cell = _flatten_positional(fun, p_tree)
  closed = pe.trace_to_jaxpr(flat, [_abstractify(x) for x in p_leaves], _fun_name(fun))
  in_avals = [_abstractify(x).strip_weak_type() for x in p_leaves]
  out_tree = out_tree_cell[0]
  out_avals = closed.out_avals
  in_dtypes = [a.dtype for a in in_avals]
  out_dtypes = [a.dtype for a in out_avals]
  if not (all(dtypes.is_inexact(d) for d in in_dtypes + out_dtypes)
          or all(dtypes.is_integer(d) for d in in_dtypes + out_dtypes)):
    raise TypeError("linear_transpose only supports [float or complex] -> [float or complex], "
                    f"and integer -> integer functions, but got "
                    f"{[d.name for d in in_dtypes]} -> {[d.name for d in out_dtypes]}.")

  def transposed_fun(out_cotangent):
    ct_leaves, ct_tree = tree_flatten(out_cotangent)
    if ct_tree != out_tree:
      raise TypeError("cotangent tree does not match function output, expected "
                      f"{out_tree} but got {ct_tree}")
    for c in ct_leaves:
      _check_arg(c, "linear_transpose")
    ct_avals = [get_aval(c) for c in ct_leaves]
    if not all(c.shape == a.shape and c.dtype == a.dtype      # (weak types too, as JAX)
               for c, a in zip(ct_avals, out_avals)):
      raise TypeError("cotangent type does not match function output, expected "
                      f"{[a.str_short() for a in out_avals]} but got "
                      f"{[c.str_short() for c in ct_avals]}")
    from ourjax import lax
    cts = [lax.convert_element_type(c, a.dtype) if get_aval(c).dtype != a.dtype else c
           for c, a in zip(ct_leaves, out_avals)]
    cts_in = ad.backward_pass(closed.jaxpr, closed.consts,
                              [ad.UndefinedPrimal(a) for a in in_avals], cts)
    # (an integer -> integer linear map transposes to integers, not float0)
    outs = [_ct_to_primal_type(c, a) if dtypes.is_inexact(a.dtype) else
            (lax.full(a.shape, 0, a.dtype) if type(c) is ad.Zero else
             lax.convert_element_type(c, a.dtype)) for c, a in zip(cts_in, in_avals)]
    return tree_unflatten(p_tree, outs)

  transposed_fun.__name__ = f"transpose({_fun_name(fun)})"
  return transposed_fun


def _ct_to_primal_type(ct, aval: ShapedArray):
  """Cotangents come back with the primal's dtype and weak type (float0 zeros for ints)."""
  from ourjax import lax
  if ad.tangent_dtype(aval.dtype) == dtypes.float0:
    return np.zeros(aval.shape, dtypes.float0)
  if type(ct) is ad.Zero:
    return lax.full(aval.shape, 0, aval.dtype, weak_type=aval.weak_type)
  ca = get_aval(ct)
  if ca.dtype != aval.dtype or ca.weak_type != aval.weak_type:
    ct = lax._convert_element_type(ct, aval.dtype, aval.weak_type)
  return ct


def _check_input_dtype_grad(holomorphic, allow_int, aval, fname):
  dt = aval.dtype
  if holomorphic:
    if not dtypes.is_complex(dt):
      raise TypeError(f"{fname} with holomorphic=True requires inputs with complex dtype, but "
                      f"got {dt.name}.")
  if dtypes.issubdtype(dt, np.integer) or dt == np.bool_:
    if not allow_int:
      raise TypeError(f"{fname} requires real- or complex-valued inputs (input dtype that is a "
                      f"sub-dtype of np.inexact), but got {dt.name}. If you want to use "
                      "Boolean- or integer-valued inputs, use vjp or set allow_int to True.")
  elif not dtypes.is_inexact(dt):
    raise TypeError(f"{fname} requires numerical-valued inputs (input dtype that is a "
                    f"sub-dtype of np.bool_ or np.number), but got {dt.name}.")


def _check_output_dtype_grad(holomorphic, aval, fname):
  dt = aval.dtype
  if holomorphic:
    if not dtypes.is_complex(dt):
      raise TypeError(f"{fname} with holomorphic=True requires outputs with complex dtype, but "
                      f"got {dt.name}.")
  elif dtypes.is_complex(dt):
    raise TypeError(f"{fname} requires real-valued outputs (output dtype that is a sub-dtype of "
                    f"np.floating), but got {dt.name}. For holomorphic differentiation, pass "
                    "holomorphic=True. For differentiation of non-holomorphic functions "
                    "involving complex outputs, use jax.vjp directly.")
  elif not dtypes.is_float(dt):
    raise TypeError(f"{fname} requires real-valued outputs (output dtype that is a sub-dtype of "
                    f"np.floating), but got {dt.name}. For differentiation of functions with "
                    "integer outputs, use jax.vjp directly.")


def value_and_grad(fun: Callable, argnums=0, has_aux: bool = False, holomorphic: bool = False,
                   allow_int: bool = False, reduce_axes=()):
  """(fun(*args), gradient of fun with respect to the arguments in ``argnums``)."""
  int_argnums = isinstance(argnums, int)
  argnums_t = (argnums,) if int_argnums else tuple(argnums)
  @_wraps(fun)
  def vg(*args, **kwargs):
    return _value_and_grad(fun, argnums_t, int_argnums, has_aux, holomorphic, allow_int, args,
                           kwargs, "grad")
  return vg


def _value_and_grad(fun, argnums, int_argnums, has_aux, holomorphic, allow_int, args, kwargs,
                    fname):
  nargs = len(args)
  for i in argnums:
    if not -nargs <= i < nargs:
      shown = argnums[0] if int_argnums else argnums      # (as the user gave it, as JAX)
      raise TypeError(f"differentiating with respect to argnums={shown} requires at least "
                      f"{max(argnums) + 1} positional arguments to be passed by the caller, but "
                      f"got only {nargs} positional arguments.")
  argnums = tuple(i % nargs for i in argnums)
  dyn = [args[i] for i in argnums]

  def f_partial(*dargs):
    full = list(args)
    for i, d in zip(argnums, dargs):
      full[i] = d
    return fun(*full, **kwargs)

  for leaf in tree_util.tree_leaves(dyn):
    _check_arg(leaf, fname)
    _check_input_dtype_grad(holomorphic, allow_int, get_aval(leaf), fname)
  if has_aux:
    out, vjp_fn, aux = vjp(f_partial, *dyn, has_aux=True)
  else:
    out, vjp_fn = vjp(f_partial, *dyn)
  out_leaves = tree_util.tree_leaves(out)
  if len(out_leaves) != 1 or not isinstance(out, (core.Tracer, Array, np.ndarray, np.generic,
                                                  float, int, complex)):
    raise TypeError(f"Gradient only defined for scalar-output functions. Output was {out}.")
  out_aval = get_aval(out)
  if out_aval.shape != ():
    raise TypeError(f"Gradient only defined for scalar-output functions. Output had shape: "
                    f"{out_aval.shape}.")
  _check_output_dtype_grad(holomorphic, out_aval, fname)
  from ourjax import lax
  # the seed has the output's weak type, as JAX's (a weak output gives weak cotangents)
  g = vjp_fn(lax.full((), 1, out_aval.dtype, weak_type=out_aval.weak_type))
  g = g[0] if int_argnums else tuple(g)
  return ((out, aux), g) if has_aux else (out, g)


def grad(fun: Callable, argnums=0, has_aux: bool = False, holomorphic: bool = False,
         allow_int: bool = False, reduce_axes=()):
  """The gradient of a scalar-valued ``fun`` with respect to the arguments in ``argnums``."""
  int_argnums = isinstance(argnums, int)
  argnums_t = (argnums,) if int_argnums else tuple(argnums)

  @_wraps(fun)
  def g(*args, **kwargs):
    res = _value_and_grad(fun, argnums_t, int_argnums, has_aux, holomorphic, allow_int, args,
                          kwargs, "grad")
    if has_aux:
      (_, aux), gr = res
      return gr, aux
    return res[1]
  return g


# ------------------------------------------------------------------------------------------------
# vmap: in _vmap.py (the in_axes/out_axes checks with JAX's errors, and the batched call)

from ourjax._vmap import (  # noqa: E402,F401  (api.vmap and the axis-spec helpers spmd uses)
    vmap, _flatten_axes, _check_axis_spec_leaves)


# ------------------------------------------------------------------------------------------------
# Jacobians


def _basis(aval: ShapedArray):
  """The standard basis of ``aval``'s space: an array of shape ``(size,) + aval.shape``, weakly
  typed when ``aval`` is (so ``jacfwd`` of a Python scalar is weakly typed, as JAX's)."""
  n = aval.size
  return Array(np.eye(n, dtype=aval.dtype).reshape((n,) + aval.shape), weak_type=aval.weak_type)


def _argnums_partial(fun, args, kwargs, argnums_t):
  def f_partial(*dargs):
    full = list(args)
    for i, d in zip(argnums_t, dargs):
      full[i] = d
    return fun(*full, **kwargs)
  f_partial.__name__ = _fun_name(fun)
  return f_partial, tuple(args[i] for i in argnums_t)


def _check_argnums(argnums_t, nargs, fname):
  for i in argnums_t:
    if not -nargs <= i < nargs:
      raise TypeError(f"differentiating with respect to argnums={argnums_t} requires at least "
                      f"{max(argnums_t) + 1} positional arguments to be passed by the caller, "
                      f"but got only {nargs} positional arguments.")


def _check_input_dtype_jac(holomorphic, aval, fname):
  dt = aval.dtype
  if holomorphic:
    _check_input_dtype_grad(holomorphic, False, aval, fname)
  elif not dtypes.is_float(dt):
    raise TypeError(f"{fname} requires real-valued inputs (input dtype that is a sub-dtype of "
                    f"np.floating), but got {dt.name}. For holomorphic differentiation, pass "
                    "holomorphic=True. For differentiation of non-holomorphic functions "
                    "involving complex inputs or integer inputs, use jax.jvp directly.")


def _check_output_dtype_jacrev(holomorphic, aval):
  dt = aval.dtype
  if holomorphic:
    _check_output_dtype_grad(holomorphic, aval, "jacrev")
  elif not dtypes.is_float(dt):
    raise TypeError(f"jacrev requires real-valued outputs (output dtype that is a sub-dtype of "
                    f"np.floating), but got {dt.name}. For holomorphic differentiation, pass "
                    "holomorphic=True. For differentiation of non-holomorphic functions "
                    "involving complex outputs, or function with integer outputs, use "
                    "jax.vjp directly.")


def jacfwd(fun: Callable, argnums=0, has_aux: bool = False, holomorphic: bool = False):
  """The Jacobian of ``fun`` by forward mode: one JVP per input coordinate, vmapped.  The
  result has, for each output leaf, the output's shape followed by the input's shape."""
  int_argnums = isinstance(argnums, int)
  argnums_t = (argnums,) if int_argnums else tuple(argnums)

  @_wraps(fun)
  def jacfun(*args, **kwargs):
    _check_argnums(argnums_t, len(args), "jacfwd")
    f_partial, dyn = _argnums_partial(fun, args, kwargs, argnums_t)
    in_leaves, in_tree = tree_flatten(dyn)
    in_avals = [get_aval(x) for x in in_leaves]
    for a in in_avals:
      _check_input_dtype_jac(holomorphic, a, "jacfwd")
    flat, out_tree = _flatten_positional(f_partial, in_tree)
    if not in_leaves:
      raise TypeError("jacfwd needs at least one input to differentiate with respect to")
    y_avals, aux = None, None
    per_in = []      # per input leaf: the Jacobian blocks of every output leaf
    for i, (x, xa) in enumerate(zip(in_leaves, in_avals)):
      def push(b, i=i):
        tans = [b if j == i else ad.Zero(ad.tangent_aval(a)) for j, a in enumerate(in_avals)]
        p_out, t_out = ad.jvp_flat(flat, in_leaves, tans)
        tree = out_tree[0]
        if has_aux:
          (_, aux_), (t_main, _) = tree_unflatten(tree, p_out), tree_unflatten(tree, t_out)
          main_avals = [get_aval(v) for v in tree_flatten(tree_unflatten(tree, p_out)[0])[0]]
        else:
          t_main, aux_ = tree_unflatten(tree, t_out), None
          main_avals = [get_aval(v) for v in p_out]
        t_leaves, t_tree = tree_flatten(t_main)
        # integer outputs have float0 tangents, which are not batched: put them back after
        t_keep = [t for t, a in zip(t_leaves, main_avals) if dtypes.is_inexact(a.dtype)]
        push.info = (t_tree, main_avals)
        return t_keep, aux_
      if xa.size:
        cols, aux = vmap(push, out_axes=(-1, None))(_basis(xa))
      else:
        cols, aux = None, push(ad.Zero(ad.tangent_aval(xa)))[1]
      t_tree, y_avals = push.info
      blocks, it = [], iter(cols or [])
      for ya in y_avals:
        if not dtypes.is_inexact(ya.dtype):
          blocks.append(np.zeros(ya.shape + xa.shape, dtypes.float0))
        elif cols is None:
          from ourjax import lax
          blocks.append(lax.full(ya.shape + xa.shape, 0, ya.dtype))
        else:
          from ourjax import lax
          blocks.append(lax.reshape(next(it), ya.shape + xa.shape))
      per_in.append(blocks)
    per_out = []
    for k in range(len(y_avals)):
      inner = tree_unflatten(in_tree, [per_in[i][k] for i in range(len(in_leaves))])
      per_out.append(inner[0] if int_argnums else inner)
    res = tree_unflatten(t_tree, per_out)
    return (res, aux) if has_aux else res
  return jacfun


def jacrev(fun: Callable, argnums=0, has_aux: bool = False, holomorphic: bool = False,
           allow_int: bool = False):
  """The Jacobian of ``fun`` by reverse mode: one VJP per output coordinate, vmapped."""
  int_argnums = isinstance(argnums, int)
  argnums_t = (argnums,) if int_argnums else tuple(argnums)

  @_wraps(fun)
  def jacfun(*args, **kwargs):
    from ourjax import lax
    _check_argnums(argnums_t, len(args), "jacrev")
    f_partial, dyn = _argnums_partial(fun, args, kwargs, argnums_t)
    for leaf in tree_util.tree_leaves(dyn):
      _check_input_dtype_grad(holomorphic, allow_int, get_aval(leaf), "jacrev")
    if has_aux:
      y, pullback, aux = vjp(f_partial, *dyn, has_aux=True)
    else:
      y, pullback = vjp(f_partial, *dyn)
    y_leaves, y_tree = tree_flatten(y)
    y_avals = [get_aval(v) for v in y_leaves]
    for a in y_avals:
      _check_output_dtype_jacrev(holomorphic, a)
    in_leaves, in_tree = tree_flatten(dyn)
    in_avals = [get_aval(x) for x in in_leaves]
    per_out = []
    for k, ya in enumerate(y_avals):
      def pull(b, k=k):
        cts = [b if j == k else lax.full(a.shape, 0, a.dtype) for j, a in enumerate(y_avals)]
        return tree_util.tree_leaves(pullback(tree_unflatten(y_tree, cts)))
      rows = vmap(pull)(_basis(ya)) if ya.size else None
      blocks = []
      for i, xa in enumerate(in_avals):
        if not dtypes.is_inexact(xa.dtype):
          blocks.append(np.zeros(ya.shape + xa.shape, dtypes.float0))
        elif rows is None:
          blocks.append(lax.full(ya.shape + xa.shape, 0, xa.dtype))
        else:
          blocks.append(lax.reshape(rows[i], ya.shape + xa.shape))
      inner = tree_unflatten(in_tree, blocks)
      per_out.append(inner[0] if int_argnums else inner)
    res = tree_unflatten(y_tree, per_out)
    return (res, aux) if has_aux else res
  return jacfun


jacobian = jacrev


def hessian(fun: Callable, argnums=0, has_aux: bool = False, holomorphic: bool = False):
  return jacfwd(jacrev(fun, argnums, has_aux=has_aux, holomorphic=holomorphic), argnums,
                has_aux=has_aux, holomorphic=holomorphic)


# ------------------------------------------------------------------------------------------------
# Devices and synchronization: ``_device_api.py`` (re-exported here)

from ourjax._device_api import (  # noqa: E402,F401
    _is_device_spec, _prefix_mismatches, device_put, device_get, block_until_ready,
    copy_to_host_async, devices, default_backend, device_count, local_devices,
    local_device_count, process_index, process_count, live_arrays, print_environment_info)


def typeof(x):
  """The abstract value (shape, dtype, weak type) of ``x``, as ``jax.typeof``."""
  return core.get_aval(x)


def clear_caches() -> None:
  """Forget every compiled executable and traced jaxpr (jit's caches, the traced bodies of control flow, the backends' cache of
  compiled jaxprs); later calls trace and compile again."""
  from ourjax import _eager, backends
  _eager.clear_cache()
  for per_fun in list(_JIT_CACHES.values()):
    for cache in list(per_fun.values()):
      cache.clear()
  for j in list(_PRIVATE_FAST):
    j._fast.clear()
    j._cache.clear()
  backends._cache.clear()
  from ourjax.lax import _trace_cache
  _trace_cache.clear()
  import sys
  if "ourjax.backends.cuda.kernel_cache" in sys.modules:   # (the PTX of earlier executables)
    sys.modules["ourjax.backends.cuda.kernel_cache"].clear()


def effects_barrier() -> None:
  """Waits until the host callbacks of every computation dispatched so far have run.  ourjax
  runs callbacks synchronously, within the call that reaches them, so there is nothing to
  wait for."""


def disable_jit(disable: bool = True):
  return config._override("jax_disable_jit", disable)


def pmap(fun, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(),
         devices=None, backend=None, axis_size=None, donate_argnums=(), global_arg_shapes=None):
  """Map ``fun`` over devices (``interpreters/pmap.py``)."""
  from ourjax.interpreters import pmap as pmap_impl
  return pmap_impl.pmap(fun, axis_name, in_axes=in_axes, out_axes=out_axes,
                        static_broadcasted_argnums=static_broadcasted_argnums,
                        devices=devices, backend=backend, axis_size=axis_size,
                        donate_argnums=donate_argnums)
