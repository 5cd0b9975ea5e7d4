"""state_dict() / load_state_dict(): a resumed loader yields exactly the samples not yet
received, with the same content, locally and with a worker; a worker killed under a Python
loop keeps the epoch exact; shards from a web server resume mid-shard."""
import pathlib
import pickle
import re
import subprocess

import numpy as np
import pytest


def by_id(batches):
    """{(epoch, index): image bytes}, failing on a sample seen twice."""
    out = {}
    for b in batches:
        for row, (epoch, index) in enumerate(b["sample_id"].tolist()):
            assert (epoch, index) not in out, f"sample {(epoch, index)} delivered twice"
            out[(epoch, index)] = b["image"][row].tobytes()
    return out


def take(loader, n):
    it = iter(loader)
    return [next(it) for _ in range(n)]


@pytest.fixture()
def reference(sluice, small_spec):
    return by_id(sluice.Loader(small_spec, sample_ids=True, epochs=2))


@pytest.mark.parametrize("batches", [5, 15])
def test_local_round_trip_mid_epoch(sluice, small_spec, reference, batches):
    spec = small_spec.shuffle(6)  # a shuffle buffer mixes the epochs' samples
    reference = by_id(sluice.Loader(spec, sample_ids=True, epochs=2))
    loader = sluice.Loader(spec, sample_ids=True, epochs=2)
    head = take(loader, batches)
    state = pickle.loads(pickle.dumps(loader.state_dict()))
    loader.close()
    assert state["fingerprint"] == spec.fingerprint()
    resumed = sluice.Loader(spec, sample_ids=True, epochs=2)
    resumed.load_state_dict(state)
    tail = list(resumed)
    got = by_id(head + tail)
    assert got == reference
    assert len(tail) * 4 <= 96 - batches * 4 + 4


@pytest.mark.parametrize("batches", [3, 11])
def test_a_batch_fetched_for_an_interrupted_next_is_not_counted(sluice, small_spec, reference,
                                                                batches):
    """Ctrl-C inside next() leaves the batch being fetched with the loader, for the next call
    to return. A state_dict() taken then (the usual `except KeyboardInterrupt: save`) must not
    count it: the resumed loader delivers it. After 11 batches of 4 the held one completes
    epoch 0 (48 samples), so its epoch must open again; after 3 it is mid-epoch."""
    loader = sluice.Loader(small_spec, sample_ids=True, epochs=2)
    head = take(loader, batches)
    loader._core._fetch_ahead()  # what the interrupted next() leaves behind
    state = loader.state_dict()
    loader.close()
    resumed = sluice.Loader(small_spec, sample_ids=True, epochs=2)
    resumed.load_state_dict(state)
    assert by_id(head + list(resumed)) == reference


def test_round_trip_with_a_worker(sluice, small_spec, reference, worker):
    kwargs = dict(sample_ids=True, epochs=2, workers=[worker.address],
                  policy="fixed:cut=2,ratio=0.6", split_size=4)
    loader = sluice.Loader(small_spec, **kwargs)
    head = take(loader, 7)
    assert loader.report()["offloaded"] is True
    state = loader.state_dict()
    loader.close()
    resumed = sluice.Loader(small_spec, **kwargs)
    resumed.load_state_dict(state)
    tail = list(resumed)
    report = resumed.report()
    assert report["workers"][0]["samples"] > 0
    assert by_id(head + tail) == reference


def test_state_of_another_pipeline_is_refused(sluice, small_spec):
    state = sluice.Loader(small_spec).state_dict()
    other = sluice.Loader(small_spec.prefetch(3))
    with pytest.raises(ValueError, match="another pipeline"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="epochs=1"):
        sluice.Loader(small_spec, epochs=3).load_state_dict(state)


def test_state_after_a_pass_resumes_at_the_next_pass(sluice, small_spec):
    loader = sluice.Loader(small_spec, sample_ids=True)
    list(loader)
    state = loader.state_dict()
    assert state["first_epoch"] == 1 and state["consumed"] == {}
    resumed = sluice.Loader(small_spec, sample_ids=True)
    resumed.load_state_dict(state)
    epochs = {e for b in resumed for e in b["sample_id"][:, 0].tolist()}
    assert epochs == {1}


def test_worker_killed_mid_loop_keeps_the_epoch_exact(sluice, small_spec, start_worker):
    # The worker reads 100 bytes a second (its first file, ~2 KB, takes it 20 s), so
    # whatever it was given is still in its hands when it is killed, however fast the
    # trainer's side ran meanwhile: the kill always takes samples the loader must requeue.
    # Unthrottled, a loaded machine had let it finish its splits before the kill, and nothing
    # was left to notice.
    w = start_worker(extra=("--read-limit", "100"))
    loader = sluice.Loader(small_spec, sample_ids=True, epochs=2, workers=[w.address],
                           policy="fixed:cut=3,ratio=0.8", split_size=4)
    seen = []
    with pytest.warns(sluice.SluiceWarning, match=r"failed \(\d+ samples re-queued"):
        for i, batch in enumerate(loader):
            seen.append(batch)
            if i == 1:
                w.kill()
    ids = sorted(by_id(seen))
    assert ids == [(e, i) for e in (0, 1) for i in range(48)]


def test_resume_mid_shard_from_a_web_server(sluice, binary, tmp_path):
    """Shards read over HTTP, with a tenth of the requests failing: a loader stopped in the
    middle of a shard resumes from state_dict() with exactly the samples it had not given,
    with the bytes of an uninterrupted pass."""
    from conftest import gen_images
    gen_images(binary, tmp_path, 40, 32, 24, 3, "--format", "tar", "--shard-size", "16")
    server_py = pathlib.Path(__file__).resolve().parents[1] / "http_shard_server.py"
    server = subprocess.Popen(["/usr/bin/python3", str(server_py), "--root",
                               str(tmp_path / "data"), "--fail-rate", "0.1"],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(re.search(r":(\d+)$", server.stdout.readline().strip()).group(1))
        url = f"http://127.0.0.1:{port}/shards/shard-{{000000..000002}}.tar"
        spec = (sluice.shards(url, data="jpg", label="cls", shuffle="shards", seed=5)
                .map("read_file").map("decode_jpeg").batch(4).options(deterministic=True))
        reference = by_id(sluice.Loader(spec, sample_ids=True))
        assert len(reference) == 40
        loader = sluice.Loader(spec, sample_ids=True)
        head = take(loader, 5)  # 20 samples: shard order puts the cut inside a shard of 16
        state = pickle.loads(pickle.dumps(loader.state_dict()))
        loader.close()
        resumed = sluice.Loader(spec, sample_ids=True)
        resumed.load_state_dict(state)
        tail = list(resumed)
        assert sum(len(b["sample_id"]) for b in tail) == 20
        assert by_id(head + tail) == reference
    finally:
        server.kill()
        server.wait()
