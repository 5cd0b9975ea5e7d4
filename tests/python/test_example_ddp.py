"""examples/train_ddp.py under torchrun: 2 ranks train and checkpoint half-way, 3 ranks resume
from the checkpoint (elastic), and every rank takes the same number of batches in every pass
(the example checks that across ranks and exits non-zero otherwise)."""
import json
import os
import re
import subprocess

from conftest import ROOT, package_path


def torchrun(nproc, tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=str(package_path()), OMP_NUM_THREADS="1")
    cmd = ["/usr/bin/python3", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
           "--redirects", "1", "--tee", "1", "--log_dir", str(tmp_path / f"logs-{nproc}"),
           str(ROOT / "examples" / "train_ddp.py"), "--deadline-s", "240", *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        # Each rank's output (a rank past its deadline prints every thread's stack there).
        for log in sorted((tmp_path / f"logs-{nproc}").rglob("*.log")):
            done.stdout += f"\n== {log}\n" + log.read_text()[-4000:]
    return done


def test_two_ranks_checkpoint_and_three_ranks_resume(sluice, tmp_path):
    data = tmp_path / "data"
    ckpt = tmp_path / "ckpt.pt"
    first = torchrun(2, tmp_path, "--data", str(data), "--images", "128", "--steps", "8",
                     "--batch-size", "8", "--policy", "none", "--checkpoint", str(ckpt))
    assert first.returncode == 0, first.stdout + first.stderr
    assert ckpt.exists()
    counts = re.search(r"2 ranks, batches per pass on each: (\[.*\]);", first.stdout)
    assert counts, first.stdout
    # 128 images, 2 ranks, batches of 8: 8 batches per rank per pass; 8 steps in all.
    assert counts.group(1) == "[[8], [8]]"

    second = torchrun(3, tmp_path, "--data", str(data), "--images", "128", "--steps", "8",
                      "--batch-size", "8", "--policy", "none", "--resume", str(ckpt))
    assert second.returncode == 0, second.stdout + second.stderr
    assert "resumed at step 4 on 3 ranks (saved on 2)" in second.stdout
    counts = re.search(r"3 ranks, batches per pass on each: (\[.*\]);", second.stdout)
    assert counts, second.stdout
    # Step 4 of 2 ranks: 64 of 128 samples trained on; the other 64 over 3 ranks (even: drop)
    # are 21 each, 2 full batches of 8 per rank; then the next pass until step 8.
    per_rank = json.loads(counts.group(1))
    assert len(per_rank) == 3 and all(r == per_rank[0] for r in per_rank)
    assert per_rank[0][0] == 2
