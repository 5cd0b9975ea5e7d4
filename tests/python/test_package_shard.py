"""Sharding by rank (docs/distributed.md): every rank takes a disjoint share of each epoch,
the same number of batches as every other, and the states of N ranks resume on M ranks with
every sample not yet delivered delivered exactly once (sample ids and content)."""
import pickle

import pytest

N = 47  # of the 48 images: 2, 3 and 4 ranks all leave a remainder


def make_spec(sluice, images, even):
    return (sluice.files(images, label="parent_dir", shuffle=True, seed=7, even=even)
            .map("read_file").map("decode_jpeg")
            .map("random_resized_crop", size=24).map("random_flip")
            .map("normalize", mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25])
            .batch(4).options(threads=2).take(N))


@pytest.fixture(autouse=True)
def no_torchrun_environment(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def collect(batches, reference, seen):
    """Adds each real sample's id to `seen` (failing on one seen before or whose content
    differs from the unsharded run's); returns how many padded samples the batches held."""
    padded = 0
    for b in batches:
        for row, (epoch, index) in enumerate(b["sample_id"].tolist()):
            if "padded" in b:
                assert bool(b["padded"][row]) == (index >= N)
            if index >= N:
                padded += 1
                continue
            assert (epoch, index) not in seen, f"sample {(epoch, index)} delivered twice"
            seen.add((epoch, index))
            assert b["image"][row].tobytes() == reference[(epoch, index)]
    return padded


def undelivered(seen, epoch):
    return sum((epoch, i) not in seen for i in range(N))


@pytest.fixture(params=["drop", "pad"])
def even(request):
    return request.param


@pytest.fixture()
def reference(sluice, images, even):
    out = {}
    for b in sluice.Loader(make_spec(sluice, images, even), sample_ids=True, epochs=2):
        for row, key in enumerate(map(tuple, b["sample_id"].tolist())):
            out[key] = b["image"][row].tobytes()
    assert len(out) == 2 * N
    return out


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_ranks_cover_every_epoch_once_with_equal_batch_counts(sluice, images, even, reference,
                                                              world_size):
    spec = make_spec(sluice, images, even)
    per_rank = N // world_size if even == "drop" else -(-N // world_size)
    seen, padded, counts = set(), 0, set()
    for rank in range(world_size):
        loader = sluice.Loader(spec, sample_ids=True, epochs=2, rank=rank,
                               world_size=world_size)
        batches = list(loader)
        assert len(batches) == len(loader) == -(-2 * per_rank // 4)
        counts.add(len(batches))
        padded += collect(batches, reference, seen)
        shard = loader.report()["shard"]
        assert shard["samples_per_epoch"] == per_rank
        assert shard["dropped_per_epoch"] == (N % world_size if even == "drop" else 0)
        loader.close()
    assert len(counts) == 1
    left_out = N % world_size if even == "drop" else 0
    assert undelivered(seen, 0) == undelivered(seen, 1) == left_out
    assert padded == (2 * (per_rank * world_size - N) if even == "pad" else 0)


@pytest.mark.parametrize("old,new", [(2, 3), (3, 2)])
def test_elastic_resume_delivers_the_rest_once(sluice, images, even, reference, old, new):
    spec = make_spec(sluice, images, even)
    seen, states = set(), []
    for rank in range(old):
        loader = sluice.Loader(spec, sample_ids=True, epochs=2, rank=rank, world_size=old)
        it = iter(loader)
        collect([next(it) for _ in range(3)], reference, seen)
        states.append(pickle.loads(pickle.dumps(loader.state_dict())))
        loader.close()
    assert {s["rank"] for s in states} == set(range(old))
    merged = sluice.merge_states(list(reversed(states)))
    assert merged["rank"] is None and merged["world_size"] == old
    remaining = [N - sum(bin(byte).count("1") for byte in merged["consumed"].get(e, b""))
                 for e in (0, 1)]
    assert sum(remaining) == 2 * N - 12 * old
    counts, after = set(), []
    for rank in range(new):
        loader = sluice.Loader(spec, sample_ids=True, epochs=2, rank=rank, world_size=new)
        # A DDP job hands every new rank the list gathered from the old ones; the merged
        # state is the same thing.
        loader.load_state_dict(states if rank % 2 == 0 else merged)
        batches = list(loader)
        counts.add(len(batches))
        collect(batches, reference, seen)
        after.append(loader.state_dict())
        loader.close()
    assert len(counts) == 1, f"the new ranks' batch counts differ: {counts}"
    drop = even == "drop"
    assert undelivered(seen, 0) == (remaining[0] % new if drop else 0)
    assert undelivered(seen, 1) == (remaining[1] % new if drop else 0)
    # Every new rank finished the pass; together they are at its end.
    assert sluice.merge_states(after)["first_epoch"] == 2


def test_same_world_size_resumes_each_rank_with_its_own_share(sluice, images):
    spec = make_spec(sluice, images, "pad")
    whole = [{tuple(i) for b in sluice.Loader(spec, sample_ids=True, rank=r, world_size=2)
              for i in b["sample_id"].tolist()} for r in range(2)]
    heads, states = [], []
    for rank in range(2):
        loader = sluice.Loader(spec, sample_ids=True, rank=rank, world_size=2)
        it = iter(loader)
        heads.append([next(it) for _ in range(2)])
        states.append(loader.state_dict())
        loader.close()
    for rank in range(2):
        loader = sluice.Loader(spec, sample_ids=True, rank=rank, world_size=2)
        loader.load_state_dict(states)  # the list: each rank takes its own
        got = [tuple(i) for b in heads[rank] + list(loader) for i in b["sample_id"].tolist()]
        assert len(got) == len(set(got))
        assert set(got) == whole[rank]


def test_rank_and_world_size_come_from_torchruns_environment(sluice, images, monkeypatch):
    spec = make_spec(sluice, images, "drop")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    loader = sluice.Loader(spec)
    assert (loader.rank, loader.world_size) == (1, 3)
    assert len(loader) == -(-(N // 3) // 4)
    single = sluice.Loader(spec, rank=0, world_size=1)  # the arguments win
    assert (single.rank, single.world_size) == (0, 1)
    assert sluice.Loader(spec, rank=2).rank == 2  # the world size still from the environment


@pytest.mark.parametrize("kwargs,env,message", [
    (dict(rank=2, world_size=2), {}, r"^rank: must be in \[0, 1\] for world_size 2, got 2$"),
    (dict(rank=-1, world_size=2), {}, r"^rank: must be in \[0, 1\] for world_size 2, got -1$"),
    (dict(world_size=0), {}, r"^world_size: must be at least 1, got 0$"),
    (dict(rank=1), {}, r"^rank=1 needs world_size \(or WORLD_SIZE in the environment\)$"),
    (dict(world_size=4), {}, r"^world_size=4 needs rank \(or RANK in the environment\)$"),
    ({}, {"WORLD_SIZE": "4"}, r"^WORLD_SIZE \(environment\)=4 needs rank"),
    ({}, {"RANK": "5", "WORLD_SIZE": "4"},
     r"^RANK \(environment\): must be in \[0, 3\] for world_size 4, got 5$"),
    ({}, {"RANK": "one", "WORLD_SIZE": "4"}, r"^RANK='one' in the environment is not an int$"),
    (dict(rank=True, world_size=2), {}, r"^rank: expected an int, got True$"),
])
def test_bad_rank_or_world_size_is_a_clear_error(sluice, images, monkeypatch, kwargs, env,
                                                 message):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        sluice.Loader(make_spec(sluice, images, "drop"), **kwargs)


def test_another_ranks_state_or_a_bad_list_is_refused(sluice, images):
    spec = make_spec(sluice, images, "drop")
    states = []
    for rank in range(2):
        loader = sluice.Loader(spec, rank=rank, world_size=2)
        next(iter(loader))
        states.append(loader.state_dict())
        loader.close()
    for rank, world_size in [(0, 2), (0, 3)]:
        with pytest.raises(ValueError, match=r"the state is rank 1's of 2; this loader is rank "
                                             rf"{rank} of {world_size}: resume from the states "
                                             r"of all 2 ranks"):
            sluice.Loader(spec, rank=rank, world_size=world_size).load_state_dict(states[1])
    with pytest.raises(ValueError, match=r"1 states given, from a run of world_size 2"):
        sluice.merge_states(states[:1])
    with pytest.raises(ValueError, match=r"the states are of ranks \[1, 1\]"):
        sluice.merge_states([states[1], states[1]])
    with pytest.raises(ValueError, match="merged already"):
        sluice.merge_states([sluice.merge_states(states), states[1]])
    other = dict(states[1], fingerprint="0000000000000000")
    with pytest.raises(ValueError, match="disagree on fingerprint"):
        sluice.merge_states([states[0], other])
    ahead = dict(states[1], first_epoch=2, consumed={}, finished={})
    with pytest.raises(ValueError, match="more than one epoch apart"):
        sluice.merge_states([states[0], ahead])
    with pytest.raises(TypeError, match="takes a list"):
        sluice.merge_states(states[0])


def test_torch_loader_takes_the_rank_and_marks_padded_samples(sluice, images):
    torch = pytest.importorskip("torch")
    import sluice.torch as st
    loader = st.Loader(make_spec(sluice, images, "pad"), rank=2, world_size=3, sample_ids=True)
    batches = list(loader)
    assert all(b["padded"].dtype == torch.bool for b in batches)
    padded = [i for b in batches for i, p in zip(b["sample_id"][:, 1].tolist(),
                                                 b["padded"].tolist()) if p]
    assert padded == [N]  # rank 2 of 3 gets the one padded sample of the epoch
