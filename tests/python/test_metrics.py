"""Metrics and health, end to end: a real `sluice worker` and real trainers (the Python loader
and `sluice train`) serve /metrics while they run; promtool (Debian's prometheus package)
checks the text, counters move as samples flow, a real Prometheus server scrapes a worker and
answers a query, and /readyz follows the worker's data root."""
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import ROOT, Worker, free_port, gen_images

# Every wait below is bounded by this (a slow, loaded machine gets the whole of it).
WAIT_S = 90


def need(tool):
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is missing (scripts/install-deps.sh installs the prometheus package)")
    return path


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def parse(text):
    """{(name, frozenset(labels)): value} of a text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        assert m, f"not a sample line: {line!r}"
        labels = frozenset(re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def promtool_ok(text):
    check = subprocess.run([need("promtool"), "check", "metrics"], input=text,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


class MetricsWorker(Worker):
    """`sluice worker` with --metrics-listen on loopback."""

    def __init__(self, binary, data_root):
        self.metrics_port = free_port()
        super().__init__(binary, data_root,
                         extra=("--metrics-listen", f"127.0.0.1:{self.metrics_port}"))
        self.url = f"http://127.0.0.1:{self.metrics_port}"

    def scrape(self):
        status, text = get(self.url + "/metrics")
        assert status == 200
        return text


@pytest.fixture()
def metrics_worker(binary, tmp_path):
    data = tmp_path / "imgs"
    pattern = gen_images(binary, data, 64, 64, 48, 2)
    w = MetricsWorker(binary, data)
    w.pattern = pattern
    yield w
    w.stop()


def worker_moved(before, text):
    """Whether the worker decoded and sent samples since the `before` scrape."""
    now = parse(text)
    return all(value(now, name, **labels) > value(before, name, **labels)
               for name, labels in (("sluice_worker_op_samples_total", {"op": "decode_jpeg"}),
                                    ("sluice_worker_samples_sent_total", {})))


def test_worker_and_python_loader_metrics_move_during_an_offloaded_run(sluice, metrics_worker):
    spec = (sluice.files(metrics_worker.pattern, label="parent_dir", shuffle=True, seed=3)
            .map("read_file").map("decode_jpeg").map("random_resized_crop", size=24)
            .map("normalize", mean=[0.5] * 3, std=[0.25] * 3).batch(4).options(threads=1))
    loader = sluice.Loader(spec, workers=[metrics_worker.address],
                           policy="fixed:cut=3,ratio=0.5", epochs=-1, metrics_port="127.0.0.1:0")
    url = f"http://{loader.metrics_address}/metrics"
    first = None
    deadline = time.monotonic() + WAIT_S
    batches = 0
    for _ in loader:
        batches += 1
        if batches % 8:
            continue
        trainer = parse(get(url)[1])
        if value(trainer, "sluice_trainer_samples_received_total",
                 worker=metrics_worker.address):
            if first is None:
                first = (trainer, parse(metrics_worker.scrape()), batches)
            # 40 batches take ~20 ms here: a worker not scheduled in them decodes and sends
            # nothing, so the loop goes on until its counters moved (bounded by the deadline).
            elif batches >= first[2] + 40 and worker_moved(first[1], metrics_worker.scrape()):
                break
        assert time.monotonic() < deadline, "no worker samples within the bound"
    trainer_text = get(url)[1]
    worker_text = metrics_worker.scrape()
    loader.close()
    promtool_ok(trainer_text)
    promtool_ok(worker_text)
    trainer, worker = parse(trainer_text), parse(worker_text)
    t0, w0, _ = first
    # The trainer counts what it handed over; the worker what its ops ran and what it sent.
    assert value(trainer, "sluice_trainer_batches_total") >= batches
    assert value(trainer, "sluice_trainer_batches_total") > value(t0, "sluice_trainer_batches_total")
    assert value(trainer, "sluice_trainer_batch_wait_seconds_count") == \
        value(trainer, "sluice_trainer_batches_total")
    assert 0 <= value(trainer, "sluice_trainer_stall_ratio") <= 1
    assert value(trainer, "sluice_trainer_plan_info",
                 policy="fixed", cut="3",
                 read_mode="remote_read", codec="none") == 1
    assert value(worker, "sluice_worker_op_samples_total", op="decode_jpeg") > \
        value(w0, "sluice_worker_op_samples_total", op="decode_jpeg")
    assert value(worker, "sluice_worker_op_cpu_seconds_total", op="decode_jpeg") > 0
    assert value(worker, "sluice_worker_samples_sent_total") > \
        value(w0, "sluice_worker_samples_sent_total")
    assert value(worker, "sluice_worker_sent_bytes_total", codec="none") > 0
    assert value(worker, "sluice_worker_sessions_opened_total") >= 1
    # Closed: the session's counters stay in the worker's totals.
    after = parse(metrics_worker.scrape())
    assert value(after, "sluice_worker_op_samples_total", op="decode_jpeg") >= \
        value(worker, "sluice_worker_op_samples_total", op="decode_jpeg")


def test_cli_train_serves_metrics_while_it_trains(binary, metrics_worker, tmp_path):
    port = free_port()
    events = tmp_path / "events.jsonl"
    report = tmp_path / "report.json"
    train = subprocess.Popen(
        [str(binary), "train", str(ROOT / "examples/pipelines/imagenet_train.yaml"),
         "--files", metrics_worker.pattern, "--workers", metrics_worker.address,
         "--policy", "fixed:cut=2,ratio=0.5", "--accelerator-ms", "20", "--steps", "100000",
         "--epochs", "-1", "--metric-store", "off", "--events", str(events), "--json", str(report),
         "--metrics-listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + WAIT_S
        samples = {}
        while time.monotonic() < deadline:
            assert train.poll() is None, train.stderr.read()
            try:
                samples = parse(get(f"http://127.0.0.1:{port}/metrics")[1])
            except (urllib.error.URLError, ConnectionError):
                samples = {}
            if (value(samples, "sluice_trainer_samples_received_total",
                      worker=metrics_worker.address) or 0) > 0:
                break
            time.sleep(0.2)
        assert value(samples, "sluice_trainer_samples_received_total",
                     worker=metrics_worker.address), "no worker samples within the bound"
        promtool_ok(get(f"http://127.0.0.1:{port}/metrics")[1])
        assert value(samples, "sluice_trainer_plan_info", policy="fixed", cut="2",
                     read_mode="remote_read", codec="none") == 1
        # Ctrl-C stops the run cleanly: the report is written and says so.
        train.send_signal(signal.SIGINT)
        assert train.wait(timeout=WAIT_S) == 128 + signal.SIGINT
        stopped = json.loads(report.read_text())
        assert stopped["stopped_by"] == "Interrupt"
        assert stopped["samples"] > 0
    finally:
        if train.poll() is None:
            train.kill()
            train.wait()
        train.stderr.close()


def test_readyz_follows_the_data_root(binary, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    w = MetricsWorker(binary, root)
    try:
        assert get(w.url + "/readyz") == (200, "serving\n")
        assert get(w.url + "/healthz")[0] == 200
        root.rename(tmp_path / "gone")
        deadline = time.monotonic() + WAIT_S
        while get(w.url + "/readyz")[0] != 503:
            assert time.monotonic() < deadline, "/readyz still 200 without a data root"
            time.sleep(0.2)
        status, why = get(w.url + "/readyz")
        assert "data root" in why and str(root) in why
        assert value(parse(w.scrape()), "sluice_worker_ready") == 0
        (tmp_path / "gone").rename(root)
        while get(w.url + "/readyz")[0] != 200:
            assert time.monotonic() < deadline, "/readyz not back to 200"
            time.sleep(0.2)
    finally:
        w.stop()
    assert w.proc.returncode == 0


def test_a_real_prometheus_scrapes_a_worker_and_answers_a_query(binary, tmp_path):
    prometheus = need("prometheus")
    root = tmp_path / "root"
    root.mkdir()
    w = MetricsWorker(binary, root)
    web_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: sluice-worker\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{w.metrics_port}']\n")
    check = subprocess.run([need("promtool"), "check", "config", str(config)],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    server = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{web_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        query = f"http://127.0.0.1:{web_port}/api/v1/query?query=sluice_worker_threads"
        deadline = time.monotonic() + WAIT_S
        result = []
        while time.monotonic() < deadline:
            assert server.poll() is None, "prometheus exited"
            try:
                status, body = get(query)
            except (urllib.error.URLError, ConnectionError):
                status, body = 0, ""
            if status == 200:
                result = json.loads(body)["data"]["result"]
                if result:
                    break
            time.sleep(0.5)
        assert result, "prometheus answered no sample of sluice_worker_threads within the bound"
        assert result[0]["metric"]["job"] == "sluice-worker"
        assert result[0]["value"][1] == "1"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        w.stop()
