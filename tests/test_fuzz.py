"""Differential fuzzing (``ourjax.fuzzing``): random programs over the primitive set run eagerly,
under jit on the CPU backend, under grad and under vmap, each compared with the reference
backend.  A bounded number of examples for CI; ``tools/fuzz.py --minutes N`` runs long and
writes a minimized reproducer for every mismatch."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ourjax import fuzzing

_EXAMPLES = int(os.environ.get("OURJAX_FUZZ_EXAMPLES", "120"))


@settings(max_examples=_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(prog=fuzzing.programs(min_ops=2, max_ops=8))
def test_random_programs_match_the_reference(prog):
  fuzzing.check(prog)


def test_generator_covers_the_primitive_families():
  """Over a fixed set of draws every family of operations and every input dtype shows up,
  with sizes 0 and 1 and special values among the inputs."""
  seen_ops, seen_dtypes, sizes, specials = set(), set(), set(), set()

  @settings(max_examples=400, deadline=None, database=None, derandomize=True,
            suppress_health_check=list(HealthCheck))
  @given(fuzzing.programs(min_ops=4, max_ops=8))
  def draw(prog):
    seen_ops.update(prog.ops)
    for a in prog.inputs:
      seen_dtypes.add(a.dtype)
      sizes.update(a.shape)
      if a.dtype in fuzzing.FLOATS:
        v = a.astype(np.float32)
        specials.update(k for k, m in (("nan", np.isnan(v)), ("inf", np.isinf(v)),
                                       ("-0", (v == 0) & np.signbit(v))) if m.any())
  draw()
  for op in ("jnp.exp", "compare", "select", "reduce_sum", "transpose", "slice", "concat",
             "pad", "dot", "gather", "scatter_add", "sort", "cumsum", "cummax", "cast", "cond",
             "scan", "while", "fori"):
    assert op in seen_ops, op
  assert set(fuzzing.DTYPES) <= seen_dtypes
  assert {0, 1} <= sizes and specials == {"nan", "inf", "-0"}


def test_a_mismatch_is_reported_with_a_reproducer(tmp_path, monkeypatch):
  """The comparison catches a wrong result, and the reproducer script replays it."""
  prog = fuzzing.Program("def f(x0):\n  x0 = jnp.asarray(x0)\n  v1 = jnp.exp(x0)\n"
                         "  return (v1,)\n", (np.array([0.0, 1.0, np.nan], np.float32),),
                         True, ("jnp.exp",))
  assert fuzzing.check(prog) == 4
  real = fuzzing.run_mode

  def wrong(p, mode, backend="cpu"):
    outs = real(p, mode, backend)
    return [np.asarray(o) * 1.01 for o in outs] if (mode, backend) == ("jit", "cpu") else outs
  monkeypatch.setattr(fuzzing, "run_mode", wrong)
  with pytest.raises(fuzzing.Mismatch, match=r"\[jit\] output 0"):
    fuzzing.check(prog)
  monkeypatch.undo()
  script = tmp_path / "repro.py"
  script.write_text(prog.reproducer("exp"))
  import subprocess
  import sys
  root = os.path.dirname(os.path.dirname(os.path.abspath(fuzzing.__file__)))
  out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=root))
  assert out.returncode == 0 and out.stdout.split() == ["eager", "ok", "jit", "ok", "grad",
                                                        "ok", "vmap", "ok"], out.stderr[-2000:]
