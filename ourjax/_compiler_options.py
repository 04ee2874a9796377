"""``jit(f, compiler_options=...)`` and ``Lowered.compile(compiler_options=...)``: checked as
JAX (XLA) checks them when it compiles.

ourjax's compiler has no XLA options, so an accepted option changes nothing; what matters for a
JAX program is which options are accepted and which are refused:

* XLA's executable-build options ``exec_time_optimization_effort`` and ``memory_fitting_effort``
  (numbers), ``optimization_level`` and ``memory_fitting_level`` (ints, or strings of one);
* ``xla_*`` debug options.  Those listed in ``_XLA_OPTIONS`` have their value checked against
  the option's type (a bool option takes a Python bool only, an int32 option an int, a string
  option a str), with XLA's words: ``While setting option xla_dump_to, '7' is not a valid
  string value.``  Other ``xla_*`` names are accepted unchecked: XLA has several hundred and
  ourjax honours none of them;
* any other name is refused: ``No such compile option: 'name'``.

Refusals raise ``errors.JaxRuntimeError`` (as JAX's), or ``TypeError`` for a build option of the
wrong Python type.
"""
from __future__ import annotations

import numpy as np

from ourjax import errors

_BOOL, _INT32, _STRING, _ENUM = "bool", "int32", "string", "enum"

# XLA debug options whose value type is known (checked); other xla_* names pass unchecked.
_XLA_OPTIONS = {
    **dict.fromkeys((
        "xla_embed_ir_in_executable", "xla_cpu_enable_fast_math", "xla_gpu_enable_fast_min_max",
        "xla_cpu_fast_math_honor_nans", "xla_cpu_fast_math_honor_infs",
        "xla_cpu_fast_math_honor_division", "xla_cpu_fast_math_honor_functions",
        "xla_dump_hlo_as_text", "xla_dump_hlo_as_proto", "xla_dump_hlo_as_dot",
        "xla_dump_hlo_as_html", "xla_dump_include_timestamp", "xla_dump_disable_metadata",
        "xla_dump_fusion_visualization", "xla_enable_dumping", "xla_detailed_logging",
        "xla_llvm_disable_expensive_passes", "xla_cpu_multi_thread_eigen",
        "xla_cpu_enable_concurrency_optimized_scheduler", "xla_cpu_strict_dot_conv_math",
        "xla_cpu_enable_xprof_traceme", "xla_gpu_enable_latency_hiding_scheduler",
        "xla_gpu_enable_triton_gemm", "xla_gpu_exhaustive_tiling_search",
        "xla_gpu_deterministic_ops", "xla_gpu_dump_llvmir", "xla_hlo_profile",
        "xla_allow_excess_precision"), _BOOL),
    **dict.fromkeys((
        "xla_backend_optimization_level", "xla_gpu_autotune_level",
        "xla_force_host_platform_device_count", "xla_cpu_parallel_codegen_split_count",
        "xla_cpu_prefer_vector_width", "xla_dump_max_hlo_modules",
        "xla_gpu_memory_limit_slop_factor"), _INT32),
    **dict.fromkeys((
        "xla_dump_to", "xla_dump_hlo_pass_re", "xla_dump_hlo_module_re",
        "xla_dump_hlo_pipeline_re", "xla_disable_hlo_passes", "xla_gpu_cuda_data_dir",
        "xla_cpu_max_isa"), _STRING),
    **dict.fromkeys(("xla_step_marker_location", "xla_gpu_enable_command_buffer"), _ENUM),
}

_BUILD_FLOAT = ("exec_time_optimization_effort", "memory_fitting_effort")
_BUILD_LEVEL = ("optimization_level", "memory_fitting_level")


def _valid(kind: str, v) -> bool:
  is_bool = isinstance(v, (bool, np.bool_))
  if kind == _BOOL:
    return is_bool
  if kind == _INT32:
    return (isinstance(v, (int, np.integer)) and not is_bool
            and -2**31 <= int(v) < 2**31)
  if kind == _STRING:
    return isinstance(v, str)
  # an enum: its number, or a name (upper case, as the proto spells them)
  return ((isinstance(v, (int, np.integer)) and not is_bool) or
          (isinstance(v, str) and v.isidentifier() and v.isupper()))


def check(options: dict | None) -> None:
  """Raise as XLA does for an unknown option name or a value of the wrong type."""
  for name, value in (options or {}).items():
    if name in _BUILD_FLOAT:
      if not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"compiler option {name} takes a float, got {value!r} of type "
                        f"{type(value).__name__}")
      continue
    if name in _BUILD_LEVEL:
      if isinstance(value, str) and value.lstrip("-").isdigit():
        continue
      if not isinstance(value, (int, np.integer)):
        raise TypeError(f"compiler option {name} takes an int (an EffortLevel's value), got "
                        f"{value!r} of type {type(value).__name__}")
      continue
    kind = _XLA_OPTIONS.get(name)
    if kind is None:
      if isinstance(name, str) and name.startswith("xla_"):
        continue
      raise errors.JaxRuntimeError(f"INVALID_ARGUMENT: No such compile option: '{name}'")
    if not _valid(kind, value):
      raise errors.JaxRuntimeError(
          f"INVALID_ARGUMENT: While setting option {name}, '{value}' is not a valid {kind} "
          "value.")
