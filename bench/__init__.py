"""Benchmark and tuning harness: seeded workloads against any OpenAI-compatible endpoint.

`python -m bench run …` measures one server; `python -m bench sweep …` restarts vLLM
through the entrypoint for each setting, in the tuning order of the tuning article.
"""
