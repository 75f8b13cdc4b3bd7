"""Development helpers the tests, the benchmarks and tools/ use; not part of the product.

tiny_model: tiny model directories vLLM serves with `--load-format dummy`
(`python -m devtools.tiny_model`); interrupt: SIGTERM ends a run like Ctrl-C;
entrypoint_docs: the generated blocks of docs/entrypoint.md.  The product packages
(budget, entrypoint, gateway, draftvocab) never import this one (tests/test_layering.py).
"""
