"""Shared helpers of the deployment tests (deploy/k8s and deploy/systemd).

The sluice binary is $SLUICE_BINARY (CTest passes the build's), else $SLUICE_BUILD_DIR/bin/sluice
(default build/). A test file whose tool (kubectl, systemd-analyze) is not installed ends the
run with exit code 77, which CTest reports as skipped (SKIP_RETURN_CODE, tests/CMakeLists.txt).
"""
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SKIP_EXIT_CODE = 77
# A guard against a hung process, not a timing assertion: far above what any step needs on a
# loaded machine.
COMMAND_TIMEOUT_S = 300


def require_tool(name, package):
    path = shutil.which(name)
    if path is None:
        pytest.exit(f"SKIPPED: {name} is not installed (Debian package {package}; "
                    "scripts/install-deps.sh installs it)", returncode=SKIP_EXIT_CODE)
    return path


@pytest.fixture(scope="session")
def binary():
    path = pathlib.Path(os.environ.get("SLUICE_BINARY") or
                        pathlib.Path(os.environ.get("SLUICE_BUILD_DIR", ROOT / "build")) /
                        "bin" / "sluice").resolve()
    assert path.exists(), f"{path} is missing: build the sluice target first"
    return path


def run(argv, **kwargs):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S, **kwargs)


def check_flags(binary, argv):
    """`sluice <argv> --check-flags`: the process, for its exit code and output."""
    return run([binary, *argv, "--check-flags"])
