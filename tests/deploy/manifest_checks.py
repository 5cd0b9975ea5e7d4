"""Structural checks of the rendered Kubernetes objects of deploy/k8s, and the flag parsing
that the checks of deploy/systemd share.

Pure functions: rendered objects (dicts from the YAML) in, a list of problems (strings) out,
so the tests can feed them both the real render and broken copies of it. The rules checked are
the ones deploy/k8s/base/deployment.yaml states:
  cpu requests = limits = --threads; memory requests = limits = 1Gi per thread;
  terminationGracePeriodSeconds >= --drain-s + 15; a liveness probe that cannot fail within
  --drain-s; gRPC probes only on a worker that serves plaintext.
"""
import re

SLUICE = "/usr/bin/sluice"
# What `sluice worker` uses when a flag is not given (src/sluice/cli/worker_command.cc).
DEFAULT_DRAIN_S = 30.0
GRACE_MARGIN_S = 15
GIB = 1024 ** 3
# The flags that name a credential file: each must be a file a Secret volume provides.
SECRET_FLAGS = ("token-file", "tls-cert", "tls-key", "tls-client-ca", "tls-ca")
# Probe defaults of the Kubernetes API, for a field left out.
DEFAULT_PERIOD_S = 10
DEFAULT_FAILURE_THRESHOLD = 3


def parse_flags(argv):
    """`--name=value`, `--name value` and bare `--name` (True) -> ({name: value}, positional)."""
    flags, positional = {}, []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if not eq:
                if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                    value = argv[i + 1]
                    i += 1
                else:
                    value = True
            flags[name] = value
        else:
            positional.append(arg)
        i += 1
    return flags, positional


def port_of(address):
    """The port of HOST:PORT or [V6]:PORT."""
    return int(address.rsplit(":", 1)[1])


def cpu_cores(quantity):
    """A Kubernetes CPU quantity ("4", "500m", 2) in cores."""
    text = str(quantity)
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


_MEMORY_SUFFIXES = {"Ki": 1024, "Mi": 1024 ** 2, "Gi": GIB, "Ti": 1024 ** 4,
                    "k": 1000, "M": 1000 ** 2, "G": 1000 ** 3, "T": 1000 ** 4}


def memory_bytes(quantity):
    """A Kubernetes memory quantity ("4Gi", "512Mi", "1G", 1024) in bytes."""
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(quantity))
    if not m or (m.group(2) and m.group(2) not in _MEMORY_SUFFIXES):
        raise ValueError(f"not a memory quantity: {quantity!r}")
    return float(m.group(1)) * _MEMORY_SUFFIXES.get(m.group(2), 1)


def of_kind(objects, kind):
    return [o for o in objects if o.get("kind") == kind]


def pod_template(workload):
    return workload["spec"]["template"]


def command_line(container):
    return list(container.get("command", [])) + list(container.get("args", []))


def subcommand(container):
    """'worker' or 'train' for a sluice container, else None."""
    argv = command_line(container)
    return argv[1] if len(argv) > 1 and argv[0] == SLUICE else None


def containers(objects):
    """(workload, pod spec, container) for every container of every Deployment and Job."""
    for workload in objects:
        if workload.get("kind") in ("Deployment", "Job"):
            spec = pod_template(workload)["spec"]
            for c in spec.get("initContainers", []) + spec["containers"]:
                yield workload, spec, c


def selects(selector, labels):
    """Whether a matchLabels-style selector (non-empty) selects these labels."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def container_port(container, port):
    """The containerPort a probe's or a Service's port (a number or a name) means, or None."""
    for p in container.get("ports", []):
        if port in (p["containerPort"], p.get("name")):
            return p["containerPort"]
    return None


def check_command(name, container):
    problems = []
    argv = command_line(container)
    if not argv or argv[0] != SLUICE:
        problems.append(f"{name}: the command line does not start with {SLUICE}: {argv}")
    elif subcommand(container) not in ("worker", "train"):
        problems.append(f"{name}: expected `sluice worker` or `sluice train`, got {argv[:2]}")
    return problems


def check_resources(name, container, threads):
    """requests = limits, cpu = threads, memory = 1Gi per thread."""
    problems = []
    res = container.get("resources", {})
    requests, limits = res.get("requests", {}), res.get("limits", {})
    for what in ("cpu", "memory"):
        if what not in requests or what not in limits:
            problems.append(f"{name}: resources.requests and .limits need {what}")
    if problems:
        return problems
    if cpu_cores(requests["cpu"]) != cpu_cores(limits["cpu"]):
        problems.append(f"{name}: cpu requests {requests['cpu']} != limits {limits['cpu']}")
    if memory_bytes(requests["memory"]) != memory_bytes(limits["memory"]):
        problems.append(f"{name}: memory requests {requests['memory']} != limits "
                        f"{limits['memory']}")
    if cpu_cores(limits["cpu"]) != threads:
        problems.append(f"{name}: cpu limit {limits['cpu']} does not match --threads {threads} "
                        "(rule: one core per thread)")
    if memory_bytes(limits["memory"]) != threads * GIB:
        problems.append(f"{name}: memory limit {limits['memory']} does not match --threads "
                        f"{threads} (rule: 1Gi per thread)")
    return problems


def check_security(name, spec, container):
    problems = []
    pod_sc = spec.get("securityContext", {})
    sc = container.get("securityContext", {})
    if not (sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True):
        problems.append(f"{name}: runAsNonRoot is not set")
    if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
        problems.append(f"{name}: runs as user 0")
    if sc.get("allowPrivilegeEscalation") is not False:
        problems.append(f"{name}: allowPrivilegeEscalation is not false")
    if sc.get("readOnlyRootFilesystem") is not True:
        problems.append(f"{name}: readOnlyRootFilesystem is not true")
    if sc.get("privileged"):
        problems.append(f"{name}: privileged")
    if "ALL" not in sc.get("capabilities", {}).get("drop", []):
        problems.append(f"{name}: capabilities.drop does not hold ALL")
    if sc.get("capabilities", {}).get("add"):
        problems.append(f"{name}: adds capabilities {sc['capabilities']['add']}")
    return problems


def mount_for(spec, container, path):
    """(volumeMount, volume) whose mount holds `path`, the deepest one, or (None, None)."""
    best = (None, None)
    for m in container.get("volumeMounts", []):
        root = m["mountPath"].rstrip("/")
        if path == root or path.startswith(root + "/"):
            if best[0] is None or len(root) > len(best[0]["mountPath"].rstrip("/")):
                volume = next((v for v in spec.get("volumes", []) if v["name"] == m["name"]),
                              None)
                best = (m, volume)
    return best


def check_secret_files(name, spec, container, flags):
    """Every credential flag names a file of a Secret volume, mounted read-only."""
    problems = []
    for flag in SECRET_FLAGS:
        path = flags.get(flag)
        if not isinstance(path, str):
            continue
        mount, volume = mount_for(spec, container, path)
        if mount is None or volume is None:
            problems.append(f"{name}: --{flag} {path}: no volume is mounted there")
            continue
        if "secret" not in volume:
            problems.append(f"{name}: --{flag} {path}: volume '{volume['name']}' is not a "
                            "Secret")
            continue
        if not mount.get("readOnly"):
            problems.append(f"{name}: --{flag} {path}: the Secret is mounted read-write")
        relative = path[len(mount["mountPath"].rstrip("/")) + 1:]
        items = volume["secret"].get("items")
        if items is None:
            problems.append(f"{name}: --{flag} {path}: Secret '{volume['secret']['secretName']}' "
                            "is mounted without items, so its file names are not checked")
        elif relative not in [i["path"] for i in items]:
            problems.append(f"{name}: --{flag} {path}: Secret "
                            f"'{volume['secret']['secretName']}' has no item at '{relative}'")
    return problems


def check_read_only_data(name, spec, container, path):
    mount, volume = mount_for(spec, container, path)
    if mount is None or volume is None:
        return [f"{name}: the data at {path} is not a mounted volume"]
    problems = []
    if not mount.get("readOnly"):
        problems.append(f"{name}: the data volume at {path} is mounted read-write")
    pvc = volume.get("persistentVolumeClaim")
    if pvc is not None and not pvc.get("readOnly"):
        problems.append(f"{name}: the data volume's persistentVolumeClaim is not readOnly")
    return problems


def check_metrics(name, template, container, flags):
    """--metrics-listen's port is a container port named metrics, and the scrape annotations
    point at it."""
    address = flags.get("metrics-listen")
    if not isinstance(address, str):
        return [f"{name}: no --metrics-listen"]
    port = port_of(address)
    problems = []
    if container_port(container, "metrics") != port:
        problems.append(f"{name}: no container port named 'metrics' at {port} (--metrics-listen "
                        f"{address})")
    annotations = template["metadata"].get("annotations", {})
    want = {"prometheus.io/scrape": "true", "prometheus.io/port": str(port),
            "prometheus.io/path": "/metrics"}
    for key, value in want.items():
        if annotations.get(key) != value:
            problems.append(f"{name}: pod annotation {key} is {annotations.get(key)!r}, "
                            f"expected {value!r}")
    return problems


def check_probes(name, container, flags):
    """Worker probes: gRPC health on the --listen port when plaintext (the kubelet's gRPC
    probes cannot speak TLS), else HTTP /readyz and /healthz on the metrics port; liveness
    slower to fail than the drain."""
    problems = []
    tls = isinstance(flags.get("tls-cert"), str)
    listen = port_of(flags["listen"]) if isinstance(flags.get("listen"), str) else None
    metrics = (port_of(flags["metrics-listen"])
               if isinstance(flags.get("metrics-listen"), str) else None)
    http_paths = {"readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
        probe = container.get(kind)
        if probe is None:
            if kind != "startupProbe":
                problems.append(f"{name}: no {kind}")
            continue
        if "grpc" in probe:
            port = probe["grpc"].get("port")
            if tls:
                problems.append(f"{name}: {kind} is a gRPC probe but the worker serves TLS "
                                "(the kubelet's gRPC probes are plaintext)")
            if container_port(container, port) is None or port != listen:
                problems.append(f"{name}: {kind} probes gRPC port {port}, not the worker port "
                                f"{listen} (--listen)")
            if kind == "readinessProbe" and probe["grpc"].get("service") != "sluice.Worker":
                problems.append(f"{name}: readinessProbe should ask for service sluice.Worker")
        elif "httpGet" in probe:
            port = container_port(container, probe["httpGet"].get("port"))
            if port is None or port != metrics:
                problems.append(f"{name}: {kind} probes HTTP port "
                                f"{probe['httpGet'].get('port')}, not the metrics port "
                                f"{metrics} (--metrics-listen)")
            path = probe["httpGet"].get("path")
            if kind in http_paths and path != http_paths[kind]:
                problems.append(f"{name}: {kind} asks for {path}, expected {http_paths[kind]}")
            if kind == "startupProbe" and path not in http_paths.values():
                problems.append(f"{name}: startupProbe asks for {path}")
        else:
            problems.append(f"{name}: {kind} is neither gRPC nor HTTP: {sorted(probe)}")
    liveness = container.get("livenessProbe")
    if liveness is not None:
        drain_s = float(flags.get("drain-s", DEFAULT_DRAIN_S))
        window = (liveness.get("periodSeconds", DEFAULT_PERIOD_S)
                  * liveness.get("failureThreshold", DEFAULT_FAILURE_THRESHOLD))
        if window <= drain_s:
            problems.append(f"{name}: livenessProbe fails after {window} s, within --drain-s "
                            f"{drain_s}: a draining worker would be restarted")
    return problems


def check_worker_pool(objects, service_name="sluice-workers"):
    """The worker overlays: a Deployment of `sluice worker`s, a headless Service and a PDB."""
    problems = []
    deployments = of_kind(objects, "Deployment")
    services = [s for s in of_kind(objects, "Service") if s["metadata"]["name"] == service_name]
    pdbs = of_kind(objects, "PodDisruptionBudget")
    if len(deployments) != 1 or len(services) != 1 or len(pdbs) != 1:
        return [f"expected one Deployment, one Service '{service_name}' and one "
                f"PodDisruptionBudget, got {[o.get('kind') for o in objects]}"]
    deployment, service, pdb = deployments[0], services[0], pdbs[0]
    template = pod_template(deployment)
    labels = template["metadata"].get("labels", {})
    spec = template["spec"]
    if not selects(deployment["spec"]["selector"].get("matchLabels"), labels):
        problems.append("the Deployment's selector does not select its own pods")
    if service["spec"].get("clusterIP") != "None":
        problems.append(f"the Service is not headless (clusterIP: "
                        f"{service['spec'].get('clusterIP')!r}, expected 'None')")
    if not selects(service["spec"].get("selector"), labels):
        problems.append(f"the Service's selector {service['spec'].get('selector')} does not "
                        f"select the Deployment's pods {labels}")
    if not selects(pdb["spec"].get("selector", {}).get("matchLabels"), labels):
        problems.append("the PodDisruptionBudget does not select the Deployment's pods")
    workers = [c for c in spec["containers"] if subcommand(c) == "worker"]
    if len(workers) != 1:
        return problems + [f"expected one `sluice worker` container, got {len(workers)}"]
    worker = workers[0]
    flags, positional = parse_flags(command_line(worker)[2:])
    name = f"Deployment/{deployment['metadata']['name']}/{worker['name']}"
    if positional:
        problems.append(f"{name}: positional arguments {positional}")
    for flag in ("listen", "threads", "metrics-listen", "data-root", "token-file"):
        if not isinstance(flags.get(flag), str):
            problems.append(f"{name}: no --{flag}")
    if problems:
        return problems
    listen = port_of(flags["listen"])
    grpc_ports = [p for p in service["spec"].get("ports", []) if p["port"] == listen]
    if not grpc_ports or container_port(worker, grpc_ports[0].get("targetPort",
                                                                  listen)) != listen:
        problems.append(f"the Service has no port {listen} that reaches the worker's --listen "
                        "port")
    drain_s = float(flags.get("drain-s", DEFAULT_DRAIN_S))
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if grace < drain_s + GRACE_MARGIN_S:
        problems.append(f"terminationGracePeriodSeconds {grace} is not at least --drain-s "
                        f"{drain_s:g} + {GRACE_MARGIN_S}")
    problems += check_resources(name, worker, int(flags["threads"]))
    problems += check_security(name, spec, worker)
    problems += check_secret_files(name, spec, worker, flags)
    problems += check_read_only_data(name, spec, worker, flags["data-root"])
    problems += check_metrics(name, template, worker, flags)
    problems += check_probes(name, worker, flags)
    return problems


def check_trainer_job(objects, pool_objects):
    """An example training Job: `sluice train` against the pool rendered in pool_objects."""
    problems = []
    jobs = of_kind(objects, "Job")
    if len(jobs) != 1:
        return [f"expected one Job, got {[o.get('kind') for o in objects]}"]
    job = jobs[0]
    template = pod_template(job)
    spec = template["spec"]
    trainers = [c for c in spec["containers"] if subcommand(c) == "train"]
    if len(trainers) != 1:
        return [f"expected one `sluice train` container, got {len(trainers)}"]
    trainer = trainers[0]
    name = f"Job/{job['metadata']['name']}/{trainer['name']}"
    flags, positional = parse_flags(command_line(trainer)[2:])
    if len(positional) != 1:
        return [f"{name}: expected one pipeline file, got {positional}"]
    threads = flags.get("threads")
    if not isinstance(threads, str):
        problems.append(f"{name}: no --threads")
    else:
        problems += check_resources(name, trainer, int(threads))
    problems += check_security(name, spec, trainer)
    problems += check_secret_files(name, spec, trainer, flags)
    problems += check_metrics(name, template, trainer, flags)

    mount, volume = mount_for(spec, trainer, positional[0])
    if volume is None or "configMap" not in volume:
        problems.append(f"{name}: the pipeline {positional[0]} is not in a mounted ConfigMap")
    else:
        maps = [m for m in of_kind(objects, "ConfigMap")
                if m["metadata"]["name"] == volume["configMap"]["name"]]
        relative = positional[0][len(mount["mountPath"].rstrip("/")) + 1:]
        items = {i["path"]: i["key"] for i in volume["configMap"].get("items", [])}
        key = items.get(relative, relative)
        if not maps or key not in maps[0].get("data", {}):
            problems.append(f"{name}: ConfigMap '{volume['configMap']['name']}' in this render "
                            f"has no key '{key}' for {positional[0]}")

    # The workers it names are the pool's Service, on the worker port, spoken to as the pool
    # serves: TLS to a TLS pool, a token to a pool that requires one.
    pool = [c for _, _, c in containers(pool_objects) if subcommand(c) == "worker"]
    pool_flags = parse_flags(command_line(pool[0])[2:])[0] if pool else {}
    services = {s["metadata"]["name"]: s for s in of_kind(pool_objects, "Service")}
    workers = flags.get("workers")
    if not isinstance(workers, str):
        return problems + [f"{name}: no --workers"]
    for entry in workers.split(","):
        m = re.fullmatch(r"dns:([^:]+):(\d+)", entry)
        if not m:
            problems.append(f"{name}: --workers entry '{entry}' is not dns:NAME:PORT")
            continue
        service = services.get(m.group(1))
        if service is None:
            problems.append(f"{name}: --workers names Service '{m.group(1)}', which the pool "
                            "does not define")
        elif service["spec"].get("clusterIP") != "None":
            problems.append(f"{name}: Service '{m.group(1)}' is not headless")
        if isinstance(pool_flags.get("listen"), str) and \
                int(m.group(2)) != port_of(pool_flags["listen"]):
            problems.append(f"{name}: --workers port {m.group(2)} is not the workers' --listen "
                            f"port {port_of(pool_flags['listen'])}")
    pool_tls = isinstance(pool_flags.get("tls-cert"), str)
    if pool_tls != isinstance(flags.get("tls-ca"), str):
        problems.append(f"{name}: the workers serve "
                        f"{'TLS' if pool_tls else 'plaintext'} but the trainer "
                        f"{'has no' if pool_tls else 'has'} --tls-ca")
    if isinstance(pool_flags.get("token-file"), str) != isinstance(flags.get("token-file"), str):
        problems.append(f"{name}: the workers and the trainer disagree on --token-file")
    return problems
