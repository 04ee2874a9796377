"""Control-flow argument handling as JAX's: predicates and branch indices of the wrong kind,
callables among cond's operands, fori_loop bound types (float bounds run as a while loop),
and the messages of the checks JAX's tests match."""
import re

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax, tree_util


def test_cond_predicates():
  assert float(lax.cond(1, lambda x: x + 1, lambda x: x - 1, 1.0)) == 2.0
  assert float(lax.cond(0.0, lambda x: x + 1, lambda x: x - 1, 1.0)) == 0.0
  f = ourjax.jit(lambda p: lax.cond(p, lambda: 1.0, lambda: 2.0))
  assert float(f(0.5)) == 1.0 and float(f(0.0)) == 2.0
  with pytest.raises(TypeError, match=re.escape("Pred type must be either boolean or number, "
                                                "got <function")):
    lax.cond(lambda x: True, lambda t: 2., lambda f: 3., 1.)
  with pytest.raises(TypeError, match=re.escape("Pred must be a scalar, got foo of type "
                                                "<class 'str'>")):
    lax.cond("foo", lambda t: 2., lambda f: 3., 1.)
  with pytest.raises(TypeError, match=re.escape("Pred must be a scalar, got (1.0, 1.0) of "
                                                "type <class 'tuple'>")):
    lax.cond((1., 1.), lambda t: 2., lambda f: 3., 1.)


def test_switch_indices():
  with pytest.raises(TypeError, match=re.escape("Index type must be an integer, got <function")):
    lax.switch(lambda x: True, [lambda _: 2., lambda _: 3.], 1.)
  with pytest.raises(TypeError, match=re.escape("Index type must be an integer, got foo.")):
    lax.switch("foo", [lambda _: 2., lambda _: 3.], 1.)
  with pytest.raises(TypeError, match=re.escape("Branch index must be scalar, got (1.0, 1.0) "
                                                "of shape (2,).")):
    lax.switch((1., 1.), [lambda _: 2., lambda _: 3.], 1.)
  assert float(lax.switch(5, [lambda x: x, lambda x: 2 * x], 3.0)) == 6.0   # clamped


def test_cond_with_callable_operands():
  @tree_util.register_pytree_node_class
  class Box:
    def __init__(self, x):
      self.x = x

    def __call__(self, *xs):
      raise AssertionError("an operand is not a branch")

    def tree_flatten(self):
      return (self.x,), None

    @classmethod
    def tree_unflatten(cls, _, xs):
      return cls(*xs)

  f = lambda a, b: a + b.x
  assert int(lax.cond(True, f, f, 3, Box(4))) == 7
  g = lambda a, b: a.x + b.x
  assert int(lax.cond(False, g, g, Box(3), Box(4))) == 7
  # the older form cond(pred, true_operand, true_fun, false_operand, false_fun)
  assert float(lax.cond(False, 1.0, lambda x: x, 2.0, lambda x: 10 * x)) == 20.0


def test_fori_loop_bounds():
  with pytest.raises(TypeError, match="lower and upper arguments to fori_loop must have equal "
                     "types, got int16 and int32"):
    lax.fori_loop(np.int16(0), jnp.int32(10), lambda i, c: c, jnp.float32(7))
  # a Python int takes the other bound's type
  assert float(lax.fori_loop(np.int16(0), 10, lambda i, c: c + 1, jnp.float32(1))) == 11.0
  assert int(ourjax.jit(lambda a, b: lax.fori_loop(a, b, lambda i, c: c + i, 0))(
      np.int16(1), 5)) == 10
  # float bounds count in floats (a while loop when traced), as JAX's
  assert float(lax.fori_loop(0., 3., lambda i, c: c + i, 0.)) == 3.0
  f = ourjax.jit(lambda x: lax.fori_loop(x, x + 2., lambda i, c: c * 2., x))
  assert float(f(1.5)) == 6.0
  np.testing.assert_allclose(float(ourjax.jvp(lambda x: lax.fori_loop(
      x, x + 2., lambda i, c: c * c, x), (1.5,), (1.0,))[1]), 4 * 1.5 ** 3, rtol=1e-6)
  # bounds known under grad stay a scan; traced ones (inside cond) are a while loop
  assert float(ourjax.grad(lambda x: lax.fori_loop(x, x + 2., lambda i, c: c * 2., x))(1.)) \
      == 4.0
  with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for "
                     "lax.while_loop"):
    ourjax.grad(lambda x: lax.cond(True, lambda x, _: lax.fori_loop(
        x, x + 2., lambda i, c: c * 2., x), lambda _, x: x, x, 1.))(1.)


def test_callable_checks_and_messages():
  with pytest.raises(TypeError, match="lax.associative_scan.*callable"):
    lax.associative_scan(42, 0)
  with pytest.raises(TypeError, match=re.escape("scan body output must be a pair, got "
                                                "float32[].")):
    lax.scan(lambda c, x: np.float32(0.), 0, jnp.arange(5.))
  with pytest.raises(TypeError, match=re.escape("cond_fun must return a boolean scalar, but "
                                                "got output type(s) [ShapedArray(float32[])].")):
    lax.while_loop(lambda c: np.float32(1.), lambda c: c, np.float32(0.))


def _raises(msg, f, *args):
  with pytest.raises(TypeError, match=re.escape(msg)):
    f(*args)


def test_carry_mismatch_messages():
  head = "function carry input and carry output must have the same pytree structure, but " \
         "they differ:\n\n"
  _raises("scan body " + head + "The input carry c is a tuple of length 2 but the corresponding"
          " component of the carry output is a tuple of length 3, so the lengths do not match.",
          lax.scan, lambda c, x: ((0, 0, 0), x), (1, (2, 3)), jnp.arange(5.))
  _raises("scan body " + head + "The input carry x is a <class 'tuple'> but the corres",
          lax.scan, lambda x, _: ([x[0].astype("float32")] * 2, None),
          (jnp.array(0, "int32"),) * 2, None, 1)
  _raises("scan body " + head + "  * the input carry component x[0] is a <class 'dict'> with 1 "
          "child but the corresponding component of the carry output is a <class 'dict'> with "
          "2 children, so the numbers of children do not match, with the symmetric difference "
          "of key sets: {'b'};\n  * the input carry component x[1]",
          lax.scan, lambda x, _: (({"a": x[0]["a"], "b": x[0]["a"]},) * 2, None),
          ({"a": jnp.array(0, "int32")},) * 2, None, 1)
  _raises("with pytree metadata ('t',) but the corresponding component of the carry output is "
          "a <class 'dict'> with pytree metadata ('T',)", lax.fori_loop, 0, 1,
          lambda i, x: {"T": jnp.array([0.5])}, {"t": jnp.array([1.0])})
  _raises("scan body function carry input and carry output must have equal types, but they "
          "differ:\n\nThe input carry component x[1] has type int32[] but the corresponding "
          "output carry component has type float32[], so the dtypes do not match.",
          lax.scan, lambda x, _: ((x[0], x[1].astype("float32")), None),
          (jnp.array(0, "int32"),) * 2, None, 1)
  _raises("The input carry x has type float32[3] but the corresponding output carry component "
          "has type int32[2], so the dtypes do not match, and the shapes do not match.",
          lax.scan, lambda x, _: (jnp.zeros(2, jnp.int32), None), jnp.zeros(3), None, 1)
  _raises("while_loop body function carry input and carry output must have equal types",
          lax.while_loop, lambda c: True, lambda c: (True, True),
          (np.bool_(True), np.float32(0.)))


def test_branch_mismatch_messages():
  _raises("cond branch outputs must have the same pytree structure, but they differ:\n\n"
          "true_fun is <lambda> at ", lax.cond, True, lambda t: dict(a=2.),
          lambda f: dict(a=(3., 3.)), 1.)
  _raises("true_fun output at path ['a'] is a pytree leaf but false_fun output at path ['a'] "
          "is a <class 'tuple'>, so their Python types differ.", lax.cond, True,
          lambda t: dict(a=2.), lambda f: dict(a=(3., 3.)), 1.)
  _raises("The output of true_fun has type float32[1] but the corresponding output of false_fun "
          "has type float32[], so the shapes do not match", lax.cond, True,
          lambda t: jnp.ones(1), lambda f: 1., 1.)
  _raises("branch 0 output at path ['a'] is a pytree leaf but branch1 output at path ['a'] is a "
          "<class 'tuple'>, so their Python types differ.", lax.switch, 1,
          [lambda _: dict(a=2.), lambda _: dict(a=(3., 3.))], 1.)
  _raises("  * the output of true_fun at path [0] has type float32[] but the corresponding "
          "output of false_fun has type int32[], so the dtypes do not match;\n  * the output "
          "of true_fun at path [1]", lax.cond, True, lambda t: (1., jnp.ones(1)),
          lambda f: (1, 1.), 1.)


def test_cond_forwards_unchanged_operands():
  def f(x, y):
    return lax.cond(x < 3, lambda x, y: (x * 2, y), lambda x, y: (x * 3, y), x, y)
  x, y = jnp.arange(4), jnp.array(3.0)
  # y passes through both branches: it stays y, unbatched under vmap
  x2, y2 = ourjax.vmap(f, in_axes=(0, None), out_axes=(0, None))(x, y)
  np.testing.assert_array_equal(np.asarray(x2), np.where(np.arange(4) < 3, 2, 3) * np.arange(4))
  assert y2 is y
  assert f(1, y)[1] is y
  assert float(ourjax.grad(lambda v: f(5, v)[1] * 2)(3.0)) == 2.0
  out = lax.cond(True, lambda a: (a, a + 1), lambda a: (a, a - 1), 5.0)
  assert float(out[0]) == 5.0 and out[0].dtype == np.float32


def _eqn_of(jaxpr, name):
  return next(e for e in jaxpr.jaxpr.eqns if e.primitive.name == name)


def test_loops_keep_unchanged_carries_unbatched():
  # a carry the body returns unchanged is a loop constant (as in JAX): under vmap over the other
  # inputs it stays unbatched, also with a batched while_loop predicate
  def f_scan(x, y):
    return lax.scan(lambda c, _: ((c[0] * 2 + c[1], c[1]), c[0]), (x, y), None, length=3)

  def f_while(x, y):     # predicate on the batched carry
    return lax.while_loop(lambda c: c[0] < 10., lambda c: (c[0] + c[1], c[1]), (x, y))

  def f_fori(x, y):
    return lax.fori_loop(0, 3, lambda i, c: (c[0] * c[1] + i, c[1]), (x, y))

  def py_scan(x, y):
    ys = []
    for _ in range(3):
      ys.append(x)
      x = x * 2 + y
    return (x, y), np.stack(ys)

  def py_while(x, y):
    while x < 10.:
      x = x + y
    return x, y

  def py_fori(x, y):
    for i in range(3):
      x = x * y + i
    return x, y

  x, y = np.array([0., 3., 9.5, 12.], np.float32), np.float32(1.5)
  for f, ref, out_axes in [(f_scan, py_scan, ((0, None), 0)), (f_while, py_while, (0, None)),
                           (f_fori, py_fori, (0, None))]:
    vf = ourjax.vmap(f, in_axes=(0, None), out_axes=out_axes)
    got = vf(jnp.asarray(x), jnp.asarray(y))
    want = [ref(np.float64(xi), np.float64(y)) for xi in x]
    got_l, _ = ourjax.tree_util.tree_flatten(got)
    want_l = [np.stack(w) for w in zip(*[ourjax.tree_util.tree_flatten(w)[0] for w in want])]
    want_l[1] = want_l[1][0]           # y is unbatched (out_axes None)
    for g, w in zip(got_l, want_l):
      np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6)
    jaxpr = ourjax.make_jaxpr(vf)(jnp.asarray(x), jnp.asarray(y))
    loop = _eqn_of(jaxpr, "scan" if f is not f_while else "while")
    # y goes in as a loop constant of shape () (unbatched); only the x carry is batched
    carry_avals = [v.aval for v in loop.outvars[:loop.params.get("num_carry", 99)]]
    assert jaxpr.jaxpr.invars[1] in loop.invars
    assert all(a.shape == (4,) for a in carry_avals if a.dtype == np.float32)
    if f is f_while:
      assert loop.params["body_nconsts"] == 1 and loop.invars[0] is jaxpr.jaxpr.invars[1]
    else:
      assert loop.params["num_consts"] == 1 and loop.invars[0] is jaxpr.jaxpr.invars[1]


def test_loops_forward_unchanged_carries():
  y = jnp.float32(2.)
  (a, b, c), _ = lax.scan(lambda c, _: (c, None), (0., y, 1), None, length=3)
  assert b is y and a.dtype == np.float32 and a.weak_type and int(c) == 1
  i, a, b = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1], c[2]), (0, 0., y))
  assert b is y and int(i) == 3 and float(a) == 0.
  # a forwarded carry that cond_fun reads stays a carry
  out = lax.while_loop(lambda c: c[0] < c[1], lambda c: (c[0] + 1, c[1]), (0, 5))
  assert [int(v) for v in out] == [5, 5]
  # gradients through a scan with a pass-through carry
  g = ourjax.grad(lambda y: lax.scan(lambda c, x: ((c[0] + x * c[1], c[1]), None),
                                     (0., y), jnp.arange(3.))[0][0])(2.)
  assert float(g) == 3.0


def test_scan_of_only_forwarded_carries_prints_as_jax():
  # every carry is a constant: the scan has no results, printed (as JAX's) without ' = '
  text = str(ourjax.make_jaxpr(lambda y: lax.scan(lambda c, _: (c, None), (0., y), None,
                                                   length=3))(2.))
  assert "\n    scan[" in text and "num_carry=0" in text and "num_consts=2" in text
  assert text.rstrip().endswith("in (0.0:f32[], a) }")
