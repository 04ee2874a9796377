"""HLO optimisation passes, one per file; each exposes ``run(module) -> bool`` ("changed").

``simplify``          algebraic rewrites to a fixed point (bit-exact unless fast math)
``constant_folding``  evaluate all-constant instructions with the reference executor
``cse``               structural hashing: merge identical instructions and sub-computations
``dce``               drop unused instructions and unreachable computations

The order they run in, and the verifier between them, live in ``lowering/pipeline.py``. Passes
record why they changed something with ``module.note(pass_name, reason)``.
"""
