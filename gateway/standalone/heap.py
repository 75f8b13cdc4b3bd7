"""The standalone gateway's cyclic garbage collector, set once its app is built.

A collection walks every object the collector tracks in the generations it collects.
Right before serving, the gateway collects once and freezes what is left (`gc.freeze`:
the app, FastAPI's, pydantic's and the libraries' objects, none of them garbage) so
that full collections no longer walk it, and a young collection then runs every
`YOUNG_COLLECTION_ALLOCATIONS` allocations instead of Python's 700.  Each streamed
request allocates thousands of short-lived objects (what that saved, measured:
docs/gateway.md, "CPU per request").  Reference counting still frees everything that
is not in a cycle at once; the older generations keep their thresholds.  Only
`python -m gateway` calls it (each worker does too), never `create_app`, which tests
call in their own process.
"""

from __future__ import annotations

import gc

YOUNG_COLLECTION_ALLOCATIONS = 10_000


def settle() -> None:
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_ALLOCATIONS, middle, old)
