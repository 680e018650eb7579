"""Validate objects against Volcano's CRD schemas (../shared/volcano/crds), strictly.

The API server prunes unknown fields silently, so a misspelt field in a simulator object would
vanish in a real cluster without an error; here every object schema that lists its properties
(and does not preserve unknown fields) rejects extra ones, so such typos fail the tests.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import jsonschema
import yaml

from tests.simtools import SHARED

CRD_FILES = {
    ("batch.volcano.sh", "Job"): "batch.volcano.sh_jobs.yaml",
    ("scheduling.volcano.sh", "PodGroup"): "scheduling.volcano.sh_podgroups.yaml",
    ("scheduling.volcano.sh", "Queue"): "scheduling.volcano.sh_queues.yaml",
}


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def validator(group: str, kind: str) -> jsonschema.Draft7Validator:
    crd = yaml.safe_load((SHARED / "volcano" / "crds" / CRD_FILES[(group, kind)]).read_text())
    schema = copy.deepcopy(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(_strict(schema))


def schema_errors(obj: dict[str, Any]) -> list[str]:
    group = str(obj.get("apiVersion", "")).split("/")[0]
    found = validator(group, str(obj.get("kind")))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in found.iter_errors(obj)]
