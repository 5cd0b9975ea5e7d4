"""The planners from Python (runtime::PolicyRunner under sluice.Loader): `auto` offloads a
stalled loop to a real `sluice worker` and delivers every sample exactly once; without
workers, or with none reachable, it runs locally and says why (log and report);
`spill=workers` reaches the loader; a state taken after the switch to an offloading loader
resumes exactly.

The tests wait on structured events (the decisions in report(), the worker's sample count),
never on how long something took; every loop is bounded by a batch count."""
import collections
import time
import unittest

import pytest

from conftest import free_port, gen_images

MAX_BATCHES = 3000  # a bound on every loop below (each takes well under a second of data)
STEP_S = 0.001      # the "accelerator": far faster than one CPU thread decodes


@pytest.fixture(scope="module")
def heavy_images(binary, tmp_path_factory):
    """48 JPEGs of 960x720 in 4 class folders: decoding them stalls a 1 ms step.

    The loop's own work between next() calls (report(), copying each 96x96 crop) reads as
    part of the step, 2-7 ms a batch of 8, and does not grow with the JPEGs. At 480x360 a
    fast machine decoded a batch in about 5 ms and the start window read a 4.5% stall, under
    the planner's 5%; at 960x720 the same machine took 14 ms a batch."""
    return gen_images(binary, tmp_path_factory.mktemp("heavy"), 48, 960, 720, 4, "--seed", "7")


@pytest.fixture()
def heavy_spec(sluice, heavy_images):
    return (sluice.files(heavy_images, label="parent_dir", shuffle=True, seed=5)
            .map("read_file").map("decode_jpeg")
            .map("random_resized_crop", size=[96, 96], scale=[0.5, 1.0])
            .map("random_flip")
            .map("normalize", mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
            .batch(8).options(threads=1))


def add(seen, batch):
    """Adds {(epoch, index): image bytes} of `batch`, failing on a sample seen twice."""
    for row, (epoch, index) in enumerate(batch["sample_id"].tolist()):
        assert (epoch, index) not in seen, f"sample {(epoch, index)} delivered twice"
        seen[(epoch, index)] = batch["image"][row].tobytes()


def reference(sluice, spec, epochs):
    seen = {}
    for b in sluice.Loader(spec, policy="none", epochs=epochs, sample_ids=True):
        add(seen, b)
    return seen


def offloading(report):
    """Whether the loader has switched to an offloading plan and a worker delivered."""
    return (any(d["plan"]["offload"] for d in report["decisions"])
            and any(w["samples"] > 0 for w in report["workers"]))


def auto_kwargs(worker):
    return dict(workers=[worker.address], epochs=-1, sample_ids=True, measure_s=0.3,
                metric_store=False)


def check_complete(sluice, spec, seen, epochs):
    """Every sample of epochs [0, epochs) arrived with the content of an all-local run."""
    want = reference(sluice, spec, epochs)
    got = {k: v for k, v in seen.items() if k[0] < epochs}
    assert sorted(got) == sorted(want)
    assert got == want


def test_auto_offloads_a_stalled_loop_and_delivers_every_sample_once(sluice, heavy_spec,
                                                                       worker):
    seen = {}
    per_epoch = collections.Counter()
    upto = None
    with unittest.TestCase().assertLogs("sluice", level="INFO") as logs:
        loader = sluice.Loader(heavy_spec, **auto_kwargs(worker))
        for n, batch in enumerate(loader):
            time.sleep(STEP_S)
            add(seen, batch)
            per_epoch.update(batch["sample_id"][:, 0].tolist())
            if upto is None and offloading(loader.report()):
                # Two whole epochs after the switch, served by the offloading loader.
                upto = max(per_epoch) + 2
            if upto is not None and all(per_epoch[e] == 48 for e in range(upto)):
                break
            assert n < MAX_BATCHES, loader.report()["decisions"]
        report = loader.report()
        loader.close()
    assert any(line.startswith("INFO:sluice:initial plan: cut=") for line in logs.output), \
        logs.output
    first = report["decisions"][0]
    assert first["kind"] == "initial" and first["plan"]["offload"] is True
    assert report["plan"]["offload"] is True and report["plan"]["ratio"] > 0
    assert "decision: offload" in report["explanation"]
    assert report["local_reason"] == ""
    assert report["time_to_plan_s"] > 0
    # The stall that made it offload was measured on Python's side of next().
    measured = report["profile"]["measured"]["consumer"]
    assert measured["stall_fraction"] > 0.05
    assert report["workers"][0]["samples"] > 0
    check_complete(sluice, heavy_spec, seen, upto)


def test_auto_without_workers_runs_locally_and_says_why_once(sluice, heavy_spec):
    with unittest.TestCase().assertLogs("sluice", level="INFO") as logs:
        loader = sluice.Loader(heavy_spec, epochs=1)
        for _ in range(2):
            assert sum(1 for _ in loader) == 6  # two passes: the reason is said once
    said = [line for line in logs.output if "no workers given" in line]
    assert len(said) == 1, logs.output
    report = loader.report()
    assert report["policy"] == "auto" and report["offloaded"] is False
    assert "no workers given" in report["local_reason"]
    assert "no workers given" in report["explanation"]
    assert report["plan"]["ratio"] == 0 and report["decisions"] == []


def test_auto_with_an_unreachable_worker_runs_locally_and_says_why(sluice, heavy_spec):
    address = f"127.0.0.1:{free_port()}"
    with unittest.TestCase().assertLogs("sluice", level="INFO") as logs:
        loader = sluice.Loader(heavy_spec, workers=[address], epochs=-1, measure_s=0.1,
                               connect_timeout_s=0.3, metric_store=False)
        for n, _ in enumerate(loader):
            if loader.report()["decisions"]:
                break
            assert n < MAX_BATCHES
        report = loader.report()
        loader.close()
    assert any(f"worker {address} did not answer the probe" in line and
               line.startswith("WARNING:sluice:") for line in logs.output), logs.output
    assert any(line.startswith("INFO:sluice:initial plan: all local") for line in logs.output)
    assert report["offloaded"] is False and report["plan"]["offload"] is False
    assert "no workers" in report["local_reason"]
    assert report["workers"] == []


def test_workers_from_a_file_are_looked_up_and_an_empty_one_trains_locally(sluice, heavy_spec,
                                                                           tmp_path):
    pool = tmp_path / "pool.workers"
    pool.write_text("# none yet\n")
    with unittest.TestCase().assertLogs("sluice", level="INFO") as logs:
        loader = sluice.Loader(heavy_spec, workers=[f"file:{pool}"], epochs=1, measure_s=0.1,
                               metric_store=False)
        assert sum(1 for _ in loader) == 6
        loader.close()
    assert any("no worker is listed yet" in line for line in logs.output), logs.output
    # A line in the file is a worker: this one does not answer, and the warning names it.
    address = f"127.0.0.1:{free_port()}"
    pool.write_text(f"{address}  # rack 1\n")
    with unittest.TestCase().assertLogs("sluice", level="INFO") as logs:
        loader = sluice.Loader(heavy_spec, workers=[f"file:{pool}"], epochs=-1, measure_s=0.1,
                               connect_timeout_s=0.3, metric_store=False)
        for n, _ in enumerate(loader):
            if loader.report()["decisions"]:
                break
            assert n < MAX_BATCHES
        loader.close()
    assert any(f"file:{pool}: 1 worker" in line for line in logs.output), logs.output
    assert any(f"worker {address} did not answer the probe" in line for line in logs.output)


def test_fixed_spill_workers_is_applied(sluice, small_spec, worker):
    kwargs = dict(workers=[worker.address], split_size=4)
    loader = sluice.Loader(small_spec, policy="fixed:cut=2,ratio=0.5,spill=workers", **kwargs)
    assert sum(b["image"].shape[0] for b in loader) == 48
    report = loader.report()
    assert report["offloaded"] is True
    assert report["spill"] == "workers" and report["plan"]["spill"] == "workers"
    assert report["policy"].endswith(",spill=workers")
    default = sluice.Loader(small_spec, policy="fixed:cut=2,ratio=0.5", **kwargs)
    list(default)
    assert default.report()["spill"] == "all"


def test_a_session_weight_is_checked_and_the_worker_tells_the_share(sluice, small_spec, worker):
    for bad in (0, -1, 1001, float("nan")):
        with pytest.raises(ValueError, match="session_weight"):
            sluice.Loader(small_spec, workers=[worker.address], session_weight=bad)
    loader = sluice.Loader(small_spec, workers=[worker.address], split_size=4, session_weight=2,
                           policy="fixed:cut=2,ratio=1.0,spill=workers", epochs=-1)
    # The worker's in-band metrics (every second) say what this loader's session is entitled
    # to: with no other trainer on it, the whole worker (its --threads, at most).
    deadline = time.monotonic() + 60
    share = 0
    for _ in loader:
        (w,) = loader.report()["workers"]
        share = w["cpu_share"]
        if share > 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    loader.close()
    assert 0 < share <= 2.0 + 1e-9


@pytest.mark.parametrize("policy, problem", [
    ("automatic", "unknown policy"),
    ("fixed:cut=2", "ratio"),
    ("fixed:cut=2,ratio=0.5,spill=some", "spill"),
])
def test_bad_policy_raises_value_error_naming_the_problem(sluice, small_spec, policy, problem):
    with pytest.raises(ValueError, match=problem):
        sluice.Loader(small_spec, policy=policy)


def test_resume_across_a_replan(sluice, heavy_spec, worker):
    kwargs = auto_kwargs(worker)
    seen = {}
    loader = sluice.Loader(heavy_spec, **kwargs)
    for n, batch in enumerate(loader):
        time.sleep(STEP_S)
        add(seen, batch)
        if offloading(loader.report()):
            break
        assert n < MAX_BATCHES
    # A few batches from the offloading loader, then the checkpoint.
    it = iter(loader)
    for _ in range(3):
        add(seen, next(it))
    assert loader.report()["profile"]["loaders_created"] >= 2
    state = loader.state_dict()
    loader.close()
    upto = max(e for e, _ in seen) + 2
    resumed = sluice.Loader(heavy_spec, **kwargs)
    resumed.load_state_dict(state)
    for n, batch in enumerate(resumed):
        add(seen, batch)
        if all(sum(1 for k in seen if k[0] == e) == 48 for e in range(upto)):
            break
        assert n < MAX_BATCHES
    resumed.close()
    check_complete(sluice, heavy_spec, seen, upto)


def test_the_next_pass_goes_on_with_the_plan_without_measuring_again(sluice, heavy_spec,
                                                                     worker):
    """A pass per epoch (a loader iterated again): the plan made in one pass goes on in the
    next, with one first plan in the whole run, and every epoch arrives exactly once."""
    seen = {}
    with unittest.TestCase().assertLogs("sluice", level="INFO") as logs:
        loader = sluice.Loader(heavy_spec, workers=[worker.address], epochs=1, sample_ids=True,
                               measure_s=0.3, metric_store=False)
        planned_in = None
        for p in range(200):  # 6 batches a pass; the window spans passes
            for batch in loader:
                time.sleep(STEP_S)
                add(seen, batch)
            if loader.report()["decisions"]:
                planned_in = p
                break
        assert planned_in is not None, "no plan in 200 passes"
        planned = loader.report()
        for _ in range(3):
            for batch in loader:
                time.sleep(STEP_S)
                add(seen, batch)
        after = loader.report()
        loader.close()
    kinds = [d["kind"] for d in after["decisions"]]
    assert kinds.count("initial") == 1, kinds
    assert after["time_to_plan_s"] == planned["time_to_plan_s"]
    assert after["profile"]["loaders_created"] >= planned["profile"]["loaders_created"] + 3
    initial_lines = [l for l in logs.output if l.startswith("INFO:sluice:initial plan")]
    assert len(initial_lines) == 1, logs.output
    assert after["pass"] == planned_in + 4
    check_complete(sluice, heavy_spec, seen, planned_in + 4)
