"""Every tracked text file cites only what a reader of the repository can open.

Allowed citations: a doc in docs/, vLLM's source (file and release), a public issue
(`vllm#48140`, `owner/repo#227`, a GitHub URL) or a source article by its label in
docs/sources.md.  Forbidden: private tracker numbers, a design file that is not in the
repository, and words about how the work was done (its sittings, the machines and
tools it was done with).  Fixture logs under tests/**/fixtures/ are verbatim vLLM output
and are not read; this file is, with what it forbids split in two where it spells it out.
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


# The words this file forbids are split in two (r"la" r"b" in the rules, "la" + "b" in
# the examples below): Python joins them, and the file passes its own rules.
RULES: tuple[Rule, ...] = (
    _rule(r"\bissues?\s*#?\s*\d+", "a tracker number; cite owner/repo#N", False),
    _rule(r"(?<![\w/.-])#\d+\b(?![\da-f])", "a bare number sign and digits; cite owner/repo#N"),
    _rule(r"(?-i:\bDES" r"IGN\b)", "a design file that is not in the repository"),
    _rule(
        r"se" r"eds?[\s_]?0\d\d(?!\d)",
        "an article's file; cite the article (docs/sources.md)",
        False,
    ),
    _rule(
        r"\bthe se" r"eds?\b|\bse" r"eds?['’]",
        "the articles' files; cite the article (docs/sources.md)",
    ),
    _rule(
        r"\bse" r"ed (figures?|articles?)\b",
        "the articles' files; cite the article (docs/sources.md)",
    ),
    _rule(r"(#|//)\s*se" r"eds?\b", "an article's file, cited in a comment", False),
    _rule(r"shared" r"/gpu", "a folder outside the repository"),
    _rule(r"KIN" r"DS\.md", "a document outside the repository"),
    _rule(r"\blent\b|\blend(s|ing)?\b", "borrowed machines"),
    _rule(r"\blab\b", "the workplace's machines"),
    _rule(r"(?-i:\$\{?O" r"UT\b)", "a work tool's output folder"),
    _rule(r"\brun\(ca" r"rry|\bca" r"rry=\[", "a work tool's call"),
    _rule(r"\b(device|GPU) (time|tools?|machines?)\b", "a work tool's time or machine"),
    _rule(
        r"\b(this|next|previous|last|later|earlier|that|current|our|work) se" r"ssions?\b",
        "a sitting of work",
        False,
    ),
    _rule(r"\bse" r"ssions?\b", "'session' other than a POSIX, Ray, HTTP, pytest or chat one"),
)

# Spans blanked out before the excusable rules run, each with why it is allowed.
ALLOWED: tuple[tuple[str, str], ...] = (
    (r"https?://\S+", "a URL anyone can open"),
    (r"\b(?!issues?#)[a-z][\w.-]*(/[\w.-]+)?#\d+\b", "a public issue: vllm#N, owner/repo#N"),
    (r"\bx-se" r"ssion-id\b|\bmulti-se" r"ssion\b", "the gateway's header, a workload"),
    (r"\b(agent|chat|client|HTTP|aiohttp|POSIX) se" r"ssions?\b", "a protocol's"),
    (r"\bRay(['’]s)? se" r"ssions?\b", "Ray's (its logs, session_latest)"),
    (r"\b(test|pytest) se" r"ssions?\b", "pytest's"),
    (r"\bse" r"ssions?[- ](scoped|wide|fixtures?)\b", "pytest's scope"),
    (r"\b(its|their) (own )?se" r"ssions?\b", "a process's POSIX one"),
    (r"\bse" r"ssions? (of (its|their) own|leader|of pid)\b", "a process's POSIX one"),
    (r"(?-i:\bSESSIONS?\w*)", "a constant"),
    (r"\bSession(?=[(:,)\]])", "a class: Session(…), ClientSession"),
    (r"\bsessions?(?=[.(=:,)\]}])|\bsessions?\s*=(?!=)", "a variable: session.post, session="),
    (r"(?<=[=(\[{\"'])\s?se" r"ssions?\b|\bfor se" r"ssions? in\b", "an argument or a string"),
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
    """Verbatim vLLM logs.  This file is read too: what it forbids is split in two
    wherever it is spelled out (see RULES)."""
    return "/fixtures/" in path and path.endswith(".log")


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
        ("see iss" + "ue 25 for the plan", True),
        ("the Iss" + "ue #" + "12 fix", True),
        ("(#" + "27)", True),
        ("DES" + "IGN §2's contracts", True),
        ("as in DES" + "IGN.md", True),
        ("# Se" + "ed 000: a draft vocabulary", True),
        ("def test_stages_run_in_se" + "ed_000_order():", True),
        ("the se" + "eds' settings (max seqs 4)", True),
        ("the se" + "ed's measured KV tokens", True),
        ("# Se" + "ed: the quantised MTP module", True),
        ("f\"seed {o['seed']}\"", False),
        ("installed as in shared" + "/gpu/README.md", True),
        ("on the le" + "nt nvidia-h200", True),
        ("what remains (next se" + "ssion)", True),
        ("this se" + "ssion's dev" + "ice time went to it", True),
        ("spent 1,690 s of GPU ti" + "me", True),
        ("a la" + "b machine", True),
        ("files under $O" + "UT", True),
        ('printf "%s" "$out"', False),
        ("NVLink multicast stays off (KIN" + "DS.md)", True),
        ("run(ca" + 'rry=[.gpu27], command="bash x")', True),
        ("the se" + "ssion is made on first use", True),
        ("every se" + "ssion on `vllm-1` completes", True),
        ("an agent session stays on its replica", False),
        ("a vLLM iss" + "ue #" + "52728 (vllm#52728)", True),
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
    line = "needs vLLM (tools/offline_bundle.sh), see docs/bench.md and `tests/conftest.py`."
    assert _REPO_PATH.findall(line) == [
        "tools/offline_bundle.sh",
        "docs/bench.md",
        "tests/conftest.py",
    ]


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
