"""tools/bundle_stubs.py, the stub wheels and pins of tools/offline_bundle.sh: a `--stub`
wins over the host's line of the same package, and pip resolves against what it wrote."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tools.bundle_stubs import main

REPO = Path(__file__).resolve().parents[2]
HOST = """\
numba==0.68.0
Torch==2.11.0+cu130
-e git+https://example.invalid/x.git@abc#egg=x
local-pkg @ file:///tmp/local_pkg-1.0-py3-none-any.whl
"""


def write(tmp_path: Path, *stubs: str) -> tuple[int, Path, Path]:
    host = tmp_path / "host.txt"
    host.write_text(HOST)
    stub_dir, constraints = tmp_path / "stubs", tmp_path / "constraints.txt"
    argv = [str(stub_dir), str(constraints), "--host-packages", str(host)]
    for spec in stubs:
        argv += ["--stub", spec]
    return main(argv), stub_dir, constraints


def test_a_stub_replaces_the_host_s_line_of_the_same_package(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stub_dir, constraints = write(tmp_path, "numba==0.65.0", "flashinfer-python==0.6.12")
    assert code == 0
    assert sorted(constraints.read_text().splitlines()) == [
        "Torch==2.11.0+cu130.stub",
        "flashinfer-python==0.6.12+stub",
        "numba==0.65.0+stub",
    ]
    assert sorted(p.name for p in stub_dir.iterdir()) == [
        "Torch-2.11.0+cu130.stub-py3-none-any.whl",
        "flashinfer_python-0.6.12+stub-py3-none-any.whl",
        "numba-0.65.0+stub-py3-none-any.whl",
    ]
    assert "numba: --stub 0.65.0 in place of the host's 0.68.0" in capsys.readouterr().err
    with zipfile.ZipFile(stub_dir / "numba-0.65.0+stub-py3-none-any.whl") as whl:
        assert "Version: 0.65.0+stub" in whl.read("numba-0.65.0+stub.dist-info/METADATA").decode()


def test_pip_resolves_a_pinned_requirement_against_the_stubs_offline(tmp_path: Path) -> None:
    # What offline_bundle.sh then runs, without an index: vLLM's numba==0.65.0 pin is
    # met by the stub, which two constraints for numba (0.65.0 and 0.68.0) would forbid,
    # and its torch==2.11.0 by the host's CUDA build's stub.
    code, stub_dir, constraints = write(tmp_path, "numba==0.65.0")
    assert code == 0
    dl = tmp_path / "dl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-index",
            "--find-links",
            str(stub_dir),
            "-c",
            str(constraints),
            "-d",
            str(dl),
            "numba==0.65.0",
            "torch==2.11.0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in dl.iterdir()) == [
        "Torch-2.11.0+cu130.stub-py3-none-any.whl",
        "numba-0.65.0+stub-py3-none-any.whl",
    ]


@pytest.mark.parametrize(
    ("stubs", "said"),
    [
        (["numba"], "--stub 'numba': expected NAME==VERSION"),
        (["numba>=0.65"], "--stub 'numba>=0.65': expected NAME==VERSION"),
        (
            ["numba==0.65.0", "Numba==0.66.0"],
            "--stub numba==0.65.0 and --stub Numba==0.66.0: one version per package",
        ),
    ],
)
def test_a_bad_stub_is_refused_in_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stubs: list[str], said: str
) -> None:
    code, stub_dir, constraints = write(tmp_path, *stubs)
    assert code == 2
    assert said in capsys.readouterr().err
    assert not constraints.exists() and not stub_dir.exists()


def test_an_unreadable_host_list_is_refused_in_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.txt"
    code = main([str(tmp_path / "s"), str(tmp_path / "c"), "--host-packages", str(missing)])
    assert code == 2
    assert f"--host-packages {missing}: No such file or directory" in capsys.readouterr().err


def test_offline_bundle_sh_refuses_a_bad_stub_before_downloading(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            "bash",
            str(REPO / "tools" / "offline_bundle.sh"),
            str(tmp_path / "out"),
            "--stub",
            "numba",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "offline_bundle: --stub 'numba': expected NAME==VERSION" in done.stderr
    assert not list((tmp_path / "out" / "whl").iterdir())
