"""deploy/systemd/sluice-worker.service: `systemd-analyze verify` accepts it, its hardening is
all there, its limits follow the worker's flags, and its ExecStart is a command line the real
`sluice worker` accepts (`--check-flags`).
"""
import re
import shlex

import pytest

from conftest import ROOT, check_flags, require_tool, run
from manifest_checks import DEFAULT_DRAIN_S, GRACE_MARGIN_S, parse_flags

UNIT = ROOT / "deploy" / "systemd" / "sluice-worker.service"
# What %d (the credentials directory) expands to for this unit.
CREDENTIALS_DIR = "/run/credentials/sluice-worker.service"


@pytest.fixture(scope="module", autouse=True)
def systemd_analyze():
    return require_tool("systemd-analyze", "systemd")


def parse_unit(text):
    """{section: {key: [values in order]}}, continuation lines joined, comments dropped."""
    sections, section, pending = {}, None, ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("["):
            section = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        section.setdefault(key.strip(), []).append(value.strip())
    return sections


def service():
    return parse_unit(UNIT.read_text())["Service"]


def last(key):
    values = service().get(key)
    assert values, f"{UNIT.name} has no {key}="
    return values[-1]


def exec_start_argv():
    """ExecStart split as systemd splits it, with the specifiers this unit uses expanded."""
    (line,) = service()["ExecStart"]
    argv = shlex.split(line)
    unknown = {m for a in argv for m in re.findall(r"%[^%d]", a)}
    assert not unknown, f"ExecStart uses specifiers this test does not expand: {unknown}"
    return [a.replace("%d", CREDENTIALS_DIR).replace("%%", "%") for a in argv]


def worker_flags():
    argv = exec_start_argv()
    assert argv[1] == "worker", argv
    flags, positional = parse_flags(argv[2:])
    assert positional == []
    return flags


def test_exec_start_is_a_command_line_sluice_accepts(binary):
    argv = exec_start_argv()
    assert argv[0].endswith("/sluice"), argv
    out = check_flags(binary, argv[1:])
    assert out.returncode == 0, f"{' '.join(argv)} --check-flags:\n{out.stderr}"
    assert "sluice worker: flags ok" in out.stdout


def test_verify(binary, tmp_path, systemd_analyze):
    """`systemd-analyze verify` checks that ExecStart's binary exists and is executable, and
    /usr/local/bin/sluice is not installed here: the copy it checks runs the build's binary
    instead, every other line unchanged. A line systemd does not understand only gets a warning
    with exit code 0, so the output must not mention the unit either."""
    unit = tmp_path / UNIT.name
    text = UNIT.read_text()
    assert text.count("ExecStart=/usr/local/bin/sluice ") == 1
    unit.write_text(text.replace("ExecStart=/usr/local/bin/sluice ", f"ExecStart={binary} "))
    out = run([systemd_analyze, "verify", "--man=no", "--recursive-errors=no", unit],
              cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    complaints = [line for line in (out.stdout + out.stderr).splitlines() if UNIT.name in line]
    assert complaints == []


def test_verify_reports_a_misspelt_line(binary, tmp_path, systemd_analyze):
    """The check above sees what `verify` only warns about."""
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text()
                    .replace("ExecStart=/usr/local/bin/sluice ", f"ExecStart={binary} ")
                    .replace("PrivateTmp=yes", "PrivateTemp=yes"))
    out = run([systemd_analyze, "verify", "--man=no", "--recursive-errors=no", unit],
              cwd=tmp_path)
    assert "PrivateTemp" in out.stdout + out.stderr


def test_hardening():
    s = service()
    assert s.get("DynamicUser") == ["yes"] or s.get("User", ["root"])[-1] not in ("root", "0")
    expected = {
        "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
        "PrivateTmp": "yes", "PrivateDevices": "yes", "CapabilityBoundingSet": "",
        "AmbientCapabilities": "", "KillSignal": "SIGTERM", "Restart": "on-failure",
    }
    for key, value in expected.items():
        assert s.get(key, [None])[-1] == value, f"{key}={s.get(key)}, expected {value!r}"
    assert set(last("RestrictAddressFamilies").split()) == {"AF_INET", "AF_INET6", "AF_UNIX"}
    assert "@system-service" in s.get("SystemCallFilter", [])


def test_data_root_is_read_only():
    data_root = worker_flags()["data-root"]
    assert data_root in " ".join(service().get("ReadOnlyPaths", [])).split()


def test_credentials_are_the_files_the_flags_name():
    """Each credential flag names a file of the credentials directory that LoadCredential=
    fills, and nothing else names one."""
    loaded = {v.split(":", 1)[0] for v in service().get("LoadCredential", [])}
    named = set()
    for flag in ("token-file", "tls-cert", "tls-key", "tls-client-ca"):
        path = worker_flags().get(flag)
        if path is None:
            continue
        assert path.startswith(CREDENTIALS_DIR + "/"), f"--{flag} {path} is not a credential"
        named.add(path[len(CREDENTIALS_DIR) + 1:])
    assert "token-file" in worker_flags()
    assert named == loaded


def test_limits_follow_the_flags():
    """TimeoutStopSec >= --drain-s + 15; CPUQuota = --threads x 100%; MemoryMax = 1G per
    thread (the rules the unit's header states, as in deploy/k8s)."""
    flags = worker_flags()
    drain_s = float(flags.get("drain-s", DEFAULT_DRAIN_S))
    assert float(last("TimeoutStopSec")) >= drain_s + GRACE_MARGIN_S
    threads = int(flags["threads"])
    assert last("CPUQuota") == f"{threads * 100}%"
    assert last("MemoryMax") == f"{threads}G"


def test_security_exposure(tmp_path, binary, systemd_analyze):
    """systemd's own review of the unit's sandboxing: an exposure of at most 2.5 of 10 (the
    unit scores 1.2 with systemd 252; --threshold counts tenths)."""
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/sluice", str(binary)))
    out = run([systemd_analyze, "security", "--offline=yes", "--threshold=25", unit],
              cwd=tmp_path)
    if "--offline" in out.stderr and "unrecognized" in out.stderr:
        pytest.skip("this systemd-analyze has no offline security review (systemd < 250)")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
