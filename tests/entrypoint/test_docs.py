"""docs/entrypoint.md shows the real --help and settings table (a doc check)."""

from entrypoint import docs


def test_docs_match_the_generated_blocks():
    assert docs.main([]) == 0, "run: python -m entrypoint.docs --write"
