"""sluice.Loader and sluice.torch.Loader: same data as `sluice run`, zero-copy arrays, passes,
reports, errors."""
import re
import subprocess

import numpy as np
import pytest

DIGEST = re.compile(r"^(\d+) (\d+) ([0-9a-f]{16})$")


def digests_of(text):
    return sorted(m.groups() for m in map(DIGEST.match, text.splitlines()) if m)


def test_batches_equal_the_cli_run_for_the_same_seed(sluice, binary, small_spec, tmp_path):
    spec = small_spec.repeat(2)
    path = tmp_path / "pipe.yaml"
    spec.save(path)
    run = subprocess.run([str(binary), "run", str(path), "--threads", "2", "--dump-checksum"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    expected = digests_of(run.stdout)
    assert len(expected) == 96
    loader = sluice.Loader(spec)
    loader._keep_last_batch = True
    got = []
    for batch in loader:
        got += digests_of(loader._debug_last_batch().digests())
        assert batch["image"].shape[1:] == (3, 24, 24) and batch["image"].dtype == np.float32
        assert batch["label"].dtype == np.int64
    assert sorted(got) == expected


def test_a_worker_on_this_machine_writes_into_the_batches(sluice, small_spec, worker):
    """At the pipeline's end a worker on this machine writes the images straight into the
    loader's batches (shared slots, docs/offload.md): the samples are all-local's, bit for bit,
    and the arrays stay readable after the loader closed and the worker is gone."""
    def digests(loader):
        loader._keep_last_batch = True
        got, kept = [], []
        for batch in loader:
            got += digests_of(loader._debug_last_batch().digests())
            kept.append(batch["image"])
        return sorted(got), kept

    expected, _ = digests(sluice.Loader(small_spec))
    loader = sluice.Loader(small_spec, workers=[worker.address], policy="fixed:cut=5,ratio=1.0",
                           split_size=4)
    got, kept = digests(loader)
    assert got == expected
    (w,) = loader.report()["workers"]
    assert w["shared_memory"] and w["shared_slots"] > 0, w
    copy = [k.copy() for k in kept]
    loader.close()
    worker.stop()
    assert all(np.array_equal(k, c) for k, c in zip(kept, copy))


def test_numpy_arrays_share_the_cpp_buffers(sluice, small_spec):
    loader = sluice.Loader(small_spec, sample_ids=True)
    loader._keep_last_batch = True
    batch = next(iter(loader))
    pointers = loader._debug_last_batch().data_pointers()
    for field in ("image", "label", "path"):
        assert batch[field].__array_interface__["data"][0] == pointers[field], field
        assert not batch[field].flags.owndata
    assert batch["sample_id"].shape == (4, 2)
    # The array keeps its buffer alive after the loader and the batch object are gone.
    image = batch["image"]
    copy = image.copy()
    loader.close()
    del batch
    loader._last_batch = None
    assert np.array_equal(image, copy)


def test_torch_tensors_share_the_cpp_buffers(sluice, small_spec):
    import torch
    import sluice.torch as st
    loader = st.Loader(small_spec)
    loader._keep_last_batch = True
    batch = next(iter(loader))
    assert isinstance(batch["image"], torch.Tensor) and batch["image"].dtype == torch.float32
    pointers = loader._debug_last_batch().data_pointers()
    assert batch["image"].data_ptr() == pointers["image"]
    assert batch["label"].data_ptr() == pointers["label"]
    loader.close()


def test_torch_dataloader_adapter_yields_every_sample(sluice, small_spec):
    import torch.utils.data
    import sluice.torch as st
    dataset = st.IterableDataset(small_spec, sample_ids=True)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=0)
    assert len(loader) == 12
    ids = [tuple(x) for b in loader for x in b["sample_id"].tolist()]
    assert sorted(ids) == [(0, i) for i in range(48)]


def test_passes_continue_the_epoch_numbering_and_len(sluice, small_spec):
    loader = sluice.Loader(small_spec, sample_ids=True, epochs=2)
    assert len(loader) == 24
    first = [tuple(x) for b in loader for x in b["sample_id"].tolist()]
    second = [tuple(x) for b in loader for x in b["sample_id"].tolist()]
    assert sorted(first) == [(e, i) for e in (0, 1) for i in range(48)]
    assert sorted(second) == [(e, i) for e in (2, 3) for i in range(48)]
    assert len(sluice.Loader(small_spec.batch(5, drop_remainder=True))) == 9
    with pytest.raises(TypeError):
        len(sluice.Loader(small_spec, epochs=-1))


def test_report_has_plan_profile_and_consumer_view(sluice, small_spec):
    with sluice.Loader(small_spec) as loader:
        n = sum(1 for _ in loader)
        report = loader.report()
    assert n == 12
    assert report["policy"] == "auto" and report["offloaded"] is False
    assert report["plan"]["cut"] is None and report["plan"]["ratio"] == 0
    assert "no workers given" in report["local_reason"]
    assert [o["name"] for o in report["ops"]] == [
        "read_file", "decode_jpeg", "random_resized_crop", "random_flip", "normalize"]
    assert all(o["samples"] == 48 for o in report["ops"])
    consumer = report["consumer"]
    assert consumer["batches"] == 12 and consumer["samples"] == 48
    assert consumer["wait_s"] >= 0 and 0 <= report["stall_fraction"] <= 1
    assert sum(b["batches"] for b in report["timeline"]) == 12
    with pytest.raises(RuntimeError, match="closed"):
        next(iter(loader))


def test_pipeline_failure_raises_runtime_error_with_the_file(sluice, images, tmp_path):
    bad = tmp_path / "bad" / "x"
    bad.mkdir(parents=True)
    (bad / "broken.jpg").write_bytes(b"not a jpeg at all")
    spec = sluice.files(str(bad / "*.jpg")).map("read_file").map("decode_jpeg")
    with pytest.raises(RuntimeError, match=r"ops\[1\].decode_jpeg: .*broken.jpg"):
        for _ in sluice.Loader(spec):
            pass
    skipping = spec.options(on_error="skip")
    loader = sluice.Loader(skipping)
    assert list(loader) == []
    assert loader.report()["skipped"] == 1
    assert loader.state_dict()["first_epoch"] == 1
