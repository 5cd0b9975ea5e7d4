"""Process-level behaviour of the loader: memory stays bounded over many epochs, and Ctrl-C
during iteration ends the program promptly and cleanly."""
import os
import signal
import subprocess
import sys
import textwrap
import time

from conftest import package_path


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def test_no_memory_growth_over_many_epochs(sluice, small_spec):
    loader = sluice.Loader(small_spec, epochs=2)
    for _ in range(5):  # warm up: allocator caches, thread stacks
        for batch in loader:
            pass
    before = rss_mb()
    for _ in range(40):
        for batch in loader:
            pass
    grown = rss_mb() - before
    loader.close()
    assert grown < 64, f"RSS grew by {grown:.0f} MiB over 80 epochs"


def test_keyboard_interrupt_during_iteration_exits_promptly(sluice, images, tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(package_path())!r})
        import sluice
        spec = (sluice.files({images!r}).map("read_file").map("decode_jpeg")
                .map("resize", size=256).batch(8).options(threads=1))
        try:
            for i, batch in enumerate(sluice.Loader(spec, epochs=-1)):
                if i == 0:
                    print("started", flush=True)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            raise
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started"
    time.sleep(0.3)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the loop did not end within 20 s of SIGINT")
    assert time.monotonic() - sent < 20
    assert "interrupted" in out, err
    assert "KeyboardInterrupt" in err
    assert proc.returncode != 0 and proc.returncode != -signal.SIGSEGV, (proc.returncode, err)
    assert "Segmentation" not in err and "terminate called" not in err
