"""vmap as a user sees it: in_axes/out_axes pytrees, keyword arguments, nesting, composition with
grad and jit, per-example gradients, the size of the batched program, and JAX's errors.

Every result is compared with a Python loop over the batch (tests/test_vmap_primitives.py does
the same for each primitive's batching rule)."""
from __future__ import annotations

import collections
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import core, lax
from ourjax.interpreters import batching
from ourjax.tree_util import tree_leaves, tree_map


def _close(got, want, rtol=1e-5, atol=1e-6):
  gl, wl = tree_leaves(got), tree_leaves(want)
  assert len(gl) == len(wl)
  for g, w in zip(gl, wl):
    assert np.shape(g) == np.shape(w), (np.shape(g), np.shape(w))
    np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                               rtol=rtol, atol=atol)


rng = np.random.default_rng(0)


def _r(*shape):
  return rng.normal(size=shape).astype(np.float32)


# ------------------------------------------------------------------------------------------------
# in_axes / out_axes


@settings(deadline=None)
@given(size=st.integers(1, 3), ax_x=st.integers(-3, 2), ax_y=st.sampled_from([None, 0, 1, -1]),
       ax_z=st.sampled_from([None, 0, -2]), out_axes=st.tuples(st.integers(-3, 2),
                                                               st.integers(-2, 1)),
       seed=st.integers(0, 2**31))
def test_pytree_in_axes_and_out_axes(size, ax_x, ax_y, ax_z, out_axes, seed):
  """A tuple argument with per-leaf axes, a dict with one axis for both leaves, a plain array;
  two outputs with their own out_axes (negative ones too)."""
  r = np.random.default_rng(seed)

  def f(pair, d, w):
    x, y = pair
    return (jnp.tanh(x) * jnp.reshape(y, (2, 1)) + d["a"] * w, jnp.sum(d["b"], axis=0) + jnp.sum(y))

  def make(shape, ax):
    if ax is None:
      return r.normal(size=shape).astype(np.float32)
    full = r.normal(size=(size,) + shape).astype(np.float32)
    return np.moveaxis(full, 0, ax % (len(shape) + 1))

  x, y = make((2, 3), ax_x), make((2,), ax_y)
  da, db = make((2, 3), ax_z), make((4, 3), ax_z)
  w = make((3,), 0)
  in_axes = ((ax_x, ax_y), {"a": ax_z, "b": ax_z}, 0)
  got = ourjax.vmap(f, in_axes=in_axes, out_axes=out_axes)((x, y), {"a": da, "b": db}, w)
  norm = lambda ax, nd: None if ax is None else ax % (nd + 1)
  outs = [f((np.take(x, b, norm(ax_x, 2)),
             y if ax_y is None else np.take(y, b, norm(ax_y, 1))),
            {"a": da if ax_z is None else np.take(da, b, norm(ax_z, 2)),
             "b": db if ax_z is None else np.take(db, b, norm(ax_z, 2))},
            np.take(w, b, 0)) for b in range(size)]
  for i, oa in enumerate(out_axes):
    rank = np.ndim(outs[0][i])
    want = np.stack([np.asarray(o[i]) for o in outs], axis=oa % (rank + 1))
    _close(got[i], want)


def test_in_axes_list_is_a_tuple_and_namedtuple_prefixes():
  Point = collections.namedtuple("Point", ["x", "y"])
  x, y = _r(3, 2), _r(2, 3)
  f = lambda p, c: p.x * p.y + c
  a = ourjax.vmap(f, in_axes=[Point(0, 1), None])(Point(x, y), 1.0)
  b = ourjax.vmap(f, in_axes=(Point(0, 1), None))(Point(x, y), 1.0)
  _close(a, b)
  _close(a, x * y.T + 1.0)


def test_keyword_arguments_are_mapped_over_axis_0():
  x, y = _r(4, 3), _r(4, 3)
  f = lambda a, b=None: a * b
  _close(ourjax.vmap(f)(x, b=y), x * y)
  # in_axes applies to the positional arguments only
  _close(ourjax.vmap(f, in_axes=(1,))(y.T, b=x), x * y)
  _close(ourjax.vmap(f, in_axes=None)(np.float32(2), b=x), 2 * x)


def test_unbatched_outputs_and_out_axes_none():
  x, w = _r(3, 4), _r(4)
  out, same = ourjax.vmap(lambda a, b: (a * b, b * 2), in_axes=(0, None),
                          out_axes=(0, None))(x, w)
  _close(out, x * w)
  _close(same, w * 2)
  # an unbatched output with an int out_axes is broadcast along the batch
  _close(ourjax.vmap(lambda a, b: b, in_axes=(0, None), out_axes=1)(x, w),
         np.broadcast_to(w[:, None], (4, 3)))
  # a Python constant output too
  c = ourjax.vmap(lambda a: 1.0)(x)
  assert c.shape == (3,) and np.all(np.asarray(c) == 1.0)


def test_axis_size_without_mapped_arguments():
  out = ourjax.vmap(lambda a: a + 1, in_axes=None, axis_size=3)(_r(2))
  assert out.shape == (3, 2)
  out = ourjax.vmap(lambda: jnp.zeros(2), axis_size=4)()
  assert out.shape == (4, 2)


def test_outputs_pytrees_and_none():
  x = _r(3, 2)
  out = ourjax.vmap(lambda a: {"s": jnp.sum(a), "l": [a, None]}, out_axes={"s": 0, "l": [1, 0]})(x)
  _close(out["s"], x.sum(1))
  _close(out["l"][0], x.T)
  assert out["l"][1] is None
  assert ourjax.vmap(lambda a: None)(x) is None


def test_batch_size_one_and_negative_axes():
  x = _r(1, 3)
  _close(ourjax.vmap(jnp.sin)(x), np.sin(x))
  y = _r(3, 2)
  _close(ourjax.vmap(lambda a: a * 2, in_axes=-1, out_axes=-1)(y), y * 2)


def test_unmapped_non_array_arguments_pass_through():
  out = ourjax.vmap(lambda f, x: f(x), in_axes=(None, 0))(lambda v: v + 1, np.arange(3.0))
  _close(out, np.arange(1.0, 4.0))


def test_constants_and_iota_inside_vmapped_functions():
  x = _r(3, 4)
  f = lambda a: a * lax.iota(np.float32, 4) + jnp.ones(4) + lax.broadcasted_iota(np.int32,
                                                                                  (4,), 0)
  _close(ourjax.vmap(f)(x), np.stack([f(r) for r in x]))
  jaxpr = ourjax.make_jaxpr(ourjax.vmap(f))(x)
  # the iota is built once, unbatched, and broadcast by the multiplication
  assert any(e.primitive.name == "iota" and e.out_binders[0].aval.shape == (4,)
             for e in jaxpr.eqns)


def test_docstring_and_wrapping():
  def superfun(a):
    """Does things with stuff."""
    return a
  v = ourjax.vmap(superfun)
  assert v.__doc__.startswith("Vectorized version of superfun.")
  assert v.__doc__.endswith("Original documentation:\n\nDoes things with stuff.")
  assert v.__name__ == "superfun"


def test_outputs_are_arrays_with_canonical_dtypes():
  out = ourjax.vmap(lambda a: a)(np.ones(3))            # float64 input, x64 off
  assert isinstance(out, ourjax.Array) and out.dtype == np.float32
  out = ourjax.vmap(lambda a, b: b, in_axes=(0, None), out_axes=None)(np.ones(3), np.ones(2))
  assert isinstance(out, ourjax.Array) and out.dtype == np.float32


def test_dtypes_and_weak_types_are_kept():
  x = np.arange(6, dtype=np.int32).reshape(3, 2)
  out = ourjax.vmap(lambda a: a * 2)(x)
  assert out.dtype == np.int32
  out = ourjax.vmap(lambda a: a + 1.5)(np.ones((2, 2), np.float16))
  assert out.dtype == np.float16


# ------------------------------------------------------------------------------------------------
# jnp, nn and random programs (the APIs built on the primitives) under vmap


def _jnp_programs():
  from ourjax import nn, random
  f32, i32 = np.float32, np.int32
  W = np.linspace(-1, 1, 12, dtype=f32).reshape(4, 3)
  return {
      "softmax": (lambda x: nn.softmax(x), [((4,), f32)]),
      "layernorm": (lambda x: (x - jnp.mean(x)) / jnp.sqrt(jnp.var(x) + 1e-5), [((4,), f32)]),
      "logsumexp": (lambda x: nn.logsumexp(x), [((2, 4), f32)]),
      "matmul": (lambda x: jnp.tanh(x @ W), [((2, 4), f32)]),
      "einsum": (lambda a, x: jnp.einsum("ij,j->i", a, x), [((3, 4), f32), ((4,), f32)]),
      "index": (lambda x, i: jnp.asarray(x)[i] + jnp.asarray(x)[1:3].sum(), [((4,), f32), ((), "index")]),
      "take": (lambda x, i: jnp.take(x, i, axis=0), [((4, 2), f32), ((3,), "index")]),
      "at_set": (lambda x, i, v: jnp.asarray(x).at[i].set(v), [((4,), f32), ((), "index"), ((), f32)]),
      "at_add": (lambda x, i: jnp.asarray(x).at[i].add(1.0), [((4,), f32), ((2,), "index")]),
      "where": (lambda x, y: jnp.where(x > 0, x, y), [((4,), f32), ((4,), f32)]),
      "sort_argsort": (lambda x: (jnp.sort(x), jnp.argsort(x), jnp.argmax(x)), [((5,), f32)]),
      "cumsum_flip_roll": (lambda x: jnp.roll(jnp.flip(jnp.cumsum(x)), 1), [((4,), f32)]),
      "stack_concat": (lambda x, y: jnp.concatenate([jnp.stack([x, y]), jnp.asarray(x)[None]], axis=0),
                       [((3,), f32), ((3,), f32)]),
      "one_hot": (lambda i: nn.one_hot(i, 4), [((2,), "index")]),
      "clip_pad_tril": (lambda x: jnp.tril(jnp.pad(jnp.clip(x, -0.5, 0.5), 1)),
                        [((2, 2), f32)]),
      "random_normal": (lambda k: random.normal(k, (3,)), [((2,), "key")]),
      "random_split_uniform": (lambda k: random.uniform(random.split(k)[1], (2,)),
                               [((2,), "key")]),
  }


_JNP_PROGRAMS = sorted(_jnp_programs())


def _make_value(r, shape, dt, lead=()):
  from ourjax import random
  full = tuple(lead) + tuple(shape)
  if dt == "index":
    return r.integers(0, 3, full).astype(np.int32)
  if dt == "key":
    keys = [np.asarray(random.PRNGKey(int(s))) for s in r.integers(0, 1000, int(np.prod(lead)))]
    return np.stack(keys).reshape(full) if lead else keys[0]
  return r.normal(size=full).astype(dt)


@pytest.mark.parametrize("name", _JNP_PROGRAMS)
@settings(deadline=None, max_examples=max(1, settings().max_examples // 3))
@given(data=st.data())
def test_jnp_programs_match_a_loop(name, data):
  fun, specs = _jnp_programs()[name]
  size = data.draw(st.integers(1, 3), label="size")
  mapped = data.draw(st.lists(st.booleans(), min_size=len(specs), max_size=len(specs))
                     .filter(any), label="mapped")
  r = np.random.default_rng(data.draw(st.integers(0, 2**31), label="seed"))
  args = [_make_value(r, sh, dt, (size,) if m else ()) for (sh, dt), m in zip(specs, mapped)]
  in_axes = tuple(0 if m else None for m in mapped)
  got = ourjax.vmap(fun, in_axes=in_axes)(*args)
  outs = [fun(*[a[b] if m else a for a, m in zip(args, mapped)]) for b in range(size)]
  want = tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *outs)
  _close(got, want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------------
# Nesting and composition


@settings(deadline=None)
@given(outer=st.sampled_from([0, 1, -1]), inner=st.sampled_from([0, 1, None]),
       seed=st.integers(0, 2**31))
def test_nested_vmap_equals_double_loop(outer, inner, seed):
  r = np.random.default_rng(seed)
  X = r.normal(size=(3, 4, 2)).astype(np.float32)     # X[i, j]: outer i, inner j
  w = r.normal(size=(4, 2)).astype(np.float32)        # mapped by the inner vmap only
  f = lambda a, b: jnp.sum(jnp.sin(a) * b)
  inner_f = ourjax.vmap(f, in_axes=(inner, 0))
  layout = X if inner in (0, None) else X.transpose(0, 2, 1)
  got = ourjax.vmap(inner_f, in_axes=(outer, None))(np.moveaxis(layout, 0, outer), w)
  want = np.array([[f(X[i, j] if inner is not None else X[i], w[j]) for j in range(4)]
                   for i in range(3)])
  _close(got, want, rtol=1e-5)


def test_nested_vmap_with_closure_over_outer_batch():
  x, y = _r(3, 2), _r(4, 2)
  got = ourjax.vmap(lambda a: ourjax.vmap(lambda b: jnp.dot(a, b))(y))(x)
  _close(got, x @ y.T)


def _mlp_params(sizes, seed=0):
  r = np.random.default_rng(seed)
  return [(r.normal(size=(m, n)).astype(np.float32) / np.sqrt(m),
           r.normal(size=(n,)).astype(np.float32) * 0.1) for m, n in zip(sizes[:-1], sizes[1:])]


def _mlp_loss(params, x, y):
  h = x
  for w, b in params[:-1]:
    h = jnp.tanh(jnp.dot(h, w) + b)
  w, b = params[-1]
  out = jnp.dot(h, w) + b
  return jnp.sum((out - y) ** 2)


@pytest.mark.parametrize("mode", ["eager", "jit(vmap(grad))", "vmap(jit(grad))",
                                  "vmap(grad(jit))"])
def test_per_example_gradients_of_an_mlp(mode):
  params = _mlp_params([3, 5, 2])
  xs, ys = _r(4, 3), _r(4, 2)
  g = ourjax.grad(_mlp_loss)
  if mode == "vmap(jit(grad))":
    g = ourjax.jit(g)
  if mode == "vmap(grad(jit))":
    g = ourjax.grad(ourjax.jit(_mlp_loss))
  per_ex = ourjax.vmap(g, in_axes=(None, 0, 0))
  if mode == "jit(vmap(grad))":
    per_ex = ourjax.jit(per_ex)
  got = per_ex(params, xs, ys)
  want = [ourjax.grad(_mlp_loss)(params, xs[i], ys[i]) for i in range(4)]
  want = tree_map(lambda *gs: np.stack([np.asarray(v) for v in gs]), *want)
  _close(got, want, rtol=1e-4, atol=1e-5)
  # the mean of the per-example gradients is the gradient of the mean loss
  mean_grad = ourjax.grad(lambda p: jnp.mean(ourjax.vmap(_mlp_loss, in_axes=(None, 0, 0))(
      p, xs, ys)))(params)
  _close(tree_map(lambda v: np.mean(np.asarray(v), 0), got), mean_grad, rtol=1e-4, atol=1e-5)


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


def test_per_example_gradient_program_does_not_grow_with_the_batch():
  params = _mlp_params([3, 5, 2])
  per_ex = ourjax.vmap(ourjax.grad(_mlp_loss), in_axes=(None, 0, 0))
  counts = {n: _count_eqns(ourjax.make_jaxpr(per_ex)(params, _r(n, 3), _r(n, 2)).jaxpr)
            for n in (1, 2, 16)}
  assert len(set(counts.values())) == 1, counts


def test_grad_of_a_function_that_uses_vmap():
  w, xs = _r(4), _r(5, 4)
  f = lambda w: jnp.sum(ourjax.vmap(lambda x: jnp.sin(jnp.dot(x, w)))(xs))
  want = sum(np.cos(xs[i] @ w) * xs[i] for i in range(5))
  _close(ourjax.grad(f)(w), want, rtol=1e-4)
  _close(ourjax.jit(ourjax.grad(f))(w), want, rtol=1e-4)


def test_vmap_of_jit_stays_one_compiled_call():
  f = ourjax.jit(lambda a, b: jnp.sin(a) * b)
  x, y = _r(3, 4), _r(4)
  jaxpr = ourjax.make_jaxpr(ourjax.vmap(f, in_axes=(0, None)))(x, y)
  calls = [e for e in jaxpr.eqns if e.primitive.name in ("jit", "pjit")]
  assert len(jaxpr.eqns) == 1 and len(calls) == 1
  inner = calls[0].params["jaxpr"]
  assert inner.in_avals[0].shape == (3, 4)
  _close(ourjax.vmap(f, in_axes=(0, None))(x, y), np.sin(x) * y)


def test_vmap_of_jit_keeps_unbatched_outputs_unbatched():
  f = ourjax.jit(lambda a, b: (a * b, b + 1))
  x, y = _r(3, 4), _r(4)
  out, same = ourjax.vmap(f, in_axes=(0, None), out_axes=(0, None))(x, y)
  _close(out, x * y)
  _close(same, y + 1)


def test_jvp_and_vmap_commute():
  x, t = _r(3, 4), _r(3, 4)
  p1, t1 = ourjax.jvp(ourjax.vmap(jnp.sin), (x,), (t,))
  p2, t2 = ourjax.vmap(lambda a, b: ourjax.jvp(jnp.sin, (a,), (b,)))(x, t)
  _close(p1, p2)
  _close(t1, t2)
  _close(t1, np.cos(x) * t)


def test_jacfwd_and_jacrev_use_vmap():
  f = lambda x: jnp.sin(x) * jnp.sum(x)
  x = _r(3)
  jf, jr = ourjax.jacfwd(f)(x), ourjax.jacrev(f)(x)
  want = np.diag(np.cos(x) * x.sum()) + np.sin(x)[:, None]
  _close(jf, want, rtol=1e-4)
  _close(jr, want, rtol=1e-4)


def test_vmap_of_linearized_custom_vjp():
  """custom_lin (the linear stand-in of a custom_vjp function) batched, then transposed."""
  @ourjax.custom_vjp
  def f(x):
    return jnp.sin(x) * 2.0

  f.defvjp(lambda x: (f(x), jnp.cos(x)), lambda c, ct: (2.0 * c * ct,))
  x0 = _r(3)
  _, f_jvp = ourjax.linearize(f, x0)
  ts, cts = _r(4, 3), _r(4, 3)
  ft = ourjax.linear_transpose(ourjax.vmap(f_jvp), ts)
  got, = ft(cts)
  _, pull = ourjax.vjp(f, x0)
  want = np.stack([np.asarray(pull(cts[i])[0]) for i in range(4)])
  _close(got, want)
  _close(got, 2 * np.cos(x0) * cts)


# ------------------------------------------------------------------------------------------------
# Errors (JAX's types and messages)


def test_error_inconsistent_sizes_names_each_argument():
  def f(x1, x2, a3):
    return x1 + x2 + a3
  with pytest.raises(ValueError, match=re.escape(
      "vmap got inconsistent sizes for array axes to be mapped:\n"
      "  * most axes (2 of them) had size 2, e.g. axis 0 of argument x1 of type float32[2];\n"
      "  * one axis had size 1: axis 0 of kwargs['a3'] of type float32[1]")):
    ourjax.vmap(f)(np.ones(2, np.float32), a3=np.ones(1, np.float32),
                   x2=np.ones(2, np.float32))
  with pytest.raises(ValueError, match=re.escape(
      "  * one axis had size 10: axis 0 of argument a of type float32[10,4];\n"
      "  * one axis had size 2: axis 1 of argument b of type float32[10,2]")):
    ourjax.vmap(lambda a, b: a, in_axes=(0, 1))(np.ones((10, 4), np.float32),
                                                np.ones((10, 2), np.float32))
  with pytest.raises(ValueError, match=re.escape("axis 1 of argument b[1] of type")):
    ourjax.vmap(lambda a, b: a, in_axes=(0, 1))(np.ones((10, 4)), [np.ones((2, 10)),
                                                                   np.ones((10, 2))])
  with pytest.raises(ValueError, match=re.escape("  * the `axis_size` argument was 5;")):
    ourjax.vmap(lambda a: a, axis_size=5)(np.ones(3))


def test_error_in_axes_not_a_prefix():
  with pytest.raises(ValueError, match=re.escape(
      "got specification ((0, 0),) for value tree PyTreeDef((*,)).")) as e:
    ourjax.vmap(lambda x: x, in_axes=((0, 0),))(np.ones(3))
  assert "vmap in_axes[0]" in str(e.value)
  with pytest.raises(ValueError, match=r"at vmap in_axes\[0\]\['b'\]") :
    ourjax.vmap(lambda d: d["a"], in_axes=({"a": 0, "b": (0, 0)},))(
        {"a": np.ones(2), "b": (np.ones(2), np.ones(2), np.ones(2))})
  with pytest.raises(ValueError, match=r"dict with keys \['a', 'c'\]"):
    ourjax.vmap(lambda d: d["a"], in_axes=({"a": 0, "c": 0},))({"a": np.ones(2), "b": 1.0})
  with pytest.raises(ValueError, match=r"len\(in_axes\)=2, len\(args\)=1"):
    ourjax.vmap(lambda x: x, in_axes=(0, 0))(np.ones(3))


def test_error_out_axes_not_a_prefix():
  with pytest.raises(ValueError, match=re.escape(
      "got specification (2, 3) for value tree PyTreeDef(*).")):
    ourjax.vmap(lambda x: x, out_axes=(2, 3))(np.ones(3))
  with pytest.raises(ValueError, match=r"at vmap out_axes\[1\]"):
    ourjax.vmap(lambda x: (x, [x]), out_axes=(0, (0, 0)))(np.ones(3))


def test_error_axes_out_of_range():
  with pytest.raises(ValueError, match=re.escape(
      "vmap was requested to map its argument along axis 1, which implies that its rank should "
      "be at least 2, but is only 1 (its shape is (2,))")):
    ourjax.vmap(lambda x: x, in_axes=1)(np.ones(2))
  with pytest.raises(ValueError, match="rank should be at least 1, but is only 0"):
    ourjax.vmap(lambda x: x)(1.0)
  with pytest.raises(ValueError, match="along axis -3"):
    ourjax.vmap(lambda x: x, in_axes=-3)(np.ones((2, 2)))
  with pytest.raises(ValueError, match=r"vmap out_axes is 2, which is out of bounds"):
    ourjax.vmap(lambda x: x, out_axes=2)(np.ones((3, 4)))
  with pytest.raises(ValueError, match=r"vmap out_axes\['a'\] is -3, which is out of bounds"):
    ourjax.vmap(lambda x: {"a": x}, out_axes={"a": -3})(np.ones((3, 4)))


def test_error_out_axes_none_for_a_batched_output():
  with pytest.raises(ValueError, match="vmap has mapped output but out_axes is None"):
    ourjax.vmap(lambda x: x, out_axes=None)(np.ones(2))
  with pytest.raises(ValueError, match=re.escape(
      "at vmap out_axes[1], got axis spec None but output was batched on axis 0")):
    ourjax.vmap(lambda x: (x, x), out_axes=(0, None))(np.ones(2))
  with pytest.raises(ValueError, match=re.escape(
      "vmap has mapped output (axis_name=foo) but out_axes is None")):
    ourjax.vmap(lambda x: x, out_axes=None, axis_name="foo")(np.ones(2))


def test_error_nothing_mapped():
  with pytest.raises(ValueError, match="vmap must have at least one non-None value in in_axes"):
    ourjax.vmap(lambda x: x, in_axes=None)(np.ones(2))
  with pytest.raises(ValueError, match="vmap wrapped function must be passed at least one "
                                       "argument containing an array"):
    ourjax.vmap(lambda: 1.0)()


def test_error_axis_spec_types():
  with pytest.raises(TypeError, match="vmap in_axes must be an int, None, or a tuple"):
    ourjax.vmap(lambda x: x, in_axes=False)
  with pytest.raises(TypeError, match="vmap in_axes must be an int, None, or a tuple"):
    ourjax.vmap(lambda x: x, in_axes={"a": 0})
  with pytest.raises(TypeError, match=r"vmap in_axes must be an int, None, or \(nested\)"):
    ourjax.vmap(lambda x: x, in_axes=(np.array(0),))
  with pytest.raises(TypeError, match=r"vmap out_axes must be an int, None, or \(nested\)"):
    ourjax.vmap(lambda x: x, out_axes=(1.5,))
  with pytest.raises(TypeError, match="Expected a callable value"):
    ourjax.vmap(3)


def test_error_outputs_and_arguments_that_are_not_arrays():
  with pytest.raises(TypeError, match="Output from batched function 'abc' with type <class "
                                      "'str'> is not a valid JAX type"):
    ourjax.vmap(lambda x: "abc")(np.ones(2))
  with pytest.raises(TypeError, match="only arrays can be mapped"):
    ourjax.vmap(lambda f, x: x)(len, np.ones(2))


def test_error_python_control_flow_on_a_batched_value():
  with pytest.raises(ourjax.errors.TracerBoolConversionError):
    ourjax.vmap(lambda x: x if x > 0 else -x)(np.ones(2))


def test_missing_batching_rule_is_named():
  p = core.Primitive("no_batching_rule_here")
  p.def_abstract_eval(lambda x: x)
  p.def_impl(lambda x: x)
  try:
    with pytest.raises(NotImplementedError,
                       match="Batching rule for 'no_batching_rule_here' not implemented"):
      ourjax.vmap(p.bind)(np.ones(2))
    # unbatched operands never need the rule
    out = ourjax.vmap(lambda x, y: p.bind(y) + x, in_axes=(0, None))(np.ones(2), np.ones(()))
    assert out.shape == (2,)
  finally:
    # (out of the registries again: test_lowering's coverage test lists every primitive)
    for reg in vars(core).values():
      if isinstance(reg, dict) and p in reg:
        del reg[p]


def test_axis_index_inside_a_loop_traced_under_vmap():
  # lax.axis_index in a while_loop's cond_fun (or a scan body) traced under vmap: the positions
  # are a constant of the vmap, not a value of the inner trace (no leaked tracer), as in JAX
  from ourjax import lax as _lax

  def fun(x):
    return _lax.while_loop(lambda v: v < _lax.axis_index("i"), lambda v: v + 2, x)

  x = np.zeros(4, np.int32)
  for f in (fun, ourjax.jit(fun)):
    np.testing.assert_array_equal(ourjax.vmap(f, axis_name="i")(x), [0, 2, 2, 4])
  np.testing.assert_array_equal(
      ourjax.vmap(lambda _, v: fun(v), axis_name="i", in_axes=(0, None))(x, 0), [0, 2, 2, 4])
  out = ourjax.vmap(lambda v: _lax.scan(lambda c, _: (c + _lax.axis_index("i"), None), v, None,
                                        length=3)[0], axis_name="i")(np.zeros(3, np.int32))
  np.testing.assert_array_equal(out, 3 * np.arange(3))
