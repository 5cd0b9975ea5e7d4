"""sluice's builder, spec files and op docs: validation errors carry the C++ messages."""
import pytest


def test_map_validates_against_the_op_schemas_with_the_cpp_messages(sluice):
    base = sluice.files("data/**/*.jpg", label="parent_dir").map("read_file").map("decode_jpeg")
    cases = [
        (lambda: base.map("decode_jepg"),
         "ops[2].decode_jepg: unknown op 'decode_jepg' (did you mean 'decode_jpeg' or "
         "'decode_png'?); `sluice ops` lists the available ops"),
        (lambda: base.map("random_resized_crop", size=[224, 224, 3]),
         "ops[2].random_resized_crop: size: expected 2 ints, got 3 ([224,224,3])"),
        (lambda: base.map("random_flip", q=0.5),
         "ops[2].random_flip: q: unknown argument"),
        (lambda: base.map("random_flip", p=[1, 2]),
         "ops[2].random_flip: p: expected a float"),
        (lambda: base.map("random_flip", p={"a": 1}),
         "ops[2].random_flip: p: expected a number, a bool, a string or a list of numbers"),
        (lambda: sluice.files("x").map("normalize", mean=[0.5], std=[0.2]),
         "ops[0].normalize: needs field"),
    ]
    for make, message in cases:
        with pytest.raises(ValueError) as e:
            make()
        assert str(e.value).startswith(message), str(e.value)


def test_spec_level_errors_name_the_key(sluice):
    spec = sluice.files("data/*.jpg").map("read_file")
    with pytest.raises(ValueError, match=r"^batch.size: must be in \[1, 65536\], got 0$"):
        spec.batch(0).to_json()
    with pytest.raises(ValueError, match=r"^options.on_error: must be one of fail, skip"):
        spec.options(on_error="ignore").validate()
    with pytest.raises(ValueError, match=r"^epochs: "):
        spec.repeat(0).validate()


def test_yaml_round_trip_and_fingerprint(sluice, tmp_path):
    spec = (sluice.files("data/**/*.jpg", label="parent_dir", shuffle=True, seed=42)
            .map("read_file").map("decode_jpeg")
            .map("random_resized_crop", size=224).map(sluice.ops.random_flip, p=0.5)
            .batch(64, drop_remainder=True).prefetch(3))
    path = tmp_path / "pipe.yaml"
    spec.save(path)
    loaded = sluice.load(path)
    assert loaded == spec
    assert loaded.fingerprint() == spec.fingerprint()
    assert len(spec.fingerprint()) == 16
    # Defaults written out or not, the canonical form is the same.
    decoded = sluice.files("data/**/*.jpg").map("read_file").map("decode_jpeg")
    assert decoded.map("random_flip") == decoded.map("random_flip", p=0.5)
    assert spec.map("random_flip").fingerprint() != spec.fingerprint()
    assert "random_resized_crop: {" in spec.to_yaml()
    assert sluice.parse(spec.to_json()) == spec


def test_spec_files_report_their_position(sluice, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("source: {files: a.jpg}\nops:\n  - random_resized_crop: {size: [1, 2, 3]}\n")
    with pytest.raises(ValueError, match=r"bad.yaml:3:\d+: ops\[0\].random_resized_crop.size: "
                                         r"expected 2 ints, got 3"):
        sluice.load(path)
    with pytest.raises(FileNotFoundError):
        sluice.load(tmp_path / "missing.yaml")


def test_op_docstrings_come_from_the_schemas(sluice):
    doc = sluice.ops.random_resized_crop.__doc__
    assert "size (list[int] of length 2" in doc and "required" in doc
    assert "scale" in doc and "default [0.08, 1.0]" in doc
    assert "Random:" in doc
    assert "decode_jpeg" in sluice.ops.__doc__
    assert set(sluice.ops.names()) >= {"read_file", "decode_jpeg", "normalize", "rand_augment"}
    import inspect
    sig = inspect.signature(sluice.ops.random_flip)
    assert sig.parameters["p"].default == 0.5
    assert sluice.ops.random_flip(p=0.2) == ("random_flip", {"p": 0.2})
    with pytest.raises(ValueError, match="unknown argument 'q'"):
        sluice.ops.random_flip(q=1)


def test_loader_argument_errors(sluice, images):
    spec = sluice.files(images).map("read_file").batch(2)
    with pytest.raises(ValueError, match="bad policy 'fixed:cut=9,ratio=0.5'"):
        sluice.Loader(spec, policy="fixed:cut=9,ratio=0.5")
    with pytest.raises(ValueError, match="bad policy 'sometimes'"):
        sluice.Loader(spec, policy="sometimes")
    with pytest.raises(ValueError, match="epochs"):
        sluice.Loader(spec, epochs=0)
    with pytest.raises(FileNotFoundError, match="nothing"):
        next(iter(sluice.Loader(sluice.files("/nonexistent-dir/nothing/*.jpg"))))
    with pytest.raises(TypeError):
        sluice.Loader(42)


def test_policies_that_need_workers_say_so(sluice, tmp_path):
    (tmp_path / "a.bin").write_bytes(b"x")
    spec = sluice.files(str(tmp_path / "*.bin")).map("read_file")
    for policy in ("fastflow", "fixed:cut=1,ratio=0.5"):
        with pytest.raises(ValueError, match="needs workers"):
            next(iter(sluice.Loader(spec, policy=policy)))
    # The planner without workers plans, and its plan is all local.
    loader = sluice.Loader(spec, policy="sluice", metric_store=False, measure_s=0.05)
    assert len(list(loader)) == 1


def test_shards_in_shard_order_with_a_shuffle_buffer_reporting_its_memory(sluice, binary,
                                                                          tmp_path):
    import numpy as np
    from conftest import gen_images
    gen_images(binary, tmp_path, 48, 32, 24, 3, "--format", "tar", "--shard-size", "16")
    pattern = str(tmp_path / "data" / "shards" / "shard-{000000..000002}.tar")
    spec = (sluice.shards(pattern, data="jpg", label="cls", shuffle="shards", seed=3)
            .map("read_file").map("decode_jpeg").batch(4).options(deterministic=True))
    assert "shuffle: shards" in spec.to_yaml()
    assert sluice.parse(spec.to_json()) == spec
    loader = sluice.Loader(spec, sample_ids=True)
    for epoch in range(2):  # each pass over the loader is the next epoch
        ids = np.concatenate([b["sample_id"] for b in loader])
        assert set(int(e) for e in ids[:, 0]) == {epoch}
        indices = [int(i) for i in ids[:, 1]]
        assert sorted(indices) == list(range(48))
        # Three shards of 16, each visited whole and in order.
        runs = [indices[k:k + 16] for k in range(0, 48, 16)]
        for run in runs:
            assert run == list(range(run[0], run[0] + 16)) and run[0] % 16 == 0, indices
        assert loader.report()["shuffle_buffer_peak_samples"] == 0
    buffered = sluice.Loader(spec.shuffle(8), sample_ids=True)
    assert sum(len(b["sample_id"]) for b in buffered) == 48
    report = buffered.report()
    assert report["shuffle_buffer_peak_samples"] == 8
    assert report["shuffle_buffer_peak_bytes"] >= 8 * 32 * 24 * 3  # decoded images
    with pytest.raises(ValueError, match="expected true, false or shards"):
        sluice.shards(pattern, data="jpg", shuffle="sometimes").validate()
    with pytest.raises(ValueError, match="is for a 'shards' source"):
        sluice.files("data/*.jpg", shuffle="shards").validate()
