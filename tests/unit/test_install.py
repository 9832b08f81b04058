"""`make setup`'s installer (tests/install.py) hands uv the settings pip has: read from pip's
own `pip config list`, so that a machine's mirror, wheel folder or constraints are not
dropped on the way to uv."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.install import SettingError, main, pip_settings, uv_options


def _pip_listing(tmp_path: Path, config: str, **env: str) -> str:
    """What this pip prints for a config file and PIP_* variables, besides the machine's own
    config files (which pip always reads; the tests compare with `_pip_listing(tmp_path, "")`)."""
    path = tmp_path / "pip.conf"
    path.write_text(config)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                          env={**clean, "PIP_CONFIG_FILE": str(path), **env}, check=True)
    return done.stdout


def test_pips_own_listing_becomes_uvs_flags_in_pips_precedence(tmp_path):
    listing = _pip_listing(tmp_path, "[global]\nindex-url = https://mirror.example/simple\n"
                                     "extra-index-url = file:///opt/one file:///opt/two\n"
                                     "constraint = /etc/pins.txt\nfind-links = /from/global\n"
                                     "[install]\nindex-url = https://install.example/simple\n",
                           PIP_FIND_LINKS="/from/env", PIP_CERT="/etc/ca.pem", PIP_TRUSTED_HOST="h1 h2")
    flags, env = uv_options(pip_settings(listing))
    pairs = list(zip(flags[::2], flags[1::2]))
    # The install section over the global one, a PIP_* variable over both; lists split as pip splits them.
    assert ("--index-url", "https://install.example/simple") in pairs
    assert ("--index-url", "https://mirror.example/simple") not in pairs
    assert [v for k, v in pairs if k == "--find-links"] == ["/from/env"]
    assert [v for k, v in pairs if k == "--extra-index-url"] == ["file:///opt/one", "file:///opt/two"]
    assert [v for k, v in pairs if k == "--allow-insecure-host"] == ["h1", "h2"]
    assert ("--constraint", "/etc/pins.txt") in pairs
    assert env == {"SSL_CERT_FILE": "/etc/ca.pem"}


def test_switches_follow_their_value(tmp_path):
    machine = uv_options(pip_settings(_pip_listing(tmp_path, "")))[0]
    on = uv_options(pip_settings(_pip_listing(tmp_path, "[global]\nno-index = true\n")))[0]
    off = uv_options(pip_settings(_pip_listing(tmp_path, "[global]\nno-index = false\n")))[0]
    assert "--no-index" not in machine
    assert sorted(on) == sorted([*machine, "--no-index"]) and off == machine


def test_a_setting_about_where_packages_come_from_is_never_dropped(tmp_path):
    listing = _pip_listing(tmp_path, "[global]\nprefix = /somewhere\n")
    with pytest.raises(SettingError, match=r"prefix='/somewhere'.*no uv equivalent"):
        uv_options(pip_settings(listing))
    # pip's own chatter is not such a setting.
    quiet = _pip_listing(tmp_path, "[global]\nprogress-bar = off\nretries = 9\n", PIP_DISABLE_PIP_VERSION_CHECK="1")
    assert uv_options(pip_settings(quiet)) == uv_options(pip_settings(_pip_listing(tmp_path, "")))


def test_lines_that_are_not_settings_are_skipped():
    assert pip_settings("WARNING: something\nglobal.find-links='/w'\nnosection='x'\n") == {"find-links": "/w"}


def test_refusals_are_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    assert main([]) == 2
    assert main([str(tmp_path / "no-venv"), "six"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(str(tmp_path / "no-venv")) and "python3 -m venv" in err[-1]
    monkeypatch.setenv("PIP_PREFIX", "/elsewhere")  # refused before anything is looked for or run
    assert main([str(tmp_path / "no-venv"), "six"]) == 2
    assert "prefix='/elsewhere'" in capsys.readouterr().err
