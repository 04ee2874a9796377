"""Array and Tracer methods and operators: every method agrees with its jnp function, on
concrete Arrays and inside jit/vmap (where the value is a Tracer); properties, len and
iteration; conversions that need a concrete value raise ConcretizationTypeError when traced."""
import numpy as np
import pytest
from hypothesis import given

import ourjax
import ourjax.numpy as jnp
from test_numpy_helpers import ALL, array_of, check

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)

X = np.arange(1, 13, dtype=np.float32).reshape(3, 4) / 4

# method call -> the same computation written with jnp functions (or NumPy for the reference)
METHOD_CASES = [
    ("sum", lambda a: a.sum(), lambda a: np.sum(a)),
    ("sum axis", lambda a: a.sum(axis=1, keepdims=True), lambda a: a.sum(1, keepdims=True)),
    ("prod", lambda a: a.prod(0), lambda a: a.prod(0)),
    ("max", lambda a: a.max(axis=-1), lambda a: a.max(-1)),
    ("min", lambda a: a.min(initial=0.0), lambda a: a.min(initial=0.0)),
    ("mean", lambda a: a.mean(0), lambda a: a.mean(0)),
    ("var", lambda a: a.var(ddof=1), lambda a: a.var(ddof=1)),
    ("std", lambda a: a.std(1), lambda a: a.std(1)),
    ("all", lambda a: a.all(1), lambda a: a.all(1)),
    ("any", lambda a: (a > 2).any(), lambda a: (a > 2).any()),
    ("argmax", lambda a: a.argmax(1), lambda a: a.argmax(1).astype(np.int32)),
    ("argmin", lambda a: a.argmin(), lambda a: np.int32(a.argmin())),
    ("cumsum", lambda a: a.cumsum(1), lambda a: a.cumsum(1)),
    ("cumprod", lambda a: a.cumprod(), lambda a: a.cumprod()),
    ("ptp", lambda a: a.ptp(0), lambda a: np.ptp(a, 0)),
    ("reshape", lambda a: a.reshape(2, 6), lambda a: a.reshape(2, 6)),
    ("reshape tuple", lambda a: a.reshape((4, -1), order="F"),
     lambda a: a.reshape((4, -1), order="F")),
    ("reshape kw", lambda a: a.reshape(shape=(12,)), lambda a: a.reshape(12)),
    ("astype", lambda a: a.astype(jnp.int32), lambda a: a.astype(np.int32)),
    ("T", lambda a: a.T, lambda a: a.T),
    ("mT", lambda a: a.mT, lambda a: a.T),
    ("transpose", lambda a: a.transpose(), lambda a: a.transpose()),
    ("transpose axes", lambda a: a.transpose(1, 0), lambda a: a.transpose(1, 0)),
    ("transpose tuple", lambda a: a.transpose((1, 0)), lambda a: a.transpose((1, 0))),
    ("ravel", lambda a: a.ravel(), lambda a: a.ravel()),
    ("flatten", lambda a: a.flatten(), lambda a: a.flatten()),
    ("squeeze", lambda a: a.reshape(1, 12, 1).squeeze(), lambda a: a.reshape(12)),
    ("swapaxes", lambda a: a.swapaxes(0, 1), lambda a: a.swapaxes(0, 1)),
    ("clip", lambda a: a.clip(1, 2), lambda a: a.clip(1, 2)),
    ("clip max", lambda a: a.clip(max=2), lambda a: a.clip(max=2)),
    ("round", lambda a: a.round(1), lambda a: a.round(1)),
    ("dot", lambda a: a.dot(a.T), lambda a: a.dot(a.T)),
    ("matmul", lambda a: a @ a.T, lambda a: a @ a.T),
    ("rmatmul", lambda a: np.ones((2, 3), np.float32) @ a,
     lambda a: np.ones((2, 3), np.float32) @ a),
    ("sort", lambda a: (-a).sort(axis=0), lambda a: np.sort(-a, axis=0)),
    ("argsort", lambda a: (-a).argsort(), lambda a: np.argsort(-a).astype(np.int32)),
    ("repeat", lambda a: a.repeat(2, axis=0), lambda a: a.repeat(2, axis=0)),
    ("diagonal", lambda a: a.diagonal(1), lambda a: a.diagonal(1)),
    ("trace", lambda a: a.trace(), lambda a: np.float32(a.trace())),
    ("conj", lambda a: a.conj(), lambda a: a.conj()),
    ("conjugate", lambda a: a.conjugate(), lambda a: a.conjugate()),
    ("real", lambda a: a.real, lambda a: a.real),
    ("imag", lambda a: a.imag, lambda a: np.zeros_like(a)),
    ("searchsorted", lambda a: a.ravel().searchsorted(1.6),
     lambda a: np.int32(a.ravel().searchsorted(1.6))),
    ("view", lambda a: a.view(jnp.int32), lambda a: a.view(np.int32)),
    ("view narrower", lambda a: a.view(jnp.uint16), lambda a: a.view(np.uint16)),
    ("view wider", lambda a: a.view(jnp.uint16).view(jnp.float32), lambda a: a),
    ("copy", lambda a: a.copy(), lambda a: a.copy()),
    ("neg", lambda a: -a, lambda a: -a),
    ("abs", lambda a: abs(a - 1), lambda a: abs(a - 1)),
    ("pow", lambda a: a ** 2, lambda a: a ** 2),
    ("rpow", lambda a: 2 ** a, lambda a: 2 ** a),
    ("mod", lambda a: a % 0.75, lambda a: a % np.float32(0.75)),
    ("rfloordiv", lambda a: 3 // a, lambda a: 3 // a),
    ("cmp", lambda a: (a >= 1.5) & (a < 2.5) | (a == 3), lambda a: (a >= 1.5) & (a < 2.5) |
     (a == 3)),
    ("iter", lambda a: jnp.stack(list(a)[::-1]), lambda a: a[::-1]),
]


@pytest.mark.parametrize("name,method,ref", METHOD_CASES, ids=[c[0] for c in METHOD_CASES])
def test_methods_on_arrays_and_tracers(name, method, ref):
  expected = np.asarray(ref(X))
  tol = 1e-5 if expected.dtype.kind == "f" else None
  check(method(jnp.asarray(X)), expected, rtol=tol, atol=tol)
  check(ourjax.jit(method)(X), expected, rtol=tol, atol=tol)
  # (vmap of a function that returns its input unchanged hands back the NumPy input)
  batched = jnp.asarray(ourjax.vmap(method)(np.stack([X, X + 1])))
  check(batched, np.stack([expected, np.asarray(ref(X + 1))]), rtol=tol, atol=tol)


def test_properties_len_iter():
  a = jnp.asarray(X)
  assert a.shape == (3, 4) and a.ndim == 2 and a.size == 12 and a.dtype == F32
  assert a.itemsize == 4 and a.nbytes == 48 and len(a) == 3
  rows = list(a)
  assert len(rows) == 3
  check(rows[1], X[1])
  assert [int(v) for v in jnp.arange(3)] == [0, 1, 2]
  with pytest.raises(TypeError, match="0-d|unsized"):
    len(jnp.float32(1))
  with pytest.raises(TypeError, match="0-d"):
    iter(jnp.float32(1))
  assert a.item(1) == X.ravel()[1] and a.tolist() == X.tolist()
  assert jnp.asarray(5).item() == 5
  assert a.__array_namespace__() is jnp

  def f(t):
    assert len(t) == 3 and t.shape == (3, 4) and t.itemsize == 4 and t.nbytes == 48
    return sum(t)           # iteration over a tracer
  check(ourjax.jit(f)(X), X.sum(0))


def test_traced_conversions_raise():
  for fn in (lambda t: t.item(), lambda t: t.tolist(), lambda t: float(t.sum()),
             lambda t: t.tobytes()):
    with pytest.raises(ourjax.errors.ConcretizationTypeError):
      ourjax.jit(fn)(X)
  assert jnp.asarray(X).tobytes() == X.tobytes()


def test_methods_deferred_to_indexing():
  if not hasattr(jnp, "take"):
    with pytest.raises(NotImplementedError, match="take"):
      jnp.asarray(X).take(0)
  else:
    check(jnp.asarray(X).take(np.array([0, 5])), X.ravel()[[0, 5]])


@given(x=array_of(ALL, lo=-5, hi=5, max_dims=3))
def test_operators_match_functions(x):
  a = jnp.asarray(x)
  for op, fn in ((lambda u, v: u + v, jnp.add), (lambda u, v: u * v, jnp.multiply),
                 (lambda u, v: u == v, jnp.equal), (lambda u, v: u < v, jnp.less),
                 (lambda u, v: u | v if x.dtype.kind in "biu" else u + v,
                  jnp.bitwise_or if x.dtype.kind in "biu" else jnp.add)):
    check(op(a, a), np.asarray(fn(x, x)))
    check(op(a, x), np.asarray(fn(x, x)))
    check(op(x, a), np.asarray(fn(x, x)))
  if x.dtype != np.bool_:
    check(a - 1, np.asarray(jnp.subtract(x, 1)))
    check(1 - a, np.asarray(jnp.subtract(1, x)))


def test_unknown_operand_types_defer():
  class Other:
    def __radd__(self, other):
      return "radd"

    def __rmatmul__(self, other):
      return "rmatmul"
  assert jnp.asarray(X) + Other() == "radd"
  assert jnp.asarray(X) @ Other() == "rmatmul"
  with pytest.raises(TypeError):
    jnp.asarray(X) + "a"
