"""lowering.loops.trip_count: the iterations of counted while loops, against running them."""
from __future__ import annotations

import operator

import numpy as np
from hypothesis import given, settings, strategies as st

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.lowering import loops

OPS = {"LT": operator.lt, "LE": operator.le, "GT": operator.gt, "GE": operator.ge}


def _trip_counts(f, *args):
  module = ourjax.jit(f).lower(*args).compile()._executable.module
  return [loops.trip_count(i) for c in module.computations for i in c.instructions
          if i.opcode == "while"]


def _python_trips(start, op, limit, step, flipped, cap=10_000):
  n, i = 0, start
  while (OPS[op](limit, i) if flipped else OPS[op](i, limit)) and n < cap:
    i += step
    n += 1
  return n


@settings(max_examples=60, deadline=None)
@given(start=st.integers(-20, 20), limit=st.integers(-20, 20),
       step=st.integers(-4, 4).filter(bool), op=st.sampled_from(sorted(OPS)),
       flipped=st.booleans())
def test_trip_count_matches_running_the_loop(start, limit, step, op, flipped):
  x = np.ones(3, np.float32)

  def cond(c):
    return OPS[op](limit, c[0]) if flipped else OPS[op](c[0], limit)

  def f(x):
    return lax.while_loop(cond, lambda c: (c[0] + step, c[1] * 1.5 + 1.0), (start, x))

  want = _python_trips(start, op, limit, step, flipped)
  got = _trip_counts(f, x)
  if not got:                 # folded away (a loop that never runs)
    assert want == 0
    return
  (n,) = got
  if want == 10_000:          # the counter runs away from the limit: no static count
    assert n is None
  else:
    assert n == want
    # and the loop computes what running it that many times does
    out = f(x)
    np.testing.assert_allclose(np.asarray(out[1]), _run(x, n), rtol=1e-6)


def _run(x, n):
  x = x.astype(np.float64)
  for _ in range(n):
    x = x * 1.5 + 1.0
  return x


def test_scan_and_fori_loop_have_static_counts():
  x = np.ones(4, np.float32)
  assert _trip_counts(lambda x: lax.scan(lambda c, _: (c * 2, c.sum()), x, None, length=7),
                      x) == [7]
  assert _trip_counts(lambda x: lax.scan(lambda c, y: (c + y, c), x, jnp.ones((5, 4)),
                                         reverse=True), x) == [5]
  assert _trip_counts(lambda x: lax.fori_loop(2, 9, lambda i, c: c + i, x), x) == [7]


def test_data_dependent_loops_have_none():
  x = np.ones(4, np.float32)
  assert _trip_counts(lambda x: lax.while_loop(lambda c: jnp.sum(c) < 100, lambda c: c * 2, x),
                      x) == [None]
  # a counter bounded by an argument is not static
  assert _trip_counts(lambda x, n: lax.fori_loop(0, n, lambda i, c: c + i, x),
                      x, np.int32(5)) == [None]
