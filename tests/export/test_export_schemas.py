"""Generated Kubernetes, Argo Rollouts, Flagger and OpenSLO documents against published schemas.

The schemas are fixtures copied from the projects (see schemas/README.md); a
CRD schema is applied strictly, as the API server does (undeclared fields fail).
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
import yaml
from export_helpers import budget_with_policy, load_schema, strict
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from tailbudget.budget import Budget
from tailbudget.export import ExportOptions, argo, flagger, keda, openslo


def _validate(instance: Any, schema: Any) -> None:
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(instance)


def _errors(instance: Any, schema: Any) -> list[str]:
    return [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(instance)]


KEDA = strict(load_schema("keda.sh_scaledobjects.schema.yaml"))
ARGO = strict(load_schema("argoproj.io_analysistemplates.schema.yaml"))
FLAGGER = {k: strict(v) for k, v in load_schema("flagger.app_schemas.yaml").items()}


def test_keda_scaledobject_matches_the_crd(template_budget: Budget) -> None:
    doc, _ = keda.build(template_budget, ExportOptions(namespace="inference"))
    _validate(doc, KEDA)
    # The rendered text is the same document.
    assert yaml.safe_load(keda.render(template_budget)) == keda.build(template_budget)[0]


def test_the_strict_keda_schema_rejects_an_unknown_field(rag: Budget) -> None:
    doc, _ = keda.build(rag)
    doc["spec"]["triggers"][0]["metricTyp"] = "Value"
    assert any("metricTyp" in e for e in _errors(doc, KEDA))
    doc, _ = keda.build(rag)
    doc["spec"]["minReplicaCount"] = "1"
    assert _errors(doc, KEDA)


def test_argo_analysis_template_matches_the_crd(template_budget: Budget) -> None:
    doc, _ = argo.build(template_budget)
    _validate(doc, ARGO)
    with_baseline = budget_with_policy({"baseline_p99_ms": 900})
    _validate(argo.build(with_baseline)[0], ARGO)


def test_the_strict_argo_schema_rejects_a_provider_it_does_not_know(rag: Budget) -> None:
    doc, _ = argo.build(rag)
    doc["spec"]["metrics"][0]["provider"] = {"prometheus": {"query": "up", "step": "1m"}}
    assert _errors(doc, ARGO)


def test_flagger_metric_templates_and_analysis_match_the_crds(template_budget: Budget) -> None:
    templates, analysis, _ = flagger.build(template_budget)
    assert templates
    for t in templates:
        _validate(t, FLAGGER["metricTemplate"])
    _validate(analysis, FLAGGER["canaryAnalysis"])


def test_flagger_analysis_schema_catches_a_bad_interval(rag: Budget) -> None:
    _, analysis, _ = flagger.build(rag)
    analysis["interval"] = "ten seconds"
    assert _errors(analysis, FLAGGER["canaryAnalysis"])


def _openslo_validator() -> jsonschema.Draft7Validator:
    parts = [
        "general",
        "metadata",
        "name",
        "description",
        "duration-shorthand",
        "metricsource",
        "sli-spec",
        "slo-spec",
    ]
    resources = []
    for part in parts:
        schema = load_schema(f"openslo/{part}.schema.json")
        resources.append(
            (schema["$id"], Resource.from_contents(schema, default_specification=DRAFT7))
        )
    registry: Registry = Registry().with_resources(resources)
    root = {
        "allOf": [
            {"$ref": "https://openslo.com/schemas/v1/parts/general.schema.json"},
            {"$ref": "https://openslo.com/schemas/v1/parts/slo-spec.schema.json"},
            {"properties": {"kind": {"const": "SLO"}}},
        ]
    }
    return jsonschema.Draft7Validator(root, registry=registry)


OPENSLO = _openslo_validator()


def test_openslo_documents_match_the_openslo_v1_schema(template_budget: Budget) -> None:
    docs = openslo.build(template_budget)
    assert len(docs) >= len(template_budget.gated)
    for doc in docs:
        errors = [e.message for e in OPENSLO.iter_errors(doc)]
        assert errors == [], errors


def test_the_openslo_schema_rejects_a_target_of_one(rag: Budget) -> None:
    doc = openslo.build(rag)[0]
    doc["spec"]["objectives"][0]["target"] = 1.0
    assert list(OPENSLO.iter_errors(doc))
    doc = openslo.build(rag)[0]
    doc["spec"]["service"] = "Bad_Name"
    assert list(OPENSLO.iter_errors(doc))


@pytest.mark.parametrize("service", ["RAG_Chat.v2", "a" * 80])
def test_odd_service_names_still_give_valid_names(service: str) -> None:
    budget = budget_with_policy("default", service=service)
    _validate(keda.build(budget)[0], KEDA)
    assert len(keda.build(budget)[0]["metadata"]["name"]) <= 63
    for doc in openslo.build(budget):
        assert [e.message for e in OPENSLO.iter_errors(doc)] == []
