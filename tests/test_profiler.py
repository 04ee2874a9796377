"""ourjax.profiler: per-kernel tables (Compiled.profile, profiler.profile), traces (Chrome
trace-event JSON), annotations and OURJAX_PROFILE=1, on the CPU and, through the stand-in
driver, the CUDA backend's host side.  Nothing here asserts on how long anything took: only
that times are positive, shares add up, and the structure (kinds, launches, bytes, FLOPs, the
HLO a kernel covers, tracks) is right."""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import backends, lax, profiler
from ourjax.backends.cpu import backend as cpu

M, K, N = 48, 64, 32


def mlp(w, b, x):
  h = jnp.maximum(x @ w + b, 0.0)          # dot + bias + relu
  return jnp.sum(h * h, axis=1)            # reduction


def _args():
  r = np.random.default_rng(0)
  return (r.standard_normal((K, N)).astype(np.float32),
          r.standard_normal((N,)).astype(np.float32),
          r.standard_normal((M, K)).astype(np.float32))


def mlp_np(w, b, x):
  h = np.maximum(x.astype(np.float64) @ w + b, 0.0)
  return np.sum(h * h, axis=1)


def _x_events(data):
  return [e for e in data["traceEvents"] if e["ph"] == "X"]


def test_compiled_profile_rows_on_the_cpu():
  args = _args()
  c = ourjax.jit(mlp, backend="cpu").lower(*args).compile()
  prof = c.profile(*args, reps=3)
  rows = prof.rows
  kinds = {r["kind"] for r in rows}
  assert "DotKernel" in kinds and {r["executable"] for r in rows} == {"jit_mlp"}
  kernels = [r for r in rows if r["category"] in ("kernel", "copy")]
  assert kernels and all(r["time_us"] > 0 and r["launches"] == 1 for r in kernels)
  assert all(r["time_us"] >= 0 for r in rows)
  assert sum(r["percent"] for r in rows) == pytest.approx(100.0)
  assert [r["time_us"] for r in rows] == sorted((r["time_us"] for r in rows), reverse=True)
  (dot,) = [r for r in rows if r["kind"] == "DotKernel"]
  assert "dot" in dot["hlo"]
  assert dot["flops"] == 2 * M * N * K and dot["gflops"] > 0
  assert dot["bytes"] == 4 * (M * K + K * N + M * N)
  assert any(r["category"] == "dispatch" for r in rows)
  # every HLO instruction of the optimized module's fusions is covered by some kernel row
  covered = " ".join(r["hlo"] for r in rows)
  assert "maximum" in covered and "reduce" in covered
  text = str(prof)
  assert "DotKernel" in text and "GFLOP/s" in text and "bytes" in text
  # profiling does not change results (the instrumented code computes the same kernels)
  np.testing.assert_allclose(np.asarray(c(*args)), mlp_np(*args), rtol=2e-5, atol=1e-4)


def test_results_are_identical_while_tracing(tmp_path):
  args = _args()
  f = ourjax.jit(mlp)
  plain = np.asarray(f(*args))
  with profiler.trace(tmp_path):
    assert backends._profile_hook is not None
    traced = np.asarray(f(*args))
    traced2 = np.asarray(f(*args))
  np.testing.assert_array_equal(traced, plain)
  np.testing.assert_array_equal(traced2, plain)
  # (a GPU's f32 dots at default precision are TF32, as JAX's: 10 bits of mantissa)
  tf32 = ourjax.default_backend() == "gpu"
  np.testing.assert_allclose(plain, mlp_np(*args), rtol=3e-3 if tf32 else 2e-5,
                             atol=1e-1 if tf32 else 1e-4)
  # afterwards: no hook, and the dispatch fast path is back
  assert backends._profile_hook is None
  f(*args)
  f(*args)
  assert any(callable(v) for v in f._fast.values())


def test_trace_writes_chrome_trace_json(tmp_path, capsys):
  args = _args()
  f = ourjax.jit(mlp, backend="cpu")
  g = ourjax.jit(lambda v: lax.fori_loop(0, 4, lambda i, a: a * 0.5 + jnp.sum(a), v),
                 backend="cpu")

  @profiler.annotate_function
  def helper(v):
    return g(v)

  with profiler.trace(tmp_path, create_perfetto_trace=True):
    for i in range(3):
      with profiler.StepTraceAnnotation("train", step_num=i):
        with profiler.TraceAnnotation("forward", batch=i):
          f(*args)
        helper(args[2])
  out = capsys.readouterr().out
  assert "jit_mlp" in out and "DotKernel" in out and ".trace.json" in out
  (path,) = glob.glob(os.path.join(tmp_path, "plugins", "profile", "*", "*.trace.json"))
  assert glob.glob(os.path.join(os.path.dirname(path), "perfetto_trace.json.gz"))
  with open(path) as fh:
    data = json.load(fh)
  events = _x_events(data)
  assert events
  named = {(e["pid"], e["tid"]) for e in data["traceEvents"]
           if e["ph"] == "M" and e["name"] == "thread_name"}
  for e in events:
    assert e["ts"] >= 0 and e["dur"] >= 0
    assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    assert (e["pid"], e["tid"]) in named       # every track has a name
  names = [e["name"] for e in events]
  assert names.count("forward") == 3 and "train 0" in names and "train 2" in names
  assert any(n.endswith("helper") for n in names)
  steps = [e for e in events if e["cat"] == "step"]
  assert [e["args"]["step_num"] for e in steps] == [0, 1, 2]
  # the CPU's kernels lie inside the call that ran them, on the calling thread's track
  calls = [e for e in events if e["cat"] == "call" and e["name"] == "jit_mlp"]
  kernels = [e for e in events if e["cat"] == "kernel" and "DotKernel" in e["name"]]
  assert len(calls) == len(kernels) == 3
  for call, k in zip(calls, kernels):
    assert (call["pid"], call["tid"]) == (k["pid"], k["tid"])
    assert call["ts"] <= k["ts"] and k["ts"] + k["dur"] <= call["ts"] + call["dur"] + 1e-3
  loops = [e for e in events if e["cat"] == "loop"]
  assert len(loops) == 3 and all(e["name"].startswith("while") for e in loops)


def test_loop_kernels_count_their_launches():
  x = np.linspace(-1, 1, 64 * 32, dtype=np.float32).reshape(64, 32)

  def f(v):
    return lax.fori_loop(0, 7, lambda i, a: jnp.tanh(a) * 1.5 + jnp.mean(a), v)
  c = ourjax.jit(f, backend="cpu").lower(x).compile()
  rows = c.profile(x, reps=2).rows
  in_loop = [r for r in rows if r["loop"]]
  assert in_loop and all(r["loop"].startswith("while") for r in in_loop)
  launches = sorted({r["launches"] for r in in_loop})
  assert 7 in launches and 8 in launches      # the body's kernels, the condition's
  assert sum(r["percent"] for r in rows) == pytest.approx(100.0)
  want = x.astype(np.float64)
  for _ in range(7):
    want = np.tanh(want) * 1.5 + want.mean()
  np.testing.assert_allclose(np.asarray(c(x)), want, rtol=1e-4, atol=1e-5)


def test_parallel_kernels_and_the_thread_pool_row():
  old = cpu.num_threads()
  cpu.set_num_threads(2)
  try:
    x = np.linspace(0, 1, 1 << 19, dtype=np.float32).reshape(512, 1024)
    f = ourjax.jit(lambda v: (jnp.exp(v) * 2 + 1, jnp.sum(v * v)), backend="cpu")
    c = f.lower(x).compile()
    assert c.runtime_executable().parallel
    rows = c.profile(x, reps=2).rows
    assert any(r["name"] == "thread pool" for r in rows)
    assert all(r["time_us"] > 0 for r in rows if r["category"] == "kernel")
    a, s = f(x)
    np.testing.assert_allclose(np.asarray(a), np.exp(x) * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(float(s), np.sum(x.astype(np.float64) ** 2), rtol=1e-5)
  finally:
    cpu.set_num_threads(old)


def test_profile_of_a_function_and_of_several_executables():
  args = _args()
  g = ourjax.jit(lambda v: jnp.tanh(v) + 1, backend="cpu")
  h = ourjax.jit(mlp, backend="cpu")

  def two(w, b, x):
    return h(w, b, g(x))
  prof = profiler.profile(two, *args, reps=2)       # jitted whole: one executable
  assert {r["executable"] for r in prof.rows} == {"jit_two"}
  # a function that calls two jitted functions eagerly: one section each
  prof = profiler.profile(ourjax.jit(mlp, backend="cpu"), *args, reps=2)
  assert any(r["kind"] == "DotKernel" for r in prof.rows)

  def calls_two(w, b, x):
    return h(w, b, g(x))
  with profiler._recording() as rec:
    for _ in range(2):
      calls_two(*args)
  p = rec.profile(per_call=True, title="two executables")
  assert {r["executable"] for r in p.rows} == {"jit_mlp", "jit_lambda"}
  assert all(r["calls"] == 2 for r in p.rows)


def test_instrumented_code_is_cached_apart():
  args = _args()
  m = ourjax.jit(mlp, backend="cpu").lower(*args).compile()._executable.module
  assert cpu.cache_key(m, True) != cpu.cache_key(m, False)
  inst = cpu.compile(m, profile=True)
  assert inst.meta["profile"]["items"] and not cpu.compile(m).meta["profile"]
  kinds = [it["kind"] for it in inst.meta["profile"]["items"]]
  assert "DotKernel" in kinds


def test_reference_backend_is_one_row():
  x = np.arange(6, dtype=np.float32)
  c = ourjax.jit(lambda v: v * 2 + 1, backend="reference").lower(x).compile()
  prof = c.profile(x, reps=2)
  (row,) = prof.rows
  assert row["category"] == "executable" and row["percent"] == pytest.approx(100.0)
  assert row["kind"] == "ReferenceExecutable" and row["time_us"] > 0


def test_op_by_op_jaxprs_and_unmeasurable_executables_are_one_row(monkeypatch, caplog):
  from ourjax.backends import profiling
  x = np.arange(6, dtype=np.float32)
  closed = ourjax.make_jaxpr(lambda v: jnp.sin(v) * 2)(x)
  ev = backends.JaxprEvaluator(closed)
  outs, rec = profiling.profiled_call(ev, [x])
  np.testing.assert_allclose(np.asarray(outs[0]), np.sin(x) * 2, rtol=1e-6)
  (row,) = rec.rows
  assert row["category"] == "executable" and rec.times[0][0] > 0

  def broken(*a):
    raise RuntimeError("no counters today")
  monkeypatch.setattr(profiling, "_native_runner", broken)
  f = ourjax.jit(lambda v: v * 3 + 1)
  with caplog.at_level("WARNING", logger="ourjax"):
    prof = f.lower(x).compile().profile(x, reps=2)
  assert "no counters today" in caplog.text
  assert [r["category"] for r in prof.rows] == ["executable"]


def test_chrome_trace_of_a_profile(tmp_path):
  args = _args()
  prof = ourjax.jit(mlp).lower(*args).compile().profile(*args, reps=2)
  path = prof.to_chrome_trace(tmp_path / "sub" / "p.trace.json")
  with open(path) as fh:
    events = _x_events(json.load(fh))
  assert sum(e["cat"] == "call" for e in events) == 2
  assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in events)


def test_trace_errors_name_the_operation(tmp_path):
  with pytest.raises(RuntimeError, match="stop_trace: no trace is running"):
    profiler.stop_trace()
  profiler.start_trace(tmp_path)
  try:
    with pytest.raises(RuntimeError, match="start_trace: a trace .* is already running"):
      profiler.start_trace(tmp_path)
  finally:
    profiler.stop_trace()
  with pytest.raises(ValueError, match="Compiled.profile: reps"):
    ourjax.jit(lambda v: v + 1).lower(np.ones(3, np.float32)).compile().profile(
        np.ones(3, np.float32), reps=0)
  with pytest.raises(TypeError, match="Argument types differ"):
    ourjax.jit(lambda v: v + 1).lower(np.ones(3, np.float32)).compile().profile(
        np.ones(4, np.float32))


def test_annotations_cost_nothing_without_a_trace():
  assert backends._profile_hook is None
  with profiler.TraceAnnotation("nothing records"):
    pass

  @profiler.TraceAnnotation("decorated")
  def f(v):
    return v + 1
  assert f(1) == 2


_ENV_SCRIPT = """
import numpy as np, ourjax, ourjax.numpy as jnp
from ourjax import backends
assert backends._profile_hook is not None and backends._profile_all
f = ourjax.jit(lambda w, x: jnp.tanh(x @ w).sum(0))
w = np.ones((64, 32), np.float32)
x = np.ones((16, 64), np.float32)
for _ in range(3):
  y = f(w, x)
print("result", float(y[0]))
"""


def test_env_var_prints_a_table_at_exit(tmp_path):
  env = dict(os.environ, OURJAX_PROFILE="1", OURJAX_PROFILE_DIR=str(tmp_path),
             OURJAX_PLATFORMS="cpu")
  r = subprocess.run([sys.executable, "-c", _ENV_SCRIPT], env=env, capture_output=True,
                     text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  assert "result 16.0" in r.stdout                  # tanh(64) * 16, unchanged by profiling
  assert "OURJAX_PROFILE=1" in r.stderr and "3 call(s)" in r.stderr
  assert "DotKernel" in r.stderr and "Python dispatch" in r.stderr
  (path,) = glob.glob(os.path.join(tmp_path, "ourjax-*.trace.json"))
  with open(path) as fh:
    assert sum(e["cat"] == "call" for e in _x_events(json.load(fh))) == 3


def test_env_var_unset_leaves_the_fast_path_alone():
  env = dict(os.environ, OURJAX_PLATFORMS="cpu")
  env.pop("OURJAX_PROFILE", None)
  script = ("import numpy as np, ourjax\nfrom ourjax import backends\n"
            "f = ourjax.jit(lambda v: v * 2)\nx = np.ones(3, np.float32)\nf(x); f(x)\n"
            "assert backends._profile_hook is None and not backends._profile_all\n"
            "assert all(callable(v) for v in f._fast.values()) and f._fast\n"
            "assert not f.lower(x).compile().runtime_executable().meta['profile']\n")
  r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                     timeout=300)
  assert r.returncode == 0, r.stderr
  assert "ourjax profiler" not in r.stderr


# ---------------------------------------------------------------------------------------------
# the CUDA backend's host side, on the stand-in driver
# ---------------------------------------------------------------------------------------------

def _fake_driver():
  return pytest.importorskip("cuda_fake_driver")     # needs cuda.bindings (types only)


def _gpu_fn(w, x):
  h = jnp.tanh(x @ w)
  # a loop of known trip count (its body launched 3 times, no round trip) and one that tests
  # data (its predicate read back every iteration)
  h = lax.fori_loop(0, 3, lambda i, v: v * 0.5 + jnp.max(v), h)
  h = lax.while_loop(lambda v: jnp.sum(v) > 1e30, lambda v: v * 0.25 + jnp.sum(v), h)
  return jnp.sum(h * h, axis=1), h


def test_gpu_profile_rows_with_the_fake_driver(monkeypatch, tmp_path):
  fake_driver = _fake_driver()
  monkeypatch.setenv("OURJAX_CUDA_GRAPHS", "1")
  w = np.ones((64, 64), np.float32)
  x = np.ones((128, 64), np.float32)
  with fake_driver.installed() as fake:
    c = ourjax.jit(_gpu_fn, backend="cuda").lower(w, x).compile()
    exe = c.runtime_executable()
    prof = c.profile(w, x, reps=2)
    rows = prof.rows
    kinds = {r["kind"] for r in rows}
    gpu_kinds = {type(k).__name__ for k in exe.kernels}
    # (the stand-in reads back zeros: the while loop's body never runs, its kernels have no
    # rows)
    assert kinds - gpu_kinds == {"host round trip", "host", "copy"}
    assert len(kinds & gpu_kinds) >= 2
    assert fake.calls["cuEventElapsedTime"] > 0
    kernels = [r for r in rows if r["category"] == "kernel"]
    assert kernels and all(r["time_us"] > 0 for r in kernels)
    (trip,) = [r for r in rows if r["kind"] == "host round trip"]
    assert trip["hlo"].startswith("while while") and trip["launches"] == 1
    assert any(r["launches"] == 3 for r in kernels)      # the fori_loop's body, 3 times
    assert any(r["category"] == "copy" and r["bytes"] > 0 for r in rows)
    assert sum(r["percent"] for r in rows) == pytest.approx(100.0)
    dots = [r for r in rows if "dot" in r["hlo"] and r["flops"]]
    assert dots and dots[0]["flops"] == 2 * 128 * 64 * 64
    # plain calls (the dispatch row's) replay a graph when the program allows: this one has a
    # while loop, so it never does
    assert exe.graph_reason.startswith("host-driven control flow (while")
    with open(prof.to_chrome_trace(tmp_path / "gpu.trace.json")) as fh:
      events = _x_events(json.load(fh))
    assert {e["cat"] for e in events} >= {"call", "kernel", "copy", "host"}
    del c, exe


def test_gpu_trace_has_a_device_track(monkeypatch, tmp_path):
  fake_driver = _fake_driver()
  monkeypatch.setenv("OURJAX_CUDA_GRAPHS", "1")
  w = np.ones((64, 64), np.float32)
  x = np.ones((128, 64), np.float32)
  with fake_driver.installed() as fake:
    f = ourjax.jit(lambda a, b: jnp.tanh(b @ a) * 2 + 1, backend="cuda")
    f(w, x)
    f(w, x)
    with profiler.trace(tmp_path):
      for _ in range(2):
        f(w, x)
    launched = sum(1 for e in fake.executed if e[0] == "kernel")
    (path,) = glob.glob(os.path.join(tmp_path, "**", "*.trace.json"), recursive=True)
    with open(path) as fh:
      data = json.load(fh)
    f(w, x)
    f(w, x)           # the fast path (and graph replay) again after the trace
  assert launched > 0
  events = _x_events(data)
  host_pid = os.getpid()
  device = [e for e in events if e["pid"] != host_pid]
  assert device and all(e["cat"] in ("kernel", "copy") for e in device)
  procs = {e["pid"]: e["args"]["name"] for e in data["traceEvents"]
           if e["ph"] == "M" and e["name"] == "process_name"}
  assert procs[device[0]["pid"]].startswith("GPU 0")
  # in stream order, one after the other (the stand-in's clock advances per event)
  for call in range(2):
    ks = device[call * len(device) // 2:(call + 1) * len(device) // 2]
    for a, b in zip(ks, ks[1:]):
      assert a["ts"] + a["dur"] <= b["ts"] + 1e-3
  assert sum(e["cat"] == "call" and e["pid"] == host_pid for e in events) == 2
