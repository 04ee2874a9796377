"""vmap of every primitive that has a batching rule, against a Python loop.

``EXAMPLES`` maps each primitive's name to example programs that use it.  For each program,
hypothesis draws the per-example shapes, the batch size (1 included), which arguments are
batched and along which axis (negative axes included), where the outputs put the batch axis,
and whether jit wraps the vmap or sits inside it; ``vmap(f)(xs)`` must equal
``np.stack([f(x) for x in xs])``.  A primitive that gains a batching rule without an entry here
fails ``test_every_batched_primitive_has_examples``; one that has no batching rule at all is
listed by ``test_primitives_without_batching_rules``.
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
from ourjax import core, lax
from ourjax.interpreters import ad, batching
from ourjax.interpreters.pjit import pjit_p

# ------------------------------------------------------------------------------------------------
# Example programs


class Arg(NamedTuple):
  shape: tuple
  dtype: str = "float32"
  domain: str = "normal"   # see _values


class Example(NamedTuple):
  fun: Callable
  args: st.SearchStrategy    # draws a list of Arg (the per-example operands)
  label: str = ""


EXAMPLES: dict[str, list[Example]] = {}


def example(name: str, fun: Callable, args, label: str = ""):
  if isinstance(args, (list, tuple)):
    args = st.just(list(args))
  EXAMPLES.setdefault(name, []).append(Example(fun, args, label or name))


_SHAPES = [(), (3,), (2, 3)]


def _elementwise_args(n: int, dtype: str, domain, shapes=_SHAPES):
  """n operands of one per-example shape, each possibly rank 0 (lax broadcasts those)."""
  domains = domain if isinstance(domain, (list, tuple)) else [domain] * n

  @st.composite
  def draw(draw):
    shape = draw(st.sampled_from(shapes))
    scalar = [False] * n if n == 1 else draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return [Arg(() if s else shape, dtype, d) for s, d in zip(scalar, domains)]
  return draw()


def _prim_fun(p, **params):
  fn = lambda *xs: p.bind(*xs, **params)
  fn.__name__ = p.name
  return fn


def _unary(name, dtypes, domain="normal"):
  p = _primitive(name)
  for dt in dtypes:
    example(name, _prim_fun(p), _elementwise_args(1, dt, domain), f"{name}:{dt}")


def _binary(name, dtypes, domain="normal"):
  p = _primitive(name)
  for dt in dtypes:
    example(name, _prim_fun(p), _elementwise_args(2, dt, domain), f"{name}:{dt}")


@functools.lru_cache(None)
def _all_primitives() -> dict:
  import importlib
  for mod in ("ourjax.numpy", "ourjax.nn", "ourjax.random", "ourjax.custom_derivatives",
              "ourjax.ad_checkpoint", "ourjax.lax.control_flow"):
    try:                      # modules register their primitives when imported
      importlib.import_module(mod)
    except ImportError:
      pass
  prims = set(core.abstract_eval_rules) | set(core.impl_rules) | set(batching.batch_rules)
  return {p.name: p for p in prims}


def _primitive(name):
  return _all_primitives()[name]


F, I, B, C = "float32", "int32", "bool", "complex64"

# --- elementwise unary
for _n in ("exp", "exp2", "expm1", "tanh", "logistic", "sin", "cos", "tan", "atan", "sinh",
           "cosh", "asinh", "cbrt", "erf", "erfc", "floor", "ceil", "is_finite"):
  _unary(_n, [F])
for _n in ("log", "sqrt", "rsqrt", "lgamma", "digamma", "log1p"):
  _unary(_n, [F], "pos")
for _n in ("asin", "acos", "atanh", "erf_inv"):
  _unary(_n, [F], "unit")
_unary("acosh", [F], "ge1")
for _n in ("neg", "sign", "abs", "square"):
  _unary(_n, [F, I])
_unary("not", [B, I])
for _n in ("population_count", "clz"):
  _unary(_n, [I])
for _n in ("real", "imag", "conj"):
  _unary(_n, [C])
_unary("stop_gradient", [F])
_unary("copy", [F, I])
example("round", lambda x: lax.round(x), _elementwise_args(1, F, "normal"), "round:away")
example("round", lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
        _elementwise_args(1, F, "halves"), "round:even")

# --- elementwise binary
for _n in ("add", "sub", "mul", "max", "min"):
  _binary(_n, [F, I])
_binary("div", [F])
_binary("div", [I], ["small_int", "small_int"])
_binary("rem", [F], ["normal", "pos"])
_binary("rem", [I], ["small_int", "small_int"])
_binary("pow", [F], ["pos", "normal"])
_binary("atan2", [F])
_binary("nextafter", [F])
for _n in ("and", "or", "xor"):
  _binary(_n, [B, I])
for _n in ("shift_left", "shift_right_arithmetic", "shift_right_logical"):
  _binary(_n, [I], ["small_int", "shift"])
for _n in ("eq", "ne", "lt", "le", "gt", "ge"):
  _binary(_n, [F, I], "small_int")

# --- elementwise with parameters
for _y in (0, 1, 2, 3, -2):
  example("integer_pow", lambda x, y=_y: lax.integer_pow(x, y),
          _elementwise_args(1, F, "pos"), f"integer_pow:{_y}")
example("integer_pow", lambda x: lax.integer_pow(x, 3), _elementwise_args(1, I, "small_int"))
for _src, _dst in ((F, I), (I, F), (F, B), (B, F), (F, "float16")):
  example("convert_element_type", lambda x, d=_dst: lax.convert_element_type(x, d),
          _elementwise_args(1, _src, "normal" if _src != I else "small_int"),
          f"convert:{_src}->{_dst}")
example("bitcast_convert_type", lambda x: lax.bitcast_convert_type(x, np.int32),
        _elementwise_args(1, F, "normal"), "bitcast:f32->i32")
example("bitcast_convert_type", lambda x: lax.bitcast_convert_type(x, np.int8),
        _elementwise_args(1, I, "small_int"), "bitcast:i32->i8 (adds a dim)")
example("bitcast_convert_type", lambda x: lax.bitcast_convert_type(x, np.int32),
        st.sampled_from([[Arg((4,), "int8", "small_int")], [Arg((2, 4), "int8", "small_int")]]),
        "bitcast:i8->i32 (removes the last dim)")


@st.composite
def _select_args(draw, ncases):
  shape = draw(st.sampled_from(_SHAPES))
  which_scalar = draw(st.booleans())
  which = Arg(() if which_scalar else shape, B if ncases == 2 else I,
              "bool" if ncases == 2 else f"which{ncases}")
  return [which] + [Arg(shape, F) for _ in range(ncases)]


example("select_n", lambda w, a, b: lax.select_n(w, a, b), _select_args(2), "select_n:bool")
example("select_n", lambda w, a, b, c: lax.select_n(w, a, b, c), _select_args(3),
        "select_n:int32")


@st.composite
def _clamp_args(draw):
  shape = draw(st.sampled_from(_SHAPES))
  lo_s, hi_s = draw(st.booleans()), draw(st.booleans())
  return [Arg(() if lo_s else shape, F, "neg"), Arg(shape, F), Arg(() if hi_s else shape, F,
                                                                    "pos")]


example("clamp", lambda lo, x, hi: lax.clamp(lo, x, hi), _clamp_args())

# --- structural
example("broadcast_in_dim", lambda x: lax.broadcast_in_dim(x, (2, 3), (1,)), [Arg((3,))])
example("broadcast_in_dim", lambda x: lax.broadcast_in_dim(x, (2, 3), ()), [Arg(())])
example("broadcast_in_dim", lambda x: lax.broadcast_in_dim(x, (3, 4), (0, 1)), [Arg((3, 1))])
example("broadcast_in_dim", lambda x: lax.broadcast_in_dim(x, (2, 4, 3), (0, 2)),
        [Arg((1, 3), I, "small_int")])
example("reshape", lambda x: lax.reshape(x, (3, 2)), [Arg((2, 3))])
example("reshape", lambda x: lax.reshape(x, (2, 3)), [Arg((6,), I, "small_int")])
example("reshape", lambda x: lax.reshape(x, (6,)), [Arg((2, 3))])
example("reshape", lambda x: lax.reshape(x, (1, 1)), [Arg(())])
example("reshape", lambda x: lax.reshape(x, ()), [Arg((1, 1))])
example("reshape", lambda x: lax.reshape(x, (3, 2), dimensions=(1, 0)), [Arg((2, 3))],
        "reshape:dimensions")
example("transpose", lambda x: lax.transpose(x, (1, 0)), [Arg((2, 3))])
example("transpose", lambda x: lax.transpose(x, (2, 0, 1)), [Arg((2, 3, 4), B, "bool")])
example("squeeze", lambda x: lax.squeeze(x, (0,)), [Arg((1, 3))])
example("squeeze", lambda x: lax.squeeze(x, (1, -1)), [Arg((2, 1, 1))])
example("squeeze", lambda x: lax.squeeze(x, (0,)), [Arg((1,))])

# --- reductions
for _n, _dts in (("reduce_sum", [F, I]), ("reduce_prod", [F]), ("reduce_max", [F, I]),
                 ("reduce_min", [F, I]), ("reduce_and", [B]), ("reduce_or", [B]),
                 ("reduce_xor", [B, I])):
  for _dt in _dts:
    for _shape, _axes in (((2, 3), (0,)), ((2, 3), (1,)), ((2, 3), (0, 1)), ((2, 3), ()),
                          ((2, 3, 2), (0, 2)), ((3,), (0,))):
      example(_n, lambda x, p=_primitive(_n), a=_axes: _reduce(p, x, a),
              [Arg(_shape, _dt, "small_int" if _dt == I else "normal")],
              f"{_n}:{_dt}:{_shape}:{_axes}")


def _reduce(p, x, axes):
  params = {"out_sharding": None} if p.name in ("reduce_sum", "reduce_prod", "reduce_max",
                                                 "reduce_min") else {}
  return p.bind(x, axes=tuple(axes), **params)


# --- transformations' own primitives
example("add_any", lambda x, y: ad.add_any_p.bind(x, y),
        st.sampled_from([[Arg(s), Arg(s)] for s in _SHAPES]))
_jitted = ourjax.jit(lambda x, y: (lax.sin(x) * y, y, lax.reduce_sum(x, (0,))))
example(pjit_p.name, lambda x, y: _jitted(x, y), [Arg((3,)), Arg((3,))], "jit:3 outputs")
_jitted_unused = ourjax.jit(lambda x, y: lax.mul(y, y))
example(pjit_p.name, lambda x, y: _jitted_unused(x, y), [Arg((2,)), Arg((2,))],
        "pjit:output independent of x")

# --- families landing beside this one (each block runs only once its primitives exist)


def _have(*names):
  return all(n in _all_primitives() for n in names)


if _have("rev", "pad", "concatenate"):
  example("rev", lambda x: lax.rev(x, (0,)), [Arg((3,))])
  example("rev", lambda x: lax.rev(x, (0, 2)), [Arg((2, 3, 2), I, "small_int")])
  example("pad", lambda x, v: lax.pad(x, v, ((1, 2, 0),)), [Arg((3,)), Arg(())])
  example("pad", lambda x, v: lax.pad(x, v, ((0, 1, 1), (-1, 1, 0))), [Arg((2, 3)), Arg(())])
  example("concatenate", lambda x, y: lax.concatenate([x, y], 0),
          [Arg((2,)), Arg((3,))])
  example("concatenate", lambda x, y, z: lax.concatenate([x, y, z], 1),
          [Arg((2, 1)), Arg((2, 3)), Arg((2, 2))])

if _have("slice", "dynamic_slice", "dynamic_update_slice", "gather", "scatter-add"):
  from ourjax.lax import slicing as _sl
  example("slice", lambda x: lax.slice(x, (1,), (3,)), [Arg((4,))])
  example("slice", lambda x: lax.slice(x, (0, 1), (2, 4), (1, 2)), [Arg((3, 4))])
  example("dynamic_slice", lambda x, i: lax.dynamic_slice(x, (i,), (2,)),
          [Arg((5,)), Arg((), I, "index")])
  example("dynamic_slice", lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 2)),
          [Arg((3, 4)), Arg((), I, "index"), Arg((), I, "small_int")])
  example("dynamic_update_slice", lambda x, u, i: lax.dynamic_update_slice(x, u, (i,)),
          [Arg((5,)), Arg((2,)), Arg((), I, "index")])
  example("dynamic_update_slice",
          lambda x, u, i: lax.dynamic_update_slice(x, u, (np.int32(1), i)),
          [Arg((3, 4)), Arg((1, 2)), Arg((), I, "small_int")])
  _gdn = _sl.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
                                    start_index_map=(0,))
  example("gather", lambda x, i: lax.gather(x, i, _gdn, (1, 3)),
          [Arg((5, 3)), Arg((2, 1), I, "index")], "gather:rows")
  example("gather", lambda x, i: lax.gather(x, i, _gdn, (1, 3), mode="fill"),
          [Arg((5, 3)), Arg((2, 1), I, "small_int")], "gather:fill")
  _sdn = _sl.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                     scatter_dims_to_operand_dims=(0,))
  for _n, _fn in (("scatter", lax.scatter), ("scatter-add", lax.scatter_add),
                  ("scatter-sub", lax.scatter_sub), ("scatter-mul", lax.scatter_mul),
                  ("scatter-min", lax.scatter_min), ("scatter-max", lax.scatter_max)):
    example(_n, lambda x, i, u, f=_fn: f(x, i, u, _sdn, unique_indices=True),
            [Arg((5, 3)), Arg((2, 1), I, "distinct5"), Arg((2, 3))])
    # (a plain scatter's places are distinct: which of two colliding updates is kept is the
    # backend's choice, in JAX too)
    example(_n, lambda x, i, u, f=_fn: f(x, i, u, _sdn, mode="drop"),
            [Arg((4, 2)), Arg((3, 1), I, "distinct_or_out" if _n == "scatter" else "small_int"),
             Arg((3, 2))], f"{_n}:drop")

if _have("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"):
  for _n in ("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"):
    for _axis, _rev in ((0, False), (1, True)):
      example(_n, lambda x, f=getattr(lax, _n), a=_axis, r=_rev: f(x, a, r), [Arg((2, 3))],
              f"{_n}:axis{_axis}:reverse={_rev}")
    example(_n, lambda x, f=getattr(lax, _n): f(x, 0), [Arg((3,))], f"{_n}:1d")

if _have("sort", "top_k"):
  example("sort", lambda x: lax.sort(x), [Arg((4,))])
  example("sort", lambda x: lax.sort(x, 0), [Arg((3, 2), I, "small_int")])
  example("sort", lambda k, v: lax.sort_key_val(k, v, 1), [Arg((2, 3), I, "small_int"),
                                                           Arg((2, 3))], "sort:key_val")
  example("top_k", lambda x: lax.top_k(x, 2), [Arg((4,))])
  example("top_k", lambda x: lax.top_k(x, 1), [Arg((2, 3))])

if _have("argmax", "argmin"):
  for _n in ("argmax", "argmin"):
    example(_n, lambda x, f=getattr(lax, _n): f(x, 0, np.int32), [Arg((3,))])
    example(_n, lambda x, f=getattr(lax, _n): f(x, 1, np.int32), [Arg((2, 3), I, "small_int")])

if _have("reduce"):
  example("reduce", lambda x: lax.reduce(x, np.float32(0), lambda a, b: a * b + b, (0,)),
          [Arg((3,))], "reduce:custom computation")
  example("reduce", lambda x, y: lax.reduce((x, y), (np.float32(0), np.int32(0)),
                                            lambda a, b: (a[0] + b[0], lax.max(a[1], b[1])),
                                            (1,)),
          [Arg((2, 3)), Arg((2, 3), I, "small_int")], "reduce:two operands")

if _have("dot_general"):
  example("dot_general", lambda x, y: lax.dot(x, y), [Arg((3,)), Arg((3,))], "dot:vv")
  example("dot_general", lambda x, y: lax.dot(x, y), [Arg((2, 3)), Arg((3,))], "dot:mv")
  example("dot_general", lambda x, y: lax.dot(x, y), [Arg((2, 3)), Arg((3, 4))], "dot:mm")
  example("dot_general",
          lambda x, y: lax.dot_general(x, y, (((2,), (1,)), ((0,), (0,)))),
          [Arg((2, 3, 4)), Arg((2, 4, 1))], "dot_general:batch dims")
  example("dot_general", lambda x, y: lax.dot(x, y), [Arg((2, 3), I, "small_int"),
                                                      Arg((3,), I, "small_int")], "dot:int")

if _have("conv_general_dilated"):
  example("conv_general_dilated",
          lambda x, w: lax.conv_general_dilated(x, w, (1,), "VALID"),
          [Arg((1, 2, 5)), Arg((3, 2, 2))], "conv:1d NCH/OIH")
  example("conv_general_dilated",
          lambda x, w: lax.conv_general_dilated(x, w, (2, 1), ((1, 0), (0, 1)),
                                                rhs_dilation=(1, 2), feature_group_count=2,
                                                dimension_numbers=("NHWC", "HWIO", "NHWC")),
          [Arg((2, 4, 3, 2)), Arg((2, 2, 1, 4))], "conv:2d NHWC groups")

if _have("custom_jvp_call", "custom_vjp_call"):
  @ourjax.custom_jvp
  def _cj(x, y):
    return lax.sin(x) * y

  _cj.defjvp(lambda p, t: (_cj(*p), lax.cos(p[0]) * p[1] * t[0] + lax.sin(p[0]) * t[1]))

  @ourjax.custom_vjp
  def _cv(x, y):
    return lax.exp(x) * y

  _cv.defvjp(lambda x, y: (_cv(x, y), (x, y)),
             lambda r, ct: (lax.exp(r[0]) * r[1] * ct, lax.exp(r[0]) * ct))
  example("custom_jvp_call", lambda x, y: _cj(x, y), _elementwise_args(2, F, "normal"))
  example("custom_jvp_call", lambda x, y: ourjax.grad(lambda a: lax.reduce_sum(_cj(a, y), ()))(x),
          [Arg(()), Arg(())], "grad(custom_jvp)")
  example("custom_vjp_call", lambda x, y: _cv(x, y), _elementwise_args(2, F, "normal"))
  example("custom_vjp_call", lambda x, y: ourjax.grad(_cv, argnums=(0, 1))(x, y),
          [Arg(()), Arg(())], "grad(custom_vjp)")

if _have("checkpoint", "name"):
  from ourjax import ad_checkpoint as _ac
  _ck = ourjax.checkpoint(lambda x, y: lax.sin(lax.sin(x)) * y)
  example("checkpoint", lambda x, y: _ck(x, y), [Arg((3,)), Arg((3,))])
  example("checkpoint", lambda x, y: ourjax.grad(lambda a: lax.reduce_sum(_ck(a, y), (0,)))(x),
          [Arg((3,)), Arg((3,))], "grad(checkpoint)")
  example("name", lambda x: _ac.checkpoint_name(lax.mul(x, x), "sq"), [Arg((2,))])

if _have("cond", "while", "scan"):
  example("cond", lambda p, x, y: lax.cond(p, lambda a, b: a * b, lambda a, b: a - b, x, y),
          [Arg((), B, "bool"), Arg((3,)), Arg((3,))], "cond:bool")
  example("cond", lambda i, x: lax.switch(i, [lax.sin, lax.cos, lambda a: a * 2], x),
          [Arg((), I, "which3"), Arg((2,))], "switch")
  example("while", lambda x, n: lax.while_loop(lambda c: c[1] < n, lambda c: (c[0] * 1.5,
                                                                              c[1] + 1), (x, 0)),
          [Arg((3,)), Arg((), I, "index")], "while:per-example trip count")
  example("while", lambda x: lax.fori_loop(0, 3, lambda i, c: c + lax.sin(c), x), [Arg((2,))],
          "fori_loop")
  example("scan", lambda c, xs: lax.scan(lambda a, x: (a + x, a * x), c, xs),
          [Arg((2,)), Arg((4, 2))], "scan:carry and ys")
  example("scan", lambda xs: lax.scan(lambda a, x: (a, lax.sin(x)), 0.0, xs, reverse=True)[1],
          [Arg((3,))], "scan:reverse, carry unbatched")

if _have("reduce_precision"):
  example("reduce_precision", lambda x: lax.reduce_precision(x, 5, 10),
          _elementwise_args(1, F, "normal"), "reduce_precision:f16-like")
  example("reduce_precision", lambda x: lax.reduce_precision(x, 8, 7),
          _elementwise_args(1, F, "normal"), "reduce_precision:bf16-like")

if _have("reduce_window_sum", "reduce_window_max", "reduce_window_min", "reduce_window"):
  example("reduce_window_sum", lambda x: lax.reduce_window(x, 0.0, lax.add, (2, 2), (1, 2),
                                                           "SAME"), [Arg((3, 4))])
  example("reduce_window_sum", lambda x: lax.reduce_window(x, 0, lax.add, (2,), (1,),
                                                           ((1, 0),), (2,), (1,)),
          [Arg((3,), I, "small_int")], "reduce_window_sum:int, base dilation")
  example("reduce_window_max", lambda x: lax.reduce_window(x, -np.inf, lax.max, (2, 2), (2, 1),
                                                           "SAME", None, (1, 2)), [Arg((3, 4))])
  example("reduce_window_min", lambda x: lax.reduce_window(x, np.inf, lax.min, (3,), (1,),
                                                           ((1, 1),)), [Arg((4,))])
  example("reduce_window", lambda x: lax.reduce_window(x, np.float32(1), lax.mul, (2,), (1,),
                                                       "SAME"), [Arg((3,))],
          "reduce_window:product")
  example("reduce_window",
          lambda x, i: lax.reduce_window((x, i), (np.float32(0), np.int32(0)),
                                         lambda a, b: (a[0] + b[0], lax.max(a[1], b[1])),
                                         (2, 1), (1, 1), ((0, 1), (0, 0))),
          [Arg((3, 2)), Arg((3, 2), I, "small_int")], "reduce_window:two operands")

if _have("fft"):
  example("fft", lambda x: lax.fft(x, "fft", (3,)), [Arg((2, 3), C)])
  example("fft", lambda x: lax.fft(x, "rfft", (2, 4)), [Arg((2, 4))], "fft:rfft 2d")
  example("fft", lambda x: lax.fft(x, "irfft", (4,)), [Arg((3,), C)], "fft:irfft")

# special functions
for _p, _n, _d in [("igamma", 2, "pos"), ("igammac", 2, "pos"), ("igamma_grad_a", 2, "pos"),
                   ("regularized_incomplete_beta", 3, "unit"), ("betainc_grad_a", 3, "unit"),
                   ("betainc_grad_b", 3, "unit"), ("bessel_i0e", 1, "normal"),
                   ("bessel_i1e", 1, "normal")]:
  example(_p, (lambda *xs, p=_primitive(_p): p.bind(*[lax.abs(x) for x in xs])) if _d == "unit"
          else _prim_fun(_primitive(_p)), _elementwise_args(_n, F, _d))

# linear algebra: each example's matrix made well conditioned inside the function (compiled
# modes run other algorithms than LAPACK's; the tolerance is float32's); vectors sign-fixed
_LA = lax.linalg


def _la_pd(x):
  import ourjax.numpy as jnp
  return x @ jnp.swapaxes(x, -1, -2) / 4 + 2 * jnp.eye(x.shape[-1], dtype=x.dtype)


def _la_dom(x):
  import ourjax.numpy as jnp
  return x / 4 + 3 * jnp.eye(*x.shape[-2:], dtype=x.dtype) + 0.25


def _la_sfix(v, axis=-2):
  import ourjax.numpy as jnp
  i = jnp.argmax(jnp.abs(v), axis=axis, keepdims=True)
  return v * jnp.sign(jnp.take_along_axis(v, i, axis=axis))


example("cholesky", lambda x: _LA.cholesky(_la_pd(x)), [Arg((3, 3))])
example("triangular_solve", lambda a, b: _LA.triangular_solve(_la_dom(a), b, left_side=True,
                                                              lower=True), [Arg((3, 3)),
                                                                            Arg((3, 2))])
example("triangular_solve", lambda a, b: _LA.triangular_solve(_la_dom(a), b, transpose_a=True),
        [Arg((3, 3)), Arg((2, 3))], "triangular_solve:right")
example("lu", lambda x: _LA.lu(x), [Arg((3, 3))])
example("lu", lambda x: _LA.lu(x), [Arg((2, 4))], "lu:wide")
example("qr", lambda x: _LA.qr(_la_dom(x), full_matrices=False), [Arg((4, 3))])
example("eigh", lambda x: (lambda v, w: (_la_sfix(v), w))(
    *_LA.eigh(_la_pd(x) + np.diag(np.array([0, 2, 4], np.float32)))), [Arg((3, 3))])
example("svd", lambda x: (lambda u, s, vh: (_la_sfix(u), s, _la_sfix(vh, -1)))(
    *_LA.svd(x / 4 + np.array([[3, 0], [0, 1], [0, 0]], np.float32), full_matrices=False)),
    [Arg((3, 2))])
example("eig", lambda x: lax.sort(lax.real(_LA.eig(
    _la_pd(x) + np.diag(np.array([0, 2, 4], np.float32)), compute_left_eigenvectors=False,
    compute_right_eigenvectors=False)[0])), [Arg((3, 3))])
example("schur", lambda x: _LA.schur(x), [Arg((3, 3))])
example("geqrf", lambda x: _LA.geqrf(x), [Arg((4, 3))])
example("qr_pivots", lambda x: _LA.qr_pivots_p.bind(x), [Arg((3, 4))])
example("hessenberg", lambda x: _LA.hessenberg(x), [Arg((4, 4))])
example("tridiagonal", lambda x: _LA.tridiagonal(x, lower=False), [Arg((4, 4))])

# primitives with no operands never see a batched value
NO_OPERANDS = {"iota", "axis_index"}

# primitives whose batching is tested in tests/test_vmap.py instead (they cannot run eagerly)
TESTED_ELSEWHERE = {"custom_lin": "test_vmap.py::test_vmap_of_linearized_custom_vjp",
                    "debug_callback": "test_callbacks.py (one call per element)",
                    "debug_print": "test_callbacks.py (debug_callback's rules)",
                    "pure_callback": "test_callbacks.py (each vmap_method)",
                    "io_callback": "test_callbacks.py (sequential; ordered refused)",
                    "custom_linear_solve": "test_custom_solvers.py (vmap of the solve, of its "
                                           "gradient)",
                    "custom_vmap_call": "test_custom_batching.py (the rule under vmap)"}
# the named-axis collectives need a vmap or pmap that binds their axis: tests/test_spmd.py
TESTED_ELSEWHERE.update({n: "test_spmd.py" for n in (
    "psum", "pmax", "pmin", "all_gather", "reduce_scatter", "all_to_all", "ppermute")})

# Primitives that have no batching rule yet; a new one fails test_primitives_without_batching_rules
# until it gets a rule (or is listed here, which makes the gap visible in review).
KNOWN_GAPS: set = set()


# ------------------------------------------------------------------------------------------------
# Values


def _values(rng, arg: Arg, lead=()):
  shape = tuple(lead) + tuple(arg.shape)
  dt = np.dtype(arg.dtype)
  d = arg.domain
  if d == "bool" or dt == np.bool_:
    return rng.random(shape) < 0.5
  if d == "index":      # in-bounds start indices for the examples' small operands
    return rng.integers(0, 3, shape).astype(dt)
  if d == "distinct5":  # distinct rows of a 5-row operand, per example
    return np.stack([rng.permutation(5)[:shape[-2]] for _ in range(int(np.prod(shape[:-2])))]
                    ).reshape(shape).astype(dt)
  if d == "distinct_or_out":   # distinct values of -4..4 per example (some out of bounds)
    return np.stack([rng.permutation(np.arange(-4, 5))[:shape[-2]]
                     for _ in range(int(np.prod(shape[:-2])))]).reshape(shape).astype(dt)
  if d in ("which2", "which3"):
    return rng.integers(0, int(d[-1]), shape).astype(dt)
  if d == "small_int":
    v = rng.integers(-4, 5, shape)
  elif d == "shift":
    v = rng.integers(0, dt.itemsize * 8 + 2, shape)
  elif d == "pos":
    v = rng.uniform(0.25, 3.0, shape)
  elif d == "neg":
    v = rng.uniform(-3.0, -0.25, shape)
  elif d == "unit":
    v = rng.uniform(-0.9, 0.9, shape)
  elif d == "ge1":
    v = rng.uniform(1.1, 4.0, shape)
  elif d == "halves":
    v = rng.integers(-6, 7, shape) / 2
  else:
    v = rng.normal(size=shape)
    if np.issubdtype(dt, np.complexfloating):
      v = v + 1j * rng.normal(size=shape)
  return np.asarray(v).astype(dt)


def _stack_at(xs, axis):
  return np.stack([np.asarray(x) for x in xs], axis=axis)


def _assert_same(got, want, what):
  got, want = np.asarray(got), np.asarray(want)
  assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
  assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
  if np.issubdtype(want.dtype, np.inexact):
    np.testing.assert_allclose(got.astype(np.complex128 if want.dtype.kind == "c" else
                                          np.float64),
                               want.astype(np.complex128 if want.dtype.kind == "c" else
                                           np.float64),
                               rtol=2e-6, atol=1e-6, equal_nan=True, err_msg=what)
  else:
    np.testing.assert_array_equal(got, want, err_msg=what)


# ------------------------------------------------------------------------------------------------
# The property


def _case_ids():
  return [(name, i) for name in sorted(EXAMPLES) for i in range(len(EXAMPLES[name]))]


def _per_example_outputs(fun, args, in_axes, size):
  outs = []
  for b in range(size):
    xs = [x if ax is None else np.take(x, b, axis=ax) for x, ax in zip(args, in_axes)]
    outs.append(fun(*xs))
  return outs


@pytest.mark.parametrize("name,index", _case_ids(),
                         ids=[f"{n}-{i}" for n, i in _case_ids()])
# a third of the profile's examples per program (8 in CI): there are hundreds of programs
@settings(max_examples=max(1, settings().max_examples // 3), deadline=None)
@given(data=st.data())
def test_vmap_matches_python_loop(name, index, data):
  ex = EXAMPLES[name][index]
  specs = data.draw(ex.args, label="args")
  n = len(specs)
  size = data.draw(st.integers(1, 3), label="batch size")
  batched = data.draw(st.lists(st.booleans(), min_size=n, max_size=n).filter(any),
                      label="batched")
  in_axes = [data.draw(st.integers(-(len(a.shape) + 1), len(a.shape)), label="in_axis")
             if b else None for a, b in zip(specs, batched)]
  rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
  args = []
  for a, ax in zip(specs, in_axes):
    if ax is None:
      args.append(_values(rng, a))
    else:
      args.append(np.moveaxis(_values(rng, a, (size,)), 0, ax))
  norm_axes = [None if ax is None else ax % (len(a.shape) + 1) for a, ax in zip(specs, in_axes)]
  expected = _per_example_outputs(ex.fun, args, norm_axes, size)
  leaves0, tree = ourjax.tree_util.tree_flatten(expected[0])
  out_axes_flat = [data.draw(st.integers(-(np.ndim(l) + 1), np.ndim(l)), label="out_axis")
                   for l in leaves0]
  out_axes = ourjax.tree_util.tree_unflatten(tree, out_axes_flat)
  mode = data.draw(st.sampled_from(["eager", "jit(vmap)", "vmap(jit)"]), label="mode")
  fun = ex.fun if mode != "vmap(jit)" else ourjax.jit(ex.fun)
  vf = ourjax.vmap(fun, in_axes=tuple(in_axes), out_axes=out_axes)
  if mode == "jit(vmap)":
    vf = ourjax.jit(vf)
  got = vf(*args)
  got_leaves, got_tree = ourjax.tree_util.tree_flatten(got)
  assert got_tree == tree
  for i, (g, oa) in enumerate(zip(got_leaves, out_axes_flat)):
    want = _stack_at([ourjax.tree_util.tree_leaves(e)[i] for e in expected],
                     oa % (np.ndim(leaves0[i]) + 1))
    _assert_same(g, want, f"{ex.label} output {i} ({mode}, in_axes={in_axes}, "
                          f"out_axes={out_axes}, size={size})")


def _count_eqns(jaxpr) -> int:
  n = 0
  for e in jaxpr.eqns:
    n += 1
    for v in e.params.values():
      for sub in (v if isinstance(v, (tuple, list)) else [v]):
        if isinstance(sub, core.ClosedJaxpr):
          n += _count_eqns(sub.jaxpr)
        elif isinstance(sub, core.Jaxpr):
          n += _count_eqns(sub)
  return n


@pytest.mark.parametrize("name,index", _case_ids(),
                         ids=[f"{n}-{i}" for n, i in _case_ids()])
@settings(max_examples=1, deadline=None)
@given(data=st.data())
def test_vmapped_jaxpr_has_no_loop_over_the_batch(name, index, data):
  """The batched program's size does not depend on the batch size."""
  ex = EXAMPLES[name][index]
  specs = data.draw(ex.args)
  counts = []
  for size in (2, 7):
    avals = [ourjax.ShapeDtypeStruct((size,) + a.shape, a.dtype) for a in specs]
    counts.append(_count_eqns(ourjax.make_jaxpr(ourjax.vmap(ex.fun))(*avals).jaxpr))
  assert counts[0] == counts[1], f"{ex.label}: {counts[0]} equations at batch size 2, " \
                                 f"{counts[1]} at 7"


def test_every_batched_primitive_has_examples():
  missing = sorted(p.name for p in batching.batch_rules
                   if p.name not in EXAMPLES and p.name not in TESTED_ELSEWHERE)
  assert not missing, (f"primitives with a batching rule but no example program in "
                       f"tests/test_vmap_primitives.py: {missing}")


def test_primitives_without_batching_rules():
  """Lists the primitives vmap cannot go through (the gaps), so that they are visible."""
  lacking = sorted(name for name, p in _all_primitives().items()
                   if p not in batching.batch_rules and name not in NO_OPERANDS)
  new = [n for n in lacking if n not in KNOWN_GAPS]
  assert not new, f"primitives without a batching rule: {new}"
  fixed = sorted(KNOWN_GAPS - set(lacking))
  assert not fixed, f"these have batching rules now; remove them from KNOWN_GAPS: {fixed}"
