#!/usr/bin/env python3
"""CPU-seconds of a build's compile steps from its .ninja_log (the last run of each output):
all objects, and the test files' (objects of *_test targets but the timing tests), alone or
in unity units. Usage: compile_cpu.py BUILD_DIR"""
import sys

last = {}
with open(f"{sys.argv[1]}/.ninja_log") as log:
    for line in log:
        if line.startswith("#"):
            continue
        start, end, _, out, _ = line.rstrip("\n").split("\t")
        if out.endswith(".o"):
            last[out] = (int(end) - int(start)) / 1000
tests = {o: s for o, s in last.items() if "_test.dir/" in o and "serial" not in o}
print(f"objects: {len(last)}, {sum(last.values()):.0f} CPU-s")
print(f"test objects: {len(tests)}, {sum(tests.values()):.0f} CPU-s "
      f"({sum(1 for o in tests if '/Unity/' in o)} unity units)")
