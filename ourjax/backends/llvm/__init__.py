"""LLVM IR emission shared by the CPU and CUDA backends (``math``: inline math functions)."""
