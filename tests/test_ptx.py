"""The CUDA backend's code generation, without a GPU: ``jit(f, backend="cuda").lower(...)
.compile()`` works anywhere (the module is loaded on the first call), ``as_text(dialect="ptx")``
gives PTX, and the PTX of every kind of kernel assembles with ``ptxas -arch=sm_90`` (skipped
when ptxas is not installed)."""
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax.backends.cuda import codegen, memory
from ourjax.backends.cuda import backend as cuda_backend

from cuda_cases import CASES

PTXAS = shutil.which("ptxas")
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas is not installed")


def _compiled(fn, args):
  return ourjax.jit(fn, backend="cuda").lower(*args).compile()


def _assemble(ptx: str, arch: str = "sm_90"):
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "m.ptx")
    with open(path, "w") as f:
      f.write(ptx)
    r = subprocess.run([PTXAS, f"-arch={arch}", path, "-o", os.path.join(d, "m.cubin")],
                       capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, f"ptxas failed:\n{r.stderr}\n--- PTX ---\n{ptx[:3000]}"


@pytest.fixture(scope="module")
def compiled_cases():
  rng = np.random.default_rng(0)
  out = {}
  for name, fn, make_args, _ in CASES:
    out[name] = _compiled(fn, make_args(rng))
  return out


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_case_compiles_to_ptx_without_a_gpu(compiled_cases, name):
  c = compiled_cases[name]
  exe = c.runtime_executable()
  assert isinstance(exe, cuda_backend.CudaExecutable), exe
  assert exe._dev is None            # nothing was loaded on a device
  ptx = c.as_text(dialect="ptx")
  assert ".entry" in ptx and f".target sm_" in ptx and ".version 8.0" in ptx


@needs_ptxas
@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_case_ptx_assembles(compiled_cases, name):
  _assemble(compiled_cases[name].as_text(dialect="ptx"))


def _kernel_kinds(c):
  return [type(k).__name__ for k in c.runtime_executable().kernels]


def test_kernel_kinds(compiled_cases):
  kinds = {n: _kernel_kinds(c) for n, c in compiled_cases.items()}
  assert kinds["ew_f32"] == ["Elementwise"]
  assert "RowReduce" in kinds["softmax"]
  assert "RowReduce" in kinds["layernorm"]
  assert kinds["sum_all"] == ["SplitPartials", "SplitFinish"]
  assert "ColumnReduce" in kinds["sum_cols"]
  assert kinds["dot_tf32"] == ["MmaDot"]
  assert "SimtDot" in kinds["dot_odd"]
  assert "MmaDot" in kinds["dot_bf16"]
  assert "Threaded" in kinds["sort"]


def test_streaming_loads_are_16_bytes_wide(compiled_cases):
  ptx = compiled_cases["ew_gelu"].as_text(dialect="ptx")
  assert "ld.global.nc.v4" in ptx or "ld.global.v4" in ptx
  assert "st.global.v4" in ptx


def test_tensor_core_instructions(compiled_cases):
  ptx = compiled_cases["dot_tf32"].as_text(dialect="ptx")
  assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx
  assert "cvt.rna.tf32.f32" in ptx and "cp.async.cg.shared.global" in ptx
  ptx = compiled_cases["dot_bf16"].as_text(dialect="ptx")
  assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
  assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx


@needs_ptxas
@pytest.mark.parametrize("name", ["dot_tf32", "dot_bf16", "dot_transposed", "dot_nt",
                                  "dot_bf16_tt", "dot_f16_tn"])
def test_first_tensor_core_kernel_still_assembles(monkeypatch, name):
  """``OURJAX_CUDA_MMA=v1``: the register-staged kernel (kept as a fallback)."""
  monkeypatch.setenv("OURJAX_CUDA_MMA", "v1")
  case = next(c for c in CASES if c[0] == name)
  c = _compiled(case[1], case[2](np.random.default_rng(0)))
  assert [type(k).__name__ for k in c.runtime_executable().kernels][-1] == "TensorCoreDot"
  _assemble(c.as_text(dialect="ptx"))


def test_reductions_use_warp_shuffles(compiled_cases):
  ptx = compiled_cases["softmax"].as_text(dialect="ptx")
  assert "shfl.sync.bfly" in ptx and "bar.sync" in ptx


def test_highest_precision_keeps_f32_dots_off_tf32():
  rng = np.random.default_rng(1)
  a = rng.standard_normal((256, 256), dtype=np.float32)
  from ourjax.config import config
  with config._override("jax_default_matmul_precision", "highest"):
    c = _compiled(lambda x, y: x @ y, (a, a))
  assert _kernel_kinds(c) == ["SimtDot"]


def test_llvm_ir_is_available_too(compiled_cases):
  ir = compiled_cases["ew_f32"].as_text(dialect="llvm")
  assert "ptx_kernel" in ir


def test_unsupported_module_falls_back_to_the_cpu_backend():
  x = np.ones(4, np.complex64)
  c = _compiled(lambda v: v * v, (x,))
  exe = c.runtime_executable()
  assert isinstance(exe, cuda_backend.HostFallbackExecutable)
  with pytest.raises(ValueError, match="no PTX"):
    c.as_text(dialect="ptx")


@needs_ptxas
def test_compile_ptx_of_handwritten_module():
  mod = codegen.new_module("m")
  import llvmlite.ir as ir
  fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ir.FloatType().as_pointer()]), "k")
  fn.calling_convention = "ptx_kernel"
  b = ir.IRBuilder(fn.append_basic_block())
  tid = codegen.sreg64(b, "tid.x")
  b.store(ir.Constant(ir.FloatType(), 1.0), b.gep(fn.args[0], [tid]))
  b.ret_void()
  ptx = codegen.compile_ptx(mod)
  assert ".visible .entry k" in ptx
  _assemble(ptx)


def test_broken_ir_raises_compile_error():
  from ourjax.errors import CompileError
  with pytest.raises(CompileError, match="LLVM rejected"):
    codegen.compile_ptx("define void @k() { ret i32 0 }")


def test_size_classes():
  assert memory.size_class(0) == 512
  assert memory.size_class(1) == 512
  assert memory.size_class(513) == 1024
  assert memory.size_class(1 << 20) == 1 << 20
  for n in (3 << 20, 1000003, 123456789, 1 << 33):
    c = memory.size_class(n)
    assert n <= c <= n * 1.07 + 512
    assert memory.size_class(c) == c      # a class maps to itself


def test_no_gpu_means_cpu_default(monkeypatch):
  from ourjax.backends.cuda import driver
  if driver.available():
    pytest.skip("a GPU is present")
  assert ourjax.default_backend() == "cpu"
  assert ourjax.devices()[0].platform == "cpu"
  with pytest.raises(RuntimeError, match="not available"):
    ourjax.devices("cuda")
  x = ourjax.device_put(np.arange(3.0, dtype=np.float32))
  assert list(x.devices())[0].platform == "cpu"
  np.testing.assert_array_equal(ourjax.device_get(x), np.arange(3.0))
