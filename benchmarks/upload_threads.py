"""Where a data-parallel step's upload time goes on this host (the 2-GPU data-parallel step
with a NumPy batch, issue 20):

  1. the host's copy rate into pinned memory against threads (``np.copyto`` of a 33.6 MB
     array, two per-device batches of 16.8 MB, cut into one part per thread), and into
     pageable memory;
  2. ``staging.upload`` of the two 16.8 MB blocks to two GPUs (as a pmap's batch) against the
     most staging threads: the host time until it returns and the time until the DMAs ran;
  3. registering the NumPy array itself (``cuMemHostRegister``) and uploading from it, the
     way that copies nothing on the host: register, DMA, unregister.

Medians (ms) after warm-ups.  Needs a GPU (two for part 2's second device).

    python benchmarks/upload_threads.py [--threads 1,2,4,8,16,24]"""
import argparse
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import ourjax
from ourjax.backends.cuda import driver, staging

import bench_util

pc = time.perf_counter


def med(fn):
  """Median ms of 20 calls after 3 untimed ones."""
  return bench_util.med(fn, k=20, warm=3)


def copy_rate(src, dst, threads):
  """ms to copy ``src`` into ``dst`` (uint8, same size) on ``threads`` threads."""
  n = src.nbytes
  bounds = [(n * i // threads) // 4096 * 4096 for i in range(threads)] + [n]
  with ThreadPoolExecutor(threads) as ex:
    def one():
      fs = [ex.submit(np.copyto, dst[a:b], src[a:b]) for a, b in zip(bounds, bounds[1:])]
      for f in fs:
        f.result()
    return med(one)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--threads", default="1,2,4,8,12,16,24")
  a = ap.parse_args()
  tlist = [int(t) for t in a.threads.split(",")]
  gpus = ourjax.devices("cuda")
  devs = [driver.get_device(i) for i in range(min(2, len(gpus)))]
  print("cpus:", os.cpu_count(), "gpus:", len(gpus), "affinity:", len(os.sched_getaffinity(0)),
        flush=True)
  per = 16_777_216 + 0      # 16.8 MB: a per-device batch of 128 (128*128*256 float32)
  x = np.random.default_rng(0).standard_normal((2, per // 4)).astype(np.float32)
  src = x.reshape(-1).view(np.uint8)
  pin = devs[0].host_alloc(src.nbytes)
  import ctypes
  pdst = np.frombuffer((ctypes.c_uint8 * src.nbytes).from_address(pin), np.uint8)
  pdst[:] = 1
  pageable = np.ones_like(src)
  print("== 1. host copy of 33.6 MB: ms (GB/s) into pinned | into pageable", flush=True)
  for t in tlist:
    tp = copy_rate(src, pdst, t)
    tq = copy_rate(src, pageable, t)
    print(f"threads {t:3d}: pinned {tp:6.3f} ({src.nbytes / tp / 1e6:5.1f})  pageable "
          f"{tq:6.3f} ({src.nbytes / tq / 1e6:5.1f})", flush=True)

  print("== 2. staging.upload of 2 x 16.8 MB to", len(devs), "GPU(s): host-return / waited ms",
        flush=True)
  from ourjax.backends.cuda.memory import Allocation  # noqa: F401
  blocks = [d.allocator.allocate(per) for d in devs]
  jobs = [(d, b.ptr, x[k]) for k, (d, b) in enumerate(zip(devs, blocks))]
  th0 = staging.THREADS
  for t in tlist:
    staging.THREADS = t
    staging._workers = None          # (a new executor of the new size)
    ret = med(lambda: staging.upload(jobs))

    def waited():
      staging.upload(jobs)
      for d in devs:
        d.synchronize()
    w = med(waited)
    print(f"most threads {t:3d} (uses {staging.threads_for(2 * per)}): return {ret:6.3f}  "
          f"waited {w:6.3f}", flush=True)
  staging.THREADS = th0
  staging._workers = None

  print("== 3. cuMemHostRegister of a 16.8 MB NumPy array: register / DMA waited / "
        "unregister ms", flush=True)
  d = driver._driver()
  dev = devs[0]
  dev.make_current()
  h = x[0]
  regs, dmas, unregs = [], [], []
  for i in range(12):
    t0 = pc()
    driver._check(d.cuMemHostRegister(h.ctypes.data, h.nbytes, 1), "cuMemHostRegister")
    t1 = pc()
    dev.copy_from_pinned(blocks[0].ptr, h.ctypes.data, h.nbytes)
    dev.synchronize()
    t2 = pc()
    driver._check(d.cuMemHostUnregister(h.ctypes.data), "cuMemHostUnregister")
    t3 = pc()
    if i >= 2:
      regs.append(t1 - t0)
      dmas.append(t2 - t1)
      unregs.append(t3 - t2)
  print(f"register {statistics.median(regs) * 1e3:.3f}  DMA {statistics.median(dmas) * 1e3:.3f} "
        f"unregister {statistics.median(unregs) * 1e3:.3f}", flush=True)
  if len(devs) == 2:
    # both GPUs' DMAs from pinned memory at once (the PCIe links' rate)
    def both():
      for k, dv in enumerate(devs):
        dv.copy_from_pinned(blocks[k].ptr, pin + k * per, per, dv.copy_stream)
      for dv in devs:
        driver._check(d.cuStreamSynchronize(dv.copy_stream), "sync")
    t = med(both)
    print(f"DMA of 16.8 MB from pinned to each of 2 GPUs at once: {t:.3f} ms "
          f"({2 * per / t / 1e6:.1f} GB/s in all)", flush=True)

    def one():
      devs[0].copy_from_pinned(blocks[0].ptr, pin, per, devs[0].copy_stream)
      driver._check(d.cuStreamSynchronize(devs[0].copy_stream), "sync")
    t = med(one)
    print(f"DMA of 16.8 MB from pinned to one GPU: {t:.3f} ms ({per / t / 1e6:.1f} GB/s)",
          flush=True)
  print("done", threading.active_count(), flush=True)


if __name__ == "__main__":
  main()
