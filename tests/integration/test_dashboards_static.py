"""Dashboards, checked without any server: JSON, panel hygiene, variables, PromQL syntax."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.integration.dashboards import (
    DASHBOARD_DIR,
    DATASOURCE_VAR,
    GPU_ONLY_PREFIX,
    MODEL_VAR,
    RATE_INTERVAL,
    ROOT,
    all_queries,
    dashboard_files,
    load,
    metric_names,
    panels,
    variables,
)
from tests.integration.promtool import promtool

EXPECTED = {"serving", "speculative", "gateway", "host-budget"}
# Grafana unit ids the dashboards may use; `suffix: …` is Grafana's custom-unit syntax.
GRAFANA_UNITS = {
    "s", "ms", "percentunit", "reqps", "ops", "short", "none", "bytes", "celsius",
    "watt", "hertz", "bool_yes_no",
}  # fmt: skip
VLLM_SELECTOR = re.compile(r"(vllm:[a-zA-Z0-9_:]+)(\{[^}]*\})?")
ENTRYPOINT_SELECTOR = re.compile(r"\b(sparkserve_[a-zA-Z0-9_]+)(\{[^}]*\})?")
RATE_WINDOW = re.compile(r"\[([^\]]+)\]")
DATASOURCE = {"type": "prometheus", "uid": "${" + DATASOURCE_VAR + "}"}

DASHBOARDS = [pytest.param(path, id=path.stem) for path in dashboard_files()]
PANELS = [
    pytest.param(panel, id=f"{path.stem}/{panel.get('title')}")
    for path in dashboard_files()
    for panel in panels(load(path))
]
QUERIES = [pytest.param(query, id=query.name) for query in all_queries()]


def test_one_file_per_dashboard():
    assert {path.stem for path in dashboard_files()} == EXPECTED
    uids = [load(path)["uid"] for path in dashboard_files()]
    assert len(set(uids)) == len(uids)


@pytest.mark.parametrize("path", DASHBOARDS)
def test_dashboard_is_json_with_a_datasource_variable(path):
    dashboard = json.loads(path.read_text())
    var = variables(dashboard).get(DATASOURCE_VAR)
    assert var is not None and var["type"] == "datasource" and var["query"] == "prometheus"


@pytest.mark.parametrize("path", DASHBOARDS)
def test_model_variable_exactly_where_per_model_metrics_are_used(path):
    """vLLM's series, and the entrypoint's (one per model's vllm service in a stack
    project, labelled by its scrape config: budget/stack_compose.py)."""
    dashboard = load(path)
    targets = json.dumps([p.get("targets") for p in panels(dashboard)])
    var = variables(dashboard).get("model_name")
    assert (var is not None) == ("vllm:" in targets or "sparkserve_" in targets)
    if var is not None:
        assert var["definition"].startswith("label_values(vllm:")
        assert var["datasource"] == DATASOURCE


@pytest.mark.parametrize("panel", PANELS)
def test_panel_has_unit_and_one_line_description(panel):
    unit = panel["fieldConfig"]["defaults"].get("unit", "")
    assert unit in GRAFANA_UNITS or unit.startswith("suffix:"), unit
    description = panel.get("description", "")
    assert description.strip() and "\n" not in description


@pytest.mark.parametrize("panel", PANELS)
def test_panel_and_targets_use_the_datasource_variable(panel):
    assert panel["datasource"] == DATASOURCE
    assert panel["targets"], "panel without a query"
    assert all(target["datasource"] == DATASOURCE for target in panel["targets"])


@pytest.mark.parametrize("query", QUERIES)
def test_every_vllm_selector_filters_by_model(query):
    for _name, matchers in VLLM_SELECTOR.findall(query.expr):
        assert f'model_name="{MODEL_VAR}"' in matchers, query.expr


@pytest.mark.parametrize("query", QUERIES)
def test_every_entrypoint_selector_filters_by_model_or_has_none(query):
    """The entrypoint's series carry model_name only in a stack project; `|` keeps a
    single model's unlabelled series."""
    for _name, matchers in ENTRYPOINT_SELECTOR.findall(query.expr):
        assert f'model_name=~"{MODEL_VAR}|"' in matchers, query.expr


@pytest.mark.parametrize("query", QUERIES)
def test_rates_use_rate_interval(query):
    assert set(RATE_WINDOW.findall(query.expr)) <= {RATE_INTERVAL}, query.expr


def test_gpu_only_panels_read_only_gpu_series():
    for query in all_queries():
        gpu_series = {name for name in metric_names(query.expr) if "_gpu_" in name}
        assert bool(gpu_series) == query.gpu_only, (query.name, GPU_ONLY_PREFIX)


def test_metric_names_skip_functions_labels_and_keywords():
    expr = (
        'sum by (source) (rate(vllm:prompt_tokens_by_source_total{model_name="x"}[1m]))'
        " / ignoring(source) group_left sum(rate(vllm:generation_tokens_total[1m]))"
        " or on() vector(0)"
    )
    assert metric_names(expr) == {
        "vllm:prompt_tokens_by_source_total",
        "vllm:generation_tokens_total",
    }


def test_every_expression_parses(tmp_path):
    """promtool checks each expression as a recording rule (PromQL syntax, offline)."""
    rules = [
        {"record": f"dashboard:check_{index}", "expr": query.substituted("m", "1m")}
        for index, query in enumerate(all_queries())
    ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = promtool("check", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_provisioning_points_at_the_dashboards_and_prometheus():
    provisioning = ROOT / "grafana" / "provisioning"
    sources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus" and source["isDefault"] is True
    assert source["url"] == "http://prometheus:9090"
    providers = yaml.safe_load((provisioning / "dashboards" / "dashboards.yml").read_text())
    (provider,) = providers["providers"]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    assert DASHBOARD_DIR.is_dir()


def test_docs_name_every_dashboard_and_panel():
    text = " ".join((ROOT / "docs" / "observability.md").read_text().split())
    for path in dashboard_files():
        assert path.name in text
        for panel in panels(load(path)):
            assert panel["title"] in text, panel["title"]
