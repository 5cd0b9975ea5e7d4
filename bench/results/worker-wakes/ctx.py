#!/usr/bin/python3
"""Worker voluntary/involuntary context switches and CPU per sample at cut=4, ratio=1 on
loopback (worker core 1, trainer core 0), builds interleaved: ctx.py ROUNDS BIN..."""
import glob, json, os, subprocess, sys, time, tempfile
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
def counters(pid):
    vol = invol = 0
    for st in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            for line in open(st):
                if line.startswith("voluntary_ctxt_switches"): vol += int(line.split()[1])
                if line.startswith("nonvoluntary_ctxt_switches"): invol += int(line.split()[1])
        except FileNotFoundError: pass
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    cpu = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    return vol, invol, cpu
rounds = int(sys.argv[1]); bins = sys.argv[2:]
res = {b: [] for b in bins}
for r in range(rounds):
    for i, b in enumerate(bins):
        port = 7920 + i
        w = subprocess.Popen(["taskset", "-c", "1", b, "worker", "--listen", f"127.0.0.1:{port}",
                              "--threads", "1", "--data-root", ROOT],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            v0, n0, c0 = counters(w.pid)
            subprocess.run(["taskset", "-c", "0", b, "train", "examples/pipelines/imagenet_train.yaml",
                            "--files", "demo-data/**/*.jpg", "--accelerator-ms", "0", "--steps", "200",
                            "--threads", "1", "--epochs", "-1", "--policy", "fixed:cut=4,ratio=1.0",
                            "--workers", f"127.0.0.1:{port}", "--json", out.name],
                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            v1, n1, c1 = counters(w.pid)
            d = json.load(open(out.name))
        w.terminate(); w.wait()
        n = sum(x.get("samples", 0) for x in (d.get("places") or {}).get("workers", []))
        row = {"samples": n, "vol_per_sample": (v1 - v0) / n, "invol_per_sample": (n1 - n0) / n,
               "worker_cpu_us_per_sample": 1e6 * (c1 - c0) / n, "rate": d["samples_per_s"]}
        res[b].append(row)
        print(r, os.path.basename(b), {k: round(v, 3) for k, v in row.items()}, flush=True)
print(json.dumps(res))
