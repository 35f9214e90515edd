"""Strict validation of rendered Kubernetes manifests, offline.

Custom resources are checked against the official CRD schemas kept in
tests/data/k8s/crds/ (SOURCES.md says where each comes from), made strict:
every object schema that names `properties` and says nothing about other
members (no `additionalProperties`, no `x-kubernetes-preserve-unknown-fields`)
gets `additionalProperties: false`, so a field the schema does not name is an
error.

Core objects (Secret, Service, Job) and the pod templates inside custom
resources are checked field by field against the Kubernetes API types of
Debian's python3-kubernetes: each model class lists its fields
(`attribute_map`) and their types (`openapi_types`); a rendered key that is
not a field of its model is an error, and nested models are walked.

Debian 12's client carries the Kubernetes 1.22 API. Fields added later are
listed in NEWER_FIELDS with the release that added them; the model walk
accepts those keys only there, and their whole subtree is checked strictly
by the JSON schema of the same type embedded in a newer CRD (the JobSet
CRD embeds batch/v1 JobSpec), see `job_spec_schema`.
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import kubernetes.client as k8s_models
import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 10x faster on 4 MB of CRDs
CRD_DIR = Path(__file__).resolve().parents[1] / "data" / "k8s" / "crds"

# (model class, JSON key) -> the Kubernetes release that added the field.
NEWER_FIELDS = {
    ("V1JobSpec", "podFailurePolicy"): "Kubernetes 1.26 (beta), GA in 1.31",
}


def strict(schema: Any) -> Any:
    """A copy of `schema` where unnamed members of objects are errors."""
    schema = copy.deepcopy(schema)

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields", False)
            ):
                node["additionalProperties"] = False
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema)
    return schema


@functools.lru_cache(maxsize=None)
def crd_schemas() -> dict[tuple[str, str, str], dict]:
    """(group, version, kind) -> the strict openAPIV3Schema of every CRD file."""
    out = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.load(path.read_text(), Loader=_LOADER)
        group = crd["spec"]["group"]
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            out[(group, version["name"], kind)] = strict(version["schema"]["openAPIV3Schema"])
    return out


@functools.lru_cache(maxsize=None)
def crd_scopes() -> dict[tuple[str, str], str]:
    """(group, kind) -> "Namespaced" or "Cluster", the CRD's spec.scope."""
    out = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.load(path.read_text(), Loader=_LOADER)
        out[(crd["spec"]["group"], crd["spec"]["names"]["kind"])] = crd["spec"]["scope"]
    return out


def scope_errors(obj: dict) -> list[str]:
    """A cluster-scoped custom resource must name no namespace (the API server
    refuses one that does); a namespaced one rendered by tandem must name its
    namespace, so that `kubectl apply` does not put it in the current one."""
    group = obj["apiVersion"].rpartition("/")[0]
    scope = crd_scopes().get((group, obj["kind"]))
    has_namespace = "namespace" in obj.get("metadata", {})
    if scope == "Cluster" and has_namespace:
        return [f"{obj['kind']} metadata.namespace: set on a cluster-scoped object"]
    if scope == "Namespaced" and not has_namespace:
        return [f"{obj['kind']} metadata.namespace: missing on a namespaced object"]
    return []


def job_spec_schema() -> dict:
    """batch/v1 JobSpec's schema as the JobSet CRD embeds it (strict)."""
    jobset = crd_schemas()[("jobset.x-k8s.io", "v1alpha2", "JobSet")]
    return jobset["properties"]["spec"]["properties"]["replicatedJobs"]["items"]["properties"][
        "template"
    ]["properties"]["spec"]


def schema_errors(obj: dict) -> list[str]:
    """Errors of a custom resource against its strict CRD schema."""
    group, _, version = obj["apiVersion"].rpartition("/")
    key = (group, version, obj["kind"])
    schema = crd_schemas().get(key)
    if schema is None:
        return [f"no CRD schema for {key} in {CRD_DIR}"]
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{obj['kind']} {'/'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(obj)
    ]


_LIST = re.compile(r"^list\[(.+)\]$")
_DICT = re.compile(r"^dict\(([^,]+), (.+)\)$")
_PRIMITIVES = {
    "str": (str,),
    "int": (int,),
    "bool": (bool,),
    "float": (int, float),
    "object": (object,),
    "datetime": (str,),
    "date": (str,),
}


def model_errors(value: Any, type_name: str, path: str) -> list[str]:
    """Errors of `value` against the python3-kubernetes type `type_name`."""
    if m := _LIST.match(type_name):
        if not isinstance(value, list):
            return [f"{path}: expected a list ({type_name}), got {type(value).__name__}"]
        errors = []
        for i, item in enumerate(value):
            errors += model_errors(item, m.group(1), f"{path}[{i}]")
        return errors
    if m := _DICT.match(type_name):
        if not isinstance(value, dict):
            return [f"{path}: expected a map ({type_name}), got {type(value).__name__}"]
        errors = []
        for k, item in value.items():
            errors += model_errors(item, m.group(2), f"{path}.{k}")
        return errors
    if type_name in _PRIMITIVES:
        allowed = _PRIMITIVES[type_name]
        if type_name == "int" and isinstance(value, bool):
            return [f"{path}: expected int, got bool"]
        if not isinstance(value, allowed):
            return [f"{path}: expected {type_name}, got {type(value).__name__} {value!r}"]
        return []
    model = getattr(k8s_models, type_name, None)
    if model is None:
        return [f"{path}: python3-kubernetes has no type {type_name}"]
    if not isinstance(value, dict):
        return [f"{path}: expected an object ({type_name}), got {type(value).__name__}"]
    by_key = {json_key: attr for attr, json_key in model.attribute_map.items()}
    errors = []
    for key, item in value.items():
        if key not in by_key:
            if (type_name, key) in NEWER_FIELDS:
                continue  # checked by the newer schema (job_spec_schema)
            errors.append(f"{path}.{key}: not a field of {type_name} (fields: {sorted(by_key)})")
            continue
        errors += model_errors(item, model.openapi_types[by_key[key]], f"{path}.{key}")
    return errors


def job_spec_errors(spec: dict, path: str) -> list[str]:
    """A batch/v1 JobSpec against both the model and the newer strict schema."""
    errors = model_errors(spec, "V1JobSpec", path)
    validator = jsonschema.Draft7Validator(job_spec_schema())
    errors += [
        f"{path}.{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(spec)
    ]
    return errors


def pod_templates(obj: dict) -> Iterator[tuple[str, dict]]:
    """(path, pod template) of every pod template inside a custom resource."""
    spec = obj.get("spec", {})
    kind = obj["kind"]
    replica_specs = {
        "MXJob": "mxReplicaSpecs",
        "PyTorchJob": "pytorchReplicaSpecs",
        "MPIJob": "mpiReplicaSpecs",
        "TFJob": "tfReplicaSpecs",
    }
    if kind in replica_specs:
        for name, replica in spec[replica_specs[kind]].items():
            yield f"{kind}.spec.{replica_specs[kind]}.{name}.template", replica["template"]
    elif obj["apiVersion"].startswith("batch.volcano.sh/") and kind == "Job":
        for i, task in enumerate(spec["tasks"]):
            yield f"{kind}.spec.tasks[{i}].template", task["template"]


def job_templates(obj: dict) -> Iterator[tuple[str, dict]]:
    """(path, Job template) of the Jobs inside a JobSet or a training runtime."""
    kind = obj["kind"]
    if kind == "JobSet":
        jobs = obj["spec"]["replicatedJobs"]
        prefix = "JobSet.spec.replicatedJobs"
    elif kind in ("TrainingRuntime", "ClusterTrainingRuntime"):
        jobs = obj["spec"]["template"]["spec"]["replicatedJobs"]
        prefix = f"{kind}.spec.template.spec.replicatedJobs"
    else:
        return
    for i, job in enumerate(jobs):
        yield f"{prefix}[{i}].template", job["template"]


CORE_TYPES = {
    ("v1", "Secret"): "V1Secret",
    ("v1", "Service"): "V1Service",
}


def manifest_errors(obj: dict) -> list[str]:
    """Every error of one rendered object (core or custom)."""
    api, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    if (api, kind) in CORE_TYPES:
        return model_errors(obj, CORE_TYPES[(api, kind)], kind)
    if (api, kind) == ("batch/v1", "Job"):
        top = {k: v for k, v in obj.items() if k != "spec"}
        return model_errors(top, "V1Job", "Job") + job_spec_errors(obj["spec"], "Job.spec")
    errors = schema_errors(obj) + scope_errors(obj)
    errors += model_errors(obj.get("metadata", {}), "V1ObjectMeta", f"{kind}.metadata")
    for path, template in pod_templates(obj):
        errors += model_errors(template, "V1PodTemplateSpec", path)
    for path, template in job_templates(obj):
        errors += model_errors(template.get("metadata", {}), "V1ObjectMeta", f"{path}.metadata")
        errors += job_spec_errors(template["spec"], f"{path}.spec")
        unknown = set(template) - {"metadata", "spec"}
        errors += [f"{path}.{k}: not a field of V1JobTemplateSpec" for k in sorted(unknown)]
    return errors
