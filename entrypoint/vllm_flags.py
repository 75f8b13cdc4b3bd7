"""Check the generated argv against the installed vLLM's own parser (pre-flight).

Importing vLLM takes ~10 s, so this runs once, before launch, never in --dry-run, and its
verdict is cached per vLLM build and arguments (entrypoint/flag_cache.py).
The parser lives in `vllm.entrypoints.launchers.cli_args` (0.32) and was
`vllm.entrypoints.openai.cli_args` before; both are tried.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
from collections.abc import Collection, Sequence

from entrypoint.errors import PreflightError

PARSER_MODULES = ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")


def vllm_parser() -> tuple[argparse.ArgumentParser, str]:
    """vLLM's serve parser and vLLM's version."""
    try:
        vllm = importlib.import_module("vllm")
        argparse_utils = importlib.import_module("vllm.utils.argparse_utils")
    except ImportError as exc:
        raise PreflightError(f"vLLM is not importable here: {exc}") from None
    for name in PARSER_MODULES:
        with contextlib.suppress(ImportError):
            module = importlib.import_module(name)
            parser = module.make_arg_parser(argparse_utils.FlexibleArgumentParser())
            return parser, str(vllm.__version__)
    raise PreflightError(f"vLLM {vllm.__version__}: no serve parser in {', '.join(PARSER_MODULES)}")


def known_flags(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def flag_name(word: str) -> str | None:
    """`--max_model_len=4` → `--max-model-len` (vLLM accepts both spellings); None for values."""
    if not word.startswith("-") or word == "-" or word.lstrip("-").replace(".", "").isdigit():
        return None
    name = word.split("=", 1)[0]
    return name[:2] + name[2:].replace("_", "-") if name.startswith("--") else name


def unknown_flags(args: Sequence[str], known: Collection[str]) -> list[str]:
    return [name for word in args if (name := flag_name(word)) and name not in known]


def parse_error(parser: argparse.ArgumentParser, args: Sequence[str]) -> str | None:
    """argparse's own complaint about `args` (bad value, missing value), or None."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(list(args))
    except SystemExit:
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        return lines[-1] if lines else "rejected by vLLM's parser"
    return None


def check_flag_names(
    planned: Sequence[str], extra: Sequence[str], known: Collection[str], version: str
) -> None:
    """Raise PreflightError naming the first flag not in `known` (the parser's flags)."""
    for args, source in (
        (planned, "generated from the plan"),
        (extra, "from SPARKSERVE_VLLM_EXTRA_ARGS"),
    ):
        if bad := unknown_flags(args, known):
            raise PreflightError(f"vLLM {version} does not know {bad[0]} ({source})")


def check_flags(
    planned: Sequence[str],
    extra: Sequence[str],
    parser_and_version: tuple[argparse.ArgumentParser, str] | None = None,
) -> str:
    """Raise PreflightError naming the first flag vLLM does not know; return vLLM's version."""
    parser, version = parser_and_version or vllm_parser()
    check_flag_names(planned, extra, known_flags(parser), version)
    if error := parse_error(parser, [*planned, *extra]):
        raise PreflightError(f"vLLM {version} rejects the arguments: {error}")
    return version


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The last value given to `flag` in `args` (`--flag v` or `--flag=v`), else None."""
    value = None
    for i, word in enumerate(args):
        if flag_name(word) != flag:
            continue
        if "=" in word:
            value = word.split("=", 1)[1]
        elif i + 1 < len(args):
            value = args[i + 1]
    return value


def without_flag(args: Sequence[str], flag: str) -> tuple[str, ...]:
    """`args` less every `flag` and its value (the user's copy of it wins)."""
    kept: list[str] = []
    skip = False
    for word in args:
        if skip:
            skip = False
            continue
        if flag_name(word) == flag:
            skip = "=" not in word
            continue
        kept.append(word)
    return tuple(kept)
