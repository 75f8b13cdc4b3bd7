"""`python -m entrypoint.gpu_check`: a user's own GPU box checked against the planner.

plan (budget) → `python -m entrypoint` with dummy weights → /ready → first requests
against steady state → stop → the plan against vLLM's log, the start-up phases, vLLM's
CUDA-graph stats → report.md / report.json in --out (docs/gpu-check.md).
"""
