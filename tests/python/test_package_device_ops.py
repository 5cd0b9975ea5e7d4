"""sluice.torch.Loader(device=..., device_ops=K): the last K ops run on the device with torch,
with the engine's results (within float rounding), sample by sample; what the engine makes is
the tensor before them."""
import pytest


def by_id(batches, field):
    out = {}
    for b in batches:
        for i, (epoch, index) in enumerate(b["sample_id"].tolist()):
            out[(epoch, index)] = b[field][i]
    return out


def test_normalize_on_the_device_equals_the_engines(sluice, small_spec):
    import torch
    import sluice.torch as st
    engine = by_id(st.Loader(small_spec, sample_ids=True), "image")
    loader = st.Loader(small_spec, sample_ids=True, device="cpu", device_ops=1)
    assert loader.device_ops == ["normalize"]
    batches = list(loader)
    moved = by_id(batches, "image")
    assert moved.keys() == engine.keys() and len(moved) == 48
    for key, image in moved.items():
        assert image.dtype == torch.float32 and image.shape == (3, 24, 24)
        assert torch.allclose(image, engine[key], atol=1e-5), key
    # The engine stopped before normalize: it ran the pipeline without it.
    assert [name for name, _ in loader.spec.ops][-1] == "random_flip"


def test_half_output_and_cast_on_the_device(sluice, images):
    import torch
    import sluice.torch as st
    spec = (sluice.files(images, label="parent_dir", shuffle=True, seed=3)
            .map("read_file").map("decode_jpeg").map("center_crop", size=16)
            .map("normalize", mean=[0.5], std=[0.2], layout="HWC", dtype="f16")
            .map("cast", dtype="i16")
            .batch(8).options(threads=2))
    engine = by_id(st.Loader(spec, sample_ids=True), "image")
    loader = st.Loader(spec, sample_ids=True, device="cpu", device_ops=2)
    assert loader.device_ops == ["normalize", "cast"]
    moved = by_id(list(loader), "image")
    assert moved.keys() == engine.keys()
    for key, image in moved.items():
        assert image.dtype == torch.int16 and image.shape == (16, 16, 3)
        # Truncation of values within a rounding of an integer may differ by one.
        assert (image.to(torch.int32) - engine[key].to(torch.int32)).abs().max() <= 1, key


def test_device_ops_that_cannot_move_are_refused_by_name(sluice, small_spec):
    import sluice.torch as st
    with pytest.raises(ValueError, match=r"ops\[3\]\.random_flip cannot run on the device"):
        st.Loader(small_spec, device="cpu", device_ops=2)
    with pytest.raises(ValueError, match="5 ops asked for|6 ops asked for"):
        st.Loader(small_spec, device="cpu", device_ops=6)
    with pytest.raises(ValueError, match="give the device"):
        st.Loader(small_spec, device_ops=1)
