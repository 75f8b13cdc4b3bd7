"""The files of one run: raw JSON lines, summary JSON, Markdown report, PNG plots."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from bench.records import RequestRecord

RECORDS = "records.jsonl"
SUMMARY = "summary.json"
REPORT = "report.md"
PLOTS = "plots"


class RunDir:
    """A run's directory; records are appended as they finish (a crash keeps them)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.plots = path / PLOTS

    @property
    def records_path(self) -> Path:
        return self.path / RECORDS

    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY

    @property
    def report_path(self) -> Path:
        return self.path / REPORT

    def create(self) -> None:
        self.plots.mkdir(parents=True, exist_ok=True)
        self.records_path.write_text("")

    def open_records(self) -> TextIO:
        return self.records_path.open("a", encoding="utf-8")

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        text = json.dumps(summary, indent=2, sort_keys=False, default=str)
        self.summary_path.write_text(text + "\n", encoding="utf-8")

    def read_summary(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.summary_path.read_text(encoding="utf-8"))
        return data

    def read_records(self) -> list[RequestRecord]:
        return list(iter_records(self.records_path))


def write_record(stream: TextIO, record: RequestRecord) -> None:
    stream.write(json.dumps(record.to_dict()) + "\n")
    stream.flush()


def iter_records(path: Path) -> Iterator[RequestRecord]:
    with path.open(encoding="utf-8") as stream:
        for line in stream:
            if line.strip():
                yield RequestRecord.from_dict(json.loads(line))
