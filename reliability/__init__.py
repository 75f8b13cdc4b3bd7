"""The reliability and security suite: load, faults and hostile input against
the local stack (entrypoint → vLLM on the tiny model, gateway), each case a measured
figure and a verdict.  `python -m reliability run [--short] [--out DIR]`."""
