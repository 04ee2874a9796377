"""The CPU backend: LLVM IR compiled for the host by llvmlite (see ``jit.py`` for the engine)."""
