"""The container's entrypoint: plan → `vllm serve` → health → warm-up → ready, supervised.

`python -m entrypoint --help` lists every SPARKSERVE_* setting; see docs/entrypoint.md.
"""
