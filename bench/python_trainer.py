#!/usr/bin/python3
"""A training loop in Python for the testbed: what `sluice bench` runs in the trainer's
namespace and cgroup for a scenario with `trainer: {frontend: python}`.

It takes the flags of `sluice train` that the bench passes (the pipeline, --files,
--accelerator-ms, --steps, --epochs, --threads, --policy, --json, --metric-store,
--workers), iterates `sluice.torch.Loader` (or `sluice.Loader` where PyTorch is missing),
sleeping --accelerator-ms per step as an accelerator would (a sleep costs no CPU), and
writes a report with the fields `sluice bench` reads from `sluice train --json`: the steady
samples/s and stall, the plan, time to plan, the timeline of decisions, samples per place.

As in `sluice train`, --steps counts from the step the first plan is applied (the steps
before it are `steady.planning_steps`), and the steady figures leave out a warm-up of a
tenth of --steps (at most 10).

usage: /usr/bin/python3 bench/python_trainer.py PIPELINE.yaml --build-dir build [flags of
       sluice train]
"""

import argparse
import json
import os
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pipeline")
    p.add_argument("--build-dir", required=True, help="where python/sluice/_core*.so was built")
    p.add_argument("--files", default=None)
    p.add_argument("--accelerator-ms", type=float, default=0)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--epochs", type=int, default=-1)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--policy", default="auto")
    p.add_argument("--json", required=True)
    p.add_argument("--metric-store", default=None)
    p.add_argument("--workers", default="")
    # Planning steps are bounded: a run that never plans still ends.
    p.add_argument("--max-planning-steps", type=int, default=5000)
    args = p.parse_args()

    sys.path.insert(0, os.path.join(os.path.abspath(args.build_dir), "python"))
    import logging
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    import sluice
    try:
        import sluice.torch as frontend
        frontend_name = "torch"
    except ImportError:
        frontend = sluice
        frontend_name = "numpy"

    spec = sluice.load(args.pipeline)
    if args.files:
        d = spec.to_dict()
        # As `sluice train --files`: the files, or the shards of a shards spec.
        d["source"]["shards" if "shards" in d["source"] else "files"] = [args.files]
        spec = sluice.parse(json.dumps(d))
    workers = [w for w in args.workers.split(",") if w]
    store = args.metric_store
    if store == "off":
        store = False
    kwargs = {"workers": workers, "policy": args.policy, "epochs": args.epochs,
              "threads": args.threads}
    if args.policy in ("auto", "sluice"):
        kwargs["metric_store"] = store
    loader = frontend.Loader(spec, **kwargs)
    plans = args.policy in ("auto", "sluice") or args.policy.startswith("fastflow")
    step_s = args.accelerator_ms / 1000.0
    warmup = min(10, args.steps // 10) if args.steps >= 10 else 0

    t0 = time.monotonic()
    planning_steps = 0
    steady = None  # [start time, samples, wait_s] once the warm-up is over
    samples_total = 0
    wait_total = 0.0
    step = 0
    planned = not plans
    it = iter(loader)
    while True:
        asked = time.monotonic()
        try:
            batch = next(it)
        except StopIteration:
            break
        got = time.monotonic()
        n = len(next(iter(batch.values())))
        samples_total += n
        wait_total += got - asked
        if not planned:
            planning_steps += 1
            # The report is built in C++ with every counter: asked for every 8 steps.
            if planning_steps % 8 == 0 or planning_steps >= args.max_planning_steps:
                planned = (loader.report().get("time_to_plan_s") is not None
                           or planning_steps >= args.max_planning_steps)
        else:
            step += 1
            if step == warmup + 1:
                steady = [asked, 0, 0.0]
            if steady is not None:
                steady[1] += n
                steady[2] += got - asked
        if step_s > 0:
            time.sleep(step_s)
        if planned and step >= args.steps:
            break
    end = time.monotonic()
    report = loader.report()
    loader.close()

    wall = end - t0
    out = {
        "command": "python_trainer",
        "frontend": frontend_name,
        "policy": args.policy,
        "accelerator_ms": args.accelerator_ms,
        "steps": step,
        "samples": samples_total,
        "samples_local": report.get("samples_local", 0),
        "samples_per_s": samples_total / wall if wall > 0 else 0,
        "stall_fraction": wait_total / wall if wall > 0 else 0,
        "wall_s": wall,
        "time_to_plan_s": report.get("time_to_plan_s") or 0.0,
        "plan": report.get("plan") or {},
        "timeline": report.get("decisions") or [],
        "places": {"workers": [{"address": w["address"], "samples": w["samples"]}
                               for w in report.get("workers", [])]},
    }
    if steady is not None:
        span = end - steady[0]
        out["steady"] = {"planning_steps": planning_steps, "warmup_steps": warmup,
                         "steps": step - warmup,
                         "samples_per_s": steady[1] / span if span > 0 else 0,
                         "stall_fraction": steady[2] / span if span > 0 else 0}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"python trainer ({frontend_name}): {out.get('steady', out)['samples_per_s']:.1f} "
          f"samples/s steady, plan {out['plan'].get('policy', 'none') if out['plan'] else 'none'}")


if __name__ == "__main__":
    main()
