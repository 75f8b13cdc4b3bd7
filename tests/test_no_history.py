"""Every tracked text file cites only what a reader of the repository can open.

Allowed citations: a doc in docs/, vLLM's source (file and release), a public issue
(`vllm#48140`, `owner/repo#227`, a GitHub URL) or a source article by its label in
docs/sources.md.  Forbidden: private tracker numbers, a design file that is not in the
repository, and words about how the work was done (work sessions, lab machines, the
tools that ran them).  Fixture logs under tests/**/fixtures/ are verbatim vLLM output
and are not read, nor is this file (it spells out what it forbids).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    reason: str
    # False: matched on the raw line, so nothing in ALLOWED can excuse it.
    excusable: bool = True


def _rule(pattern: str, reason: str, excusable: bool = True) -> Rule:
    return Rule(re.compile(pattern, re.IGNORECASE), reason, excusable)


RULES: tuple[Rule, ...] = (
    _rule(r"\bissues?\s*#?\s*\d+", "a tracker number; cite owner/repo#N", False),
    _rule(r"(?<![\w/.-])#\d+\b(?![\da-f])", "a bare #N; cite owner/repo#N"),
    _rule(r"(?-i:\bDESIGN\b)", "a design file that is not in the repository"),
    _rule(r"seeds?[\s_]?0\d\d(?!\d)", "a seed file; cite the article (docs/sources.md)", False),
    _rule(r"\bthe seeds?\b|\bseeds?['’]", "the seed files; cite the article (docs/sources.md)"),
    _rule(r"\bseed (figures?|articles?)\b", "the seed files; cite the article (docs/sources.md)"),
    _rule(r"(#|//)\s*seeds?\b", "a seed file, cited in a comment", False),
    _rule(r"shared/gpu", "a folder outside the repository"),
    _rule(r"KINDS\.md", "a lab document outside the repository"),
    _rule(r"\blent\b|\blend(s|ing)?\b", "lab machines lent for the work"),
    _rule(r"\blab\b", "lab machines"),
    _rule(r"(?-i:\$\{?OUT\b)", "the lab device tool's output folder"),
    _rule(r"\brun\(carry|\bcarry=\[", "the lab device tool's call"),
    _rule(r"\b(device|GPU) (time|tools?|machines?)\b", "the lab's device time or tool"),
    _rule(
        r"\b(this|next|previous|last|later|earlier|that|current|our|work) sessions?\b",
        "a work session",
        False,
    ),
    _rule(r"\bsessions?\b", "'session' other than a POSIX, Ray, HTTP, pytest or chat session"),
)

# Spans blanked out before the excusable rules run, each with why it is allowed.
ALLOWED: tuple[tuple[str, str], ...] = (
    (r"https?://\S+", "a URL anyone can open"),
    (r"\b(?!issues?#)[a-z][\w.-]*(/[\w.-]+)?#\d+\b", "a public issue: vllm#N, owner/repo#N"),
    (r"\bx-session-id\b|\bmulti-session\b", "the gateway's session header, a workload"),
    (r"\b(agent|chat|client|HTTP|aiohttp|POSIX) sessions?\b", "a session of a protocol"),
    (r"\bRay(['’]s)? sessions?\b", "Ray's session (its logs, session_latest)"),
    (r"\b(test|pytest) sessions?\b", "pytest's session"),
    (r"\bsessions?[- ](scoped|wide|fixtures?)\b", "pytest's session scope"),
    (r"\b(its|their) (own )?sessions?\b", "a process's POSIX session"),
    (r"\bsessions? (of (its|their) own|leader|of pid)\b", "a process's POSIX session"),
    (r"(?-i:\bSESSIONS?\w*)", "a constant"),
    (r"\bSession(?=[(:,)\]])", "a class: Session(…), ClientSession"),
    (r"\bsessions?(?=[.(=:,)\]}])|\bsessions?\s*=(?!=)", "a variable: session.post, session="),
    (r"(?<=[=(\[{\"'])\s?sessions?\b|\bfor sessions? in\b", "an argument or a string"),
    (r"[\"'](sessions?|seeds?)[\"']", "a key: statuses[\"session\"], o['seed']"),
    (r"\bseed\b(?=\s*[=:)\]}]|\s+[\d{])|--seed\b", "a random seed: --seed 0, seed=3"),
)
_ALLOWED = re.compile("|".join(f"(?:{p})" for p, _ in ALLOWED), re.IGNORECASE)


def problems(line: str) -> list[str]:
    """The reasons `line` breaks a rule (empty: it is fine)."""
    excused = _ALLOWED.sub(lambda m: " " * len(m.group(0)), line)
    return [
        rule.reason for rule in RULES if rule.pattern.search(excused if rule.excusable else line)
    ]


def _is_skipped(path: str) -> bool:
    """Verbatim vLLM logs, and this file, which has to spell out what it forbids."""
    return ("/fixtures/" in path and path.endswith(".log")) or ROOT / path == Path(__file__)


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    files = []
    for name in filter(None, listed.split("\0")):
        path = ROOT / name
        if _is_skipped(name) or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" not in data[:8192]:
            files.append(path)
    return files


@pytest.mark.parametrize(
    ("line", "bad"),
    [
        ("see issue 25 for the plan", True),
        ("the Issue #12 fix", True),
        ("(#27)", True),
        ("DESIGN §2's contracts", True),
        ("as in DESIGN.md", True),
        ("# Seed 000: a draft vocabulary", True),
        ("def test_stages_run_in_seed_000_order():", True),
        ("the seeds' settings (max seqs 4)", True),
        ("the seed's measured KV tokens", True),
        ("# Seed: the quantised MTP module", True),
        ("f\"seed {o['seed']}\"", False),
        ("installed as in shared/gpu/README.md", True),
        ("on the lent nvidia-h200", True),
        ("what remains (next session)", True),
        ("this session's device time went to it", True),
        ("spent 1,690 s of GPU time", True),
        ("a lab machine", True),
        ("files under $OUT", True),
        ('printf "%s" "$out"', False),
        ("NVLink multicast stays off (KINDS.md)", True),
        ('run(carry=[.gpu27], command="bash x")', True),
        ("the session is made on first use", True),
        ("every session on `vllm-1` completes", True),
        ("an agent session stays on its replica", False),
        ("a vLLM issue #52728 (vllm#52728)", True),
        ("vllm#48140 and eugr/spark-vllm-docker#227, sglang#10341", False),
        ("https://github.com/vllm-project/vllm/issues/48140", False),
        ("MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#47 reads it", False),
        ('@pytest.fixture(scope="session")', False),
        ("async with aiohttp.ClientSession() as session:", False),
        ("    async with session.post(url) as r:", False),
        ("vLLM runs in a session of its own (its own process group)", False),
        ("tar czf logs.tgz -C /tmp/ray/session_latest logs  # Ray's session logs", False),
        ("the header x-session-id names a chat session", False),
        ("the one serving vLLM of the test session (session-scoped)", False),
        ("workloads mixed; scale `small`; seed 0", False),
        ("the tuning article §5.3", False),
    ],
)
def test_matcher(line: str, bad: bool) -> None:
    assert bool(problems(line)) is bad, problems(line)


def test_every_tracked_file_cites_only_what_a_reader_can_open() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {reason}: {line.strip()[:120]}"
        for path in tracked_text_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        for reason in problems(line)
    ]
    assert not found, "\n" + "\n".join(found)


_REPO_PATH = re.compile(
    r"(?<![\w/.-])((?:bench|budget|docker|docs|draftvocab|entrypoint|gateway|grafana|"
    r"prometheus|reliability|tests|tools)/[\w./-]*\w\.(?:md|py|sh|toml|json|ya?ml))\b"
)


def test_cited_paths_are_found() -> None:
    line = "needs vLLM (tools/gpu/README.md), see docs/bench.md and `tests/conftest.py`."
    assert _REPO_PATH.findall(line) == ["tools/gpu/README.md", "docs/bench.md", "tests/conftest.py"]


def test_every_repository_path_cited_exists() -> None:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    tracked = set(listed.stdout.split())
    missing = [
        f"{path.relative_to(ROOT)}:{number}: {cited}"
        for path in tracked_text_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        for cited in _REPO_PATH.findall(line)
        if cited not in tracked
    ]
    assert not missing, "\n" + "\n".join(missing)
