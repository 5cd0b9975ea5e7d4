"""sluice.Loader: iterate a pipeline's batches as dicts of NumPy arrays.

The arrays share the C++ buffers (no copy): each keeps its buffer alive for as long as it
lives. The C++ engine runs on its own threads; the GIL is released while Python waits for
a batch.

Passes. Iterating a Loader runs one *pass* of `epochs` epochs (default: the spec's
`epochs`, 1 unless it says otherwise). Iterating it again runs the next pass, whose epochs
continue the numbering (so every epoch has its own shuffle and its own augmentations),
like a PyTorch DataLoader used in `for epoch in range(n): for batch in loader:`. The next
pass goes on with the plan in force and everything the planner measured: it is not measured
or planned again, and the pause between passes (validation, say) is not read as a step.

Checkpoints. `state_dict()` records which samples the training loop has received so far
(by epoch, as a bitmap of source indices, plus the spec's fingerprint); a Loader given that
state with `load_state_dict()` before iterating yields exactly the samples not yet received
in that pass, with the same augmentations, locally or with workers (docs/python.md).

Ranks. `rank` and `world_size` (default: torchrun's RANK and WORLD_SIZE) make the loader
one of `world_size` data-parallel trainers: it yields only its share of every epoch, the
same number of batches as every other rank. The states of all ranks, as a list or merged
with `merge_states()`, resume on any number of ranks (docs/distributed.md).

Policies. With `workers=[...]`, `policy="auto"` (the default) measures the training loop
(the time Python spends between batches is the accelerator's step, the time it blocks in
next() the stall), plans where each op runs and how much goes to each worker, switches to
the plan and keeps adapting; `"fastflow"` runs the FastFlow baseline. Decisions are logged
on the `sluice` logger and kept in `report()["decisions"]` (docs/policy.md).
"""
import collections
import logging
import math
import os
import threading
import time
import warnings
from collections.abc import Mapping

from . import _core
from ._spec import as_spec

STATE_VERSION = 2
_STATE_VERSIONS = (1, 2)  # 1: a single trainer's, from before sharding by rank
_EPOCH_END = 1 << 32  # epochs are 32-bit (a SampleId's epoch)
_MAX_THREADS = 1024  # pipeline::SpecLimits::kMaxThreads


class SluiceWarning(RuntimeWarning):
    """Warnings from the engine: unreachable workers, failures, reconnects."""


log = logging.getLogger("sluice")


def _policy_text(policy):
    if policy is None:
        return "auto"
    if not isinstance(policy, str):
        raise ValueError(f"policy: expected a string such as 'auto', 'none' or "
                         f"'fixed:cut=3,ratio=0.5', got {type(policy).__name__}")
    return policy


def _env_int(name):
    text = os.environ.get(name, "")
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} in the environment is not an int") from None


def _shard_args(rank, world_size):
    """(rank, world_size) from the arguments, else from torchrun's RANK and WORLD_SIZE, else
    (0, 1). ValueError for a world size below 1, a rank out of range, or one without the
    other (a world size of 1 needs no rank)."""
    for name, value in (("rank", rank), ("world_size", world_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{name}: expected an int, got {value!r}")
    rank_name = "rank" if rank is not None else "RANK (environment)"
    size_name = "world_size" if world_size is not None else "WORLD_SIZE (environment)"
    rank = rank if rank is not None else _env_int("RANK")
    world_size = world_size if world_size is not None else _env_int("WORLD_SIZE")
    if world_size is None:
        if rank is not None:
            raise ValueError(f"{rank_name}={rank} needs world_size (or WORLD_SIZE in the "
                             "environment)")
        return 0, 1
    if world_size < 1:
        raise ValueError(f"{size_name}: must be at least 1, got {world_size}")
    if rank is None:
        if world_size == 1:
            return 0, 1
        raise ValueError(f"{size_name}={world_size} needs rank (or RANK in the environment)")
    if not 0 <= rank < world_size:
        raise ValueError(f"{rank_name}: must be in [0, {world_size - 1}] for world_size "
                         f"{world_size}, got {rank}")
    return rank, world_size


def _per_rank(n, world_size, even):
    """A rank's samples when `n` are divided among `world_size` ranks (pipeline/shard.h)."""
    return n // world_size if even == "drop" else -(-n // world_size)


def _check_bitmaps(state, key, first_epoch, n, only=None):
    """state[key] ({epoch: bitmap}) after checking it: epochs in [first_epoch, 2^32) (or
    only the epoch `only`), and, when `n` is known, one bit per sample and none past the
    last."""
    raw = state.get(key, {})
    if not isinstance(raw, Mapping):
        raise TypeError(f"state['{key}'] must be a dict of epoch to bytes, got "
                        f"{type(raw).__name__}")
    out = {}
    for epoch, bits in raw.items():
        if isinstance(epoch, bool) or not isinstance(epoch, int):
            raise TypeError(f"state['{key}'] keys must be epoch ints, got {epoch!r}")
        if only is not None and epoch != only:
            raise ValueError(f"state['{key}'] has epoch {epoch}; only first_epoch - 1 = "
                             f"{only} may be there")
        if not first_epoch <= epoch < _EPOCH_END and only is None:
            raise ValueError(f"state['{key}'] has epoch {epoch}, outside "
                             f"[first_epoch={first_epoch}, 2^32)")
        if not isinstance(bits, (bytes, bytearray, memoryview)):
            raise TypeError(f"state['{key}'][{epoch}] must be bytes, got {type(bits).__name__}")
        bits = bytes(bits)
        if n is not None:
            want = (n + 7) // 8
            if len(bits) != want:
                raise ValueError(
                    f"state['{key}'][{epoch}] is a bitmap of {len(bits)} bytes; this "
                    f"pipeline has {n} samples per epoch ({want} bytes): the state does not "
                    "fit this spec's files")
            if n % 8 and bits and bits[-1] >> (n % 8):
                raise ValueError(
                    f"state['{key}'][{epoch}] marks samples past the last of the {n} "
                    "samples per epoch: the state does not fit this spec's files")
        out[epoch] = bits
    return out


def _check_progress(state, n=None):
    """The progress in `state` ({first_epoch, consumed, divided, padded, finished}) after
    checking that it is well formed and, when `n` (samples per epoch) is known, that it fits
    a pipeline of `n` samples per epoch."""
    first_epoch = state.get("first_epoch")
    if isinstance(first_epoch, bool) or not isinstance(first_epoch, int):
        raise TypeError(f"state['first_epoch'] must be an int, got "
                        f"{type(first_epoch).__name__}")
    if not 0 <= first_epoch < _EPOCH_END:
        raise ValueError(f"state['first_epoch'] must be in [0, 2^32), got {first_epoch}")
    progress = {"first_epoch": first_epoch,
                "consumed": _check_bitmaps(state, "consumed", first_epoch, n),
                "divided": _check_bitmaps(state, "divided", first_epoch, n),
                "finished": _check_bitmaps(state, "finished", first_epoch, n,
                                           only=first_epoch - 1)}
    world_size = state.get("world_size", 1)
    padded = []
    for item in state.get("padded", []):
        if (not isinstance(item, (tuple, list)) or len(item) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in item)):
            raise TypeError(f"state['padded'] must list (epoch, index) pairs, got {item!r}")
        epoch, index = item
        if not first_epoch <= epoch < _EPOCH_END or (
                n is not None and not n <= index < n + world_size):
            raise ValueError(f"state['padded'] has {tuple(item)}, not a padded sample of an "
                             "epoch in progress")
        padded.append((epoch, index))
    progress["padded"] = padded
    return progress


def _check_state_header(state):
    if not isinstance(state, Mapping):
        raise TypeError("load_state_dict() takes the dict that state_dict() returned, "
                        f"got {type(state).__name__}")
    if state.get("version") not in _STATE_VERSIONS:
        raise ValueError(f"unsupported loader state version {state.get('version')!r}")
    rank, world_size = state.get("rank", 0), state.get("world_size", 1)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"state['world_size'] must be an int >= 1, got {world_size!r}")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int)
                             or not 0 <= rank < world_size):
        raise ValueError(f"state['rank'] must be None (merged) or in [0, {world_size - 1}], "
                         f"got {rank!r}")
    return rank, world_size


def merge_states(states):
    """One state from the `state_dict()` of every rank of a sharded run (a list, in any
    order): every sample any rank received. Any number of ranks can load it: the samples of
    the epoch not received anywhere are divided afresh among them, each delivered once.
    ValueError for states of different pipelines or runs, not exactly one per rank, or of
    ranks more than one epoch apart (take every rank's state at the same step)."""
    if isinstance(states, Mapping) or not isinstance(states, (list, tuple)) or not states:
        raise TypeError("merge_states() takes a list of the dicts state_dict() returned on "
                        f"every rank, got {type(states).__name__}")
    headers = [_check_state_header(s) for s in states]
    first = states[0]
    for key in ("fingerprint", "epochs_per_pass"):
        values = {repr(s.get(key)) for s in states}
        if len(values) > 1:
            raise ValueError(f"the states disagree on {key} ({', '.join(sorted(values))}): "
                             "they are not from one run")
    if any(rank is None for rank, _ in headers):
        raise ValueError("a state given to merge_states() is merged already")
    sizes = {world_size for _, world_size in headers}
    if sizes != {len(states)}:
        raise ValueError(f"{len(states)} states given, from a run of world_size "
                         f"{'/'.join(map(str, sorted(sizes)))}: give the state of every rank, "
                         "once")
    ranks = sorted(rank for rank, _ in headers)
    if ranks != list(range(len(states))):
        raise ValueError(f"the states are of ranks {ranks}; give the state of every rank of "
                         f"0..{len(states) - 1}, once")
    ordered = sorted(states, key=lambda s: s.get("rank", 0))
    merged = _core.merge_progress([_check_progress(s) for s in ordered])
    return {"version": STATE_VERSION, "fingerprint": first.get("fingerprint"),
            "epochs_per_pass": first.get("epochs_per_pass"), "rank": None,
            "world_size": len(states), **merged}


def _metric_store_text(metric_store):
    """The C++ spelling: "" the default folder, "off" none, else the folder."""
    if metric_store is None or metric_store is True:
        return ""
    if metric_store is False or metric_store == "off":
        return "off"
    text = os.fspath(metric_store)
    if not text:
        raise ValueError("metric_store: an empty path; use None (the default folder) or False")
    return str(text)


class _Timeline:
    """Per-second buckets of what the consumer saw (bounded)."""

    def __init__(self, limit=3600):
        self.start = time.monotonic()
        self.buckets = collections.OrderedDict()
        self.limit = limit

    def add(self, now, samples, wait_s):
        second = int(now - self.start)
        b = self.buckets.get(second)
        if b is None:
            b = self.buckets[second] = [0, 0, 0.0]
            while len(self.buckets) > self.limit:
                self.buckets.popitem(last=False)
        b[0] += 1
        b[1] += samples
        b[2] += wait_s

    def to_list(self):
        return [{"t": s, "batches": b[0], "samples": b[1], "wait_s": b[2],
                 "stall_fraction": min(1.0, b[2])} for s, b in self.buckets.items()]


class Loader:
    """Iterates the batches of `spec` (a sluice.Spec, a dict, or a spec file path) as
    dicts {field: numpy.ndarray}.

    workers      list of "host:port" of `sluice worker` processes (or a comma-separated
                 string); used when the policy offloads.
    policy       "auto" (default; also "sluice"): measure this loop, plan, offload and keep
                 adapting (all local, saying why, without workers or without a stall);
                 "fastflow" / "fastflow:code": the FastFlow baseline; "none": all local;
                 "fixed:cut=K,ratio=R[,read=local|remote][,compress=lz4|zstd|none]
                 [,spill=all|workers][,shares=a/b/...]" (docs/offload.md, docs/policy.md).
    measure_s    auto: seconds of all-local training measured before the first plan.
    metric_store auto: where measured costs are kept between runs (None: the default
                 folder, as `sluice train`: $XDG_CACHE_HOME/sluice or ~/.cache/sluice;
                 False: none; else a folder).
    epochs       epochs per pass (None: the spec's); -1: one endless pass.
    threads      local threads (None: the spec's, else the CPUs this process may use).
    token, token_file, tls_ca, tls_cert, tls_key: worker credentials (docs/offload.md).
    sample_ids   add a field "sample_id": int64 [n, 2] of (epoch, index) per sample.
    require_workers  with an offloading policy, raise ConnectionError when no worker can be
                 reached at start (False: warn and run locally, retrying in the background).
    metrics_port serve Prometheus metrics on http://0.0.0.0:PORT/metrics for the Loader's
                 life (an int; or "HOST:PORT" to choose the interface; 0: any free port, see
                 `metrics_address`). docs/metrics.md lists the metrics.
    rank, world_size  this loader is rank `rank` of `world_size` data-parallel trainers: it
                 yields its share of every epoch, as many batches as every other rank (the
                 spec's `source.even` says how the remainder is made even). Each defaults to
                 the environment's RANK / WORLD_SIZE (torchrun sets them), else 0 and 1.
                 With `even: pad`, batches carry a field "padded" (bool per sample).
    session_weight  this loader's weight where workers divide their CPU between the
                 trainers they serve (default 1: equal shares; at most 1000).

    Errors: ValueError for a bad spec, argument or policy; FileNotFoundError when the
    source matches no file; ConnectionError when no worker is reachable; RuntimeError when
    the pipeline fails (a corrupt file under on_error: fail, ...).
    """

    def __init__(self, spec, workers=None, policy="auto", epochs=None, threads=None,
                 token=None, token_file=None, tls_ca=None, tls_cert=None, tls_key=None,
                 sample_ids=False, require_workers=True, connect_timeout_s=5.0,
                 split_size=None, measure_s=2.0, metric_store=None, metrics_port=None,
                 rank=None, world_size=None, session_weight=1.0):
        self.spec = as_spec(spec)
        self.rank, self.world_size = _shard_args(rank, world_size)
        self._even = self.spec.to_dict()["source"].get("even", "drop")
        self._json = self.spec.to_json()
        self._spec_epochs = self.spec.to_dict().get("epochs", 1)
        if epochs is None:
            epochs = self._spec_epochs
        if not isinstance(epochs, int) or (epochs < 1 and epochs != -1):
            raise ValueError(f"epochs: must be at least 1, or -1 for forever; got {epochs!r}")
        self.epochs = epochs
        if isinstance(workers, str):
            workers = [w for w in workers.split(",") if w]
        self.workers = list(workers or [])
        self.policy = _policy_text(policy)
        num_ops = len(self.spec.ops)
        self._policy_name = _core.check_policy(self.policy, num_ops)
        self._threads = int(threads or 0)
        if not 0 <= self._threads <= _MAX_THREADS:  # the spec's options.threads range
            raise ValueError(f"threads: must be in [1, {_MAX_THREADS}] (or None), "
                             f"got {self._threads}")
        self._credentials = dict(token=token or "", token_file=str(token_file or ""),
                                 tls_ca=str(tls_ca or ""), tls_cert=str(tls_cert or ""),
                                 tls_key=str(tls_key or ""))
        self._sample_ids = sample_ids
        self._require_workers = require_workers
        self._connect_timeout_s = float(connect_timeout_s)
        self._split_size = int(split_size or 0)
        self._session_weight = float(session_weight)
        if not 0 < self._session_weight <= 1000:
            raise ValueError(f"session_weight: must be > 0 and at most 1000, got {session_weight!r}")
        self._measure_s = float(measure_s)
        if not 0.05 <= self._measure_s <= 600:
            raise ValueError(f"measure_s: must be in [0.05, 600] seconds, got {measure_s!r}")
        self._metric_store = _metric_store_text(metric_store)
        self._metrics = None
        if metrics_port is not None:
            if isinstance(metrics_port, bool) or not isinstance(metrics_port, (int, str)):
                raise ValueError(f"metrics_port: a port number or 'HOST:PORT', got {metrics_port!r}")
            listen = f"0.0.0.0:{metrics_port}" if isinstance(metrics_port, int) else metrics_port
            self._metrics = _core.MetricsServer(listen)
        self._said = set()  # log lines said once per loader (the reason it runs locally)
        self._fingerprint = self.spec.fingerprint()
        self._lock = threading.RLock()
        self._core = None
        # The runner of the last pass, kept for the next one: its plan, what the planner
        # measured and its closed loop go on (a pass neither measures nor plans again).
        self._carry = None
        self._pass = 0            # the pass being (or next to be) iterated
        self._resume = None       # the progress dict (_core.Loader's resume) for the next start
        self._finished_state = None  # the progress at the end of the last pass
        self._closed = False
        self._samples_per_epoch = None
        self._last_batch = None
        self._keep_last_batch = False  # tests: keep the last _core.Batch (addresses, digests)
        self._final_report = None
        self._reset_counters()

    # -- iteration ---------------------------------------------------------------------------
    def _reset_counters(self):
        self._batches = 0
        self._samples = 0
        self._wait_s = 0.0
        self._step_s = 0.0
        self._t_start = None
        self._t_last = None
        self._timeline = _Timeline()

    def _pass_bounds(self):
        if self.epochs < 0:
            return 0, -1
        first = self._pass * self.epochs
        return first, first + self.epochs

    def _start(self):
        first, end = self._pass_bounds()
        resume = {"first_epoch": first}
        if self._finished_state is not None and self._finished_state["first_epoch"] == first:
            resume = self._finished_state  # a rank keeps the bits of the epoch it finished
        if self._resume is not None:
            resume = self._resume
            self._resume = None
        self._final_report = None
        if self._carry is not None:
            core, self._carry = self._carry, None
            try:
                core.next_pass(epochs=end, resume=resume)
            except BaseException:
                core.close()
                raise
            self._core = core
            self._emit_warnings()
            return
        self._core = _core.Loader(
            self._json, workers=self.workers, policy=self.policy, threads=self._threads,
            epochs=end, connect_timeout_s=self._connect_timeout_s, split_size=self._split_size,
            resume=resume, measure_s=self._measure_s, metric_store=self._metric_store,
            metrics=self._metrics, rank=self.rank, world_size=self.world_size,
            session_weight=self._session_weight, **self._credentials)
        self._samples_per_epoch = self._core.samples_per_epoch
        if self.world_size > 1:
            note = _core.describe_shard(self.rank, self.world_size, self._even,
                                        self._samples_per_epoch)
            if note not in self._said:
                self._said.add(note)
                log.info("%s", note)
        self._emit_warnings()
        if self.workers and self._require_workers and self._policy_name != "none":
            report = self._core.report()
            if report["offloaded"] and not any(w["connected"] for w in report["workers"]):
                reasons = "; ".join(f"{w['address']}: {w['last_error']}" for w in report["workers"])
                self._core.close()
                self._core = None
                raise ConnectionError(f"no worker reachable ({reasons})")

    def __iter__(self):
        with self._lock:
            if self._closed:
                raise RuntimeError("the loader is closed")
            if self._core is None:
                self._start()
        return self

    def __next__(self):
        with self._lock:
            if self._closed:
                raise RuntimeError("the loader is closed")
            if self._core is None:
                self._start()
            now = time.monotonic()
            if self._t_start is None:
                self._t_start = now
            elif self._t_last is not None:
                self._step_s += now - self._t_last
            batch = self._core.next()
            done = time.monotonic()
            wait = done - now
            self._wait_s += wait
            self._t_last = done
            self._emit_warnings()
            if batch is None:
                self._end_pass()
                raise StopIteration
            if self._keep_last_batch:
                self._last_batch = batch
            self._batches += 1
            self._samples += batch.num_samples
            self._timeline.add(done, batch.num_samples, wait)
            out = batch.arrays()
            if self._sample_ids or self._even == "pad":
                ids = batch.ids()
                if self._sample_ids:
                    out["sample_id"] = ids
                if self._even == "pad":
                    # A padded sample's index is past the epoch's samples (docs/distributed.md).
                    out["padded"] = ids[:, 1] >= self._samples_per_epoch
            return out

    def _end_pass(self):
        self._final_report = self.report()
        self._finished_state = self._core.progress()
        # The runner stays for the next pass (its Loader is replaced then); what the planner
        # measured is saved now, as it is at close, for a process that never iterates again.
        self._core.save()
        self._carry, self._core = self._core, None
        self._pass += 1
        self._t_last = None

    def _emit_warnings(self):
        if self._core is None:
            return
        for message in self._core.drain_warnings():
            warnings.warn(message, SluiceWarning, stacklevel=3)
        for level, message in self._core.drain_log():
            # A new pass repeats the notes of the last (no workers, ...): say them once.
            if not message.startswith(("initial plan", "replan", "adjust_ratio",
                                       "recalibrate")):
                if message in self._said:
                    continue
                self._said.add(message)
            log.log(level, "%s", message)

    def __len__(self):
        """Batches in one pass when that is known (not for an endless pass)."""
        if self.epochs < 0:
            raise TypeError("an endless loader (epochs=-1) has no length")
        n = self.samples_per_epoch
        if self.world_size > 1:
            n = _per_rank(n, self.world_size, self._even)
        n *= self.epochs
        d = self.spec.to_dict()
        b = d.get("batch") or d.get("padded_batch")
        if not b:
            return n
        size = b["size"]
        return n // size if b.get("drop_remainder") else math.ceil(n / size)

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self):
        """What the training loop has received so far; a plain dict (ints, bytes, str, None)
        that torch.save / pickle store as is. A rank's state covers its own share; collect
        every rank's (e.g. torch.distributed.all_gather_object) to resume on another number
        of ranks."""
        with self._lock:
            if self._core is not None:
                progress = self._core.progress()
            elif self._resume is not None:
                progress = self._resume
            elif (self._finished_state is not None
                  and self._finished_state["first_epoch"] == self._pass_bounds()[0]):
                progress = self._finished_state
            else:
                progress = {"first_epoch": self._pass_bounds()[0]}
            def bitmaps(key):
                return {int(e): bytes(b) for e, b in progress.get(key, {}).items()}
            return {"version": STATE_VERSION, "fingerprint": self._fingerprint,
                    "epochs_per_pass": self.epochs, "rank": self.rank,
                    "world_size": self.world_size, "first_epoch": int(progress["first_epoch"]),
                    "consumed": bitmaps("consumed"), "divided": bitmaps("divided"),
                    "padded": [(int(e), int(i)) for e, i in progress.get("padded", [])],
                    "finished": bitmaps("finished")}

    def load_state_dict(self, state):
        """Resumes from `state_dict()`: the next iteration yields exactly the samples of the
        current pass not yet received. A rank resumes its own state as it was, at the same
        rank and world size; the states of every rank (a list, or `merge_states()` of it)
        resume on any number of ranks, the samples not received anywhere divided afresh
        (given a list at the same world size, each rank takes its own). A running pass is
        stopped first. Raises TypeError when `state` is not such a dict, and ValueError when
        it belongs to another pipeline, does not fit this one (a bitmap of the wrong length,
        epochs out of range), or is another rank's."""
        if (isinstance(state, (list, tuple)) and state
                and all(isinstance(s, Mapping) for s in state)):
            headers = [_check_state_header(s) for s in state]
            mine = [s for s, h in zip(state, headers) if h == (self.rank, self.world_size)]
            if len(state) == self.world_size and len(mine) == 1:
                state = mine[0]
            else:
                state = merge_states(state)
        rank, world_size = _check_state_header(state)
        if state.get("fingerprint") != self._fingerprint:
            raise ValueError(
                f"the state belongs to another pipeline (fingerprint {state.get('fingerprint')}, "
                f"this loader's is {self._fingerprint})")
        if state.get("epochs_per_pass") != self.epochs:
            raise ValueError(f"the state was saved with epochs={state.get('epochs_per_pass')}, "
                             f"this loader has epochs={self.epochs}")
        progress = _check_progress(state, self.samples_per_epoch)
        if (rank, world_size) != (self.rank, self.world_size):
            if rank is not None and world_size > 1:
                raise ValueError(
                    f"the state is rank {rank}'s of {world_size}; this loader is rank "
                    f"{self.rank} of {self.world_size}: resume from the states of all "
                    f"{world_size} ranks (a list of them, or sluice.merge_states(list))")
            # Merged, or a single trainer's: every sample received anywhere is in it, and
            # what remains is divided afresh.
            progress = {"first_epoch": progress["first_epoch"],
                        "consumed": progress["consumed"], "divided": dict(progress["consumed"])}
        with self._lock:
            if self._core is not None:
                # The runner goes on from the state (its plan kept); the pass restarts there.
                self._carry, self._core = self._core, None
            first_epoch = progress["first_epoch"]
            self._pass = 0 if self.epochs < 0 else first_epoch // self.epochs
            self._resume = progress
            self._reset_counters()

    # -- reports and lifetime ---------------------------------------------------------------
    def report(self):
        """The profile (per-op counters), the plan, the consumer's view (batches, samples,
        time waiting in next(), time between calls, stall fraction) and a per-second
        timeline, as a dict."""
        with self._lock:
            if self._core is not None:
                r = self._core.report()
            elif self._final_report is not None:
                r = dict(self._final_report)
            else:
                r = {"policy": self._policy_name, "offloaded": False, "plan": None,
                     "explanation": "", "local_reason": "", "decisions": [], "profile": None,
                     "time_to_plan_s": None, "spill": "all", "workers": [], "ops": [],
                     "warnings": []}
            wall = 0.0 if self._t_start is None else (
                (self._t_last or time.monotonic()) - self._t_start)
            consumer = {"batches": self._batches, "samples": self._samples,
                        "wait_s": self._wait_s, "step_s": self._step_s, "wall_s": wall,
                        "stall_fraction": (self._wait_s / wall) if wall > 0 else 0.0,
                        "samples_per_s": (self._samples / wall) if wall > 0 else 0.0}
            r["consumer"] = consumer
            r["stall_fraction"] = consumer["stall_fraction"]
            r["timeline"] = self._timeline.to_list()
            r["fingerprint"] = self._fingerprint
            r["pass"] = self._pass
            r["shard"] = {"rank": self.rank, "world_size": self.world_size, "even": self._even,
                          "samples_per_epoch": None, "dropped_per_epoch": None,
                          "padded_per_epoch": None}
            n = self._samples_per_epoch  # known once a pass started
            if n is not None:
                per_rank = _per_rank(n, self.world_size, self._even)
                r["shard"].update(samples_per_epoch=per_rank,
                                  dropped_per_epoch=max(n - per_rank * self.world_size, 0),
                                  padded_per_epoch=max(per_rank * self.world_size - n, 0))
            return r

    def close(self):
        """Stops the engine's threads and frees its buffers (arrays already handed out stay
        valid). The loader cannot be iterated afterwards."""
        with self._lock:
            if self._core is not None:
                self._final_report = self._core.report()
                self._core.close()
                self._core = None
            if self._carry is not None:
                self._carry.close()
                self._carry = None
            if self._metrics is not None:
                self._metrics.close()
            self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        for name in ("_core", "_carry"):
            core = getattr(self, name, None)
            if core is not None:
                core.close()
        server = getattr(self, "_metrics", None)
        if server is not None:
            server.close()

    @property
    def metrics_address(self):
        """HOST:PORT the metrics are served on (None without metrics_port)."""
        return self._metrics.address if self._metrics is not None else None

    @property
    def samples_per_epoch(self):
        if self._samples_per_epoch is None:
            self._samples_per_epoch = _core.samples_per_epoch(self._json)
        return self._samples_per_epoch

    def _debug_last_batch(self):
        """The last _core.Batch (tests: buffer addresses, digests)."""
        return self._last_batch
