"""`make system-deps` leaves the machine as it was: the Prometheus tools are unpacked into the
cache (never installed), apt installs only what is absent and upgrades nothing, and the tests
run the cached tools first. apt-get and dpkg-deb are stand-ins here that log their calls."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.stack import REPO
from tests.support import system_tools

SCRIPT = REPO / "tests" / "support" / "system_tools.py"

# A fresh machine: `apt-get download` fails until `apt-get update` has fetched the lists.
FAKE_APT = """#!/bin/sh
echo "apt-get $*" >> "$CALLS"
case "$*" in
  *update*) touch "$LISTS" ;;
  *download*) [ -e "$LISTS" ] || exit 100
    for p in prometheus prometheus-alertmanager; do : > "${p}_1.0_amd64.deb"; done ;;
esac
"""
FAKE_DPKG_DEB = """#!/bin/sh
echo "dpkg-deb $*" >> "$CALLS"
mkdir -p "$3/usr/bin"
for t in prometheus promtool prometheus-alertmanager amtool; do
  printf '#!/bin/sh\\n' > "$3/usr/bin/$t"; chmod +x "$3/usr/bin/$t"
done
"""


def executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def fake_apt(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    executable(bin_dir / "apt-get", FAKE_APT)
    executable(bin_dir / "dpkg-deb", FAKE_DPKG_DEB)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "CALLS": str(tmp_path / "calls"),
        "LISTS": str(tmp_path / "lists"),
        "OLLAMA_TAP_TEST_CACHE": str(tmp_path / "cache"),
    }


def provide(env: dict[str, str], code: str = "sys.exit(st.main())") -> list[str]:
    """Run the provisioning in a child with the stand-ins on PATH; the calls it made."""
    program = f"import sys; sys.path.insert(0, {str(REPO)!r}); "
    program += f"from tests.support import system_tools as st; {code}"
    subprocess.run([sys.executable, "-c", program], env=env, check=True, capture_output=True)
    calls = Path(env["CALLS"])
    return calls.read_text().splitlines() if calls.exists() else []


def test_a_fresh_machine_gets_the_tools_unpacked_into_the_cache(fake_apt: dict[str, str]) -> None:
    calls = provide(fake_apt, "st.unpack(st.cache_root())")
    downloads = [c for c in calls if c.startswith("apt-get") and "download" in c]
    assert len(downloads) == 2, "the first download, without package lists, is tried again"
    assert downloads[0] == downloads[1]
    assert downloads[0].endswith(" prometheus prometheus-alertmanager")
    assert calls[:3] == [downloads[0], "apt-get update -qq", downloads[1]]
    assert not [c for c in calls if " install" in c], "nothing is installed for Prometheus"
    assert sorted(c.split()[2].rsplit("/", 1)[1] for c in calls if c.startswith("dpkg-deb -x")) == [
        "prometheus-alertmanager_1.0_amd64.deb",
        "prometheus_1.0_amd64.deb",
    ]
    bin_dir = Path(fake_apt["OLLAMA_TAP_TEST_CACHE"]) / "debs" / "root" / "usr" / "bin"
    assert sorted(p.name for p in bin_dir.iterdir()) == sorted(system_tools.UNPACKED_TOOLS)


def test_a_second_run_reuses_the_cache(fake_apt: dict[str, str]) -> None:
    provide(fake_apt, "st.unpack(st.cache_root())")
    Path(fake_apt["CALLS"]).unlink()
    assert provide(fake_apt, "st.unpack(st.cache_root())") == []


def test_absent_tools_are_installed_upgrading_nothing(fake_apt: dict[str, str]) -> None:
    calls = provide(fake_apt, "st.install(['chromium', 'openssl'])")
    installs = [c for c in calls if " install " in c]
    assert installs == [
        "apt-get install -y -qq --no-upgrade --no-install-recommends chromium "
        "fonts-dejavu-core openssl"
    ]
    assert "update" in calls[0], "a fresh machine's apt knows no packages before an update"


def test_present_tools_are_left_alone(fake_apt: dict[str, str]) -> None:
    assert provide(fake_apt, "st.install([])") == []


def test_the_tests_run_the_cached_tool_before_the_one_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cached = tmp_path / "debs" / "root" / "usr" / "bin" / "promtool"
    cached.parent.mkdir(parents=True)
    executable(cached, "#!/bin/sh\n")
    on_path = tmp_path / "path" / "promtool"
    on_path.parent.mkdir()
    executable(on_path, "#!/bin/sh\n")
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv("OLLAMA_TAP_TEST_CACHE", str(tmp_path))
    assert system_tools.find_tool("promtool") == str(cached)
    cached.unlink()
    assert system_tools.find_tool("promtool") == str(on_path)
