"""deploy/k8s: every overlay and example Job renders offline with `kubectl kustomize`, its
objects pass the structural checks of manifest_checks.py, and every container's command line is
one the real `sluice` binary accepts (`--check-flags`).

Kubernetes cannot run here, so nothing is applied: these checks are what stands between an edit
and a manifest that would not start, or would start a worker the probes or the trainers cannot
reach.
"""
import copy
import pathlib

import pytest
import yaml

from conftest import ROOT, check_flags, require_tool, run
import manifest_checks as mc

K8S = ROOT / "deploy" / "k8s"
POOLS = sorted(p.parent for p in K8S.glob("overlays/*/kustomization.yaml"))
JOBS = sorted(p.parent for p in K8S.glob("train/*/kustomization.yaml"))


@pytest.fixture(scope="module", autouse=True)
def kubectl():
    return require_tool("kubectl", "kubernetes-client")


_rendered = {}


def render(directory):
    """The objects `kubectl kustomize DIR` renders (cached: each directory renders once)."""
    if directory not in _rendered:
        out = run([require_tool("kubectl", "kubernetes-client"), "kustomize", directory])
        assert out.returncode == 0, f"kubectl kustomize {directory} failed:\n{out.stderr}"
        _rendered[directory] = [o for o in yaml.safe_load_all(out.stdout) if o]
    return copy.deepcopy(_rendered[directory])


def label(directory):
    return str(pathlib.Path(directory).relative_to(K8S))


def test_every_kustomization_is_checked():
    """A new overlay or Job directory is either checked below or fails here."""
    found = {label(p.parent) for p in K8S.rglob("kustomization.yaml")}
    checked = {label(p) for p in POOLS + JOBS} | {"base"}
    assert found == checked
    assert {p.name for p in POOLS} == {"tls-off", "tls-on"}
    assert {p.name for p in JOBS} == {p.name for p in POOLS}, "one example Job per overlay"


@pytest.mark.parametrize("pool", POOLS, ids=label)
def test_worker_pool(pool):
    assert mc.check_worker_pool(render(pool)) == []


@pytest.mark.parametrize("job", JOBS, ids=label)
def test_training_job(job):
    """Each example Job against the overlay of the same name."""
    assert mc.check_trainer_job(render(job), render(K8S / "overlays" / job.name)) == []


@pytest.mark.parametrize("directory", POOLS + JOBS, ids=label)
def test_every_command_line_is_one_sluice_accepts(directory, binary):
    lines = []
    for workload, _, container in mc.containers(render(directory)):
        argv = mc.command_line(container)
        assert argv[:1] == [mc.SLUICE], f"{workload['kind']}: {argv}"
        out = check_flags(binary, argv[1:])
        assert out.returncode == 0, (f"{workload['kind']}/{workload['metadata']['name']}: "
                                     f"sluice {' '.join(argv[1:])} --check-flags exited "
                                     f"{out.returncode}:\n{out.stderr}")
        assert f"sluice {argv[1]}: flags ok" in out.stdout
        lines.append(argv)
    assert lines, f"{label(directory)} renders no containers"


def test_check_flags_refuses_what_sluice_would_refuse(binary):
    """--check-flags is only worth running if it fails on bad flags."""
    for argv in (["worker", "--no-such-flag"], ["worker", "--threads=-1"],
                 ["worker", "--drain-s", "soon"], ["worker", "stray-argument"],
                 ["train", "--steps=10"], ["train", "p.yaml", "--tls-cert=c.pem"]):
        out = check_flags(binary, argv)
        assert out.returncode == 2, f"sluice {' '.join(argv)} --check-flags: {out.returncode}"


def test_one_image_everywhere():
    """The workers' base and the example Jobs name the same image (kubectl 1.20's kustomize
    has no components to share one `images:` entry), and it reaches every container."""
    entries = [yaml.safe_load((K8S / d / "kustomization.yaml").read_text())["images"]
               for d in ("base", "train/tls-off")]
    assert entries[0] == entries[1]
    (image,) = entries[0]
    assert image["name"] == "sluice"
    want = f"{image['newName']}:{image['newTag']}"
    for directory in POOLS + JOBS:
        for _, _, container in mc.containers(render(directory)):
            assert container["image"] == want, label(directory)


def test_example_pipeline_runs(binary, tmp_path):
    """The Job's pipeline (its ConfigMap) runs on a small generated data set."""
    (config_map,) = mc.of_kind(render(JOBS[0]), "ConfigMap")
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(config_map["data"]["pipeline.yaml"])
    gen = run([binary, "gen-data", "--kind", "jpeg", "--count", "64", "--width", "64",
               "--height", "48", "--classes", "2", "--threads", "1", "--out", tmp_path / "data"])
    assert gen.returncode == 0, gen.stderr
    out = run([binary, "run", pipeline, "--files", f"{tmp_path}/data/**/*.jpg", "--threads", "1"])
    assert out.returncode == 0, out.stderr


# Broken copies of the render: each must be reported, with the problem named.
def worker_pod(objects):
    return mc.pod_template(mc.of_kind(objects, "Deployment")[0])


def worker_container(objects):
    return worker_pod(objects)["spec"]["containers"][0]


def volume(objects, name):
    return next(v for v in worker_pod(objects)["spec"]["volumes"] if v["name"] == name)


def set_args(objects, **flags):
    container = worker_container(objects)
    container["args"] = [a for a in container["args"]
                         if a.split("=")[0][2:] not in flags] + \
        [f"--{k.replace('_', '-')}={v}" for k, v in flags.items()]


MUTATIONS = {
    "service-not-headless": ("tls-off", "not headless",
                             lambda o: mc.of_kind(o, "Service")[0]["spec"].pop("clusterIP")),
    "service-selects-other-pods": ("tls-off", "Service's selector", lambda o: mc.of_kind(
        o, "Service")[0]["spec"]["selector"].update({"app.kubernetes.io/name": "other"})),
    "pdb-selects-other-pods": ("tls-off", "PodDisruptionBudget", lambda o: mc.of_kind(
        o, "PodDisruptionBudget")[0]["spec"]["selector"]["matchLabels"].update(
            {"app.kubernetes.io/component": "other"})),
    "cpu-not-threads": ("tls-off", "does not match --threads",
                        lambda o: set_args(o, threads=8)),
    "limits-not-requests": ("tls-on", "requests", lambda o: worker_container(o)["resources"][
        "requests"].update({"cpu": "2"})),
    "grace-within-drain": ("tls-off", "terminationGracePeriodSeconds",
                           lambda o: set_args(o, drain_s=40)),
    "liveness-within-drain": ("tls-on", "a draining worker would be restarted",
                              lambda o: worker_container(o)["livenessProbe"].update(
                                  {"failureThreshold": 2})),
    "grpc-probe-with-tls": ("tls-on", "gRPC probes are plaintext",
                            lambda o: worker_container(o).update(
                                {"readinessProbe": {"grpc": {"port": 7070,
                                                             "service": "sluice.Worker"}}})),
    "grpc-probe-wrong-port": ("tls-off", "not the worker port",
                              lambda o: worker_container(o)["livenessProbe"]["grpc"].update(
                                  {"port": 7071})),
    "http-probe-wrong-path": ("tls-on", "expected /readyz", lambda o: worker_container(o)[
        "readinessProbe"]["httpGet"].update({"path": "/healthz"})),
    "no-readiness": ("tls-off", "no readinessProbe",
                     lambda o: worker_container(o).pop("readinessProbe")),
    "token-elsewhere": ("tls-off", "no item at 'token'", lambda o: volume(o, "auth")[
        "secret"]["items"][0].update({"path": "bearer"})),
    "tls-key-not-mounted": ("tls-on", "no volume is mounted there",
                            lambda o: set_args(o, tls_key="/etc/ssl/private/worker.key")),
    "metrics-port-moved": ("tls-off", "prometheus.io/port",
                           lambda o: set_args(o, metrics_listen="0.0.0.0:9100")),
    "data-writable": ("tls-off", "mounted read-write",
                      lambda o: worker_container(o)["volumeMounts"][0].update(
                          {"readOnly": False})),
    "root-filesystem-writable": ("tls-on", "readOnlyRootFilesystem", lambda o: worker_container(
        o)["securityContext"].update({"readOnlyRootFilesystem": False})),
    "capabilities-kept": ("tls-off", "capabilities.drop", lambda o: worker_container(o)[
        "securityContext"]["capabilities"].update({"drop": []})),
}


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_broken_pool_is_reported(case):
    overlay, expected, edit = MUTATIONS[case]
    objects = render(K8S / "overlays" / overlay)
    edit(objects)
    problems = mc.check_worker_pool(objects)
    assert any(expected in p for p in problems), problems


def test_job_against_the_other_transport_is_reported():
    problems = mc.check_trainer_job(render(K8S / "train" / "tls-on"),
                                    render(K8S / "overlays" / "tls-off"))
    assert any("--tls-ca" in p for p in problems), problems


def test_job_naming_another_service_is_reported():
    objects = render(K8S / "train" / "tls-off")
    trainer = mc.of_kind(objects, "Job")[0]["spec"]["template"]["spec"]["containers"][0]
    trainer["args"] = [a.replace("dns:sluice-workers:", "dns:workers:") for a in trainer["args"]]
    problems = mc.check_trainer_job(objects, render(K8S / "overlays" / "tls-off"))
    assert any("does not define" in p for p in problems), problems
