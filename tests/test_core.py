"""The core: jaxpr text, typechecking, eval_jaxpr, weak types, Array behaviour and the errors a
person sees when abstract values are used concretely."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import core, errors, lax
from ourjax.interpreters import partial_eval as pe


def test_make_jaxpr_text_matches_jax_format():
  f = lambda a, b: jnp.sin(a) * b + 1.0
  x = np.ones(3, np.float32)
  text = str(ourjax.make_jaxpr(f)(x, x))
  assert text == ("{ lambda ; a:f32[3] b:f32[3]. let\n"
                  "    c:f32[3] = sin a\n"
                  "    d:f32[3] = mul c b\n"
                  "    e:f32[3] = add d 1.0:f32[]\n"
                  "  in (e,) }")


def test_jaxpr_params_literals_and_constvars():
  big = np.arange(4.0, dtype=np.float32)
  f = lambda x: (jnp.sum(x * big), x > 2)
  text = str(ourjax.make_jaxpr(f)(np.ones(4, np.float32)))
  # a non-scalar closed-over constant is a constvar; params print as [k=v]
  assert text.startswith("{ lambda a:f32[4]; b:f32[4]. let")
  assert "reduce_sum[axes=(0,)" in text
  assert "gt b 2.0:f32[]" in text
  assert text.rstrip().endswith("in (d, e) }")


def test_var_names_continue_past_z():
  def f(x):
    for _ in range(30):
      x = jnp.sin(x)
    return x
  text = str(ourjax.make_jaxpr(f)(1.0))
  assert "ba:f32[] = sin" in text and "be:f32[] = sin" in text


def test_nested_jaxpr_printed_inline_like_jax():
  g = ourjax.jit(lambda x: x * 2.0)
  text = str(ourjax.make_jaxpr(lambda x: g(x) + 1.0)(np.ones(2, np.float32)))
  assert text == ("{ lambda ; a:f32[2]. let\n"
                  "    b:f32[2] = jit[\n"
                  "      name=<lambda>\n"
                  "      jaxpr={ lambda ; a:f32[2]. let b:f32[2] = mul a 2.0:f32[] in (b,) }\n"
                  "    ] a\n"
                  "    c:f32[2] = add b 1.0:f32[]\n"
                  "  in (c,) }")


def test_short_jaxpr_on_one_line_and_unused_binders_dropped():
  def f(x):
    jnp.sin(x)
    return x * 2
  text = str(ourjax.make_jaxpr(f)(np.ones(3, np.float32)))
  assert text == "{ lambda ; a:f32[3]. let _:f32[3] = sin a; b:f32[3] = mul a 2.0:f32[] in (b,) }"


def test_typecheck_and_eval_jaxpr_agree_with_eager():
  def f(x, y):
    return jnp.tanh(x) * y - jnp.exp(x) / 3.0
  x = np.linspace(-1, 1, 5).astype(np.float32)
  y = np.linspace(2, 3, 5).astype(np.float32)
  closed = ourjax.make_jaxpr(f)(x, y)
  core.typecheck_jaxpr(closed.jaxpr)
  out, = core.eval_jaxpr(closed.jaxpr, closed.consts, x, y)
  np.testing.assert_allclose(np.asarray(out), np.tanh(x) * y - np.exp(x) / 3, rtol=1e-6)


def test_typecheck_catches_wrong_binder_type():
  closed = ourjax.make_jaxpr(lambda x: jnp.sin(x))(np.ones(3, np.float32))
  eqn = closed.jaxpr.eqns[0]
  bad = core.Var(core.ShapedArray((4,), np.float32))
  jaxpr = core.Jaxpr([], closed.jaxpr.invars, [eqn._replace(out_binders=[bad])], [bad])
  with pytest.raises(core.JaxprTypeError, match="does not match"):
    core.typecheck_jaxpr(jaxpr)


def test_weak_types_do_not_widen():
  x = jnp.ones(3, jnp.float16)
  assert (x + 1.0).dtype == np.float16
  assert (x * 2).dtype == np.float16
  i8 = jnp.ones(3, jnp.int8)
  assert (i8 + 1).dtype == np.int8
  assert (i8 + 1.5).dtype == np.float32       # int + weak float -> default float
  w = lax.add(1.0, 2.0)
  assert w.weak_type and w.dtype == np.float32
  assert repr(w) == "Array(3., dtype=float32, weak_type=True)"


def test_x64_flag_controls_canonical_dtypes(x64):
  assert jnp.asarray(np.ones(2)).dtype == np.float64
  assert (jnp.ones(2, jnp.float64) + 1).dtype == np.float64


def test_64bit_inputs_become_32bit_without_x64():
  a = jnp.asarray(np.arange(3, dtype=np.int64))
  assert a.dtype == np.int32
  assert jnp.asarray(np.ones(2)).dtype == np.float32


def test_array_repr_and_conversion():
  a = jnp.asarray(np.array([[1, 2], [3, 4]], np.int32))
  assert repr(a) == "Array([[1, 2],\n       [3, 4]], dtype=int32)"
  assert a.shape == (2, 2) and a.ndim == 2 and a.size == 4 and len(a) == 2
  host = np.asarray(a)
  assert not host.flags.writeable          # arrays are immutable
  assert int(jnp.asarray(7)) == 7 and float(jnp.asarray(2.5)) == 2.5
  with pytest.raises(TypeError):
    hash(a)


def test_array_iteration_yields_rows():
  a = jnp.asarray(np.array([[1, 2], [3, 4]], np.int32))
  assert [r.tolist() for r in a] == [[1, 2], [3, 4]]


def test_array_copies_callers_buffer():
  buf = np.zeros(3, np.float32)
  a = jnp.asarray(buf)
  buf[0] = 5
  assert np.asarray(a)[0] == 0


def test_python_int_overflow():
  with pytest.raises(OverflowError):
    jnp.asarray(2 ** 40) + jnp.ones(2, jnp.int32)


def test_bool_of_tracer_raises_helpful_error():
  def f(x):
    if x > 0:
      return x
    return -x
  with pytest.raises(errors.TracerBoolConversionError) as info:
    ourjax.jit(f)(1.0)
  assert isinstance(info.value, errors.ConcretizationTypeError)
  msg = str(info.value)
  assert "bool[]" in msg and "lax.cond" in msg and "jnp.where" in msg
  assert "test_core.py" in msg          # the user's line


def test_python_control_flow_on_primals_works_under_grad():
  def f(x):
    return x * x if x > 0 else -x
  assert float(ourjax.grad(f)(3.0)) == 6.0
  assert float(ourjax.grad(f)(-3.0)) == -1.0


def test_tracer_to_numpy_raises():
  with pytest.raises(errors.TracerArrayConversionError):
    ourjax.jit(lambda x: np.asarray(x) + 1)(np.ones(2, np.float32))


@pytest.mark.parametrize("transform", [
    lambda f, x: ourjax.grad(lambda y: f(y).sum())(x),
    lambda f, x: ourjax.jvp(f, (x,), (x,)),
    lambda f, x: ourjax.vmap(f)(x)])
def test_tracer_to_numpy_raises_even_when_its_value_is_known(transform):
  # (under grad/jvp the primal is known, but np.exp of it would return a constant: the
  # derivative would be silently lost; JAX refuses it too)
  x = np.linspace(-1, 1, 3).astype(np.float32)
  with pytest.raises(errors.TracerArrayConversionError):
    transform(np.exp, x)
  out = transform(jnp.exp, x)                      # (the jnp function is fine)
  np.testing.assert_allclose(out[0] if isinstance(out, tuple) else out, np.exp(x), rtol=1e-6)


def test_known_values_still_read_by_python_under_grad():
  assert float(ourjax.grad(lambda x: x.item() * x)(2.0)) == 2.0
  assert float(ourjax.grad(lambda x: x * 3 if x > 0 else -x)(2.0)) == 3.0


def test_leaked_tracer_is_reported_with_the_transformation():
  leaked = []

  def f(x):
    leaked.append(x)
    return x
  ourjax.jit(f)(1.0)
  with pytest.raises(errors.UnexpectedTracerError, match="f"):
    jnp.sin(leaked[0])


def test_shape_error_names_op_shapes_and_user_line():
  with pytest.raises(TypeError) as info:
    lax.add(jnp.ones((2, 3)), jnp.ones((3, 2)))
  msg = str(info.value)
  assert "add" in msg and "(2, 3)" in msg and "(3, 2)" in msg
  assert "test_core.py" in msg


def test_dtype_error_names_dtypes():
  with pytest.raises(TypeError, match="float32, int32"):
    lax.add(jnp.ones(2, jnp.float32), jnp.ones(2, jnp.int32))


def test_partial_eval_jaxpr_splits_known_and_unknown():
  closed = ourjax.make_jaxpr(lambda a, b: jnp.sin(a) * b)(np.ones(2, np.float32),
                                                          np.ones(2, np.float32))
  jk, ju, out_unk, nres = pe.partial_eval_jaxpr(closed.jaxpr, [False, True])
  assert [e.primitive.name for e in jk.eqns] == ["sin"]
  assert [e.primitive.name for e in ju.eqns] == ["mul"]
  assert out_unk == [True] and nres == 1
  a, b = np.float32([0.5, 1.0]), np.float32([2.0, 3.0])
  *_, res = core.eval_jaxpr(jk, [], a)
  out, = core.eval_jaxpr(ju, [], res, b)
  np.testing.assert_allclose(np.asarray(out), np.sin(a) * b, rtol=1e-6)


def test_dce_drops_unused():
  closed = ourjax.make_jaxpr(lambda a: (jnp.sin(a), jnp.cos(a)))(np.ones(2, np.float32))
  new, used = pe.dce_jaxpr(closed.jaxpr, [True, False])
  assert [e.primitive.name for e in new.eqns] == ["sin"] and used == [True]


@given(st.lists(st.floats(-3, 3, width=32), min_size=1, max_size=8),
       st.sampled_from(["sin", "exp", "tanh", "square", "negative"]))
def test_eager_jit_and_eval_jaxpr_agree(vals, name):
  x = np.asarray(vals, np.float32)
  fn = getattr(jnp, name)
  f = lambda v: fn(v) * 2.0 + v
  ref = getattr(np, name)(x.astype(np.float64)) * 2 + x
  np.testing.assert_allclose(np.asarray(f(x)), ref, rtol=2e-6, atol=1e-6)
  np.testing.assert_allclose(np.asarray(ourjax.jit(f)(x)), ref, rtol=2e-6, atol=1e-6)
