"""The CUDA backend's code generation, without a GPU: ``jit(f, backend="cuda").lower(...)
.compile()`` works anywhere (the module is loaded on the first call), ``as_text(dialect="ptx")``
gives PTX, and the PTX of every kind of kernel assembles with ``ptxas -arch=sm_90`` (skipped
when ptxas is not installed)."""
import math
import re
import os
import shutil
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax
from ourjax.backends.cuda import codegen, memory
from ourjax.backends.cuda import backend as cuda_backend

from cuda_cases import CASES, IMPLICIT_GEMM_CASES, STRIDED_GRAD_CASES
from cuda_fake_device import FakeDevice as _FakeDevice, FakeEvent as _FakeEvent

BF16 = ml_dtypes.bfloat16
PTXAS = shutil.which("ptxas")
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas is not installed")


def _compiled(fn, args):
  return ourjax.jit(fn, backend="cuda").lower(*args).compile()


def _assemble(ptx: str, arch: str | None = None):
  """``ptxas`` for the PTX's own ``.target`` (sm_90a for modules with wgmma) unless given; an
  executable's PTX of several modules is assembled module by module."""
  if cuda_backend.MODULE_SEPARATOR in ptx:
    for part in ptx.split(cuda_backend.MODULE_SEPARATOR):
      _assemble(part, arch)
    return
  if arch is None:
    import re
    m = re.search(r"^\.target (\w+)", ptx, re.M)
    arch = m.group(1) if m else "sm_90"
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
  assert kinds["dot_tf32"] == ["WgmmaDot"]
  assert "SimtDot" in kinds["dot_odd"]
  assert "WgmmaDot" in kinds["dot_bf16"]
  # A stored M-major (not a wgmma layout) is copied K-major first
  assert kinds["dot_transposed"] == ["StridedTranspose", "WgmmaDot"]
  # elementwise consumers run in the dot kernel; SimtDot has no epilogue
  assert kinds["dot_epilogue_bias_gelu"] == ["WgmmaDot"]
  assert kinds["dot_epilogue_residual_tt"] == ["StridedTranspose", "WgmmaDot"]
  assert kinds["dot_epilogue_batched_bf16"] == ["WgmmaDot"]
  assert kinds["dot_epilogue_simt"] == ["SimtDot", "Elementwise"]
  # f32 A stored M-major with a K-major B: the register form, no copy; a weight gradient
  # (both operands k-outermost) copies the smaller operand, here B (64 columns, not A's 384)
  ks = {n: compiled_cases[n].runtime_executable().kernels
        for n in ("dot_wgmma_tt", "dot_wgmma_wgrad_small_b")}
  assert [(type(k).__name__, getattr(k, "mode", None)) for k in ks["dot_wgmma_tt"]] == [
      ("WgmmaDot", "rs")]
  copies = [k for k in ks["dot_wgmma_wgrad_small_b"] if type(k).__name__ == "StridedTranspose"]
  assert [(k.R, k.C) for k in copies] == [(64, 4096)], copies
  assert [k.mode for k in ks["dot_wgmma_wgrad_small_b"] if type(k).__name__ == "WgmmaDot"] \
      == ["rs"]
  assert kinds["dot_split_k"] == ["SimtDot", "SplitKSum"]      # the epilogue in the sum
  # weights much smaller than the patch matrix: copied K-major, then a shared-memory form
  # (transposed below 256 output channels), the epilogue at the accumulators (late only when
  # asked) and the tile through shared memory, also into a [N, H, W, C] result
  forms = {n: [(type(k).__name__, getattr(k, "mode", None), getattr(k, "late_epilogue", None),
                getattr(k, "staged_store", None))
               for k in compiled_cases[n].runtime_executable().kernels]
           for n in ("conv_narrow_b_ss_t", "conv_narrow_b_ss_t_edges",
                     "conv_narrow_b_ss_bf16", "dot_narrow_b_ss_t")}
  copy = ("StridedTranspose", None, None, None)
  assert forms["conv_narrow_b_ss_t"] == [copy, ("WgmmaDot", "ss_t", False, True)]
  assert forms["conv_narrow_b_ss_t_edges"] == [copy, ("WgmmaDot", "ss_t", False, True)]
  assert forms["conv_narrow_b_ss_bf16"] == [copy, ("WgmmaDot", "ss", False, True)]
  assert forms["dot_narrow_b_ss_t"] == [copy, ("WgmmaDot", "ss_t", False, True)]
  # 8-bit integer dots on the tensor cores (a row-major B copied K-major first); other integer
  # dots on SimtDot, never a sum per element inside an elementwise kernel
  assert kinds["dot_wgmma_s8"] == ["StridedTranspose", "WgmmaDot"]
  assert kinds["dot_wgmma_u8_nt"] == ["WgmmaDot"]
  assert kinds["dot_wgmma_s8_dequant"] == ["StridedTranspose", "WgmmaDot"]   # (epilogue fused)
  assert kinds["dot_int32_simt"] == ["SimtDot"] and kinds["dot_s8_odd_k_simt"] == ["SimtDot"]
  # float8 dots on the tensor cores likewise (both operands K-major: NT needs no copy, a
  # row-major B or an M-major A is copied); k not a multiple of 16 bytes: SimtDot
  assert kinds["dot_wgmma_e4m3_nt"] == ["WgmmaDot"]
  assert kinds["dot_wgmma_e4m3_out"] == ["WgmmaDot"]
  assert kinds["dot_wgmma_e5m2"] == ["StridedTranspose", "WgmmaDot"]
  assert kinds["dot_wgmma_e5m2_e4m3_tn_f16"] == ["StridedTranspose"] * 2 + ["WgmmaDot"]
  assert kinds["dot_wgmma_e4m3_batched"] == ["StridedTranspose", "WgmmaDot"]
  assert kinds["dot_fp8_odd_k_simt"] == ["SimtDot"]
  assert kinds["dot_wgmma_e4m3_split_k"] == ["WgmmaDot", "SplitKSum"]
  # quantize -> dot -> dequantize runs on the device: the quantizing converts, the weight's
  # copy K-major, the dot with the dequantizing scale fused as its epilogue
  assert kinds["dot_wgmma_fp8_linear"][-2:] == ["StridedTranspose", "WgmmaDot"]
  for name in ("fp8_convert_f32", "fp8_arith", "fp8_reduce"):
    assert "Threaded" not in kinds[name], (name, kinds[name])
  for name, k in kinds.items():     # sort and scatter cases reach the parallel kernels
    if "sort" in name or name == "top_k":
      assert "GpuSort" in k and "Threaded" not in k, (name, k)
    if "scatter" in name or name in ("segment_sum", "take_grad"):
      assert "GpuScatter" in k and "Threaded" not in k, (name, k)
  assert kinds["sort"] == ["GpuSort"]
  # grouped convolutions (forwards, input gradients: feature groups): one tensor-core dot over
  # all groups, its patches read in place, its result stored in the output's feature order
  # where the output is channels-last (no kernel of its own for the transpose)
  def grouped(name):
    return [(k.im2col.geometry.groups, (k.c_sb, k.c_sm) != (k.spec.M * k.spec.N, k.spec.N))
            for k in compiled_cases[name].runtime_executable().kernels
            if getattr(k, "im2col", None) is not None]
  # a scale (and shift) and relu after the swap: the dot's epilogue, evaluated before the
  # swap, which the dot's store does (one kernel but the weights' reshape)
  for name, groups in (("conv_grouped", 2), ("conv_grouped_scale_shift_relu_bf16", 4),
                       ("conv_grouped_relu_1d", 2)):
    assert grouped(name) == [(groups, True)], (name, grouped(name))
    assert kinds[name] == ["Elementwise", "WgmmaDot"], (name, kinds[name])
    (dot,) = [k for k in compiled_cases[name].runtime_executable().kernels
              if type(k).__name__ == "WgmmaDot"]
    assert dot.epilogue is not None and dot.c_swapped, name
  assert grouped("conv_grouped_narrow") == [(32, True)]
  assert grouped("conv_grouped_bf16") == [(8, True)]
  assert grouped("conv_grouped_strided") == [(4, True)]
  assert grouped("conv_grouped_1d") == [(2, True)]
  assert grouped("conv_grouped_nchw") == [(4, False)]
  # (the forward's result read through tanh, the input gradient's stored as it is)
  assert sorted(grouped("conv_grouped_input_grad")) == [(4, False), (4, True)]
  for name in ("conv_grouped_narrow", "conv_grouped_bf16"):
    assert kinds[name].count("WgmmaDot") == 1 and len(kinds[name]) == 2, (name, kinds[name])
  # the weight gradient: batch groups, each group's rows of the (transposed) input's patches
  # read in place, split along its long contraction
  ks = compiled_cases["conv_grouped_weight_grad"].runtime_executable().kernels
  wgrad = [k for k in ks if getattr(k, "im2col", None) is not None and
           k.im2col.geometry.group_rows is not None]
  assert [(k.im2col.geometry.groups, k.S > 1) for k in wgrad] == [(2, True)], ks
  assert "GpuSortStep" in kinds["sort_long_rows"] and "GpuSortStep" in kinds["argsort_long_row"]


def test_streaming_loads_are_16_bytes_wide(compiled_cases):
  ptx = compiled_cases["ew_gelu"].as_text(dialect="ptx")
  assert "ld.global.nc.v4" in ptx or "ld.global.v4" in ptx
  assert "st.global.v4" in ptx


def test_tensor_core_instructions(monkeypatch):
  """``OURJAX_CUDA_MMA=v2``: the mma.sync kernel (MmaDot), which dots that WgmmaDot does not
  take (or a GPU before Hopper) get."""
  monkeypatch.setenv("OURJAX_CUDA_MMA", "v2")
  rng = np.random.default_rng(0)
  compiled_cases = {n: _compiled(fn, make(rng)) for n, fn, make, _ in CASES
                    if n in ("dot_tf32", "dot_bf16")}
  ptx = compiled_cases["dot_tf32"].as_text(dialect="ptx")
  assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx
  assert "cvt.rna.tf32.f32" in ptx and "cp.async.cg.shared.global" in ptx
  ptx = compiled_cases["dot_bf16"].as_text(dialect="ptx")
  assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
  assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx


def test_wgmma_instructions(compiled_cases):
  """WgmmaDot: sm_90a PTX; tf32 with a row-major B in the register form (B^T read in pairs of
  values and rounded to tf32 for finite values only, a fence before each instruction), bf16 with
  B staged N-major (transpose flag 1); copies fenced for the async proxy."""
  for name in ("dot_wgmma_tf32", "dot_wgmma_bf16", "dot_wgmma_tf32_nt"):
    assert _kernel_kinds(compiled_cases[name]) == ["WgmmaDot"], name
  ptx = compiled_cases["dot_wgmma_tf32"].as_text(dialect="ptx")
  assert ".target sm_90a" in ptx and "setp.lt.f32 p, a, 0f7F800000" in ptx
  assert "@p add.s32" in ptx and "ld.shared.v2.b32" in ptx
  assert ptx.count("wgmma.fence.sync.aligned") == ptx.count("wgmma.mma_async.sync")
  assert "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32" in ptx
  assert "fence.proxy.async.shared::cta" in ptx and "wgmma.wait_group.sync.aligned 1" in ptx
  # the k loop is marked for ptxas not to unroll (a loop of a few slices it unrolled whole)
  assert '.pragma "nounroll"' in ptx
  ptx = compiled_cases["dot_wgmma_bf16"].as_text(dialect="ptx")
  assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in ptx and ", 0, 1; }" in ptx
  # 16-bit dots issue a slice's 4 k steps unrolled (only tf32's shared-memory forms loop around
  # one instruction: test_wgmma_k_loop_switch); the register form keeps its 2 x 4 unrolled ones
  assert ptx.count("wgmma.mma_async") == 4
  assert compiled_cases["dot_wgmma_tf32"].as_text(dialect="ptx").count("wgmma.mma_async") == 8
  ptx = compiled_cases["dot_wgmma_tf32_nt"].as_text(dialect="ptx")
  assert ptx.count("wgmma.mma_async") == 1
  # 8-bit integers: k32 steps into int32 accumulators, no operand scales or transpose flags
  ptx = compiled_cases["dot_wgmma_u8_nt"].as_text(dialect="ptx")
  assert "wgmma.mma_async.sync.aligned.m64n128k32.s32.u8.u8" in ptx
  assert ".s32.u8.u8" in ptx and ", p; }" in ptx
  # 8-bit floats: k32 steps into f32 accumulators, operand scales, no transpose flags; each
  # operand its own type
  ptx = compiled_cases["dot_wgmma_e4m3_nt"].as_text(dialect="ptx")
  assert "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3" in ptx and ", p, 1, 1; }" in ptx
  assert ".f32.e5m2.e5m2" in compiled_cases["dot_wgmma_e5m2"].as_text(dialect="ptx")
  assert ".f32.e4m3.e5m2" in compiled_cases["dot_wgmma_e4m3_e5m2_bf16"].as_text(dialect="ptx")
  assert ".f32.e5m2.e4m3" in compiled_cases["dot_wgmma_e5m2_e4m3_tn_f16"].as_text(dialect="ptx")


def test_wgmma_takes_any_sizes(compiled_cases):
  """Sizes the tiles do not divide stay on the tensor cores: copies past an edge load zeros
  (cp.async with a source size), stores are guarded, narrow products get one warpgroup and a
  32-wide tile, and a long contraction with few output tiles is split into partial products."""
  for name in ("dot_wgmma_edges", "dot_wgmma_narrow_nt", "dot_wgmma_bf16_edges",
               "dot_wgmma_batched_edges"):
    assert _kernel_kinds(compiled_cases[name]) == ["WgmmaDot"], name
  ptx = compiled_cases["dot_wgmma_edges"].as_text(dialect="ptx")
  assert "cp.async.cg.shared.global [%rd" in ptx and "[g], 16, %r" in ptx
  ptx = compiled_cases["dot_wgmma_narrow_nt"].as_text(dialect="ptx")
  assert "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32" in ptx
  assert _kernel_kinds(compiled_cases["dot_wgmma_split_k"]) == [
      "StridedTranspose", "WgmmaDot", "SplitKSum"]
  k = compiled_cases["dot_wgmma_narrow_b"].runtime_executable().kernels
  assert [type(x).__name__ for x in k] == ["StridedTranspose", "WgmmaDot"]
  assert (k[1].mode, k[1].WG, k[1].Q) == ("ss", 2, 64)
  assert ".target sm_90\n" in compiled_cases["ew_f32"].as_text(dialect="ptx")


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


def test_sort_and_scatter_instructions(compiled_cases):
  """The bitonic sort runs in dynamic shared memory with barriers and a declared block size;
  scatters combine with native atomics where PTX has them, else compare-and-swap loops."""
  ptx = compiled_cases["sort_rows_5000"].as_text(dialect="ptx")
  assert ".extern .shared" in ptx and "bar.sync" in ptx and ".maxntid 1024" in ptx
  assert "atom.global.add.f32" in compiled_cases["scatter_add_dups"].as_text(dialect="ptx")
  assert "atom.global.max.s32" in compiled_cases["scatter_max_i32"].as_text(dialect="ptx")
  for name in ("scatter_mul_f32", "scatter_add_bf16", "scatter_min_u8"):
    assert "atom.relaxed.gpu.global.cas.b32" in compiled_cases[name].as_text(dialect="ptx")


def test_reductions_use_warp_shuffles(compiled_cases):
  ptx = compiled_cases["softmax"].as_text(dialect="ptx")
  assert "shfl.sync.bfly" in ptx and "bar.sync" in ptx


def test_highest_precision_keeps_f32_dots_off_tf32():
  rng = np.random.default_rng(1)
  a = rng.standard_normal((256, 256), dtype=np.float32)
  from ourjax.config import config
  with config._override("jax_default_matmul_precision", "highest"):
    c = _compiled(lambda x, y: x @ y, (a, a))
  kinds = _kernel_kinds(c)
  assert kinds[0] == "SimtDot" and set(kinds) <= {"SimtDot", "SplitKSum"}, kinds


def test_llvm_ir_is_available_too(compiled_cases):
  ir = compiled_cases["ew_f32"].as_text(dialect="llvm")
  assert "ptx_kernel" in ir


@pytest.mark.parametrize("fn", [lambda x: jnp.sum(jnp.sin(x), axis=-1),
                                lambda x: jnp.max(jnp.cos(x * 3.0), axis=-1) + 1.0])
def test_gpu_trig_inside_an_inline_reduction_compiles_for_the_gpu(fn):
  """sin/cos evaluated in the body of a short reduction that an elementwise kernel computes
  inline: the GPU module is valid (it was rejected, and the program ran on the host)."""
  c = _compiled(fn, (np.ones((7,), np.float32),))
  assert not isinstance(c.runtime_executable(), cuda_backend.HostFallbackExecutable)
  if PTXAS is not None:
    _assemble(c.as_text(dialect="ptx"))


def test_unsupported_module_falls_back_to_the_cpu_backend():
  x = np.ones(4, np.complex64)
  c = _compiled(lambda v: v * v, (x,))
  exe = c.runtime_executable()
  assert isinstance(exe, cuda_backend.HostFallbackExecutable)
  with pytest.raises(ValueError, match="no PTX"):
    c.as_text(dialect="ptx")


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_conditional_setter_kernels_assemble(arch):
  """The handle setters of conditional graph nodes (``cuda/conditional.py``: PTX the driver
  JIT loads, calling ``cudaGraphSetConditional``) assemble for the GPUs we target."""
  from ourjax.backends.cuda import conditional
  assert ".entry ourjax_set_while" in conditional.PTX
  assert ".entry ourjax_set_switch" in conditional.PTX
  _assemble(conditional.PTX, arch)


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


def test_late_epilogue_goes_through_the_shared_tile(monkeypatch):
  """A tensor-core dot's fused epilogue is evaluated in the loop over the shared tile's 16-byte
  chunks (a few copies of its code) rather than at each accumulator: less PTX, which
  assembles; a convolution's result stored as [N, H, W, C] goes through the tile too.
  ``OURJAX_CUDA_LATE_EPILOGUE=0``: at each accumulator, as before."""
  rng = np.random.default_rng(0)
  a, w, c = (rng.standard_normal(s).astype(np.float32) for s in ((512, 256), (256, 512), (512,)))
  x = rng.standard_normal((8, 16, 16, 32)).astype(np.float32)
  k = rng.standard_normal((3, 3, 32, 64)).astype(np.float32)
  progs = {"dot": (lambda a, w, c: jax_gelu(a @ w + c), (a, w, c)),
           "conv": (lambda x, k, c: jnp.maximum(lax.conv_general_dilated(
               x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
               * c[:64], 0.0), (x, k, c))}
  for name, (f, args) in progs.items():
    sizes = {}
    for late in ("0", "1"):
      monkeypatch.setenv("OURJAX_CUDA_LATE_EPILOGUE", late)
      exe = _compiled(f, args)
      (dot,) = [k for k in exe.runtime_executable().kernels if type(k).__name__ == "WgmmaDot"]
      assert dot.epilogue is not None and dot.staged_store, name
      assert dot.late_epilogue == (late == "1"), name
      ptx = exe.as_text(dialect="ptx")
      sizes[late] = len(ptx)
      if PTXAS:
        _assemble(ptx)
    if name == "dot":       # (128 accumulators a thread, each with a GELU before)
      assert sizes["1"] < 0.8 * sizes["0"], (name, sizes)


def test_wgmma_k_loop_switch(monkeypatch):
  """``OURJAX_CUDA_WGMMA_KLOOP=0``: the shared-memory forms of tf32 dots issue a slice's 4 k
  steps unrolled (4 instructions in the PTX, 1 by default); 16-bit dots are always unrolled
  (their instructions run twice as fast: the loop's gaps show); all assemble."""
  rng = np.random.default_rng(0)
  counts = {}
  for dt in (np.float32, BF16):
    a = rng.standard_normal((256, 192)).astype(dt)
    w = rng.standard_normal((256, 192)).astype(dt)          # K-major B: x @ w.T
    for on in ("0", "1"):
      monkeypatch.setenv("OURJAX_CUDA_WGMMA_KLOOP", on)
      exe = _compiled(lambda a, w: jnp.matmul(a, w.T, preferred_element_type=jnp.float32),
                      (a, w))
      (dot,) = [k for k in exe.runtime_executable().kernels if type(k).__name__ == "WgmmaDot"]
      assert dot.mode == "ss", dot.mode
      ptx = exe.as_text(dialect="ptx")
      counts[np.dtype(dt).name, on] = ptx.count("wgmma.mma_async")
      if PTXAS:
        _assemble(ptx)
  assert counts == {("float32", "0"): 4, ("float32", "1"): 1,
                    ("bfloat16", "0"): 4, ("bfloat16", "1"): 4}, counts


def jax_gelu(x):
  return 0.5 * x * (1.0 + jnp.tanh(0.79788456 * (x + 0.044715 * x * x * x)))


def test_loops_marked_not_to_unroll():
  """``ForLoop(unroll=False)``: each such loop gets a loop ID of its own marked
  ``llvm.loop.unroll.disable`` (LLVM accepts the module) and its header a ``.pragma "nounroll"``
  for ptxas; a plain loop of the same few trips is unrolled by LLVM and has none."""
  import llvmlite.ir as ir
  from ourjax.backends.llvm import emitter as E
  mod = codegen.new_module("m")
  fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ir.FloatType().as_pointer()] * 3), "k")
  fn.calling_convention = "ptx_kernel"
  b = ir.IRBuilder(fn.append_basic_block())
  for arg, unroll in zip(fn.args, (False, False, True)):
    with E.ForLoop(b, 0, 4, "i", unroll=unroll) as loop:
      p = b.gep(arg, [loop.index])
      b.store(b.fadd(b.load(p), ir.Constant(ir.FloatType(), 1.0)), p)
  b.ret_void()
  ptx = codegen.compile_ptx(mod)
  assert ptx.count('.pragma "nounroll"') == 2
  assert len(re.findall(r"@%p\d+ bra", ptx)) == 2          # two loops left
  assert len(re.findall(r"ld\.global\.b32", ptx)) == 2 + 4  # the third unrolled
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


def test_allocate_many_and_let_go_keep_the_books():
  """A call's blocks in one go (``allocate_many``), blocks let go of queued and filed by the
  next allocation: the same blocks and statistics as one ``allocate`` at a time."""
  rng = np.random.default_rng(0)
  sizes = [int(n) for n in rng.integers(0, 3 << 20, 40)]
  dev = _FakeDevice()
  alloc = dev.allocator
  first = alloc.allocate_many([memory.block_size(n) for n in sizes], sizes)
  assert [a.size for a in first] == [memory.size_class(max(n, 1)) for n in sizes]
  assert len({a.ptr for a in first}) == len(sizes)
  stats = alloc.memory_stats()
  assert stats["bytes_in_use"] == sum(a.size for a in first)
  assert stats["bytes_requested_in_use"] == sum(sizes)
  assert stats["num_allocs"] == stats["num_requests"] == len(sizes)
  ptrs = {a.ptr for a in first}
  del first                                   # (finalisers queue the blocks)
  assert alloc.memory_stats()["bytes_in_use"] == 0
  one = [alloc.allocate(n) for n in sizes]     # every block comes back from the cache
  assert {a.ptr for a in one} == ptrs
  stats = alloc.memory_stats()
  assert stats["num_allocs"] == len(sizes) and stats["num_cache_hits"] == len(sizes)
  assert stats["bytes_cached"] == 0
  one[0].free()
  assert alloc.memory_stats()["bytes_cached"] == one[0].size


def test_preferred_and_wanted_blocks():
  """``allocate_many(prefer=)`` takes each preferred block that is free (before the others
  take theirs), the rest as usual; requests without a preference keep off the blocks a kept
  graph wants, taking a new block rather than a wanted one while the cache is small, and a
  wanted one once it is not."""
  dev = _FakeDevice()
  alloc = dev.allocator
  size = memory.block_size(4096)
  blocks = alloc.allocate_many([size] * 4, [4096] * 4)
  a, b, c, d = (x.ptr for x in blocks)
  for x in blocks:                                  # freed in order: d is the most recent
    x.free()
  got = alloc.allocate_many([size] * 3, [4096] * 3, prefer=[0, a, 12345])
  assert got[1].ptr == a                            # the free preferred block
  assert {got[0].ptr, got[2].ptr} == {c, d}         # the others: most recently freed first
  del got
  alloc.want([b, c, d])
  x = alloc.allocate(4096)
  assert x.ptr == a                                 # the one no graph wants
  y = alloc.allocate(4096)
  assert y.ptr not in (a, b, c, d)                  # a new block rather than a wanted one
  assert alloc.memory_stats()["num_allocs"] == 5
  alloc.unwant([d])
  w = alloc.allocate(4096)
  assert w.ptr == d
  dev.total_memory = 4 * size                       # the cache is large: a wanted block it is
  z = alloc.allocate(4096)
  assert z.ptr in (b, c)
  alloc.unwant([b, c])
  assert not alloc._wanted and alloc.memory_stats()["num_allocs"] == 5
  del x, y, z, w


def test_uploads_to_several_devices_run_at_once(monkeypatch):
  """``Uploads``: each block is copied once to its device, in order per device; copies to
  other devices run on other threads when they are large enough, on the calling thread when
  not; a failed copy is raised by ``run``."""
  import threading
  from ourjax.backends.cuda import backend as cuda_backend, device_buffers
  devs = [_FakeDevice(), _FakeDevice()]
  seen = []
  for k, dev in enumerate(devs):
    def copy(dst, host, k=k):
      seen.append((k, dst, host.nbytes, threading.get_ident()))
    dev.copy_to_device = copy
  big = device_buffers.PARALLEL_UPLOAD_BYTES // 4
  for n, parallel in ((big, True), (16, False)):
    seen.clear()
    up = cuda_backend.Uploads()
    hosts = [[np.full(n, 10 * k + j, np.float32) for j in range(2)] for k in range(2)]
    bufs = [[up.put(h, dev) for h in hs] for hs, dev in zip(hosts, devs)]
    assert not seen                                 # nothing copied before run
    up.run()
    assert sorted(s[:3] for s in seen) == sorted((k, b.ptr, n * 4) for k in range(2)
                                                 for b in bufs[k])
    assert [s[1] for s in seen if s[0] == 1] == [b.ptr for b in bufs[1]]   # in order
    me = threading.get_ident()
    assert {s[3] for s in seen if s[0] == 0} == {me}
    assert ({s[3] for s in seen if s[0] == 1} != {me}) == parallel
    assert [b.shape for b in bufs[0]] == [(n,), (n,)]

  def fail(dst, host):
    raise RuntimeError("copy failed")
  devs[1].copy_to_device = fail
  up = cuda_backend.Uploads()
  up.put(np.zeros(big, np.float32), devs[0])
  up.put(np.zeros(big, np.float32), devs[1])
  with pytest.raises(RuntimeError, match="copy failed"):
    up.run()


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


def test_executable_plumbing_with_a_fake_driver(monkeypatch):
  """Host-side logic of CudaExecutable (arguments, outputs, arena, launches with parameter
  blocks, copies, while/cond read-backs, profile) with a stand-in driver."""
  from ourjax.backends.cuda import driver
  monkeypatch.setenv("OURJAX_CUDA_GRAPHS", "0")   # this stand-in has no graph API (see
  fake = _FakeDevice()                             # test_cuda_dispatch.py for graphs)
  monkeypatch.setattr(driver, "get_device", lambda ordinal=0: fake)
  monkeypatch.setattr(driver, "Event", _FakeEvent)
  rng = np.random.default_rng(0)
  names = ["ew_f32", "softmax", "sum_all", "mlp_square", "fori_loop", "cond", "sort",
           "dot_tf32", "bias_update", "dynamic_update_slice"]
  for name, fn, make_args, _ in CASES:
    if name not in names:
      continue
    args = make_args(rng)
    c = _compiled(fn, args)
    exe = c.runtime_executable()
    leaves = ourjax.tree_util.tree_leaves(args)
    mexe = c._executable
    if mexe.kept_args is not None:
      leaves = [leaves[i] for i in mexe.kept_args]
    hoisted = [ourjax.Array(h) for h in mexe.hoisted]
    fake.log.clear()
    outs = exe(*leaves, *hoisted)
    assert len(outs) == len(exe.out_specs)
    for o, (dt, dims) in zip(outs, exe.out_specs):
      assert o.shape == dims and o.dtype == dt and o.is_ready()
    launched = [e for e in fake.log if isinstance(e[0], str) and e[0] not in ("h2d", "d2h",
                                                                             "d2d")]
    assert launched, name
    outs2 = exe(*leaves, *hoisted)                   # the persistent parameter blocks again
    assert len(outs2) == len(outs)
    prof = exe.profile(*leaves, *hoisted, reps=1)
    assert prof and all(len(p) == 3 for p in prof)
    y = ourjax.array.Array._from_device(outs[0], ourjax.core.ShapedArray(outs[0].shape,
                                                                         outs[0].dtype))
    assert np.asarray(y).shape == outs[0].shape      # read back through the fake copy
  stats = fake.allocator.memory_stats()
  assert stats["num_cache_hits"] > 0 and stats["num_requests"] > stats["num_allocs"]


def test_highest_precision_dot_stays_off_tf32():
  # JAX: precision=HIGHEST computes a float32 product in float32; DEFAULT may use tf32
  a = np.ones((128, 128), np.float32)
  default = _compiled(lambda x, y: x @ y, (a, a)).as_text(dialect="ptx")
  highest = _compiled(lambda x, y: jnp.dot(x, y, precision="highest"), (a, a))
  assert "mma.sync" in default or "wgmma.mma_async" in default
  assert "mma" not in highest.as_text(dialect="ptx")
  assert "operand_precision={highest,highest}" in highest.as_text()


def test_highest_precision_convolution_stays_off_tf32():
  # a convolution's precision reaches its HLO and the GEMM conv_to_dot makes of it
  from ourjax import lax
  x, w = np.ones((2, 16, 16, 32), np.float32), np.ones((3, 3, 32, 128), np.float32)

  def conv(precision):
    return lambda a, b: lax.conv_general_dilated(
        a, b, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=precision)
  default = _compiled(conv(None), (x, w)).as_text(dialect="ptx")
  highest = _compiled(conv("highest"), (x, w))
  assert "wgmma" in default or "mma.sync" in default
  ptx = highest.as_text(dialect="ptx")
  assert "wgmma" not in ptx and "mma.sync" not in ptx


def test_kernels_of_the_same_code_share_one_module():
  """Each kernel's code is a PTX module of its own, made at once; kernels whose code is the
  same (the same step repeated on other buffers) share one, and every kernel is an entry of the
  module the executable loads it from."""
  def f(a, c):
    for _ in range(10):                 # reductions between elementwise steps: many kernels
      a = ourjax.numpy.tanh(a * 1.1) - ourjax.numpy.mean(a, axis=0, keepdims=True)
      c = c * 0.9 + ourjax.numpy.max(a, axis=1, keepdims=True)
    return a, c
  rng = np.random.default_rng(0)
  args = (rng.standard_normal((64, 48)).astype(np.float32),
          rng.standard_normal((64, 1)).astype(np.float32))
  exe = _compiled(f, args).runtime_executable()
  mods = exe.ptx_modules
  assert 1 < len(mods) <= len(exe.kernels) // 2
  for k in exe.kernels:
    g, name = k.ptx_entry
    assert f".entry {name}(" in mods[g]
  if PTXAS is not None:
    _assemble(exe.ptx)


@needs_ptxas
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_trig_huge_argument_reduction_assembles(dtype):
  """sin/cos/tan: the huge-argument (Payne-Hanek) reduction with its 2/pi table, reached from
  the float32 GPU variants' slow path and inline in float64, assembles for the GPU."""
  from ourjax.config import enable_x64
  with enable_x64(dtype == np.float64):
    x = np.linspace(-1e30, 1e30, 4096).astype(dtype)
    c = _compiled(lambda v: jnp.sin(v) + jnp.cos(v) * jnp.tan(v), (x,))
    ptx = c.as_text(dialect="ptx")
  assert "ojx_m_two_over_pi_rows" in ptx
  _assemble(ptx)


def test_convolutions_are_implicit_gemms(compiled_cases):
  """The convolutions' dots read their patches from the input: no kernel writes a buffer as
  large as a patch matrix (the others write the weights' reshape, a prologue's value of the
  input's size, the result)."""
  for name, *_ in IMPLICIT_GEMM_CASES:
    ks = compiled_cases[name].runtime_executable().kernels
    dots = [k for k in ks if getattr(k, "im2col", None) is not None]
    assert dots, name
    patch_bytes = min(math.prod(k.im2col.dims) * k.im2col.dtype.itemsize for k in dots)
    for k in ks:
      assert all(b.nbytes < patch_bytes for b in k.writes), (name, k, k.writes)
  # a weight gradient's patches (rows: input channel and kernel position; columns: output
  # position and batch element) are read in place from the transposed input too, a batch
  # too small for 16-byte copies zero-padded
  for name in ("conv_weight_grad", "conv_implicit_weight_grad_bf16_batch4",
               "conv_implicit_weight_grad_f32_batch2"):
    ks = compiled_cases[name].runtime_executable().kernels
    assert sorted(k.im2col.geometry.layout for k in ks
                  if getattr(k, "im2col", None) is not None) == ["F", "W"], (name, ks)


def test_strided_input_gradients_write_no_dilated_patches(compiled_cases):
  """The input gradient of a strided convolution (lhs dilation) and a transposed convolution
  are split by output phase (``conv_to_dot._split_phases``): no kernel writes a dilated
  output gradient or a patch matrix of it (no buffer larger than the largest argument or
  result; the dilated 3x3 patch matrix was 9 x 4 times the output gradient), the phases of
  several kernel positions are implicit GEMMs, and the 1x1 kernel's three phases of zeros
  are no dots."""
  rng = np.random.default_rng(0)
  for name, fn, make_args, _ in STRIDED_GRAD_CASES:
    if name == "conv_strided_nchw_grads":      # (with its weight gradient: below)
      continue
    args = make_args(rng)
    outs = ourjax.jit(fn, backend="reference").lower(*args).out_info
    largest = max([np.asarray(a).nbytes for a in args] +
                  [math.prod(o.shape) * np.dtype(o.dtype).itemsize
                   for o in ourjax.tree_util.tree_leaves(outs)])
    ks = compiled_cases[name].runtime_executable().kernels
    for k in ks:
      assert all(b.nbytes <= largest for b in k.writes), (name, k, k.writes, largest)
    dots = [k for k in ks if type(k).__name__ == "WgmmaDot"]
    if name == "conv_strided_1x1_input_grad":
      assert len(dots) == 2, (name, ks)         # (the forward and the one phase)
    else:
      assert sum(getattr(k, "im2col", None) is not None for k in dots) >= 3, (name, ks)
  notes = "\n".join(compiled_cases["conv_strided_nchw_grads"]._executable.compiled.module.notes)
  assert "1 convolutions of its output phases (lhs dilation (2, 1))" in notes, notes


def _resnet_blocks(x, ws, ss, bs):
  """A stem convolution and relu, then three residual blocks: conv, scale and shift, relu,
  conv, scale and shift, plus the block's input, relu; each block's result read by the next
  block twice."""
  x = jnp.maximum(lax.conv_general_dilated(x, ws[-1], (1, 1), "SAME", dimension_numbers=(
      "NHWC", "HWIO", "NHWC")), 0.0)
  for w1, w2, s, b in zip(ws[::2], ws[1::2], ss, bs):
    h = jnp.maximum(lax.conv_general_dilated(x, w1, (1, 1), "SAME", dimension_numbers=(
        "NHWC", "HWIO", "NHWC")) * s + b, 0.0)
    y = lax.conv_general_dilated(h, w2, (1, 1), "SAME", dimension_numbers=(
        "NHWC", "HWIO", "NHWC")) * s - b
    x = jnp.maximum(y + x, 0.0)
  return x


def test_convolution_epilogues_run_in_their_dots():
  """With patches read in place, every convolution's scale, shift, residual add and relu is its
  dot's epilogue: a block's result is stored once, by the dot that computes it, and read by the
  next block's patches and residual add (not recomputed in each of them from the dots it
  comes from); the fusion dump says why."""
  rng = np.random.default_rng(0)
  x = rng.standard_normal((2, 8, 8, 16)).astype(np.float32)
  ws = [(0.1 * rng.standard_normal((3, 3, 16, 16))).astype(np.float32) for _ in range(7)]
  ss = [rng.standard_normal(16).astype(np.float32) for _ in range(3)]
  bs = [rng.standard_normal(16).astype(np.float32) for _ in range(3)]
  c = _compiled(_resnet_blocks, (x, ws, ss, bs))
  ks = c.runtime_executable().kernels
  dots = [k for k in ks if getattr(k, "im2col", None) is not None]
  assert len(dots) == 7 and all(k.epilogue is not None for k in dots)
  assert not [k for k in ks if type(k).__name__ in ("Elementwise", "Horizontal")]
  notes = "\n".join(c._executable.compiled.module.notes)
  assert "reads in place from its input" in notes and "the epilogue of %dot" in notes
  _assemble(c.as_text(dialect="ptx"))


def test_batch_chunks_of_a_convolution_are_implicit_gemms(monkeypatch):
  """A patch matrix past conv_to_dot.MAX_PATCH_BYTES is cut into batch chunks only where it
  would be written: a forward convolution's, read in place (``Module.patches_in_place``), is
  one dot over the whole batch; a weight gradient's (its own layout) is still cut into chunks
  (sibling fusions merged into one tuple-rooted fusion), each chunk's dot reading its patches
  in place."""
  from ourjax.lowering.passes import conv_to_dot
  from cuda_cases import CHUNKED_CONV
  monkeypatch.setattr(conv_to_dot, "MAX_PATCH_BYTES", 1 << 16)
  _, fn, make, _ = CHUNKED_CONV
  args = make(np.random.default_rng(0))
  c = _compiled(fn, args)
  dots = [k for k in c.runtime_executable().kernels if getattr(k, "im2col", None) is not None]
  assert [k.im2col.geometry.batch0 for k in dots] == [0]
  assert dots[0].im2col.dims[0] == math.prod(args[0].shape[:-1])      # every output position
  _assemble(c.as_text(dialect="ptx"))
  grad_w = ourjax.grad(lambda x, w, s: jnp.sum(fn(x, w, s)), argnums=1)
  c = _compiled(grad_w, args)
  dots = [k for k in c.runtime_executable().kernels if getattr(k, "im2col", None) is not None]
  assert sum(k.im2col.geometry.layout == "W" for k in dots) >= 2
  _assemble(c.as_text(dialect="ptx"))


def _helpers_ignoring_their_piece(ir: str) -> list:
  """The internal functions of a GPU module's LLVM IR (planned ``Kernel``s a GPU kernel calls
  as device functions with its thread's index and the thread count, their last two ``i64``
  arguments) that never read those two: every GPU thread would then do all of the work."""
  bad = []
  for m in re.finditer(r'define internal void @"?([\w.]+)"?\(([^)]*)\)[^{]*\{(.*?)\n\}', ir, re.S):
    name, params, body = m.groups()
    ps = [p.strip() for p in params.split(",")]
    if len(ps) >= 2 and all(p.startswith("i64") for p in ps[-2:]):
      if any(p.split()[-1] not in body for p in ps[-2:]):
        bad.append(name)
  return bad


def test_gpu_device_functions_share_out_their_work(compiled_cases):
  """A kernel the CPU planned as serial (emitted there with constant piece bounds) is on the
  GPU a device function called by every thread of a GPU kernel (a Horizontal's part): it must
  take its piece from the thread's index.  (An LSTM step of 100 iterations ran 78x slower when
  such helpers ignored it.)"""
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                  "benchmarks"))
  import models
  irs = {n: c.as_text(dialect="llvm") for n, c in compiled_cases.items()}
  for w in models.workloads("cuda", small=True, only={"lstm", "ode_rk4", "transformer"}):
    irs[w["name"]] = _compiled(w["make"](ourjax), w["inputs"]).as_text(dialect="llvm")
  assert sum(ir.count("define internal void") for ir in irs.values()) > 0
  bad = {n: b for n, ir in irs.items() if (b := _helpers_ignoring_their_piece(ir))}
  assert not bad, bad
