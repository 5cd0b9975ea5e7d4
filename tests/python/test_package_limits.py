"""Limits seen from Python: out-of-range spec values and op arguments are rejected with the
argument named (at .map() time for op arguments), and load_state_dict() refuses a state of
the wrong type or one that does not fit the spec, instead of failing somewhere deeper."""
import math

import pytest


def test_map_rejects_oversized_ints_and_non_finite_floats(sluice):
    base = sluice.files("data/**/*.jpg", label="parent_dir").map("read_file").map("decode_jpeg")
    cases = [
        (lambda: base.map("resize", size=2 ** 70),
         "ops[2].resize: size: integer out of range: 1180591620717411303424"),
        (lambda: base.map("resize", size=[224, -2 ** 64]),
         "ops[2].resize: size: integer out of range: -18446744073709551616"),
        (lambda: base.map("resize", size=100000),
         "ops[2].resize: size: every entry must be in [1, 16384], got [100000,100000]"),
        (lambda: base.map("random_flip", p=math.nan),
         "ops[2].random_flip: p: must be a finite number, got nan"),
        (lambda: base.map("color_jitter", brightness=math.inf),
         "ops[2].color_jitter: brightness: must be a finite number, got inf"),
        (lambda: base.map("normalize", mean=[0.5, -math.inf, 0.5], std=0.2),
         "ops[2].normalize: mean: every entry must be a finite number, got [0.5,-inf,0.5]"),
        (lambda: base.map("one_hot", num_classes=10 ** 12),
         "ops[2].one_hot: num_classes: must be in [1, 16777216], got 1000000000000"),
    ]
    for make, message in cases:
        with pytest.raises(ValueError) as e:
            make()
        assert str(e.value) == message, str(e.value)


def test_spec_values_over_their_range_are_errors(sluice):
    spec = sluice.files("data/*.jpg").map("read_file")
    with pytest.raises(ValueError, match=r"^batch.size: must be in \[1, 65536\], got 10000000$"):
        spec.batch(10 ** 7).validate()
    with pytest.raises(ValueError, match=r"^options.threads: must be \"auto\" or an int in "
                                         r"\[1, 1024\], got 100000$"):
        spec.options(threads=100000).validate()
    with pytest.raises(ValueError, match=r"^prefetch: must be in \[0, 1024\], got 5000$"):
        spec.prefetch(5000).validate()
    # Python writes nan as NaN in JSON, which the spec reader does not take for a number.
    with pytest.raises(ValueError, match=r"^padded_batch.padding_value: (must be a finite "
                                         r"number|expected a number)"):
        spec.padded_batch(4, padding_value=math.nan).validate()


def test_loader_threads_are_bounded(sluice, small_spec):
    with pytest.raises(ValueError, match=r"^threads: must be in \[1, 1024\] \(or None\), "
                                         r"got 1000000$"):
        sluice.Loader(small_spec, threads=10 ** 6)


def test_load_state_dict_checks_the_state(sluice, small_spec):
    loader = sluice.Loader(small_spec, epochs=1)
    with pytest.raises(TypeError, match=r"^load_state_dict\(\) takes the dict that "
                                        r"state_dict\(\) returned, got list$"):
        loader.load_state_dict([1, 2, 3])
    with pytest.raises(TypeError, match="got str"):
        loader.load_state_dict("state")
    good = loader.state_dict()
    n = loader.samples_per_epoch
    assert n == 48

    def bad(**changes):
        state = dict(good)
        state.update(changes)
        return state

    with pytest.raises(ValueError, match=r"is a bitmap of 3 bytes; this pipeline has 48 samples "
                                         r"per epoch \(6 bytes\)"):
        loader.load_state_dict(bad(consumed={0: b"\xff\xff\xff"}))
    with pytest.raises(ValueError, match=r"is a bitmap of 100 bytes"):
        loader.load_state_dict(bad(consumed={0: bytes(100)}))
    with pytest.raises(ValueError, match=r"outside \[first_epoch=0, 2\^32\)"):
        loader.load_state_dict(bad(consumed={2 ** 40: bytes(6)}))
    with pytest.raises(ValueError, match=r"first_epoch'\] must be in \[0, 2\^32\)"):
        loader.load_state_dict(bad(first_epoch=-1))
    with pytest.raises(TypeError, match=r"first_epoch'\] must be an int, got str"):
        loader.load_state_dict(bad(first_epoch="0"))
    with pytest.raises(TypeError, match=r"consumed'\]\[0\] must be bytes, got int"):
        loader.load_state_dict(bad(consumed={0: 5}))
    # A state that fits resumes: half of the epoch marked consumed leaves the other half.
    loader.load_state_dict(bad(consumed={0: b"\xff\xff\xff\x00\x00\x00"}))
    assert sum(len(b["image"]) for b in loader) == 24
    loader.close()


def test_load_state_dict_refuses_bits_past_the_last_sample(sluice, small_spec):
    spec = small_spec.take(45)  # 45 samples: 6 bytes, the last 3 bits unused
    loader = sluice.Loader(spec, epochs=1)
    state = loader.state_dict()
    state["consumed"] = {0: b"\x00\x00\x00\x00\x00\xe0"}
    with pytest.raises(ValueError, match=r"marks samples past the last of the 45 samples"):
        loader.load_state_dict(state)
    loader.close()
