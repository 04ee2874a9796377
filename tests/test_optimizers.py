"""example_libraries.optimizers against hand-written NumPy updates (float64) for three steps,
over a pytree of parameters, eagerly and under jit, with constant and scheduled step sizes."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax.example_libraries import optimizers


def tree(w, b):
  return {"w": np.array(w, np.float32), "b": (np.array(b, np.float32),)}


P0 = tree([[1.0, -2.0], [0.5, 3.0]], [0.1, -0.4])
# gradients of three steps, fixed (so the reference does not need autodiff)
GRADS = [
    tree([[0.3, -0.1], [2.0, 0.5]], [1.0, -3.0]),
    tree([[-0.2, 0.4], [1.0, -0.5]], [0.5, 0.2]),
    tree([[0.1, 0.1], [-1.5, 0.0]], [-2.0, 1.0]),
]


def leaves(tree):
  return [tree["w"], tree["b"][0]]


def reference(update, state0):
  """Run ``update(i, g, state) -> state`` on each leaf in float64 NumPy."""
  out = []
  for leaf_index, x0 in enumerate(leaves(P0)):
    state = state0(x0.astype(np.float64))
    for i, g in enumerate(GRADS):
      state = update(i, leaves(g)[leaf_index].astype(np.float64), state)
    out.append(state[0] if isinstance(state, tuple) else state)
  return out


def sched(i):
  return 0.1 / (1 + i)


def np_sgd(lr):
  return lambda i, g, x: x - lr(i) * g


def np_momentum(lr, mass):
  def update(i, g, s):
    x, v = s
    v = mass * v + g
    return x - lr(i) * v, v
  return update


def np_nesterov(lr, mass):
  def update(i, g, s):
    x, v = s
    v = mass * v + g
    return x - lr(i) * (mass * v + g), v
  return update


def np_adam(lr, b1, b2, eps):
  def update(i, g, s):
    x, m, v = s
    m = (1 - b1) * g + b1 * m
    v = (1 - b2) * g * g + b2 * v
    mhat = m / (1 - b1 ** (i + 1))
    vhat = v / (1 - b2 ** (i + 1))
    return x - lr(i) * mhat / (np.sqrt(vhat) + eps), m, v
  return update


def np_rmsprop(lr, gamma, eps):
  def update(i, g, s):
    x, a = s
    a = a * gamma + g * g * (1 - gamma)
    return x - lr(i) * g / np.sqrt(a + eps), a
  return update


def np_adagrad(lr, mom):
  def update(i, g, s):
    x, gsq, m = s
    gsq = gsq + g * g
    inv = np.where(gsq > 0, 1 / np.sqrt(gsq), 0.0)
    m = (1 - mom) * (g * inv) + mom * m
    return x - lr(i) * m, gsq, m
  return update


def np_adamax(lr, b1, b2, eps):
  def update(i, g, s):
    x, m, u = s
    m = (1 - b1) * g + b1 * m
    u = np.maximum(b2 * u, np.abs(g))
    return x - (lr(i) / (1 - b1 ** (i + 1))) * m / (u + eps), m, u
  return update


zeros = np.zeros_like
CASES = [
    ("sgd", optimizers.sgd(0.1), np_sgd(lambda i: 0.1), lambda x: x),
    ("sgd_schedule", optimizers.sgd(sched), np_sgd(sched), lambda x: x),
    ("momentum", optimizers.momentum(0.1, mass=0.9), np_momentum(lambda i: 0.1, 0.9),
     lambda x: (x, zeros(x))),
    ("momentum_schedule", optimizers.momentum(sched, 0.5), np_momentum(sched, 0.5),
     lambda x: (x, zeros(x))),
    ("nesterov", optimizers.nesterov(0.05, 0.9), np_nesterov(lambda i: 0.05, 0.9),
     lambda x: (x, zeros(x))),
    ("adam", optimizers.adam(0.01), np_adam(lambda i: 0.01, 0.9, 0.999, 1e-8),
     lambda x: (x, zeros(x), zeros(x))),
    ("adam_custom", optimizers.adam(sched, b1=0.5, b2=0.9, eps=1e-3),
     np_adam(sched, 0.5, 0.9, 1e-3), lambda x: (x, zeros(x), zeros(x))),
    ("rmsprop", optimizers.rmsprop(0.01), np_rmsprop(lambda i: 0.01, 0.9, 1e-8),
     lambda x: (x, zeros(x))),
    ("adagrad", optimizers.adagrad(0.1), np_adagrad(lambda i: 0.1, 0.9),
     lambda x: (x, zeros(x), zeros(x))),
    ("adamax", optimizers.adamax(0.02), np_adamax(lambda i: 0.02, 0.9, 0.999, 1e-8),
     lambda x: (x, zeros(x), zeros(x))),
]


@pytest.mark.parametrize("name,opt,np_update,np_init", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("jit", [False, True])
def test_three_steps_match_numpy(name, opt, np_update, np_init, jit):
  init_fun, update_fun, get_params = opt
  state = init_fun(ourjax.tree_util.tree_map(jnp.asarray, P0))
  update = ourjax.jit(update_fun) if jit else update_fun
  for i, g in enumerate(GRADS):
    state = update(i, ourjax.tree_util.tree_map(jnp.asarray, g), state)
  params = get_params(state)
  assert set(params) == {"w", "b"} and isinstance(params["b"], tuple)
  want = reference(np_update, np_init)
  for got, ref in zip(leaves(params), want):
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), ref, rtol=2e-6, atol=2e-7)


def test_optimizer_minimises_a_quadratic():
  target = jnp.array([1.0, -2.0, 3.0])
  loss = lambda p: jnp.sum((p["x"] - target) ** 2)  # noqa: E731
  init_fun, update_fun, get_params = optimizers.adam(0.1)
  state = init_fun({"x": jnp.zeros(3)})

  @ourjax.jit
  def step(i, state):
    return update_fun(i, ourjax.grad(loss)(get_params(state)), state)

  for i in range(300):
    state = step(i, state)
  np.testing.assert_allclose(np.asarray(get_params(state)["x"]), np.asarray(target), atol=1e-2)


def test_schedules():
  np.testing.assert_allclose(float(optimizers.exponential_decay(1.0, 10, 0.5)(20)), 0.25)
  np.testing.assert_allclose(float(optimizers.inverse_time_decay(1.0, 10, 1.0)(10)), 0.5)
  np.testing.assert_allclose(
      float(optimizers.inverse_time_decay(1.0, 10, 1.0, staircase=True)(15)), 0.5)
  pd = optimizers.polynomial_decay(1.0, 10, 0.1, power=2.0)
  np.testing.assert_allclose([float(pd(i)) for i in (0, 5, 10, 20)],
                             [1.0, 0.1 + 0.9 * 0.25, 0.1, 0.1], rtol=1e-6)
  pc = optimizers.piecewise_constant([2, 5], [1.0, 0.5, 0.1])
  np.testing.assert_allclose([float(pc(i)) for i in range(7)],
                             [1, 1, 0.5, 0.5, 0.5, 0.1, 0.1], rtol=1e-6)
  np.testing.assert_allclose(float(ourjax.jit(pc)(3)), 0.5)
  with pytest.raises(ValueError):
    optimizers.piecewise_constant([1, 2], [1.0])
  assert optimizers.make_schedule(0.3)(7) == 0.3


def test_state_is_a_pytree_and_round_trips():
  init_fun, update_fun, get_params = optimizers.momentum(0.1, 0.9)
  state = init_fun(P0)
  n_leaves = len(ourjax.tree_util.tree_leaves(state))
  assert n_leaves == 4  # (x, velocity) for each of two parameter arrays
  packed = optimizers.pack_optimizer_state(optimizers.unpack_optimizer_state(state))
  np.testing.assert_array_equal(np.asarray(get_params(packed)["w"]), P0["w"])
  with pytest.raises(TypeError, match="tree structure"):
    update_fun(0, {"w": P0["w"]}, state)


def test_clip_grads_and_l2_norm():
  g = {"a": jnp.array([3.0, 4.0]), "b": jnp.array([[12.0]])}
  np.testing.assert_allclose(float(optimizers.l2_norm(g)), 13.0)
  c = optimizers.clip_grads(g, 1.3)
  np.testing.assert_allclose(np.asarray(c["a"]), [0.3, 0.4], rtol=1e-6)
  np.testing.assert_allclose(float(optimizers.l2_norm(c)), 1.3, rtol=1e-6)
  same = optimizers.clip_grads(g, 100.0)
  np.testing.assert_array_equal(np.asarray(same["a"]), [3.0, 4.0])
