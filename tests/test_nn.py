"""ourjax.nn against float64 NumPy (including extreme inputs), its derivatives, and the
initializers against JAX's numbers (literals from jax 0.10.2) and their statistics."""
import math

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import nn, random

X = np.array([-1e4, -50., -20., -3., -1., -0.5, -1e-3, 0., 1e-3, 0.5, 1., 3., 6., 20., 50., 1e4],
             np.float32)
_erf = np.vectorize(math.erf)


def _sigmoid(x):
  e = np.exp(-np.abs(x))
  return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softplus(x):
  return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


REFERENCES = {
    "relu": lambda x: np.maximum(x, 0),
    "relu6": lambda x: np.clip(x, 0, 6),
    "sigmoid": _sigmoid,
    "softplus": _softplus,
    "log_sigmoid": lambda x: -_softplus(-x),
    "silu": lambda x: x * _sigmoid(x),
    "swish": lambda x: x * _sigmoid(x),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
    "celu": lambda x: np.maximum(x, 0) + np.expm1(np.minimum(x, 0)),
    "selu": lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 *
                                                     np.expm1(np.minimum(x, 0))),
    "leaky_relu": lambda x: np.where(x >= 0, x, 0.01 * x),
    "hard_tanh": lambda x: np.clip(x, -1, 1),
    "hard_sigmoid": lambda x: np.clip(x + 3, 0, 6) / 6,
    "hard_silu": lambda x: x * np.clip(x + 3, 0, 6) / 6,
    "soft_sign": lambda x: x / (np.abs(x) + 1),
    "mish": lambda x: x * np.tanh(_softplus(x)),
    "sparse_plus": lambda x: np.where(x <= -1, 0, np.where(x >= 1, x, (x + 1) ** 2 / 4)),
    "sparse_sigmoid": lambda x: np.clip((x + 1) / 2, 0, 1),
    "squareplus": lambda x: (x + np.sqrt(x * x + 4)) / 2,
}


# squareplus is (x + sqrt(x^2 + b)) / 2 as in JAX: it cancels for large negative x
MODERATE_ONLY = {"squareplus"}


def assert_close_cancelling(got, want, x, rtol=2e-6):
  """|got - want| <= rtol |want| + 1.2e-7 |x|: the float32 rounding of a formula that adds
  terms of size |x| to reach a smaller result (as JAX's own formula does)."""
  err = np.abs(np.asarray(got, np.float64) - want)
  bound = rtol * np.abs(want) + 1.2e-7 * np.abs(np.asarray(x, np.float64))
  assert (err <= bound).all(), (err - bound).max()


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_activation_against_float64(name):
  x = X[np.abs(X) <= 20] if name in MODERATE_ONLY else X
  got = np.asarray(getattr(nn, name)(jnp.asarray(x)))
  assert got.dtype == np.float32 and got.shape == x.shape
  want = REFERENCES[name](x.astype(np.float64))
  assert np.isfinite(got).all()
  if name in MODERATE_ONLY:
    assert_close_cancelling(got, want, x)
  else:
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-30)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_activation_jit_matches_eager(name):
  f = getattr(nn, name)
  np.testing.assert_allclose(np.asarray(ourjax.jit(f)(X)), np.asarray(f(X)), rtol=2e-6)


def test_gelu_both_forms():
  x = X.astype(np.float64)
  exact = 0.5 * x * (1 + _erf(x / np.sqrt(2)))
  approx = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
  np.testing.assert_allclose(np.asarray(nn.gelu(X, approximate=False)), exact, rtol=2e-6,
                             atol=1e-30)
  # 1 + tanh(...) cancels for negative x in float32 (JAX's formula does the same)
  assert_close_cancelling(nn.gelu(X), approx, X)
  assert_close_cancelling(nn.gelu(X, approximate=True), approx, X)
  # the two forms differ (by up to ~1e-3 near |x| ~ 2), so the test can tell them apart
  assert np.abs(exact - approx).max() > 1e-4
  assert nn.gelu(jnp.arange(3)).dtype == np.float32  # ints promote to float


def test_activation_gradients():
  x = jnp.array([-2., 0., 0.5, 6., 7.])
  np.testing.assert_array_equal(np.asarray(ourjax.vmap(ourjax.grad(nn.relu))(x)),
                                [0, 0, 1, 1, 1])  # relu'(0) = 0, as JAX
  np.testing.assert_array_equal(np.asarray(ourjax.vmap(ourjax.grad(nn.relu6))(x)),
                                [0, 0, 1, 0, 0])
  xs = np.array([-30., -2., 0., 0.5, 30.], np.float32)
  g = np.asarray(ourjax.vmap(ourjax.grad(nn.softplus))(xs))
  np.testing.assert_allclose(g, _sigmoid(xs.astype(np.float64)), rtol=1e-6)
  g = np.asarray(ourjax.vmap(ourjax.grad(nn.sigmoid))(xs))
  s = _sigmoid(xs.astype(np.float64))
  np.testing.assert_allclose(g, s * (1 - s), rtol=1e-5, atol=1e-12)  # s(1-s) rounds to 0 at 30
  g = np.asarray(ourjax.vmap(ourjax.grad(lambda v: nn.gelu(v, approximate=False)))(xs))
  xd = xs.astype(np.float64)
  want = 0.5 * (1 + _erf(xd / np.sqrt(2))) + xd * np.exp(-xd * xd / 2) / np.sqrt(2 * np.pi)
  np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-30)


def _softmax64(x, axis=-1):
  x = np.asarray(x, np.float64)
  e = np.exp(x - x.max(axis=axis, keepdims=True))
  return e / e.sum(axis=axis, keepdims=True)


def test_softmax_and_log_softmax_extremes():
  x = np.array([[1e4, 0., -1e4], [1., 2., 3.], [-1e4, -1e4, -1e4], [88., 89., 90.]], np.float32)
  s = np.asarray(nn.softmax(x))
  assert np.isfinite(s).all()
  np.testing.assert_allclose(s, _softmax64(x), rtol=1e-6, atol=1e-30)
  np.testing.assert_allclose(s.sum(-1), 1, rtol=1e-6)
  ls = np.asarray(nn.log_softmax(x))
  x64 = x.astype(np.float64)
  want = x64 - x64.max(-1, keepdims=True) - np.log(
      np.exp(x64 - x64.max(-1, keepdims=True)).sum(-1, keepdims=True))
  np.testing.assert_allclose(ls, want, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(np.asarray(nn.softmax(x, axis=0)), _softmax64(x, 0), rtol=1e-6,
                             atol=1e-30)
  np.testing.assert_allclose(np.asarray(nn.softmax(x, axis=(0, 1))).sum(), 1, rtol=1e-5)


def test_softmax_where_and_neg_inf():
  x = jnp.array([1., 2., 3., 4.])
  where = jnp.array([True, False, True, True])
  s = np.asarray(nn.softmax(x, where=where))
  want = _softmax64([1., 3., 4.])
  np.testing.assert_allclose(s[[0, 2, 3]], want, rtol=1e-6)
  assert s[1] == 0
  ls = np.asarray(nn.log_softmax(x, where=where))
  assert ls[1] == -np.inf
  np.testing.assert_allclose(ls[[0, 2, 3]], np.log(want), rtol=1e-6)
  s = np.asarray(nn.softmax(jnp.array([-np.inf, 0., 1.])))
  np.testing.assert_allclose(s, [0, *_softmax64([0., 1.])], rtol=1e-6)
  s = np.asarray(ourjax.jit(lambda v: nn.softmax(v, where=v > 1.5))(x))
  np.testing.assert_allclose(s, [0, *_softmax64([2., 3., 4.])], rtol=1e-6)


def test_softmax_gradient():
  x = np.array([0.3, -1.2, 2.0, 0.1], np.float32)
  w = np.array([1., 2., -1., 0.5], np.float32)
  g = np.asarray(ourjax.grad(lambda v: jnp.sum(nn.softmax(v) * w))(x))
  s = _softmax64(x)
  want = s * (w - np.dot(s, w))
  np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-7)
  # large inputs: the gradient stays finite
  g = np.asarray(ourjax.grad(lambda v: jnp.sum(nn.softmax(v) * w))(x * 1e4))
  assert np.isfinite(g).all()
  g = np.asarray(ourjax.grad(lambda v: jnp.sum(nn.log_softmax(v) * w))(x))
  np.testing.assert_allclose(g, w - s * w.sum(), rtol=1e-5, atol=1e-6)


def _logsumexp64(a, axis=None, b=None):
  a = np.asarray(a, np.float64)
  m = np.max(a, axis=axis, keepdims=True)
  m = np.where(np.isfinite(m), m, 0)
  e = np.exp(a - m) * (1 if b is None else b)
  return np.log(np.abs(np.sum(e, axis=axis))) + np.squeeze(m, axis=axis)


def test_logsumexp():
  x = np.array([[1e4, 1e4 - 1, 0.], [-np.inf, -np.inf, -np.inf], [1., 2., 3.],
                [-1e4, -1e4, -np.inf]], np.float32)
  got = np.asarray(nn.logsumexp(x, axis=1))
  with np.errstate(divide="ignore"):
    want = _logsumexp64(x, axis=1)
  assert got[1] == -np.inf
  np.testing.assert_allclose(got, want, rtol=1e-6)
  assert float(nn.logsumexp(jnp.array([-np.inf]))) == -np.inf
  assert float(nn.logsumexp(jnp.array([np.inf, 1.]))) == np.inf
  np.testing.assert_allclose(float(nn.logsumexp(x[2])), _logsumexp64(x[2]), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(nn.logsumexp(x[2:3], axis=1, keepdims=True)),
                             [[_logsumexp64(x[2])]], rtol=1e-6)
  b = np.array([1., -2., 0.5], np.float32)
  val, sign = nn.logsumexp(x[2], b=b, return_sign=True)
  total = np.sum(b * np.exp(x[2].astype(np.float64)))
  np.testing.assert_allclose(float(val), np.log(abs(total)), rtol=1e-6)
  assert float(sign) == np.sign(total)
  if total < 0:
    assert np.isnan(float(nn.logsumexp(x[2], b=b)))
  np.testing.assert_allclose(float(nn.logsumexp(x[2], where=jnp.array([True, False, True]))),
                             _logsumexp64([1., 3.]), rtol=1e-6)
  # gradient is the softmax
  g = np.asarray(ourjax.grad(lambda v: nn.logsumexp(v))(x[0]))
  np.testing.assert_allclose(g, _softmax64(x[0]), rtol=1e-6, atol=1e-30)
  np.testing.assert_allclose(float(nn.logmeanexp(x[2])), _logsumexp64(x[2]) - np.log(3),
                             rtol=1e-6)


def test_one_hot():
  y = jnp.array([0, 2, -1, 3])
  np.testing.assert_array_equal(np.asarray(nn.one_hot(y, 3)),
                                [[1, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]])
  assert nn.one_hot(y, 3).dtype == np.float32
  assert nn.one_hot(y, 3, dtype=jnp.int32).dtype == np.int32
  np.testing.assert_array_equal(np.asarray(nn.one_hot(jnp.array([0, 1]), 3, axis=0)),
                                [[1, 0], [0, 1], [0, 0]])
  z = nn.one_hot(jnp.arange(6).reshape(2, 3), 6, axis=1)
  assert z.shape == (2, 6, 3)
  np.testing.assert_array_equal(np.asarray(z)[1, :, 2], np.eye(6)[5])
  np.testing.assert_array_equal(np.asarray(ourjax.jit(lambda v: nn.one_hot(v, 4))(y)),
                                np.asarray(nn.one_hot(y, 4)))


def test_standardize():
  x = np.array([[1., 2., 3., 10.], [4., 5., 9., -2.]], np.float32)
  got = np.asarray(nn.standardize(x))
  x64 = x.astype(np.float64)
  want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  got0 = np.asarray(nn.standardize(x, axis=0, epsilon=0.))
  np.testing.assert_allclose(got0, np.sign(x64 - x64.mean(0)), rtol=1e-5)


def test_glu():
  x = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
  got = np.asarray(nn.glu(x))
  np.testing.assert_allclose(got, x[:, :2] * _sigmoid(x[:, 2:].astype(np.float64)), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# initializers

JAX_INITS = {  # jax.nn.initializers.<name>()(PRNGKey(0), (3, 2)), flattened
    "glorot_uniform": [0.980789303779602, 1.048516035079956, -0.3674309551715851,
                       -0.0686439648270607, 0.15311850607395172, -0.732846200466156],
    "glorot_normal": [1.046842336654663, 1.2329133749008179, -0.29671576619148254,
                      -0.05394943431019783, 0.12079361826181412, -0.65617436170578],
    "he_uniform": [1.2661935091018677, 1.3536282777786255, -0.47435131669044495,
                   -0.08861897140741348, 0.19767512381076813, -0.9461002945899963],
    "he_normal": [1.3514677286148071, 1.5916844606399536, -0.38305842876434326,
                  -0.06964842975139618, 0.15594390034675598, -0.84711754322052],
    "lecun_uniform": [0.895334005355835, 0.9571597576141357, -0.3354170322418213,
                      -0.06266307830810547, 0.13977742195129395, -0.6689939498901367],
    "lecun_normal": [0.9556319713592529, 1.1254907846450806, -0.2708631753921509,
                     -0.049248870462179184, 0.1102689802646637, -0.599002480506897],
    "orthogonal": [0.96083664894104, 0.18604838848114014, -0.2567500174045563,
                   0.31881120800971985, 0.1042710393667221, -0.9293790459632874],
}


@pytest.mark.parametrize("name", sorted(JAX_INITS))
def test_initializers_match_jax(name):
  w = getattr(nn.initializers, name)()(random.PRNGKey(0), (3, 2))
  assert w.shape == (3, 2) and w.dtype == np.float32
  np.testing.assert_allclose(np.asarray(w).ravel(), JAX_INITS[name], rtol=2e-6, atol=1e-7)


def test_simple_initializers_match_jax():
  k = random.PRNGKey(0)
  np.testing.assert_allclose(np.asarray(nn.initializers.normal(0.5)(k, (3,))),
                             [0.8113210797309875, 1.0126323699951172, -0.21679721772670746],
                             rtol=2e-6)
  np.testing.assert_allclose(np.asarray(nn.initializers.uniform(2.0)(k, (3,))),
                             [1.895334005355835, 1.9571597576141357, 0.6645829677581787],
                             rtol=1e-7)
  np.testing.assert_allclose(np.asarray(nn.initializers.truncated_normal(0.5)(k, (3,))),
                             [0.7279796004295349, 0.857374370098114, -0.20633767545223236],
                             rtol=2e-6)
  vs = nn.initializers.variance_scaling(2.0, "fan_out", "normal", in_axis=0, out_axis=(1, 2))
  np.testing.assert_allclose(np.asarray(vs(k, (2, 3, 4))).ravel()[:6],
                             [0.6624408960342407, 0.826810896396637, -0.17701418697834015,
                              -0.032095398753881454, 0.07188881188631058, -0.3968537747859955],
                             rtol=2e-6, atol=1e-7)
  conv = nn.initializers.he_normal()(k, (3, 3, 2, 4))
  np.testing.assert_allclose(np.asarray(conv).ravel()[:5],
                             [0.5517343878746033, 0.6498024463653564, -0.1563829481601715,
                              -0.028433850035071373, 0.06366382539272308], rtol=2e-6, atol=1e-7)
  np.testing.assert_array_equal(np.asarray(nn.initializers.zeros(k, (2, 3))), np.zeros((2, 3)))
  np.testing.assert_array_equal(np.asarray(nn.initializers.ones(k, (2,), jnp.int32)), [1, 1])
  np.testing.assert_array_equal(np.asarray(nn.initializers.constant(7.)(k, (2,))), [7, 7])


@pytest.mark.parametrize("name,scale,mode", [
    ("glorot_uniform", 1.0, "fan_avg"), ("glorot_normal", 1.0, "fan_avg"),
    ("he_uniform", 2.0, "fan_in"), ("he_normal", 2.0, "fan_in"),
    ("lecun_normal", 1.0, "fan_in"), ("xavier_uniform", 1.0, "fan_avg"),
    ("kaiming_normal", 2.0, "fan_in")])
def test_initializer_variance(name, scale, mode):
  fan_in, fan_out = 300, 200
  w = np.asarray(getattr(nn.initializers, name)()(random.PRNGKey(3), (fan_in, fan_out)),
                 np.float64)
  n = {"fan_in": fan_in, "fan_avg": (fan_in + fan_out) / 2}[mode]
  assert abs(w.mean()) < 0.01 * np.sqrt(scale / n) * 10
  np.testing.assert_allclose(w.var(), scale / n, rtol=0.03)
  if "uniform" in name:
    assert np.abs(w).max() <= np.sqrt(3 * scale / n) * (1 + 1e-6)
  else:
    assert np.abs(w).max() <= 2 * np.sqrt(scale / n) / 0.87962566103423978 * (1 + 1e-6)


def test_orthogonal_initializer():
  w = np.asarray(nn.initializers.orthogonal(scale=2.0)(random.PRNGKey(0), (20, 8)), np.float64)
  np.testing.assert_allclose(w.T @ w, 4 * np.eye(8), atol=1e-4)
  w = np.asarray(nn.initializers.orthogonal(column_axis=0)(random.PRNGKey(0), (4, 3, 3)))
  m = w.reshape(4, 9)
  np.testing.assert_allclose(m @ m.T, np.eye(4), atol=1e-5)
  with pytest.raises(ValueError, match="2D"):
    nn.initializers.orthogonal()(random.PRNGKey(0), (3,))


def test_initializer_errors():
  with pytest.raises(ValueError, match="mode"):
    nn.initializers.variance_scaling(1.0, "fan_bad", "normal")
  with pytest.raises(ValueError, match="1-dimensional"):
    nn.initializers.glorot_uniform()(random.PRNGKey(0), (3,))


# complex variance scaling: jax.nn.initializers.variance_scaling(1, "fan_in", d,
# dtype=complex64)(PRNGKey(0), (3, 2)), flattened (real JAX 0.10.2)
JAX_COMPLEX_INITS = {
    "uniform": [0.7485747 + 0.03433j, 0.3456918 + 0.045639j, -0.3393368 - 0.1905325j,
                -0.1833473 + 0.2164891j, 0.0602908 + 0.3524779j, 0.5078691 + 0.4726651j],
    "truncated_normal": [0.8013652 + 0.036751j, 0.2667372 + 0.0352153j,
                         -0.2653258 - 0.1489764j, -0.1390446 + 0.1641782j,
                         0.0466483 + 0.2727197j, 0.4925237 + 0.4583833j],
    "normal": [0.4098871 - 0.9971284j, -0.3700106 - 0.831063j, -0.30544 + 0.0839131j,
               -0.4782085 - 0.1443363j, -0.3556793 - 0.3110746j, 0.2403921 - 0.4811417j],
}


@pytest.mark.parametrize("dist", sorted(JAX_COMPLEX_INITS))
def test_complex_variance_scaling(dist):
  init = nn.initializers.variance_scaling(1.0, "fan_in", dist, dtype=jnp.complex64)
  w = init(random.PRNGKey(0), (3, 2))
  assert w.dtype == np.complex64 and w.shape == (3, 2)
  np.testing.assert_allclose(np.asarray(w).ravel(), JAX_COMPLEX_INITS[dist], atol=2e-6)
  # the distribution: mean 0, E|z|^2 = scale / fan_in (JAX's truncated normal: 1.019x that),
  # uniform on the disk of radius sqrt(2 var), the truncated normal cut at modulus 2 std
  fan_in = 400
  z = np.asarray(init(random.PRNGKey(5), (fan_in, 300)), np.complex128)
  var = 1.0 / fan_in
  # truncated: E r^2 = (1 - 5 e^-4) / (1 - e^-4) for the unit complex normal cut at r < 2,
  # divided by JAX's scale 1 - 5 e^-4
  want = var / (1 - np.exp(-4)) if dist == "truncated_normal" else var
  np.testing.assert_allclose(np.mean(np.abs(z) ** 2), want, rtol=0.02)
  assert abs(z.mean()) < 0.05 * np.sqrt(var)
  np.testing.assert_allclose(np.var(z.real), np.var(z.imag), rtol=0.05)   # circular
  if dist == "uniform":
    assert np.abs(z).max() <= np.sqrt(2 * var) * (1 + 1e-6)
    # uniform on the disk: P(|z| < R/2) = 1/4
    np.testing.assert_allclose(np.mean(np.abs(z) < np.sqrt(2 * var) / 2), 0.25, atol=0.01)
  if dist == "truncated_normal":
    assert np.abs(z).max() <= 2 * np.sqrt(var) / 0.95311164380491208 * (1 + 1e-6)
  for name in ("glorot_normal", "he_uniform", "lecun_normal"):
    assert getattr(nn.initializers, name)(dtype=jnp.complex64)(
        random.PRNGKey(0), (4, 3)).dtype == np.complex64


@pytest.mark.parametrize("shape", [(3, 2, 3), (3, 4, 2, 2), (2, 3, 3, 1, 4)])
def test_delta_orthogonal(shape):
  w = np.asarray(nn.initializers.delta_orthogonal(scale=2.0)(random.PRNGKey(1), shape),
                 np.float64)
  centre = tuple((k - 1) // 2 for k in shape[:-2])
  m = w[centre]
  np.testing.assert_allclose(m @ m.T, 4 * np.eye(shape[-2]), atol=1e-5)   # orthogonal rows
  rest = w.copy()
  rest[centre] = 0
  assert not rest.any()
  with pytest.raises(ValueError, match="3D, 4D or 5D"):
    nn.initializers.delta_orthogonal()(random.PRNGKey(0), (2, 3))
  with pytest.raises(ValueError, match="fan_in"):
    nn.initializers.delta_orthogonal()(random.PRNGKey(0), (3, 4, 2))


def test_one_hot_inputs():
  np.testing.assert_array_equal(np.asarray(nn.one_hot([0, 2, 1], 3)), np.eye(3)[[0, 2, 1]])
  with pytest.warns(DeprecationWarning, match="one_hot input should be integer-typed"):
    np.testing.assert_array_equal(np.asarray(nn.one_hot(jnp.array([1.0]), 3)), [[0, 1, 0]])
  with pytest.raises(ourjax.errors.ConcretizationTypeError, match="argument `num_classes`"):
    ourjax.jit(nn.one_hot)(3, 5)


def test_standardize_stable_algorithm():
  x = np.array([1e6, 1e6 + 1, 1e6 + 2, 1e6 + 5], np.float32)
  x64 = x.astype(np.float64)
  want = (x64 - x64.mean()) / np.sqrt(x64.var() + 1e-5)
  np.testing.assert_allclose(np.asarray(nn.standardize(x, algorithm="stable")), want,
                             rtol=1e-5)
  np.testing.assert_allclose(
      np.asarray(ourjax.jit(lambda v: nn.standardize(v, algorithm="stable"))(x)), want,
      rtol=1e-5)
  # the one-pass formula cancels here (mean**2 ~ 1e12 in float32), but stays finite
  assert np.isfinite(np.asarray(nn.standardize(x, algorithm="fast"))).all()
  with pytest.raises(ValueError, match="Unknown algorithm"):
    nn.standardize(x, algorithm="exact")


def test_jit_returns_float0_cotangents():
  # the cotangent of a boolean argument is float0: a jitted vjp returns it as NumPy zeros
  def bwd(x, b, m):
    return ourjax.vjp(lambda x, b, m: nn.dot_product_attention(x, x, x, bias=b, mask=m),
                      x, b, m)[1](x)
  x = random.normal(random.PRNGKey(0), (2, 8, 2, 4))
  bias = random.normal(random.PRNGKey(1), (2, 2, 8, 8))
  mask = jnp.arange(8)[None, None, :] < 6
  got, want = ourjax.jit(bwd)(x, bias, mask), bwd(x, bias, mask)
  for g, w in zip(got[:2], want[:2]):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)
  assert isinstance(got[2], np.ndarray) and got[2].dtype == ourjax.dtypes.float0
  assert got[2].shape == (1, 1, 8)


def test_sigmoid_family_refuses_integers_as_jax():
  # jax.nn.sigmoid is lax.logistic: an integer input is a TypeError (silu, swish, glu too)
  for f in (nn.sigmoid, nn.silu, nn.swish):
    with pytest.raises(TypeError, match="logistic does not accept dtype int32"):
      f(np.arange(3, dtype=np.int32))
  np.testing.assert_allclose(float(nn.sigmoid(2.0)), 1 / (1 + np.exp(-2.0)), rtol=1e-6)


def test_softmax_of_integers_promotes_as_jnp_under_x64(x64):
  # as JAX: an int32 input is float32 (jnp's inexact promotion), not the default float64
  x = np.arange(3, dtype=np.int32)
  for f in (nn.softmax, nn.log_softmax):
    r = f(x)
    assert r.dtype == np.float32, f
  np.testing.assert_allclose(np.asarray(nn.softmax(x)), np.exp(x) / np.exp(x).sum(), rtol=1e-6)
  assert nn.softmax(np.arange(3, dtype=np.int64)).dtype == np.float64
