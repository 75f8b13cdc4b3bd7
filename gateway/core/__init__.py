"""The gateway's request handling, shared by both faces, with no I/O of its own: no
sockets, no HTTP client, no environment or file reading (tests/gateway/test_layering.py
holds it to that)."""
