"""A reduced draft vocabulary for an MTP drafter: the checkpoint tool (`python -m
draftvocab`) and the vLLM plugin that serves it (draftvocab/plugin.py)."""
