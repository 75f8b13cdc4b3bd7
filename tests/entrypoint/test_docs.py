"""docs/entrypoint.md shows the real --help and settings table (a doc check)."""

from devtools import entrypoint_docs


def test_docs_match_the_generated_blocks():
    assert entrypoint_docs.main([]) == 0, "run: python -m devtools.entrypoint_docs --write"
