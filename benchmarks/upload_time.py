"""Host -> GPU upload timings, pageable (OURJAX_STAGED_UPLOADS=0, the old path) against pinned
staging (``ourjax/backends/cuda/staging.py``), switched per call in one process:
  * device_put of one array to GPU 0, several sizes (where the threshold should sit): the
    host time until the call returns and the time until the copy has run;
  * a pmap identity over 1 and 2 GPUs of a per-device block of 16.8 MB (the batch-128
    transformer input), waited: the pmap's upload of a NumPy batch;
Medians of 30 (after 5 warm-ups, which also allocate the pinned pools).  Needs a GPU (two for
the second part).

    python benchmarks/upload_time.py"""
import os

import numpy as np

import ourjax
from ourjax.backends.cuda import staging

from bench_util import med


def mode(staged: bool, overlap: bool = True):
  """Uploads from now on staged (pinned chunks, copy stream) or pageable (the old path); a
  call's staged uploads overlapped with its enqueueing (gated DMAs) or copied first."""
  os.environ["OURJAX_STAGED_UPLOADS"] = "1" if staged else "0"
  os.environ["OURJAX_UPLOAD_OVERLAP"] = "1" if overlap else "0"


def main():
  gpus = ourjax.devices("cuda")
  print("gpus:", gpus, "cpus:", os.cpu_count(), "staging threads:", staging.THREADS,
        "chunk MiB:", staging.CHUNK_BYTES >> 20, "threshold bytes (busy / idle):",
        staging.MIN_BYTES, staging.IDLE_MIN_BYTES, "bytes per thread:", staging.THREAD_BYTES, flush=True)

  print("== device_put to GPU 0: host-return ms / waited ms (pageable | staged)")
  thresholds = staging.MIN_BYTES, staging.IDLE_MIN_BYTES
  for nbytes in [1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 64 << 20]:
    x = np.random.default_rng(0).standard_normal(nbytes // 4).astype(np.float32)
    row = []
    for staged in (False, True):
      mode(staged)
      # (the threshold does not apply here: every size is forced through the chosen path)
      staging.MIN_BYTES = staging.IDLE_MIN_BYTES = 0 if staged else 1 << 62
      ret = med(lambda: ourjax.device_put(x, gpus[0]))
      wait = med(lambda: ourjax.block_until_ready(ourjax.device_put(x, gpus[0])))
      row.append(f"{ret:7.3f} / {wait:7.3f}")
    gbs = nbytes / 1e6 / float(row[1].split("/")[1])
    print(f"{nbytes / 1e6:8.3f} MB: pageable {row[0]}   staged {row[1]}  ({gbs:.1f} GB/s staged)",
          flush=True)
  staging.MIN_BYTES, staging.IDLE_MIN_BYTES = thresholds

  print("== pmap identity of a NumPy batch, 16.8 MB per device, waited ms")
  per = (128, 128, 256)
  for n in (1, 2):
    if n > len(gpus):
      continue
    devs = gpus[:n]
    ident = ourjax.pmap(lambda v: v, axis_name="d", devices=devs)
    x = np.random.default_rng(1).standard_normal((n,) + per).astype(np.float32)
    out = {}
    for staged in (False, True):
      mode(staged)
      out[staged] = med(lambda: ourjax.block_until_ready(ident(x)))
    y = ident(x)
    assert all(np.array_equal(np.asarray(s.data)[0], x[k]) for k, s in
               enumerate(y.addressable_shards)), "wrong upload"
    print(f"{n} GPU(s): pageable {out[False]:.3f}  staged {out[True]:.3f}", flush=True)
  print("done", flush=True)


if __name__ == "__main__":
  main()
