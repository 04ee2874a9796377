"""The SPMD executor's program (``interpreters/spmd.py``, ``spmd_schedule.py``): collectives
gathered into rounds and packed, and pmap results that feed the next pmap.

References: NumPy on the global arrays, and the one-device function (jit on the whole batch).
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.core import JaxprEqn
from ourjax.interpreters import spmd

from cpu_devices import N, four_cpu_devices, random_f32 as _x  # noqa: F401,E402  (autouse)


def _program(f) -> spmd.Program:
  (entry,) = f._pmap_cache.values()
  return entry[0]


def _collectives(program):
  return [s for s in program.steps if isinstance(s, JaxprEqn)]


def test_independent_collectives_run_in_one_round_packed_per_dtype():
  rng = np.random.default_rng(0)
  x = rng.standard_normal((N, 3, 2)).astype(np.float32)
  k = rng.integers(-5, 5, (N, 4)).astype(np.int32)

  def f(x, k):
    a = lax.psum(jnp.sin(x), "i")              # round 0, packed with b, c (float32)
    b = lax.pmean(x.sum(), "i")
    c = lax.psum(jnp.zeros((0, 2)), "i")       # empty: left out of the packing
    m = lax.pmax(x * 2, "i")                   # round 0, its own collective (another op)
    i = lax.psum(k * 3, "i")                   # round 0, int32: packed on its own
    j = lax.psum(k + 1, "i")
    d = lax.psum(a * m, "i")                   # round 1: reads round 0's results
    return a + b, c, m, i - j, d
  pf = ourjax.pmap(f, axis_name="i")
  a, c, m, ij, d = pf(x, k)
  s = np.sin(x).sum(0)
  mx = (x * 2).max(0)
  np.testing.assert_allclose(np.asarray(a), np.broadcast_to(s + x.sum() / N, x.shape),
                             rtol=1e-5, atol=1e-5)
  assert np.asarray(c).shape == (N, 0, 2)
  np.testing.assert_array_equal(np.asarray(m), np.broadcast_to(mx, x.shape))
  np.testing.assert_array_equal(np.asarray(ij),
                                np.broadcast_to((k * 3).sum(0) - (k + 1).sum(0), k.shape))
  np.testing.assert_allclose(np.asarray(d), np.broadcast_to(N * s * mx, x.shape), rtol=1e-5,
                             atol=1e-4)
  # the same under vmap with the named axis (pmap's definition)
  for got, want in zip((a, c, m, ij, d), ourjax.vmap(f, axis_name="i")(x, k)):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-4)
  coll = _collectives(_program(pf))
  # round 0: one psum (float32 and int32 packs, the empty operand), one pmax; round 1: a psum
  assert [e.primitive.name for e in coll] == ["psum", "pmax", "psum"]
  shapes = sorted(tuple(x.aval.shape) for x in coll[0].inputs)
  assert shapes == [(0, 2), (7,), (8,)]   # sin(x) and the sum; the two int32


def test_data_parallel_gradients_take_one_all_reduce_and_match_one_device():
  rng = np.random.default_rng(1)
  params = {"w1": rng.standard_normal((3, 5)).astype(np.float32),
            "b1": np.zeros(5, np.float32), "w2": rng.standard_normal((5, 2)).astype(np.float32)}
  x = rng.standard_normal((N, 6, 3)).astype(np.float32)
  y = rng.standard_normal((N, 6, 2)).astype(np.float32)

  def loss(p, x, y):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    return jnp.mean((h @ p["w2"] - y) ** 2)

  def step(p, x, y):
    value, g = ourjax.value_and_grad(loss)(p, x, y)
    g, value = lax.pmean(g, "d"), lax.pmean(value, "d")
    return ourjax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g), value
  pf = ourjax.pmap(step, axis_name="d", in_axes=(None, 0, 0))
  new, value = pf(params, x, y)
  whole_v, whole_g = ourjax.jit(ourjax.value_and_grad(loss))(params, x.reshape(-1, 3),
                                                             y.reshape(-1, 2))
  np.testing.assert_allclose(np.asarray(value), np.full(N, float(whole_v)), rtol=1e-5)
  for name in params:
    want = params[name] - 0.1 * np.asarray(whole_g[name])
    np.testing.assert_allclose(np.asarray(new[name]), np.broadcast_to(want, (N,) + want.shape),
                               rtol=1e-5, atol=1e-6)
  program = _program(pf)
  (coll,) = _collectives(program)               # the gradients' and the loss's: one psum
  assert len(coll.inputs) == 1 and coll.inputs[0].aval.shape == (3 * 5 + 5 + 5 * 2 + 1,)
  assert sum(isinstance(s, spmd._Compute) for s in program.steps) == 2


def test_pmap_results_feed_pmap_along_their_axis_or_another():
  x = np.arange(N * 6, dtype=np.float32).reshape(N, 2, 3)
  f = ourjax.pmap(lambda v: v * 2 + lax.axis_index("i"), axis_name="i")
  g = ourjax.pmap(lambda v: v + lax.psum(v, "i"), axis_name="i", in_axes=1, out_axes=1)
  y = f(x)
  want_y = x * 2 + np.arange(N)[:, None, None]
  for _ in range(2):       # the lanes' values of y (not its blocks) go in
    z = f(y)
    np.testing.assert_array_equal(np.asarray(z), want_y * 2 + np.arange(N)[:, None, None])
  # y mapped along another axis: split as any array (2 lanes of the 2-long axis 1)
  yt = np.swapaxes(want_y, 0, 1)          # [2, N, 3]
  w = g(np.asarray(y).transpose(1, 0, 2))  # in_axes=1 over a host array: axis 1 has N entries
  np.testing.assert_array_equal(np.asarray(w), yt + yt.sum(1, keepdims=True))
  w2 = g(w)                                # w is mapped along axis 1: its lanes' values go in
  np.testing.assert_array_equal(np.asarray(w2),
                                np.asarray(w) + np.asarray(w).sum(1, keepdims=True))
  h = ourjax.pmap(lambda v: v.sum(), axis_name="i", in_axes=1)
  np.testing.assert_array_equal(np.asarray(h(y)), want_y.sum((0, 2)))
  # the blocks and the values of a result read before and after it feeds a pmap
  y2 = f(x)
  assert y2.block_until_ready() is y2 and y2.is_ready() and not y2.is_deleted()
  shards = y2.addressable_shards
  assert [s.data.shape for s in shards] == [(1, 2, 3)] * N
  for k, s in enumerate(shards):
    np.testing.assert_array_equal(np.asarray(s.data), want_y[k:k + 1])
  np.testing.assert_array_equal(np.asarray(f(y2)), np.asarray(z))


def test_calls_of_one_structure_with_other_types_take_their_own_programs():
  """A call whose leaves have the structure of the last call but other types (shape, dtype, an
  Array or a pmap result, over the same devices or others) is run by its own program, and the
  lanes' values of a result over other devices are not taken as this call's."""
  f = ourjax.pmap(lambda a, b: (a * 2 + b, lax.psum(a, "i")), axis_name="i")
  rng = np.random.default_rng(0)
  a3, a4 = _x(rng, (N, 3)), _x(rng, (N, 4))
  b3 = _x(rng, (N, 3))
  ai = np.arange(N * 3, dtype=np.int32).reshape(N, 3)
  ys = f(a3, b3)[0]                                  # a result over devices 0..N-1, axis 0
  rev = ourjax.pmap(lambda v: v + 0, axis_name="i", devices=ourjax.devices()[::-1])(a3)
  sq = _x(rng, (N, N))
  by_cols = ourjax.pmap(lambda v: v + 0, axis_name="i", in_axes=1, out_axes=1)(sq)
  cases = [(a3, b3), (a4, a4), (ai, ai), (a3, b3), (ys, b3), (rev, b3),
           (ourjax.numpy.asarray(a3), b3), (ai, ai.astype(np.float32)), (ys, ys),
           (sq, sq), (by_cols, sq), (sq, by_cols)]
  for _ in range(2):
    for a, b in cases:
      got_s, got_p = f(a, b)
      na, nb = np.asarray(a), np.asarray(b)
      want_s = na * 2 + nb
      np.testing.assert_array_equal(np.asarray(got_s), want_s)
      assert got_s.dtype == (np.int32 if nb.dtype == np.int32 else np.float32)
      np.testing.assert_array_equal(np.asarray(got_p), np.broadcast_to(na.sum(0), na.shape))


def test_calls_with_other_structures_at_the_last_structures_leaves():
  """The last call's structure is matched by generated code that does not examine its leaf
  positions: a container there, another key, a list for a tuple are other structures."""
  from ourjax.tree_util import tree_map
  f = ourjax.pmap(lambda t: tree_map(lambda v: v * 2 + lax.psum(v, "i"), t), axis_name="i")
  rng = np.random.default_rng(1)
  x, y = _x(rng, (N, 2)), _x(rng, (N, 3))
  calls = [{"a": x, "b": y}, {"a": x, "b": (y, x)}, {"a": x, "c": y}, {"a": x, "b": [y, x]},
           {"a": x, "b": None}, {"a": (x,), "b": y}, {"a": x, "b": y}]
  for t in calls * 2:
    got = f(t)
    want = tree_map(lambda v: v * 2 + v.sum(0), t)
    assert ourjax.tree_util.tree_structure(got) == ourjax.tree_util.tree_structure(want)
    for g, w in zip(ourjax.tree_util.tree_leaves(got), ourjax.tree_util.tree_leaves(want)):
      np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6)


def test_donated_pmap_results_are_deleted_and_later_results_survive():
  x = np.arange(N * 3, dtype=np.float32).reshape(N, 3)
  ident = ourjax.pmap(lambda v: v, axis_name="i")
  step = ourjax.pmap(lambda v: v + 1, axis_name="i", donate_argnums=0)
  a = ident(x)
  b = ident(a)                     # b's lanes' values are a's
  c = step(a)                      # a donated: deleted, b (sharing its values) is not
  assert a.is_deleted() and not b.is_deleted()
  np.testing.assert_array_equal(np.asarray(b), x)
  np.testing.assert_array_equal(np.asarray(c), x + 1)
  with pytest.raises(RuntimeError, match="deleted"):
    np.asarray(a)
  d = step(step(c))
  assert c.is_deleted()
  np.testing.assert_array_equal(np.asarray(d), x + 3)


def test_reductions_over_one_device_are_their_operands():
  rng = np.random.default_rng(2)
  x = rng.standard_normal((1, 3)).astype(np.float32)
  k = np.array([[3, -4]], np.int32)
  f = ourjax.pmap(lambda v, c: (lax.psum(v, "i"), lax.pmax(v * 2, "i"), lax.pmean(v, "i"),
                                lax.pmin(c, "i"), lax.all_gather(v, "i")), axis_name="i")
  s, m, mean, mn, g = f(x, k)
  np.testing.assert_array_equal(np.asarray(s), x)
  np.testing.assert_array_equal(np.asarray(m), x * 2)
  np.testing.assert_array_equal(np.asarray(mean), x)
  np.testing.assert_array_equal(np.asarray(mn), k)
  assert np.asarray(mn).dtype == np.int32
  np.testing.assert_array_equal(np.asarray(g), x[:, None])
  # the reductions are gone from the program: only the all_gather cuts it
  assert [e.primitive.name for e in _collectives(_program(f))] == ["all_gather"]


def test_packs_hold_at_most_pack_parts_operands(monkeypatch):
  from ourjax.interpreters import spmd_schedule
  monkeypatch.setattr(spmd_schedule, "PACK_PARTS", 3)
  rng = np.random.default_rng(3)
  xs = [rng.standard_normal((N, i + 1)).astype(np.float32) for i in range(7)]
  pf = ourjax.pmap(lambda *vs: lax.psum([v * (i + 1) for i, v in enumerate(vs)], "i"),
                   axis_name="i")
  outs = pf(*xs)
  for i, (x, o) in enumerate(zip(xs, outs)):
    np.testing.assert_allclose(np.asarray(o), np.broadcast_to((x * (i + 1)).sum(0), x.shape),
                               rtol=1e-5, atol=1e-5)
  (coll,) = _collectives(_program(pf))
  # packs of operands 0-2 and 3-5 (1+2+3 and 4+5+6 elements), operand 6 alone
  assert sorted(x.aval.shape for x in coll.inputs) == [(6,), (7,), (15,)]


@settings(max_examples=6, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["sin", "mul", "psum", "pmax", "pmean", "gather"]),
                              st.integers(0, 100), st.integers(0, 100)), min_size=2, max_size=7),
       seed=st.integers(0, 2**16))
def test_scheduled_programs_match_vmap(ops, seed):
  """Random chains of computations and collectives, each reading earlier values: pmap (the
  collectives gathered into rounds and packed) against vmap with the named axis."""
  x = np.random.default_rng(seed).standard_normal((N, 3)).astype(np.float32)

  def f(v):
    vals = [v, v * 0.5]
    for op, i, j in ops:
      a, b = vals[i % len(vals)], vals[j % len(vals)]
      if op == "sin":
        vals.append(jnp.sin(a))
      elif op == "mul":
        vals.append(a * b * 0.5)
      elif op == "gather":
        vals.append(lax.all_gather(a, "i").sum(0) / N)
      else:
        vals.append(getattr(lax, op)(a, "i") / (N if op == "psum" else 1))
    return vals[2:]
  got = ourjax.pmap(f, axis_name="i")(x)
  want = ourjax.vmap(f, axis_name="i")(x)
  for g, w in zip(got, want):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)
