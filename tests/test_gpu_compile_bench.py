"""benchmarks/gpu_compile.py --first-call: the first call of a workload in fresh processes, on
the stand-in driver where there is no GPU, with an A/B of a switch (what the lead runs on the
H100 before and after a compile-time change)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_first_call_ab_rows(tmp_path):
  out = tmp_path / "rows.json"
  r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_compile.py"),
                      "--first-call", "--small", "--only", "ode_rk4,mlp", "--repeat", "1",
                      "--no-ptxas", "--ab", "OURJAX_CUDA_FOLD=0", "--json", str(out)],
                     cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("ode_rk4", "mlp"))]
  assert len(lines) == 2 and all(len(ln.split()) == 4 for ln in lines), r.stdout
  rows = json.loads(out.read_text())["rows"]
  assert [x["name"] for x in rows] == ["mlp", "ode_rk4"] or \
      [x["name"] for x in rows] == ["ode_rk4", "mlp"]
  for x in rows:
    assert 0 < x["first[default]"] < 60 and 0 < x["first[OURJAX_CUDA_FOLD=0]"] < 60
