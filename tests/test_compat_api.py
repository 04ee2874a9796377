"""Small public names JAX programs use: tree_util's one-level flattening, broadcasting and
associative reduction, flatten_util.ravel_pytree, checking_leaks, clear_caches, float0,
transfer guards."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import tree_util as tu
from ourjax.flatten_util import ravel_pytree

# pytrees of small lists/tuples/dicts with integer leaves
leaf = st.integers(-5, 5)
trees = st.recursive(leaf, lambda ch: st.one_of(
    st.lists(ch, max_size=3), st.tuples(ch, ch),
    st.dictionaries(st.sampled_from("abc"), ch, max_size=3)), max_leaves=8)


@given(trees, st.integers(1, 3))
def test_tree_broadcast_puts_each_prefix_leaf_over_its_subtree(tree, k):
  full = tu.tree_map(lambda x: [x] * k, tree)
  out = tu.tree_broadcast(tree, full)
  assert out == full                       # each leaf x above [x]*k broadcasts to [x]*k
  assert ourjax.tree.broadcast(tree, full) == full
  # a leaf prefix covers the whole tree
  assert tu.tree_broadcast(7, full) == tu.tree_map(lambda _: 7, full)


def test_tree_broadcast_rejects_a_non_prefix():
  with pytest.raises(ValueError, match="pytree structure error"):
    tu.tree_broadcast((1, 2, 3), (0, {"a": 0, "b": 0}))
  with pytest.raises(ValueError, match="pytree structure error"):
    tu.tree_broadcast((1, {"a": 0}), (0, {"a": 0, "b": 0}))
  assert tu.tree_broadcast((1, 2, 3), (0, {"a": 0, "b": 0}, (0, 0))) == \
      (1, {"a": 2, "b": 2}, (3, 3))


@given(st.lists(st.integers(-100, 100), max_size=9))
def test_tree_reduce_associative_is_a_balanced_reduction(xs):
  if not xs:
    with pytest.raises(TypeError, match="identity"):
      tu.tree_reduce_associative(lambda a, b: a + b, xs)
    assert tu.tree_reduce_associative(lambda a, b: a + b, xs, identity=0) == 0
    return
  assert tu.tree_reduce_associative(lambda a, b: a + b, xs) == sum(xs)
  nested = tu.tree_reduce_associative(lambda a, b: (a, b), xs)
  assert tu.tree_leaves(nested) == xs      # order kept

  def depth(t):
    return 1 + max(depth(t[0]), depth(t[1])) if isinstance(t, tuple) else 0
  assert depth(nested) == int(np.ceil(np.log2(len(xs))))


def test_flatten_one_level():
  assert tu.flatten_one_level({"b": [2], "a": 1}) == ((1, [2]), ("a", "b"))
  assert tu.flatten_one_level([1, (2,)]) == ([1, (2,)], None)
  assert tu.flatten_one_level(None) == ((), None)
  children, aux = tu.flatten_one_level_with_keys({"a": 1, "b": [2]})
  assert children == ((tu.DictKey("a"), 1), (tu.DictKey("b"), [2]))
  with pytest.raises(ValueError, match="can't tree-flatten"):
    tu.flatten_one_level(3)
  assert tu.is_tree_node(list) and tu.is_tree_node(type(None)) and not tu.is_tree_node(int)


shapes = st.lists(st.integers(0, 3), max_size=2).map(tuple)


@given(st.lists(st.tuples(shapes, st.sampled_from([np.float32, np.int32, np.bool_])),
                max_size=4), st.integers(0, 2**31 - 1))
def test_ravel_pytree_round_trip(specs, seed):
  rng = np.random.default_rng(seed)
  leaves = [np.asarray(rng.integers(0, 2, size=s) if dt == np.bool_ else
                       rng.integers(-9, 9, size=s)).astype(dt) for s, dt in specs]
  tree = {"x": leaves}
  flat, unravel = ravel_pytree(tree)
  expect = np.concatenate([np.ravel(x) for x in leaves]) if leaves else np.zeros(0)
  assert flat.shape == (sum(x.size for x in leaves),)
  want_dtype = np.float32 if not leaves else jnp.result_type(*[x.dtype for x in leaves])
  assert flat.dtype == want_dtype
  np.testing.assert_array_equal(np.asarray(flat), expect.astype(flat.dtype))
  back = unravel(flat)
  for a, b in zip(back["x"], leaves):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(np.asarray(a), b)
  with pytest.raises(ValueError, match="shape"):
    unravel(jnp.zeros(flat.shape[0] + 1, flat.dtype))


def test_ravel_pytree_single_dtype_unravel_keeps_the_given_dtype():
  flat, unravel = ravel_pytree(jnp.arange(10, dtype=jnp.float32))
  mask = unravel(flat < 5.3)
  assert mask.dtype == np.bool_
  _, unravel2 = ravel_pytree((jnp.arange(3.0), jnp.arange(3)))
  with pytest.raises(TypeError, match="dtype"):
    unravel2(jnp.zeros(6, jnp.int32))


def test_ravel_pytree_gradient_and_jit():
  params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(2)}
  g = ourjax.grad(lambda p: (ravel_pytree(p)[0] ** 2).sum())(params)
  np.testing.assert_allclose(np.asarray(g["w"]), 2 * np.arange(6.0).reshape(2, 3))
  np.testing.assert_allclose(np.asarray(g["b"]), 2 * np.ones(2))
  flat = ourjax.jit(lambda p: ravel_pytree(p)[0])(params)
  np.testing.assert_array_equal(np.asarray(flat), [1, 1, 0, 1, 2, 3, 4, 5])


def test_checking_leaks_catches_a_stored_tracer_only():
  with ourjax.checking_leaks():
    ourjax.vmap(lambda x: x)(np.arange(3.0))
    ourjax.jit(lambda x: ourjax.jit(lambda y: y * 2)(x) + 1)(1.0)
    ourjax.grad(ourjax.jit(lambda x: ourjax.lax.scan(
        lambda c, x: (c * x, c), x, np.arange(1.0, 4.0))[0]))(2.0)
    stash = []

    @ourjax.jit
    def f(x):
      stash.append(x)
      return x
    with pytest.raises(Exception, match="Leaked trace DynamicJaxprTrace"):
      f(3)
  stash.clear()
  # off again: the same mistake goes unnoticed
  ourjax.jit(lambda x: stash.append(x) or x)(3)


class _Holder:
  def __init__(self, dct):
    self.dct = dct


def test_checking_leaks_in_vmap_names_the_reference_chain():
  """As JAX reports it: the leaked BatchTracer, then who holds it, link by link."""
  holder = _Holder({})

  def sketch(x):
    def foo():
      return x
    holder.dct["hi"] = [foo]
    return x

  with ourjax.check_tracer_leaks():
    with pytest.raises(Exception) as e:
      ourjax.vmap(sketch)(jnp.arange(3))
  msg = str(e.value)
  assert msg.startswith("Leaked trace BatchTrace. Leaked tracer(s):")
  import re
  assert re.search(r"This BatchTracer with object id [0-9]+ was created on line:\n  .*\n"
                   r"<BatchTracer [0-9]+> is referred to by <function [0-9]+> \(foo\) "
                   r"closed-over variable x\n<function [0-9]+> is referred to by <list [0-9]+>"
                   r"\[0\]\n<list [0-9]+> is referred to by <dict [0-9]+>\['hi'\]\n"
                   r"<dict [0-9]+> is referred to by <_Holder [0-9]+>\.dct", msg), msg
  holder.dct.clear()
  # the same function without the checker, and programs that keep nothing, raise nothing
  ourjax.vmap(sketch)(jnp.arange(3))
  holder.dct.clear()
  x = jnp.arange(6.0).reshape(2, 3)
  with ourjax.checking_leaks():
    np.testing.assert_allclose(ourjax.vmap(ourjax.grad(lambda v: jnp.sin(v).sum()))(x),
                               np.cos(np.arange(6.0).reshape(2, 3)), rtol=1e-6)
    ourjax.vmap(lambda v: ourjax.lax.scan(lambda c, a: (c + a, c * a), 0.0, v))(x)
    ourjax.grad(lambda w: ourjax.vmap(lambda v: (v * w).sum())(x).sum())(1.0)


def test_clear_caches_forces_a_new_trace():
  traces = []

  @ourjax.jit
  def f(x):
    traces.append(1)
    return x + 1
  f(1.0)
  f(2.0)
  assert len(traces) == 1
  ourjax.clear_caches()
  assert float(f(3.0)) == 4.0
  assert len(traces) == 2
  ourjax.effects_barrier()


def test_float0_and_transfer_guard():
  assert ourjax.float0 == np.dtype([("float0", np.void, 0)])
  _, t = ourjax.jvp(lambda x: x * 2, (3,), (np.zeros((), ourjax.float0),))
  assert t.dtype == ourjax.float0
  with ourjax.transfer_guard("disallow"):
    assert ourjax.config.jax_transfer_guard_host_to_device == "disallow"
    assert float(ourjax.jit(lambda x: x * 2)(2.0)) == 4.0
  assert ourjax.config.jax_transfer_guard_host_to_device is None
  with pytest.raises(ValueError):
    with ourjax.transfer_guard("sometimes"):
      pass


def test_scalar_conversion_errors_match_jax():
  """int/float/complex/operator.index/bool on arrays: JAX's errors, eager and under jit (shape
  and dtype errors first, concretization errors only for scalars)."""
  import operator
  from ourjax.errors import (ConcretizationTypeError, TracerBoolConversionError,
                             TracerIntegerConversionError)
  a = ourjax.numpy.arange(10)
  for f in (operator.index, hex):
    for x in (a, ourjax.numpy.float32(0), ourjax.numpy.arange(0)):
      for g in (f, ourjax.jit(f)):
        with pytest.raises(TypeError, match="Only integer scalar arrays can be converted"):
          g(x)
    with pytest.raises(TracerIntegerConversionError, match=r"__index__\(\) method was called on "
                       r"traced array with shape int32\[\]"):
      ourjax.jit(f)(ourjax.numpy.int32(3))
    assert f(ourjax.numpy.int32(3)) == f(3)
  for f in (int, float, complex):
    for g in (f, ourjax.jit(f)):
      with pytest.raises(TypeError, match="Only scalar arrays can be converted to Python scalars"):
        g(a)
    with pytest.raises(ConcretizationTypeError, match=rf"x.astype\({f.__name__}\)"):
      ourjax.jit(f)(ourjax.numpy.int32(0))
    assert f(ourjax.numpy.int32(2)) == f(2)
  for g in (bool, ourjax.jit(bool)):
    with pytest.raises(ValueError, match="truth value of an empty array"):
      g(ourjax.numpy.arange(0))
    with pytest.raises(ValueError, match="more than one element"):
      g(a)
  with pytest.raises(TracerBoolConversionError):
    ourjax.jit(bool)(ourjax.numpy.int32(1))


def test_autodiff_error_messages_match_jax():
  with pytest.raises(TypeError, match="two-element tuple"):
    ourjax.grad(lambda x: (x, x, x), has_aux=True)(1.)
  with pytest.raises(TypeError, match="two-element tuple"):
    ourjax.grad(lambda x: x, has_aux=True)(1.)
  _, f_vjp = ourjax.vjp(lambda x: (x, x), 1.0)
  with pytest.raises(TypeError, match="applied to <lambda> was called with 2 arguments"):
    f_vjp(1.0, 1.0)
  assert f_vjp((1.0, 2.0))[0] == 3.0
  f0 = ourjax.grad(lambda x: x + 0., allow_int=True)(1)
  assert f0.dtype == ourjax.dtypes.float0
  with pytest.raises(TypeError, match="Called add with a float0 array. float0s do not support"):
    f0 + ourjax.numpy.zeros(())
  with pytest.raises(TypeError, match="Called add with a float0 at position 0"):
    ourjax.lax.add(f0, ourjax.numpy.zeros(()))
  with pytest.raises(TypeError, match=r"dot_general requires contracting dimensions to have the "
                     r"same shape, got \(3,\) and \(4,\)"):
    ourjax.numpy.dot(np.zeros(3), np.zeros(4))


def test_tracing_error_messages_match_jax():
  import enum

  class E(enum.Enum):
    A = 1

  with pytest.raises(TypeError, match=r"traced for jit returned a value of type <enum 'E'>, "
                     "which is not a valid JAX type"):
    ourjax.jit(lambda x: E.A)(1)
  with pytest.raises(TypeError, match=r"returned a value of type <class 'str'> at output "
                     r"component \[1\]"):
    ourjax.jit(lambda x: (x, "abc"))(1)
  assert ourjax.jit(lambda x: (x, None))(1)[1] is None

  @ourjax.jit
  def branchy(x):
    return 1 if x > 0 else 0
  with pytest.raises(ourjax.errors.TracerBoolConversionError,
                     match=r"with shape bool\[\]\.\nThe error occurred at .*test_compat_api"):
    branchy(0)

  @ourjax.jit
  def reads_sharding(x):
    with pytest.raises(AttributeError, match="typeof"):
      x.sharding
    return x
  reads_sharding(jnp.arange(2.))
  with pytest.raises(TypeError, match="Error interpreting argument to add as a JAX value.* "
                     "passed to add at position 1"):
    ourjax.lax.add(jnp.array(7), np.array("hello"))
  with pytest.raises(ValueError, match="ndim of its first argument"):
    ourjax.sharding.Mesh(ourjax.devices(), ("x", "y"))


def test_large_python_ints_copies_of_tracers_and_axis_env():
  import copy
  with pytest.raises(OverflowError):
    jnp.multiply(2 ** 100, 3.)
  assert float(ourjax.lax.convert_element_type(2 ** 100, jnp.float32)) == np.float32(2 ** 100)
  assert float(ourjax.lax.convert_element_type(2 ** 40 + 1, jnp.float32)) == np.float32(2 ** 40)
  assert int(ourjax.jit(lambda x: copy.copy(x) + copy.deepcopy(x))(2)) == 4
  jaxpr = ourjax.make_jaxpr(lambda x: x - ourjax.lax.psum(x, "i"), axis_env=[("i", 4)])(2)
  assert "psum" in str(jaxpr)
  assert issubclass(ourjax.errors.CompileError, ourjax.errors.JaxRuntimeError)
  assert issubclass(ourjax.errors.JaxRuntimeError, RuntimeError)


def test_array_buffer_attributes():
  x = jnp.arange(4.0)
  assert x.is_fully_replicated is True and x.is_fully_addressable is True
  assert x.on_device_size_in_bytes() == x.nbytes == 16
  assert x.unsafe_buffer_pointer() == np.asarray(x).ctypes.data
  np.testing.assert_array_equal(np.asarray(x.addressable_data(0)), np.arange(4.0))
  k = ourjax.random.split(ourjax.random.key(0), 3)
  assert k.on_device_size_in_bytes() == k.nbytes == 24
  assert k.unsafe_buffer_pointer() == k._base_array.unsafe_buffer_pointer()
  assert k.addressable_data(0).dtype == k.dtype


def test_with_sharding_constraint():
  from ourjax.sharding import Mesh, NamedSharding, P
  devices = ourjax.devices()
  mesh = Mesh(np.array(devices), ("x",))
  s = NamedSharding(mesh, P("x"))
  x = jnp.arange(2.0 * len(devices))
  y = ourjax.lax.with_sharding_constraint({"a": x}, s)["a"]
  np.testing.assert_array_equal(np.asarray(y), np.asarray(x))
  if len(devices) > 1:
    assert y.sharding == s
  f = ourjax.jit(lambda v: ourjax.lax.with_sharding_constraint(v * 2, s))
  np.testing.assert_array_equal(np.asarray(f(x)), 2 * np.asarray(x))
  assert float(ourjax.grad(lambda v: ourjax.lax.with_sharding_constraint(v, s) * 3)(1.0)) == 3.0
  with mesh:
    np.testing.assert_array_equal(np.asarray(ourjax.lax.with_sharding_constraint(x, P("x"))),
                                  np.asarray(x))
  with pytest.raises(ValueError, match="needs a mesh"):
    ourjax.lax.with_sharding_constraint(x, P("x"))
