"""`python -m entrypoint` (the container's exec-form ENTRYPOINT, PID 1)."""

from entrypoint.cli import run

run()
