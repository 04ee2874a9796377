"""LLVM IR emission shared by the CPU and CUDA backends (``math.py``: inline math functions)."""
