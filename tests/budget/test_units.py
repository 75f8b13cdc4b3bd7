"""Sizes read exactly as vLLM's own parser reads them."""

from __future__ import annotations

import pytest

from budget.parsers import byte_size


@pytest.mark.parametrize("text", ["40G", "40g", "512M", "1.5g", "1073741824", "3K", "2t"])
def test_same_as_vllm(text: str) -> None:
    from vllm.utils.argparse_utils import human_readable_int

    assert byte_size(text) == human_readable_int(text)


@pytest.mark.parametrize("text", ["1.5G", "lots", "", "-3G", "0", "1.5"])
def test_rejected_saying_what_is_allowed(text: str) -> None:
    with pytest.raises(ValueError, match="must be|decimals are not allowed"):
        byte_size(text)
