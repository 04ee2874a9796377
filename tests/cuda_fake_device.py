"""A stand-in for ``driver.Device`` (and its events and functions) that runs the CUDA backend's
host side without a GPU: ``test_ptx``, ``test_cuda_warm_start``.  It imports nothing of the
compiler (a warm-start test checks what a process imports).  Launches and copies are appended
to ``log``: (kernel name, grid, block), ("h2d"|"d2h"|"d2d", bytes)."""
from ourjax.backends.cuda import memory


class FakeFunction:
  def __init__(self, name, log):
    self.name, self.log = name, log

  def set_max_dynamic_shared(self, n):
    pass

  def launch(self, grid, block, params_address, shared=0):
    assert params_address != 0 or True
    self.log.append((self.name, grid, block))


class FakeDevice:
  """Enough of ``driver.Device`` to run an executable's host-side logic without a GPU."""
  arch, multiprocessor_count, ordinal, name, total_memory = "90", 132, 0, "fake", 1 << 34
  driver_version = 1          # (no real driver's: the cache keys of its cubins are its own)

  def link_ptx(self, ptx, name):
    return b"fake cubin of " + name.encode()

  def __init__(self):
    self.log, self.next_ptr = [], 1 << 20
    self.allocator = memory.DeviceAllocator(self)

  def make_current(self):
    pass

  def mem_alloc(self, n):
    p, self.next_ptr = self.next_ptr, self.next_ptr + n
    return p

  def mem_free(self, p):
    pass

  def memory_info(self):
    return 1 << 30, 1 << 34

  def synchronize(self, what=""):
    pass

  def copy_to_device(self, dst, host):
    self.log.append(("h2d", host.nbytes))

  def copy_to_host(self, host, src):
    host[...] = 0
    self.log.append(("d2h", host.nbytes))

  def copy_device(self, dst, src, n):
    self.log.append(("d2d", n))

  def load_module(self, ptx, name):
    dev = self

    class M:
      def function(self, fname):
        return FakeFunction(fname, dev.log)
    return M()


class FakeEvent:
  def __init__(self, dev, timing=False):
    pass

  def record(self):
    return self

  def synchronize(self, what=""):
    pass

  def query(self):
    return True

  def elapsed_ms(self, other):
    return 0.0
