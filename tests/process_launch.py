"""Tests' launcher of several ourjax processes on this host (``ourjax.distributed`` over a
loopback coordinator): each worker runs a Python source with its port, process id and extra
arguments, and prints one ``RESULT <json>`` line, which ``run_workers`` collects in process
order."""
import json
import os
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def run_workers(source: str, extra_args=(), *, processes: int = 2, cpu_devices: int = 1,
                collective_timeout: str = "60", wait_s: float = 120, path=()) -> list:
  """Each process's ``RESULT`` object; a worker that fails or does not finish within
  ``wait_s`` fails the test (and the others are killed).  ``path``: more directories for the
  workers' imports, after the project's root."""
  port = free_port()
  env = dict(os.environ, OURJAX_NUM_CPU_DEVICES=str(cpu_devices), JAX_PLATFORMS="cpu",
             OURJAX_PLATFORMS="cpu", OURJAX_COLLECTIVE_TIMEOUT=collective_timeout,
             PYTHONPATH=os.pathsep.join([ROOT, *path, os.environ.get("PYTHONPATH", "")]))
  procs = [subprocess.Popen([sys.executable, "-c", source, str(port), str(pid),
                             *map(str, extra_args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=ROOT) for pid in range(processes)]
  outs = []
  for p in procs:
    try:
      so, se = p.communicate(timeout=wait_s)
    except subprocess.TimeoutExpired:
      for q in procs:
        q.kill()
      raise
    assert p.returncode == 0, se[-3000:]
    line = [ln for ln in so.splitlines() if ln.startswith("RESULT ")][-1]
    outs.append(json.loads(line[len("RESULT "):]))
  return outs
