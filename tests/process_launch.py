"""Tests' launcher of several ourjax processes on this host (``ourjax.distributed`` over a
loopback coordinator): each worker runs a Python source with its port, process id and extra
arguments, and prints one ``RESULT <json>`` line, which ``run_workers`` collects in process
order.  Workers run on CPU devices (``cpu_devices`` each), or on GPUs (``gpus``): one GPU
each, made the only one it sees (``CUDA_VISIBLE_DEVICES``) or, with ``gpus="all"``, every GPU
visible to every worker (the worker picks its own, e.g. ``local_device_ids``)."""
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


def gpu_count() -> int:
  """GPUs this process sees that NCCL can join (0 without the driver, a GPU or NCCL)."""
  from ourjax.backends.cuda import driver
  if not driver.available():
    return 0
  from ourjax.backends import collectives
  if collectives.nccl_unavailable_reason() is not None:
    return 0
  return driver.device_count()


def _env(pid, cpu_devices, gpus, collective_timeout, path):
  env = dict(os.environ, OURJAX_COLLECTIVE_TIMEOUT=collective_timeout,
             PYTHONPATH=os.pathsep.join([ROOT, *path, os.environ.get("PYTHONPATH", "")]))
  if not gpus:
    env.update(OURJAX_NUM_CPU_DEVICES=str(cpu_devices), JAX_PLATFORMS="cpu",
               OURJAX_PLATFORMS="cpu")
    return env
  for k in ("OURJAX_NUM_CPU_DEVICES", "JAX_PLATFORMS"):
    env.pop(k, None)
  env["OURJAX_PLATFORMS"] = "cuda"
  if gpus != "all":
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = visible.split(",") if visible else [str(i) for i in range(gpu_count())]
    env["CUDA_VISIBLE_DEVICES"] = ids[pid]
  return env


def run_workers(source: str, extra_args=(), *, processes: int = 2, cpu_devices: int = 1,
                gpus=False, collective_timeout: str = "60", wait_s: float = 120,
                path=()) -> list:
  """Each process's ``RESULT`` object; a worker that fails or does not finish within
  ``wait_s`` fails the test (and the others are killed).  ``path``: more directories for the
  workers' imports, after the project's root.  ``gpus``: False (CPU devices), True (one GPU
  per worker) or "all" (see the module docstring)."""
  port = free_port()
  procs = [subprocess.Popen([sys.executable, "-c", source, str(port), str(pid),
                             *map(str, extra_args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(pid, cpu_devices, gpus, collective_timeout, path),
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
