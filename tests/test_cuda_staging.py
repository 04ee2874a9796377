"""Uploads through pinned staging chunks (``backends/cuda/staging.py``), on the stand-in driver
(``cuda_fake_driver``): its DMAs from pinned memory read the chunk only when the stream is
synchronised or an event behind them is waited for, so a chunk rewritten before its DMA ran
uploads the wrong bytes and these tests see it."""
import threading

import numpy as np
import pytest

pytest.importorskip("cuda.bindings")

import cuda_fake_driver  # noqa: E402

from ourjax.backends.cuda import backend as cuda_backend  # noqa: E402
from ourjax.backends.cuda import driver, staging  # noqa: E402

KB = 1 << 10


@pytest.fixture
def fake(monkeypatch):
  # small chunks and pools, so that a test upload is many pieces and reuses chunks in waves
  monkeypatch.setattr(staging, "CHUNK_BYTES", 64 * KB)
  monkeypatch.setattr(staging, "MIN_BYTES", 128 * KB)
  monkeypatch.setattr(staging, "IDLE_MIN_BYTES", 128 * KB)
  monkeypatch.setattr(staging, "POOL_BYTES", 4 * 64 * KB)
  monkeypatch.setattr(staging, "THREAD_BYTES", 64 * KB)
  monkeypatch.delenv("OURJAX_STAGED_UPLOADS", raising=False)
  with cuda_fake_driver.installed() as f:
    f.device_count = 2
    yield f


def _device_bytes(fake, dev, buf):
  dev.synchronize()
  return fake.read_device(buf.ptr, buf.nbytes)


def _pieces_of(fake, dst, n):
  """The host-to-device copies into ``[dst, dst + n)``: (offset, bytes, pinned?)."""
  return sorted((d - dst, k, p) for d, _, k, p in fake.htod if dst <= d < dst + n)


@pytest.mark.parametrize("nbytes", [128 * KB, 64 * KB * 5 + 12, 64 * KB * 11 - 4])
def test_large_upload_is_staged_in_chunks(fake, nbytes):
  """An array of at least MIN_BYTES goes in chunk-sized DMAs from pinned memory covering it
  exactly, and the device holds its bytes, also when the upload needs more chunks than the
  pool has (11 pieces, a pool of 4: the chunks are reused in waves)."""
  rng = np.random.default_rng(nbytes)
  host = rng.integers(0, 256, nbytes, dtype=np.uint8)
  dev = driver.get_device(0)
  buf = cuda_backend.DeviceBuffer.from_host(host, dev)
  got = _pieces_of(fake, buf.ptr, nbytes)
  chunk = staging.CHUNK_BYTES
  assert [(o, k) for o, k, _ in got] == [(o, min(chunk, nbytes - o))
                                        for o in range(0, nbytes, chunk)]
  assert all(p for _, _, p in got)
  assert len(staging.Pool.of(dev).chunks) == min(4, len(got))
  assert _device_bytes(fake, dev, buf) == host.tobytes()
  # the DMAs have run: a second upload reuses the chunks without growing the pool or waiting
  waits = fake.calls["cuEventSynchronize"]
  buf2 = cuda_backend.DeviceBuffer.from_host(host[::-1].copy(), dev)
  assert len(staging.Pool.of(dev).chunks) == min(4, len(got))
  assert fake.calls["cuEventSynchronize"] == waits + (len(got) > 4) * (len(got) - 4)
  assert _device_bytes(fake, dev, buf2) == host[::-1].tobytes()


def test_small_upload_takes_the_plain_path(fake):
  host = np.arange(1000, dtype=np.float32)              # 4 KB < MIN_BYTES
  dev = driver.get_device(0)
  buf = cuda_backend.DeviceBuffer.from_host(host, dev)
  assert _pieces_of(fake, buf.ptr, host.nbytes) == [(0, host.nbytes, False)]
  assert fake.calls["cuMemHostAlloc"] == 0
  assert _device_bytes(fake, dev, buf) == host.tobytes()


def test_threshold_and_switch(fake, monkeypatch):
  dev = driver.get_device(0)
  assert not staging.worth_staging(dev, staging.MIN_BYTES - 1)
  assert staging.worth_staging(dev, staging.MIN_BYTES)
  # between MIN_BYTES and IDLE_MIN_BYTES: staged only while the main stream is busy
  monkeypatch.setattr(staging, "IDLE_MIN_BYTES", 4 * staging.MIN_BYTES)
  assert not dev.busy()
  assert not staging.worth_staging(dev, 2 * staging.MIN_BYTES)
  assert staging.worth_staging(dev, 4 * staging.MIN_BYTES)
  _busy(fake, dev)
  assert dev.busy() and staging.worth_staging(dev, 2 * staging.MIN_BYTES)
  host = np.arange(2 * staging.MIN_BYTES // 4, dtype=np.float32)
  buf = cuda_backend.DeviceBuffer.from_host(host, dev)
  assert all(p for _, _, p in _pieces_of(fake, buf.ptr, host.nbytes))
  np.testing.assert_array_equal(buf.to_host(), host)
  assert not dev.busy()
  buf = cuda_backend.DeviceBuffer.from_host(host + 1, dev)
  assert _pieces_of(fake, buf.ptr, host.nbytes) == [(0, host.nbytes, False)]
  np.testing.assert_array_equal(buf.to_host(), host + 1)
  monkeypatch.setenv("OURJAX_STAGED_UPLOADS", "0")
  assert not staging.worth_staging(dev, 1 << 30)
  host = np.ones(64 * KB, np.float32)
  buf = cuda_backend.DeviceBuffer.from_host(host, dev)
  assert _pieces_of(fake, buf.ptr, host.nbytes) == [(0, host.nbytes, False)]
  assert _device_bytes(fake, dev, buf) == host.tobytes()


def test_host_array_may_change_once_the_upload_returns(fake):
  """The copy into pinned memory is done when the call returns: changing or freeing the host
  array afterwards changes nothing on the device, though the DMAs have not run yet."""
  dev = driver.get_device(0)
  host = np.arange(100_000, dtype=np.float32)
  want = host.tobytes()
  buf = cuda_backend.DeviceBuffer.from_host(host, dev)
  assert any(getattr(dev.copy_stream, "pending", ()))   # DMAs not run yet
  host[:] = -1
  del host
  assert _device_bytes(fake, dev, buf) == want


def test_chunks_are_reused_only_after_their_dma(fake):
  """Back-to-back uploads reuse the pool's chunks: each chunk is rewritten only after the event
  behind its last DMA completed, so every upload lands intact (a chunk rewritten early would
  make an earlier, still pending DMA read the later data)."""
  dev = driver.get_device(0)
  rng = np.random.default_rng(1)
  hosts = [rng.standard_normal(3 * 64 * KB // 4).astype(np.float32) for _ in range(5)]
  bufs = [cuda_backend.DeviceBuffer.from_host(h, dev) for h in hosts]
  pool = staging.Pool.of(dev)
  assert len(pool.chunks) == 4                          # 15 pieces through 4 chunks
  assert fake.calls["cuMemHostAlloc"] == 4              # (grown while its chunks were busy)
  # each reuse first saw its chunk's event complete (queried, or waited for)
  assert fake.calls["cuEventSynchronize"] + fake.calls["cuEventQuery"] >= 15 - 4
  for h, b in zip(hosts, bufs):
    assert _device_bytes(fake, dev, b) == h.tobytes()


def test_uploads_to_two_devices_stage_at_once(fake, monkeypatch):
  """``Uploads.run``: both devices' large blocks go through their own pools, their pieces
  interleaved and copied by several threads; small blocks take the plain path meanwhile;
  every block lands intact."""
  monkeypatch.setattr(staging, "THREADS", 3)
  monkeypatch.setattr(staging, "_workers", None)
  threads = set()
  real = staging._run_piece

  def spy(piece):
    threads.add(threading.get_ident())
    real(piece)
  monkeypatch.setattr(staging, "_run_piece", spy)
  devs = [driver.get_device(0), driver.get_device(1)]
  rng = np.random.default_rng(2)
  big = [rng.standard_normal(5 * 64 * KB // 4).astype(np.float32) for _ in devs]
  small = [np.full(7, k, np.int32) for k in range(2)]
  up = cuda_backend.Uploads()
  bufs = [(up.put(b, d), up.put(s, d)) for b, s, d in zip(big, small, devs)]
  assert not fake.htod
  up.run()
  for d, (bb, sb), b, s in zip(devs, bufs, big, small):
    assert all(p for _, _, p in _pieces_of(fake, bb.ptr, bb.nbytes))
    assert _pieces_of(fake, sb.ptr, sb.nbytes) == [(0, s.nbytes, False)]
  for d, (bb, sb), b, s in zip(devs, bufs, big, small):
    assert _device_bytes(fake, d, bb) == b.tobytes()
    assert _device_bytes(fake, d, sb) == s.tobytes()
  assert len(threads) > 1
  assert staging.Pool.of(devs[0]) is not staging.Pool.of(devs[1])
  order = [staging.pieces([(d, 0, b) for d, b in zip(devs, big)])[i][0] for i in range(4)]
  assert order == [devs[0], devs[1], devs[0], devs[1]]


def test_a_failed_dma_is_raised_and_leaves_the_pool_usable(fake):
  dev = driver.get_device(0)
  host = np.ones(3 * 64 * KB, np.uint8)
  fake.fail.add("cuMemcpyHtoDAsync")
  with pytest.raises(driver.DeviceError, match="pinned"):
    cuda_backend.DeviceBuffer.from_host(host, dev)
  fake.fail.clear()
  buf = cuda_backend.DeviceBuffer.from_host(host * 3, dev)
  assert _device_bytes(fake, dev, buf) == (host * 3).tobytes()


def test_pieces_cover_odd_dtypes_and_shapes():
  """``pieces`` cuts any C-contiguous array into byte ranges that tile it."""
  for a in [np.zeros((3, 5, 7), np.float64), np.ones((), np.int16), np.arange(10) > 4,
            np.arange(1001, dtype=np.complex64).reshape(7, 11, 13)]:
    ps = staging.pieces([("d", 1000, a)], chunk_bytes=96)
    assert b"".join(p[2].tobytes() for p in ps) == a.tobytes()
    assert [p[1] for p in ps] == [1000 + 96 * i for i in range(len(ps))]


def test_device_put_with_a_sharding_stages_every_block(fake):
  """``device_put`` of a host array laid out over two GPUs: each device's block goes through
  its pinned pool (one ``Uploads`` for all of them) and holds that block's bytes."""
  import ourjax
  from ourjax.sharding import Mesh, NamedSharding, PartitionSpec
  gpus = ourjax.devices("cuda")
  assert len(gpus) == 2
  x = np.arange(2 * 3 * 64 * KB // 4, dtype=np.float32).reshape(2, -1)
  mesh = Mesh(np.array(gpus), ("d",))
  y = ourjax.device_put(x, NamedSharding(mesh, PartitionSpec("d")))
  bufs = [s.data._device_buf for s in y.addressable_shards]
  assert [b.device.ordinal for b in bufs] == [0, 1]
  for k, b in enumerate(bufs):
    assert all(p for _, _, p in _pieces_of(fake, b.ptr, b.nbytes))
    assert _device_bytes(fake, b.device, b) == x[k:k + 1].tobytes()


def test_piece_size_spreads_an_upload_over_the_threads(monkeypatch):
  """A few-chunk upload is cut into smaller pieces so that every thread copies some (never
  below MIN_PIECE_BYTES, never above a chunk); two devices' uploads share the threads."""
  monkeypatch.setattr(staging, "THREADS", 8)
  MB = 1 << 20
  chunk = 2 * MB
  assert staging.piece_bytes(16 * MB, 1, chunk) == 2 * MB
  assert staging.piece_bytes(8 * MB, 1, chunk) == 1 * MB
  assert staging.piece_bytes(8 * MB, 2, chunk) == 2 * MB
  assert staging.piece_bytes(1 * MB, 1, chunk) == staging.MIN_PIECE_BYTES
  assert staging.piece_bytes(100 * MB, 1, chunk) == chunk
  assert staging.piece_bytes(3 * MB + 5, 1, chunk) % (64 << 10) == 0
  monkeypatch.setattr(staging, "THREADS", 1)
  assert staging.piece_bytes(8 * MB, 1, chunk) == chunk


def test_a_calls_host_arguments_upload_at_once(fake):
  """``_upload_args``: several host arguments of one call go through one ``Uploads`` (the large
  one staged, the small ones pageable), each slot gets its own copy, a host Array keeps its
  device copy; when the copies fail, the Array forgets the copy it never got."""
  import ourjax
  dev = driver.get_device(0)
  rng = np.random.default_rng(3)
  big = rng.standard_normal(3 * 64 * KB // 4).astype(np.float32)
  small = np.arange(10, dtype=np.int32)
  arr = ourjax.numpy.asarray(np.full(5, 2.5, np.float32))
  assert arr._device_buf is None or arr._device_buf.device is not dev
  arr._device_buf = None
  slots, keep = [0] * 4, []
  ups = cuda_backend._upload_args(dev, [(0, big, np.dtype(np.float32), big.shape),
                                        (2, small, np.dtype(np.int32), small.shape),
                                        (3, arr, np.dtype(np.float32), (5,))], slots, keep)
  ups.finish()
  assert slots[1] == 0 and len(keep) == 2 and arr._device_buf is not None
  assert slots[3] == arr._device_buf.ptr
  assert all(p for _, _, p in _pieces_of(fake, slots[0], big.nbytes))
  assert _pieces_of(fake, slots[2], small.nbytes) == [(0, small.nbytes, False)]
  dev.synchronize()
  assert fake.read_device(slots[0], big.nbytes) == big.tobytes()
  assert fake.read_device(slots[2], small.nbytes) == small.tobytes()
  assert fake.read_device(slots[3], 20) == np.full(5, 2.5, np.float32).tobytes()
  arr2 = ourjax.numpy.asarray(np.zeros(3, np.float32))
  arr2._device_buf = None
  fake.fail.add("cuMemcpyHtoDAsync")
  with pytest.raises(driver.DeviceError):
    cuda_backend._upload_args(dev, [(0, big, np.dtype(np.float32), big.shape),
                                    (1, arr2, np.dtype(np.float32), (3,))], [0, 0], [])
  assert arr2._device_buf is None


def _busy(fake, dev):
  """Make ``dev``'s main stream busy: a DMA from pinned memory pending on it stands for the
  previous step's kernels (events recorded behind it are not reached until it runs)."""
  src = dev.host_alloc(64)
  dev.copy_from_pinned(dev.mem_alloc(64), src, 64)
  assert any(getattr(dev.stream, "pending", ()))


def test_staged_dmas_run_on_the_copy_stream_and_the_main_stream_waits_for_them(fake,
                                                                                monkeypatch):
  """A staged upload's DMAs go on the device's copy stream (not behind the main stream's
  work), an event is recorded behind the last of them and the main stream waits for it: a
  read back enqueued after the upload sees the uploaded bytes, though nothing synchronised
  the copy stream.  Without that wait (``_publish`` a no-op) it would read the block early."""
  dev = driver.get_device(0)
  rng = np.random.default_rng(4)
  host = rng.standard_normal(3 * 64 * KB // 4).astype(np.float32)
  _busy(fake, dev)
  buf = cuda_backend.DeviceBuffer.from_host(host, dev)
  mine = [s for (d, _, _, p), s in zip(fake.htod, fake.htod_streams)
          if buf.ptr <= d < buf.ptr + host.nbytes]
  assert mine and all(s is dev.copy_stream for s in mine)
  assert fake.read_device(buf.ptr, host.nbytes) != host.tobytes()   # DMAs still pending
  assert (dev.stream, dev.copy_stream) in [w[:2] for w in fake.waits]
  np.testing.assert_array_equal(buf.to_host(), host)
  # the same without the main stream's wait: the read back sees the block before the DMAs
  monkeypatch.setattr(staging, "_publish", lambda devs: None)
  buf2 = cuda_backend.DeviceBuffer.from_host(host * 2, dev)
  assert not np.array_equal(buf2.to_host(), host * 2)


def test_a_jitted_call_launches_after_its_staged_argument_landed(fake):
  """The call that reads an uploaded NumPy argument is launched on the main stream after its
  wait on the copy stream's event: when its first kernel launches, the argument's bytes are
  on the device (the stand-in driver lands the DMAs a stream waits for at its next launch)."""
  import ourjax
  rng = np.random.default_rng(5)
  host = rng.standard_normal(3 * 64 * KB // 4).astype(np.float32)
  f = ourjax.jit(lambda v: v * 2 + 1)
  f(np.ones(8, np.float32))                    # (compiled and loaded before the staged call)
  seen = []
  real_launch, real_graph = fake.cuLaunchKernel, fake.cuGraphLaunch

  def at_launch():
    dst = min(d for d, _, _, p in fake.htod if p)
    seen.append(fake.read_device(dst, host.nbytes) == host.tobytes())

  def launch(*a):
    r = real_launch(*a)
    at_launch()
    return r

  def graph(*a):
    r = real_graph(*a)
    at_launch()
    return r
  fake.cuLaunchKernel, fake.cuGraphLaunch = launch, graph
  dev = driver.get_device(0)
  _busy(fake, dev)
  fake.htod.clear()
  fake.htod_streams.clear()
  out = f(host)
  assert all(s is dev.copy_stream for (_, _, _, p), s in zip(fake.htod, fake.htod_streams) if p)
  assert seen and seen[0]
  assert out.shape == host.shape


def test_upload_blocks_rotate_and_are_fenced(fake):
  """The blocks staged uploads write: a block released while the main stream is still busy
  (its last reader may not have run) is not written by the next upload, which gets a new
  block; once the main stream has passed the fence recorded after the release, the block is
  reused, the copy stream waiting for that fence first.  Every upload lands intact."""
  dev = driver.get_device(0)
  rng = np.random.default_rng(6)
  hosts = [rng.standard_normal(3 * 64 * KB // 4).astype(np.float32) for _ in range(4)]
  blocks = staging.Blocks.of(dev)
  _busy(fake, dev)
  b1 = cuda_backend.DeviceBuffer.from_host(hosts[0], dev)
  p1 = b1.ptr
  del b1
  b2 = cuda_backend.DeviceBuffer.from_host(hosts[1], dev)   # p1's fence not passed yet
  p2 = b2.ptr
  assert p2 != p1
  np.testing.assert_array_equal(b2.to_host(), hosts[1])     # (the main stream is idle now)
  del b2
  nwaits = len(fake.waits)
  b3 = cuda_backend.DeviceBuffer.from_host(hosts[2], dev)
  assert b3.ptr == p1                                       # the oldest released block
  fences = [w for w in fake.waits[nwaits:] if w[0] is dev.copy_stream]
  assert fences and fences[0][1] is dev.stream
  np.testing.assert_array_equal(b3.to_host(), hosts[2])
  # at PER_SIZE blocks of a size, a busy main stream makes the upload wait on the device
  _busy(fake, dev)
  keep = [b3]
  for h in hosts:
    keep.append(cuda_backend.DeviceBuffer.from_host(h, dev))
  assert len({b.ptr for b in keep}) == len(keep)
  del keep[:-1]
  _busy(fake, dev)
  b = cuda_backend.DeviceBuffer.from_host(hosts[3] + 1, dev)
  assert sum(1 for p in blocks.owned if blocks.sizes[p] == blocks.sizes[b.ptr]) <= \
      max(staging.Blocks.PER_SIZE, len(hosts) + 1)
  np.testing.assert_array_equal(b.to_host(), hosts[3] + 1)
  np.testing.assert_array_equal(keep[-1].to_host(), hosts[3])


def test_small_uploads_are_copied_on_the_calling_thread(fake, monkeypatch):
  """An upload of less than two THREAD_BYTES is copied by the calling thread alone (no hand
  off to the staging threads: its fixed cost would exceed the copy it saves)."""
  monkeypatch.setattr(staging, "THREADS", 4)
  monkeypatch.setattr(staging, "THREAD_BYTES", 1 << 20)
  monkeypatch.setattr(staging, "_workers", None)
  submitted = []
  monkeypatch.setattr(staging, "_executor",
                      lambda: (_ for _ in ()).throw(AssertionError("handed off")))
  dev = driver.get_device(0)
  host = np.arange(300 * KB // 4, dtype=np.float32)
  buf = cuda_backend.DeviceBuffer.from_host(host, dev)
  assert all(p for _, _, p in _pieces_of(fake, buf.ptr, host.nbytes))
  np.testing.assert_array_equal(buf.to_host(), host)
  assert not submitted
  assert staging.threads_for(2 << 20) == 2 and staging.threads_for(100 << 20) == 4
  assert staging.threads_for(1) == 1


def test_switched_off_uploads_stay_on_the_main_stream(fake, monkeypatch):
  """``OURJAX_STAGED_UPLOADS=0``: the old path, pageable copies on the main stream, no copy
  stream, no waits, no upload blocks."""
  monkeypatch.setenv("OURJAX_STAGED_UPLOADS", "0")
  dev = driver.get_device(0)
  host = np.arange(3 * 64 * KB // 4, dtype=np.float32)
  buf = cuda_backend.DeviceBuffer.from_host(host, dev)
  assert _pieces_of(fake, buf.ptr, host.nbytes) == [(0, host.nbytes, False)]
  assert all(s is dev.stream for s in fake.htod_streams)
  assert dev._copy_stream is None and not fake.waits
  assert getattr(dev, "_upload_blocks", None) is None
  np.testing.assert_array_equal(buf.to_host(), host)


def test_free_upload_blocks_go_back_when_memory_runs_out(fake):
  """The free blocks that staged uploads keep are returned to the allocator, and to the
  driver, when an allocation runs out of device memory."""
  dev = driver.get_device(0)
  blocks = staging.Blocks.of(dev)
  b = cuda_backend.DeviceBuffer.from_host(np.ones(3 * 64 * KB, np.uint8), dev)
  ptr = b.ptr
  del b
  assert ptr in blocks.owned
  frees = fake.calls["cuMemFree"]
  dev.allocator.empty_cache()
  assert not blocks.owned and not blocks.free
  assert fake.calls["cuMemFree"] == frees + 1
  b = cuda_backend.DeviceBuffer.from_host(np.full(3 * 64 * KB, 7, np.uint8), dev)
  np.testing.assert_array_equal(b.to_host(), np.full(3 * 64 * KB, 7, np.uint8))


def test_a_training_loop_uploads_beside_the_running_step(fake):
  """Steps back to back, the device one step behind the host (step k - 1 still running when
  batch k + 1 is uploaded; stood in for by a pending DMA per step on the main stream): the
  batches' blocks alternate between two, and no upload's copy stream waits for a fence the
  main stream has not passed (nothing holds the DMAs behind the running step); every batch
  lands intact and is read back after its step."""
  dev = driver.get_device(0)
  rng = np.random.default_rng(7)
  marks, ptrs = [], []
  for k in range(8):
    if len(marks) >= 2:                 # step k - 2 has finished on the device
      fake._flush(dev.stream, marks[-2] + 1)
    host = rng.standard_normal(3 * 64 * KB // 4).astype(np.float32)
    nwaits = len(fake.waits)
    buf = cuda_backend.DeviceBuffer.from_host(host, dev)
    for stream, src, upto in fake.waits[nwaits:]:
      if stream is dev.copy_stream:
        assert not any(seq < upto for seq, *_ in getattr(src, "pending", ())), k
    ptrs.append(buf.ptr)
    _busy(fake, dev)                    # step k, enqueued behind its upload
    marks.append(dev.stream.seq)
    if k == 5:
      np.testing.assert_array_equal(buf.to_host(), host)
      marks = []
    del buf
  assert len(set(ptrs)) == 2 and ptrs[:4] == ptrs[4:]


def test_an_upload_out_of_memory_gives_back_the_free_upload_blocks(fake, monkeypatch):
  """An upload whose block the allocator cannot get while the staged uploads keep free
  blocks of another size: those go back to the driver and the allocation is tried again."""
  dev = driver.get_device(0)
  blocks = staging.Blocks.of(dev)
  b = cuda_backend.DeviceBuffer.from_host(np.ones(3 * 64 * KB, np.uint8), dev)
  old = b.ptr
  del b
  real = fake.cuMemAlloc
  freed = []
  real_free = fake.cuMemFree

  def mem_free(p):
    freed.append(int(p))
    return real_free(p)

  def mem_alloc(n):               # out of memory until the kept block is freed
    if not freed:
      fake.calls["cuMemAlloc"] += 1
      return (cuda_fake_driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY, None)
    return real(n)
  monkeypatch.setattr(fake, "cuMemAlloc", mem_alloc)
  monkeypatch.setattr(fake, "cuMemFree", mem_free)
  host = np.full(5 * 64 * KB, 3, np.uint8)
  b = cuda_backend.DeviceBuffer.from_host(host, dev)
  assert freed == [old] and old not in blocks.owned
  np.testing.assert_array_equal(b.to_host(), host)


# ------------------------------------------------------------------------------------------------
# Overlapped uploads (Uploads.start / finish): DMAs behind gates the copying threads open


def _two_device_uploads(fake, rng, chunks=3):
  devs = [driver.get_device(0), driver.get_device(1)]
  big = [rng.standard_normal(chunks * 64 * KB // 4).astype(np.float32) for _ in devs]
  small = [np.full(7, k, np.int32) for k in range(2)]
  up = cuda_backend.Uploads()
  bufs = [(up.put(b, d), up.put(sm, d)) for b, sm, d in zip(big, small, devs)]
  return devs, big, small, up, bufs


def test_an_overlapped_upload_gates_every_dma_and_is_read_by_finish(fake, monkeypatch):
  """``Uploads.start``: every staged DMA is enqueued on the copy stream behind a gate (a wait
  for its chunk's word), and ``start`` returns while the copies are still held up (here: by
  the test) -- the caller enqueues its work meanwhile; ``finish`` returns once every piece is
  copied and every gate open; the host arrays may then change and the blocks hold what they
  held when ``finish`` returned, small blocks included."""
  release = threading.Event()
  real = staging._fill
  filled = []

  def held(chunk, src):
    assert release.wait(10), "start waited for the copies"
    filled.append(src.__array_interface__["data"][0])
    real(chunk, src)
  monkeypatch.setattr(staging, "_fill", held)
  monkeypatch.setattr(staging, "THREADS", 3)
  monkeypatch.setattr(staging, "_workers", None)
  devs, big, small, up, bufs = _two_device_uploads(fake, np.random.default_rng(11))
  up.start()                              # (returns with every copy still held up)
  assert not filled
  npieces = sum(1 for _, _, _, p in fake.htod if p)
  assert npieces == 6
  assert fake.calls["cuStreamWaitValue32"] == npieces + 2      # (+ each pool's probe)
  for d in devs:
    kinds = ["gate" if dst is None else "dma" for _, dst, *_ in d.copy_stream.pending]
    assert kinds == ["gate", "dma"] * (len(kinds) // 2)
  release.set()
  up.finish()
  assert len(filled) == npieces
  want = [b.tobytes() for b in big]
  for b in big:
    b[:] = -1                               # (read no more)
  for sm in small:
    sm[:] = -1
  for k, (d, (bb, sb)) in enumerate(zip(devs, bufs)):
    assert _device_bytes(fake, d, bb) == want[k]
    assert _device_bytes(fake, d, sb) == np.full(7, k, np.int32).tobytes()
    pool = staging.Pool.of(d)
    assert all(pool.flags[c.slot] == c.seq for c in pool.chunks)
  assert fake.gates_passed == npieces + 2


def test_an_overlapped_batch_is_copied_from_the_callers_array_once(fake, monkeypatch):
  """A pmap's NumPy batch: each device's slice is copied straight from the caller's array
  into the pinned chunks (no copy of the slice first), the step is launched after its batch
  landed, and the call returns only once the batch was read: the array changed afterwards
  changes nothing on the devices."""
  import ourjax
  real = staging._fill
  sources = []

  def spy(chunk, src):
    sources.append((src.__array_interface__["data"][0], src.nbytes))
    real(chunk, src)
  monkeypatch.setattr(staging, "_fill", spy)
  f = ourjax.pmap(lambda v: v * 2.0, axis_name="i", devices=ourjax.devices("cuda")[:2])
  f(np.ones((2, 8), np.float32))            # (compiled and loaded first)
  x = np.random.default_rng(12).standard_normal((2, 3 * 64 * KB // 4)).astype(np.float32)
  want = x.copy()
  seen = []
  real_launch, real_graph = fake.cuLaunchKernel, fake.cuGraphLaunch

  devs = [driver.get_device(0), driver.get_device(1)]

  def block(k):
    """Device k's batch block as its DMAs (on its copy stream) have left it."""
    dst = min(d for (d, _, _, p), st in zip(fake.htod, fake.htod_streams)
              if p and st is devs[k].copy_stream)
    return fake.read_device(dst, x[k].nbytes)

  def check(stream):
    k = [d.stream for d in devs].index(stream)
    seen.append(block(k) == want[k].tobytes())

  def launch(*a):
    r = real_launch(*a)                     # (lands what the main stream waits for)
    check(a[8])
    return r

  def graph(*a):
    r = real_graph(*a)
    check(a[1])
    return r
  fake.cuLaunchKernel, fake.cuGraphLaunch = launch, graph
  lo, hi = x.__array_interface__["data"][0], x.__array_interface__["data"][0] + x.nbytes
  for step in range(2):
    seen.clear()
    sources.clear()
    fake.htod.clear()
    fake.htod_streams.clear()
    gates = fake.gates_passed
    f(x)
    # 3 pieces a device, each behind its gate (the first call also probes each pool's gates)
    assert fake.gates_passed - gates == (8 if step == 0 else 6)
    assert sources and all(lo <= a and a + n <= hi for a, n in sources)
    assert sum(n for _, n in sources) == x.nbytes
    assert len(seen) >= 2 and all(seen)        # each device's step after its block landed
    x[:] = 5.0                                # (the call has returned: read no more)
    for d in devs:
      d.synchronize()
    assert [block(k) for k in range(2)] == [r.tobytes() for r in want]
    x[:] = want


def test_a_failed_copy_opens_its_gates_and_is_raised_by_finish(fake, monkeypatch):
  """A copy that fails in a worker: every gate is opened all the same (the streams do not
  wait for ever; later uploads work), ``finish`` raises the error, and a host Array given a
  device copy by the failed upload forgets it."""
  import ourjax
  real = staging._fill
  calls = []

  def failing(chunk, src):
    calls.append(1)
    if len(calls) == 3:
      raise MemoryError("copy failed")
    real(chunk, src)
  monkeypatch.setattr(staging, "_fill", failing)
  monkeypatch.setattr(fake, "gate_timeout_s", 2.0)
  devs, big, small, up, bufs = _two_device_uploads(fake, np.random.default_rng(13))
  arr = ourjax.numpy.asarray(np.zeros(3, np.float32))
  arr._device_buf = None
  slots, keep = [0, 0], []
  ups = cuda_backend._upload_args(devs[0], [(0, big[0], np.dtype(np.float32), big[0].shape),
                                            (1, arr, np.dtype(np.float32), (3,))], slots, keep)
  assert arr._device_buf is not None
  with pytest.raises(MemoryError, match="copy failed"):
    ups.finish()
  assert arr._device_buf is None
  for d in devs:
    d.synchronize()
    d.synchronize("copies", d.copy_stream)           # (no gate left shut)
  monkeypatch.setattr(staging, "_fill", real)
  up.start()
  up.finish()
  for d, (bb, _), b in zip(devs, bufs, big):
    assert _device_bytes(fake, d, bb) == b.tobytes()


def test_without_gates_start_makes_the_whole_upload(fake, monkeypatch):
  """A driver without stream memory operations (the probe fails), or
  ``OURJAX_UPLOAD_OVERLAP=0``: ``start`` copies everything before it returns, no gates."""
  for how in ("driver", "switch"):
    if how == "driver":
      fake.fail.add("cuStreamWaitValue32")
    else:
      fake.fail.clear()
      monkeypatch.setenv("OURJAX_UPLOAD_OVERLAP", "0")
    before = fake.gates_passed
    devs, big, small, up, bufs = _two_device_uploads(fake, np.random.default_rng(14))
    up.start()
    assert up._in_flight is None
    want = [b.tobytes() for b in big]
    for b in big:
      b[:] = 0
    up.finish()
    for d, (bb, _), w in zip(devs, bufs, want):
      assert _device_bytes(fake, d, bb) == w
    assert fake.gates_passed == before
    if how == "driver":
      assert all(not staging.Pool.of(d).gated() for d in devs)
