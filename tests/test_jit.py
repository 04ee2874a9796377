"""jit: random programs agree eagerly, jitted and through the staged API; the cache keys on
structure, avals (weak types included), static values, backend and the x64 flag; static, donated
and unused arguments behave as in JAX; compile logging explains cache misses; the staged API
(trace/lower/compile, as_text, cost_analysis); leaked tracers and error locations."""
from __future__ import annotations

import logging
import re

import numpy as np
import pytest
from hypothesis import given, settings

import jaxpr_programs
import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.config import config, enable_x64
from ourjax.errors import UnexpectedTracerError

F32 = np.float32


@pytest.fixture(autouse=True)
def strict_lowering(monkeypatch):
  monkeypatch.setenv("OURJAX_STRICT_LOWERING", "1")


@pytest.fixture
def log_compiles():
  old = config.jax_log_compiles
  config.update("jax_log_compiles", True)
  try:
    yield
  finally:
    config.update("jax_log_compiles", old)


def counting(fn):
  """``fn`` wrapped to count how often it is traced (run as Python)."""
  calls = []

  def wrapped(*args, **kwargs):
    calls.append(1)
    return fn(*args, **kwargs)
  wrapped.__name__ = fn.__name__
  wrapped.calls = calls
  return wrapped


# ------------------------------------------------------------------------------------------------
# Random programs: eager == jit == lower().compile()


@settings(max_examples=2 * settings.default.max_examples)
@given(jaxpr_programs.programs())
def test_random_programs_eager_jit_compiled_agree(prog):
  """(f32 dots at the highest precision, as eager computes them: on a GPU the default rounds
  their operands to tf32, as JAX's does)"""
  args = prog.inputs
  expected = prog(*args)
  before = ourjax.config.jax_default_matmul_precision
  ourjax.config.update("jax_default_matmul_precision", "highest")
  try:
    jitted = ourjax.jit(prog)(*args)
    jaxpr_programs.assert_outputs_close(jitted, expected, "jit")
    compiled = ourjax.jit(prog).lower(*args).compile()
    jaxpr_programs.assert_outputs_close(compiled(*args), expected, "lower().compile()")
  finally:
    ourjax.config.update("jax_default_matmul_precision", before)


@given(jaxpr_programs.programs(min_ops=3, max_ops=12))
def test_random_programs_keep_unused_and_abstract_lowering(prog):
  """Lowering from ShapeDtypeStructs gives the same module; keep_unused keeps every input."""
  args = prog.inputs
  structs = [ourjax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in args]
  text = ourjax.jit(prog).lower(*args).as_text("hlo")
  assert ourjax.jit(prog).lower(*structs).as_text("hlo") == text
  kept = ourjax.jit(prog, keep_unused=True)
  assert kept.lower(*args).as_text("hlo").count("parameter(") >= len(args)
  # (against the same program jitted: the same backend and dot precision)
  jaxpr_programs.assert_outputs_close(kept(*args), ourjax.jit(prog)(*args), "keep_unused")


# ------------------------------------------------------------------------------------------------
# The cache


def test_cache_hits_for_equal_avals():
  f = counting(lambda x, y: x * y + 1)
  g = ourjax.jit(f)
  a, b = np.ones((2, 3), F32), np.arange(6, dtype=F32).reshape(2, 3)
  np.testing.assert_array_equal(g(a, b), a * b + 1)
  g(b, a)
  g(jnp.asarray(a), b)         # an Array and a NumPy array have the same aval
  assert len(f.calls) == 1


def test_cache_is_shared_by_jits_of_one_function():
  f = counting(lambda x: x + 1)
  ourjax.jit(f)(1.0)
  ourjax.jit(f)(2.0)                          # a new wrapper, the same function and options
  assert len(f.calls) == 1
  ourjax.jit(f, static_argnums=())(1.0)       # equal options
  assert len(f.calls) == 1
  ourjax.jit(f, keep_unused=True)(1.0)        # other options: their own cache
  assert len(f.calls) == 2


def test_cache_misses_on_shape_dtype_and_structure():
  f = counting(lambda x: jnp.sum(x))
  g = ourjax.jit(f)
  g(np.ones(3, F32))
  g(np.ones(4, F32))                              # shape
  g(np.ones(4, np.int32))                         # dtype
  assert len(f.calls) == 3
  h = counting(lambda xs: xs[0] + xs[1])
  gh = ourjax.jit(h)
  gh((np.ones(2, F32), np.ones(2, F32)))
  gh([np.ones(2, F32), np.ones(2, F32)])          # list vs tuple: another structure
  gh((np.ones(2, F32), np.ones(2, F32)))
  assert len(h.calls) == 2


def test_weak_and_strong_scalars_are_different_keys():
  f = counting(lambda x: x * 2)
  g = ourjax.jit(f)
  r1 = g(1.0)                     # weak f32 (a Python float)
  r2 = g(2.5)                     # same weak aval: cached
  r3 = g(np.float32(1.0))         # strong f32
  assert len(f.calls) == 2
  assert r1.weak_type and r2.weak_type and not r3.weak_type
  assert r1.dtype == r3.dtype == np.float32
  g(3)                            # weak int32
  g(4)
  assert len(f.calls) == 3


def test_static_args_are_part_of_the_key():
  f = counting(lambda x, n: x * n)
  g = ourjax.jit(f, static_argnums=1)
  assert np.asarray(g(np.ones(2, F32), 2))[0] == 2
  assert np.asarray(g(np.ones(2, F32), 2))[0] == 2
  assert len(f.calls) == 1
  assert np.asarray(g(np.ones(2, F32), 3))[0] == 3
  assert len(f.calls) == 2
  g(np.ones(2, F32), 2.0)         # == and same hash as 2, but a float: traced again (as JAX)
  assert len(f.calls) == 3
  g(np.ones(2, F32), 2.0)
  assert len(f.calls) == 3


def test_static_args_compare_by_eq_and_hash():
  class Key:
    def __init__(self, v):
      self.v = v

    def __eq__(self, other):
      return isinstance(other, Key) and self.v == other.v

    def __hash__(self):
      return hash(self.v)

  f = counting(lambda x, k: x + k.v)
  g = ourjax.jit(f, static_argnums=(1,))
  g(np.ones(2, F32), Key(1))
  g(np.ones(2, F32), Key(1))       # another object, equal: a hit
  assert len(f.calls) == 1
  g(np.ones(2, F32), Key(2))
  assert len(f.calls) == 2
  t = counting(lambda x, shape: jnp.reshape(x, shape))
  gt = ourjax.jit(t, static_argnames="shape")
  gt(np.ones(6, F32), shape=(2, 3))
  gt(np.ones(6, F32), shape=tuple([2, 3]))
  assert len(t.calls) == 1


def test_x64_flag_is_part_of_the_key():
  f = counting(lambda x: x + 1)
  g = ourjax.jit(f)
  x = np.ones(3, F32)
  g(x)
  with enable_x64(True):
    r = g(x)
    assert r.dtype == np.float32
    assert g(np.ones(3)).dtype == np.float64      # float64 survives with x64
  g(x)
  assert len(f.calls) == 3
  assert g(np.ones(3)).dtype == np.float32


def test_backend_is_passed_through():
  for backend in (None, "cpu", "reference"):
    g = ourjax.jit(lambda x: x * 2, backend=backend)
    np.testing.assert_array_equal(g(np.arange(3, dtype=F32)), [0, 2, 4])
  with pytest.raises(ValueError, match="backend"):
    ourjax.jit(lambda x: x, backend="tpu")(1.0)


# ------------------------------------------------------------------------------------------------
# static_argnums / static_argnames / donate / keep_unused / decorators


def test_static_argnums_and_argnames_infer_each_other():
  def f(x, n, *, scale=1.0):
    return x * n * scale
  g = ourjax.jit(f, static_argnums=1)
  assert "n" in g.static_argnames
  assert np.asarray(g(np.ones(2, F32), n=3))[0] == 3   # passed by keyword, still static
  h = ourjax.jit(f, static_argnames=("n", "scale"))
  assert 1 in h.static_argnums
  assert np.asarray(h(np.ones(2, F32), 2, scale=0.5))[0] == 1
  k = ourjax.jit(f, static_argnums=-1)
  assert np.asarray(k(np.ones(2, F32), 4))[0] == 4


def test_static_args_control_python():
  @ourjax.jit(static_argnames="mode")
  def f(x, mode):
    if mode == "double":          # Python control flow on a static value
      return x * 2
    return x
  np.testing.assert_array_equal(f(np.ones(2, F32), mode="double"), [2, 2])
  np.testing.assert_array_equal(f(np.ones(2, F32), mode="same"), [1, 1])


@pytest.mark.parametrize("bad", [[1, 2], {"a": 1}, np.ones(2), "ARRAY"])
def test_unhashable_static_arg(bad):
  g = ourjax.jit(lambda x, n: x, static_argnums=1)
  if isinstance(bad, str):
    bad = jnp.ones(2)
  with pytest.raises(ValueError, match="Non-hashable static arguments are not supported"):
    g(1.0, bad)
  with pytest.raises(ValueError, match="hash an object of type"):
    ourjax.jit(lambda x, n: x, static_argnames="n")(1.0, n=bad)


def test_invalid_static_and_donate_specs():
  def f(x, n):
    return x
  with pytest.raises(ValueError, match=r"static_argnums=\(3,\), but only accepts 2 positional"):
    ourjax.jit(f, static_argnums=3)
  with pytest.raises(ValueError, match="invalid argnames"):
    ourjax.jit(f, static_argnames="m")
  with pytest.raises(ValueError, match=r"donate_argnums=\(5,\)"):
    ourjax.jit(f, donate_argnums=5)
  ourjax.jit(lambda *xs: xs[0], static_argnums=3)     # *args: any position may be static


def test_donate_argnums_recorded():
  def f(x, y):
    return x + y
  g = ourjax.jit(f, donate_argnums=0)
  assert "x" in g.donate_argnames
  x, y = np.ones(3, F32), np.full(3, 2.0, F32)
  np.testing.assert_array_equal(g(x, y), [3, 3, 3])
  lowered = g.lower(x, y)
  assert lowered.donate_argnums == (0,)
  info, _ = lowered.args_info
  assert info[0].donated and not info[1].donated
  h = ourjax.jit(f, donate_argnames="y")
  assert h.donate_argnums == (1,)
  np.testing.assert_array_equal(h(x, y=y), [3, 3, 3])
  np.testing.assert_array_equal(x, [1, 1, 1])         # NumPy arguments are never overwritten


def test_keep_unused():
  f = counting(lambda x, unused, z: x * z)
  args = (np.ones(3, F32), np.ones((7, 7), F32), np.full(3, 3.0, F32))
  g = ourjax.jit(f)
  np.testing.assert_array_equal(g(*args), [3, 3, 3])
  assert g.lower(*args).as_text("hlo").count("parameter(") == 2
  assert "f32[7,7]" not in g.lower(*args).compile().as_text()
  np.testing.assert_array_equal(g.lower(*args).compile()(*args), [3, 3, 3])
  k = ourjax.jit(f, keep_unused=True)
  assert k.lower(*args).as_text("hlo").count("parameter(") == 3
  np.testing.assert_array_equal(k(*args), [3, 3, 3])


def test_decorator_forms_and_methods():
  @ourjax.jit
  def a(x):
    return x + 1

  @ourjax.jit(static_argnames="k")
  def b(x, k=2):
    return x * k

  class M:                      # (self is not an array: it must be static, as in JAX)
    def __init__(self, s):
      self.s = s

    @ourjax.jit(static_argnums=0)
    def apply(self, x):
      return x * 3 + self.s

    @ourjax.jit
    def bad(self, x):
      return x

  assert a(1.0) == 2 and b(1.0) == 2 and b(1.0, k=5) == 5
  assert M(0).apply(2.0) == 6 and M(1).apply(2.0) == 7
  # (JAX 0.10.2's words: "Error interpreting argument to ... as an abstract array ... path self")
  with pytest.raises(TypeError, match="Error interpreting argument to .* as an abstract array"
                                      ".* passed to the function at path self"):
    M(0).bad(1.0)
  assert ourjax.jit(static_argnums=0)(lambda n, x: x * n)(3, 2.0) == 6
  with pytest.raises(TypeError, match="Expected a callable"):
    ourjax.jit(3)
  assert a.__name__ == "a" and repr(a) == f"<PjitFunction of {a.__wrapped__!r}>"


def test_pytrees_kwargs_and_no_outputs():
  @ourjax.jit
  def f(tree, *, bias):
    return {"sum": tree["a"] + tree["b"][0], "none": None, "pair": (bias, bias * 2)}
  out = f({"a": np.ones(2, F32), "b": [np.ones(2, F32)]}, bias=1.0)
  np.testing.assert_array_equal(out["sum"], [2, 2])
  assert out["none"] is None and out["pair"][1] == 2
  assert ourjax.jit(lambda: None)() is None
  assert ourjax.jit(lambda: ())() == ()
  np.testing.assert_array_equal(ourjax.jit(lambda: jnp.arange(3))(), [0, 1, 2])


def test_disable_jit():
  f = counting(lambda x: x + 1)
  g = ourjax.jit(f)
  with ourjax.disable_jit():
    g(1.0)
    g(1.0)
  assert len(f.calls) == 2


def test_inline():
  inner = ourjax.jit(lambda x: jnp.sin(x) * 2, inline=True)
  jaxpr = ourjax.make_jaxpr(lambda x: inner(x) + 1)(np.ones(3, F32))
  assert "jit" not in str(jaxpr) and "sin" in str(jaxpr)
  np.testing.assert_allclose(inner(np.ones(3, F32)), 2 * np.sin(1), rtol=1e-6)


def test_nested_jit_inlines_into_one_module():
  inner_f = counting(lambda x: x * 2)
  inner = ourjax.jit(inner_f)
  outer = ourjax.jit(lambda x: inner(x) + inner(x + 1))
  np.testing.assert_array_equal(outer(np.ones(2, F32)), [6, 6])
  assert len(inner_f.calls) == 1                   # one signature, traced once
  text = outer.lower(np.ones(2, F32)).as_text("hlo")
  assert text.count("ENTRY") == 1 and text.count("HloModule") == 1


def test_jit_under_transformations():
  g = ourjax.jit(lambda x, w: jnp.tanh(x * w).sum())
  x, w = np.arange(3, dtype=F32), np.full(3, 0.5, F32)
  dx = ourjax.grad(g)(x, w)
  np.testing.assert_allclose(dx, w * (1 - np.tanh(x * w) ** 2), rtol=1e-5)
  v = ourjax.vmap(g, in_axes=(0, None))(np.stack([x, x + 1]), w)
  np.testing.assert_allclose(v, [np.tanh(x * w).sum(), np.tanh((x + 1) * w).sum()], rtol=1e-6)


# ------------------------------------------------------------------------------------------------
# jax_log_compiles


def _compile_logs(caplog):
  return [r.getMessage() for r in caplog.records
          if r.name == "ourjax" and r.getMessage().startswith("Compiling")]


def test_log_compiles_explains_misses(caplog, log_compiles):
  caplog.set_level(logging.WARNING, logger="ourjax")

  def fn(x, y, n=1):
    return x * n + y
  g = ourjax.jit(fn, static_argnames="n")
  g(np.ones(3, F32), np.ones(3, F32))
  g(np.ones(3, F32), np.ones(3, F32))            # a hit: no log
  logs = _compile_logs(caplog)
  assert len(logs) == 1 and "Compiling jit(fn)" in logs[0] and "first call" in logs[0]
  g(np.ones(4, F32), np.ones(3, F32)[:1])
  assert re.search(r"argument x: shape changed, now f32\[4\] and before f32\[3\]",
                   _compile_logs(caplog)[-1])
  g(np.ones(3, np.int32), np.ones(3, F32))
  assert re.search(r"argument x: dtype changed, now i32\[3\] and before f32\[3\]",
                   _compile_logs(caplog)[-1])
  g(np.ones(3, F32), np.float32(2.0))
  g(np.ones(3, F32), 2.0)
  assert re.search(r"argument y: now f32\[\] \(weak type\) and before f32\[\]: the weak type "
                   "changed", _compile_logs(caplog)[-1])
  g(np.ones(3, F32), np.ones(3, F32), n=2)
  g(np.ones(3, F32), np.ones(3, F32), n=3)
  assert "static argument n: now 3 and before 2" in _compile_logs(caplog)[-1]
  with enable_x64(True):
    g(np.ones(3, F32), np.ones(3, F32), n=3)
  assert "jax_enable_x64 is now True and was False" in _compile_logs(caplog)[-1]
  assert len(_compile_logs(caplog)) == 8


def test_log_compiles_names_nested_paths(caplog, log_compiles):
  caplog.set_level(logging.WARNING, logger="ourjax")
  g = ourjax.jit(lambda params, x: params["w"] * x)
  g({"w": np.ones(2, F32)}, np.ones(2, F32))
  g({"w": np.ones(3, F32)}, np.ones(2, F32)[:1])
  msg = _compile_logs(caplog)[-1]
  assert "argument params['w']: shape changed" in msg
  assert "argument x: shape changed" in msg


def _phase_logs(caplog):
  return [r.getMessage() for r in caplog.records
          if r.name == "ourjax" and r.getMessage().startswith("Finished compiling")]


def _phases_of(msg):
  """{phase: seconds} of a "Finished compiling" line."""
  return {m.group(1): float(m.group(2))
          for m in re.finditer(r"([\w.:]+) (\d+\.\d+) s(?: x\d+)?(?:,|$)", msg)}


def test_log_compiles_times_each_phase(caplog, log_compiles, tmp_path):
  # every phase of a CPU compile is reported (values are not checked: no timing in tests);
  # a fresh disk cache misses first, then a new function of the same program hits it
  caplog.set_level(logging.WARNING, logger="ourjax")
  old = config.jax_compilation_cache_dir
  config.update("jax_compilation_cache_dir", str(tmp_path))
  try:
    x = np.linspace(-1, 1, 12, dtype=F32).reshape(3, 4)
    w = np.linspace(0, 2, 20, dtype=F32).reshape(4, 5)

    def make():
      def loss(x, w):
        return jnp.tanh(x @ w).sum()
      return loss
    out = ourjax.jit(make(), backend="cpu")(x, w)
    np.testing.assert_allclose(out, np.tanh(x.astype(np.float64) @ w).sum(), rtol=1e-5)
    logs = _phase_logs(caplog)
    assert len(logs) == 1 and logs[0].startswith("Finished compiling loss in ")
    phases = _phases_of(logs[0])
    for p in ("trace", "lower", "pass:simplify", "pass:cse", "pass:fusion",
              "pass:buffer_assignment", "cache_read", "plan", "emit", "llvm", "llvm.opt",
              "llvm.codegen", "load", "cache_write", "other"):
      assert p in phases, (p, logs[0])
    assert all(v >= 0 for v in phases.values())

    out2 = ourjax.jit(make(), backend="cpu")(x, w)
    np.testing.assert_allclose(out2, out)
    phases = _phases_of(_phase_logs(caplog)[-1])
    assert "cache_read" in phases and "load" in phases and "llvm.opt" not in phases
  finally:
    config.update("jax_compilation_cache_dir", old)


def test_no_phase_times_when_disabled(caplog):
  caplog.set_level(logging.DEBUG, logger="ourjax")
  ourjax.jit(lambda x: x * 3)(2.0)
  assert not _phase_logs(caplog)


def test_no_logs_when_disabled(caplog):
  # as JAX: without jax_log_compiles nothing is logged at WARNING; "Compiling ..." and the
  # phases' "Finished ..." records are DEBUG ones
  caplog.set_level(logging.DEBUG, logger="ourjax")
  ourjax.jit(lambda x: x + 1)(1.0)
  assert not [r for r in caplog.records if r.name == "ourjax" and r.levelno >= logging.WARNING]
  debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
  # (JAX's words, which JAX's own tests look for)
  assert any(m.startswith("Finished tracing <lambda> for jit") for m in debug)
  assert any(m.startswith("Compiling jit(<lambda>)") for m in debug)
  assert any(m.startswith("Finished XLA compilation of jit(<lambda>)") for m in debug)


# ------------------------------------------------------------------------------------------------
# Errors


def test_leaked_tracer_raises_unexpected_tracer_error():
  leaked = []

  def leaky_function(x):
    leaked.append(x * 2)
    return x + 1
  ourjax.jit(leaky_function)(np.ones(3, F32))
  with pytest.raises(UnexpectedTracerError, match="leaky_function"):
    leaked[0] + 1
  with pytest.raises(UnexpectedTracerError):
    ourjax.jit(lambda y: y * leaked[0])(np.ones(3, F32))


def test_errors_keep_the_users_line():
  def bad(x, y):
    return lax.add(x, y)       # incompatible shapes
  with pytest.raises(TypeError) as info:
    ourjax.jit(bad)(np.ones(3, F32), np.ones(4, F32))
  assert "test_jit.py" in str(info.value)
  line = bad.__code__.co_firstlineno + 1
  assert f"test_jit.py:{line}" in str(info.value)


def test_python_errors_propagate_and_do_not_poison_the_cache():
  calls = []

  def f(x, fail):
    calls.append(1)
    if fail:
      raise RuntimeError("boom")
    return x + 1
  g = ourjax.jit(f, static_argnums=1)
  with pytest.raises(RuntimeError, match="boom"):
    g(1.0, True)
  assert g(1.0, False) == 2
  with pytest.raises(RuntimeError, match="boom"):
    g(1.0, True)                         # nothing was cached for the failing signature
  assert len(calls) == 3


def test_concretization_error_inside_jit():
  def f(x):
    if x > 0:
      return x
    return -x
  with pytest.raises(ourjax.errors.TracerBoolConversionError):
    ourjax.jit(f)(1.0)


# ------------------------------------------------------------------------------------------------
# The staged API


def test_trace_lower_compile():
  def f(x, n, y=1.0):
    return jnp.sin(x) * n + y
  g = ourjax.jit(f, static_argnums=1)
  x = np.ones(3, F32)
  traced = g.trace(x, 2)
  assert "sin" in str(traced.jaxpr)
  assert traced.out_info.shape == (3,)
  lowered = traced.lower()
  text = lowered.as_text("hlo")
  assert text.startswith("HloModule jit_f") and "ENTRY" in text and "sine(" in text
  # JAX's default form is StableHLO
  assert lowered.as_text() == lowered.as_text("stablehlo")
  assert lowered.as_text().startswith("module @jit_f") and "stablehlo.sine" in lowered.as_text()
  assert lowered.in_tree == ourjax.tree_util.tree_structure(((x,), {}))
  assert lowered.out_tree == ourjax.tree_util.tree_structure(x)
  assert lowered.out_info.shape == (3,) and lowered.out_info.dtype == np.float32
  compiled = lowered.compile()
  assert "ENTRY" in compiled.as_text() and compiled.as_text(dialect="hlo") == compiled.as_text()
  assert re.search(r"%sine\.\d+ = f32\[3\] sine\(%p0\)", lowered.as_text("hlo"))
  assert "sine(f32[3] %p0)" in lowered.as_text("hlo", debug_info=True)
  np.testing.assert_allclose(compiled(x), np.sin(1) * 2 + 1, rtol=1e-6)   # static n left out
  np.testing.assert_allclose(g(x, 2), compiled(x))
  assert g.eval_shape(x, 2).shape == (3,)


def test_compiled_checks_its_arguments():
  compiled = ourjax.jit(lambda x, y: x + y).lower(np.ones(3, F32), np.ones(3, F32)).compile()
  with pytest.raises(TypeError, match=r"Argument 'x' compiled with float32\[3\] and called "
                                      r"with float32\[4\]"):
    compiled(np.ones(4, F32), np.ones(3, F32))
  with pytest.raises(TypeError, match="Argument 'y' compiled with float32.* int32"):
    compiled(np.ones(3, F32), np.ones(3, np.int32))
  with pytest.raises(TypeError, match="pytree"):
    compiled(np.ones(3, F32))


def test_lower_from_shape_dtype_structs():
  s = ourjax.ShapeDtypeStruct((2, 3), np.float32)
  lowered = ourjax.jit(lambda a, b: a @ b.T).lower(s, s)
  assert "dot(" in lowered.as_text("hlo")
  out = lowered.compile()(np.ones((2, 3), F32), np.ones((2, 3), F32))
  np.testing.assert_array_equal(out, np.full((2, 2), 3))


def test_as_text_dialects():
  # the reference backend carries no native code: asking for it is a clear error
  compiled = ourjax.jit(lambda x: x + 1, backend="reference").lower(1.0).compile()
  with pytest.raises(ValueError, match="LLVM IR"):
    compiled.as_text(dialect="llvm")
  with pytest.raises(ValueError, match="PTX"):
    compiled.as_text(dialect="ptx")
  with pytest.raises(ValueError, match="unknown dialect"):
    compiled.as_text(dialect="mlir")
  # a backend whose executable carries its code: as_text returns it
  rt = compiled.runtime_executable()
  rt.llvm_ir = "define void @main() { ret void }"
  assert compiled.as_text(dialect="llvm").startswith("define void @main")
  rt.ptx = lambda: ".version 8.0"
  assert compiled.as_text(dialect="ptx") == ".version 8.0"


def test_as_text_llvm_of_the_cpu_backend():
  compiled = ourjax.jit(lambda x: x * 2.0 + 1.0, backend="cpu").lower(
      np.ones(8, F32)).compile()
  text = compiled.as_text(dialect="llvm")
  assert "define" in text and "fmul" in text


def test_cost_analysis():
  m, k, n = 4, 5, 6

  def f(a, b):
    return jnp.exp(a @ b) + 1.0
  a, b = np.ones((m, k), F32), np.ones((k, n), F32)
  lowered = ourjax.jit(f).lower(a, b)
  cost = lowered.compile().cost_analysis()
  assert set(cost) >= {"flops", "transcendentals", "bytes accessed"}
  assert cost["flops"] == 2 * m * n * k + m * n        # the dot and the add
  assert cost["transcendentals"] == m * n              # exp
  assert cost["bytes accessed"] == 4 * (m * k + k * n + m * n)
  assert lowered.cost_analysis()["flops"] == cost["flops"]
  red = ourjax.jit(lambda x: jnp.sum(x, axis=1)).lower(np.ones((3, 8), F32)).compile()
  assert red.cost_analysis()["flops"] == 24


def test_compile_reuses_nothing_stale_after_clear_cache():
  f = counting(lambda x: x + 1)
  g = ourjax.jit(f)
  g(1.0)
  g.clear_cache()
  g(1.0)
  assert len(f.calls) == 2


def test_default_matmul_precision_is_part_of_the_cache_key():
  """The default precision is read when a dot is traced, so a change of it retraces (as in
  JAX), on the fast path too; going back finds the first trace again."""
  traces = []

  def f(a, b):
    traces.append(1)
    return a @ b
  g = ourjax.jit(f)
  a = np.ones((4, 4), np.float32)
  before = ourjax.config.jax_default_matmul_precision
  try:
    ourjax.config.update("jax_default_matmul_precision", None)
    g(a, a)
    g(a, a)
    ourjax.config.update("jax_default_matmul_precision", "highest")
    g(a, a)
    g(a, a)
    ourjax.config.update("jax_default_matmul_precision", before)
    np.testing.assert_array_equal(np.asarray(g(a, a)), a @ a)
  finally:
    ourjax.config.update("jax_default_matmul_precision", before)
  assert len(traces) == 2


def test_jit_wrapper_behaves_as_jaxs():
  def f(x: int) -> int:
    """doc of f."""
    return x + 1
  f.some_value = 4
  jf = ourjax.jit(f)
  assert (jf.__doc__, jf.__name__, jf.__qualname__, jf.__annotations__) == (
      f.__doc__, f.__name__, f.__qualname__, f.__annotations__)
  assert jf.some_value == 4 and repr(jf) == f"<PjitFunction of {f!r}>"
  with pytest.raises(AttributeError):
    jf.no_such_attribute

  def gen(x):
    yield x
  with pytest.raises(TypeError, match="generator function"):
    ourjax.jit(gen)
  with pytest.raises(TypeError, match="staticmethod arguments are not supported"):
    ourjax.jit(staticmethod(f))

  def h(a, /, b, c, *args, **kwargs):
    return a
  ourjax.jit(h, static_argnames=("b", "not_a_parameter"))     # **kwargs may take it
  for bad in (("a",), ("args",)):                             # positional-only, *args
    with pytest.raises(ValueError, match="invalid argnames"):
      ourjax.jit(h, static_argnames=bad)
  # XLA compiler options are accepted (and change nothing here)
  g = ourjax.jit(lambda x: jnp.sqrt(x ** 2) + 1., compiler_options={"xla_foo": True})
  assert float(g(2.0)) == 3.0


def test_copy_to_host_async_returns_its_argument():
  x = [jnp.ones(3), 1, object()]
  assert ourjax.copy_to_host_async(x) is x


def test_escaped_tracer_error_names_the_line():
  saved = []

  @ourjax.jit
  def leak(x):
    saved.append(x * 2)
    return x

  leak(1.0)

  @ourjax.jit
  def use(y):
    return y + saved[0]

  with pytest.raises(ourjax.errors.UnexpectedTracerError,
                     match=r"(?s)global state.*created on line .*test_jit.py:\d+ \(leak\)"):
    use(1.0)


def test_jit_cache_depends_on_named_axes_in_scope():
  g = ourjax.jit(lambda: lax.axis_size("i"))
  for n in (2, 3, 2):
    assert int(ourjax.vmap(g, axis_name="i", axis_size=n, out_axes=None)()) == n


def test_no_tracing_no_execution_and_masked_arrays():
  @ourjax.jit
  def f(x):
    return x * 2

  f(jnp.arange(3))
  with ourjax.no_tracing():
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(3))), [0, 2, 4])   # a cache hit
    with pytest.raises(RuntimeError, match="no_tracing"):
      f(jnp.arange(4))
  with ourjax.no_execution():
    with pytest.raises(RuntimeError, match="no_execution"):
      f(jnp.arange(3))
  np.testing.assert_array_equal(np.asarray(f(jnp.arange(3))), [0, 2, 4])
  m = np.ma.array([1, 2, 3], mask=[True, False, True])
  for g in (f, jnp.asarray, jnp.sin, ourjax.device_put):
    with pytest.raises(ValueError, match="masked arrays are not supported"):
      g(m)


def test_compiled_rejects_transformations_and_lower_takes_platforms():
  f = ourjax.jit(lambda x: x * 2)
  lowered = f.trace(jnp.arange(4)).lower(lowering_platforms=("cpu", "tpu"))
  np.testing.assert_array_equal(np.asarray(lowered.compile()(jnp.arange(4))), [0, 2, 4, 6])
  c = f.lower(1.0).compile()
  assert float(c(3.0)) == 6.0
  with pytest.raises(TypeError, match="Cannot apply JAX transformations to a function lowered "
                     "and compiled.*BatchTracer"):
    ourjax.vmap(c)(jnp.arange(3.0))
  with pytest.raises(TypeError, match="Cannot apply JAX transformations"):
    ourjax.grad(c)(1.0)


def test_static_and_donated_argnames_checks():
  with pytest.raises(ValueError, match="static_argnames and donate_argnames cannot intersect"):
    ourjax.jit(lambda x: x, static_argnames="x", donate_argnames="x")

  class NoSignature:
    @property
    def __signature__(self):
      raise TypeError("no signature")

    def __call__(self, *args, **kwargs):
      return args[0]

  with pytest.raises(ValueError, match="Getting the signature of function.*failed. Pass "
                     "donate_argnums instead of donate_argnames."):
    ourjax.jit(NoSignature(), donate_argnames="a")(np.arange(4))
  np.testing.assert_array_equal(np.asarray(ourjax.jit(NoSignature())(np.arange(4))),
                                np.arange(4))


def test_tracing_is_logged_as_jax_does(caplog):
  # "Finished tracing f for jit in ... sec": WARNING with jax_log_compiles, else DEBUG;
  # clear_caches makes the next call trace again
  def add(x):
    return x * 2
  f = ourjax.jit(add)
  caplog.set_level(logging.DEBUG, logger="ourjax")
  with ourjax.log_compiles(True):
    f(np.arange(8))
    ourjax.clear_caches()
    f(np.arange(8))
  warn = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
  assert sum(m.startswith("Finished tracing add for jit in ") for m in warn) == 2
  caplog.clear()
  ourjax.jit(lambda x: x + 1)(1.0)
  assert any(r.levelno == logging.DEBUG and r.getMessage().startswith(
      "Finished tracing <lambda> for jit") for r in caplog.records)
  assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
