"""`make setup`'s installer (tests/install.py) hands uv the settings pip has, as pip's own
install command reads them, so that a machine's mirror, wheel folder or constraints are not
dropped or misread on the way to uv. Each case is compared with what this machine's own pip
config gives (pip always reads the system's files)."""

from __future__ import annotations

import pytest

from tests.install import SettingError, main, pip_options, uv_options


@pytest.fixture
def pip_config(tmp_path, monkeypatch):
    """Sets a config file and PIP_* variables for pip, none of the caller's PIP_* left; returns
    uv's flags and environment for them."""
    import os

    def options(config: str = "", **env: str) -> tuple[list[str], dict[str, str]]:
        for key in [k for k in os.environ if k.startswith("PIP_")]:  # the previous call's
            monkeypatch.delenv(key)
        path = tmp_path / "pip.conf"
        path.write_text(config)
        monkeypatch.setenv("PIP_CONFIG_FILE", str(path))
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return uv_options(pip_options())

    return options


def test_pips_precedence_lists_and_paths(pip_config):
    flags, env = pip_config("[global]\nindex-url = https://mirror.example/simple\n"
                            "extra-index-url = file:///opt/one file:///opt/two\n"
                            "constraint = /etc/pins.txt\nfind-links = /from/global\n"
                            "[install]\nindex-url = https://install.example/simple\n",
                            PIP_FIND_LINKS="/from/env /and/more", PIP_CERT="/etc/ca.pem", PIP_TRUSTED_HOST="h1 h2")
    # The install section over the global one, a PIP_* variable over both; lists as pip splits them.
    assert env["UV_INDEX_URL"] == "https://install.example/simple"
    assert env["UV_FIND_LINKS"] == "/from/env,/and/more"
    assert env["UV_EXTRA_INDEX_URL"].split() == ["file:///opt/one", "file:///opt/two"]
    assert env["SSL_CERT_FILE"] == "/etc/ca.pem"
    pairs = list(zip(flags[::2], flags[1::2]))
    assert ("--constraint", "/etc/pins.txt") in pairs
    assert [v for k, v in pairs if k == "--allow-insecure-host"] == ["h1", "h2"]


def test_an_empty_value_leaves_the_weaker_setting(pip_config):
    _, env = pip_config("[global]\nindex-url = https://mirror.example/simple\n", PIP_INDEX_URL="")
    assert env["UV_INDEX_URL"] == "https://mirror.example/simple"


@pytest.mark.parametrize("word,on", [("y", True), ("t", True), ("on", True), ("1", True), ("off", False),
                                     ("0", False), ("false", False)])
def test_on_and_off_read_as_pip_reads_them(pip_config, word, on):
    machine = pip_config()[0]
    flags = pip_config(f"[global]\nno-index = {word}\n")[0]
    assert "--no-index" not in machine
    assert ("--no-index" in flags) is on


def test_no_build_isolation_false_turns_isolation_off_as_in_pip(pip_config):
    # pip's option is store_false: a config value of false means "no build isolation".
    assert "--no-build-isolation" in pip_config("[install]\nno-build-isolation = false\n")[0]
    assert "--no-build-isolation" not in pip_config("[install]\nno-build-isolation = true\n")[0]


def test_index_credentials_stay_off_the_command_line(pip_config):
    flags, env = pip_config(PIP_INDEX_URL="https://user:s3cret@mirror.example/simple")
    assert "s3cret" in env["UV_INDEX_URL"] and not any("s3cret" in f for f in flags)


def test_a_setting_that_installs_elsewhere_is_refused_by_name(pip_config):
    with pytest.raises(SettingError, match="--target") as refused:
        pip_config(PIP_TARGET="/somewhere/secret")
    assert "/somewhere/secret" not in str(refused.value)
    # Settings that change nothing about what is installed where pass.
    assert pip_config(PIP_REQUIRE_VIRTUALENV="true", PIP_PROGRESS_BAR="off") == pip_config()


def test_refusals_are_one_line_and_exit_2(tmp_path, capsys, pip_config):
    assert main([]) == 2
    assert main([str(tmp_path / "no-venv"), "six"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(str(tmp_path / "no-venv")) and "python3 -m venv" in err[-1]
    with pytest.raises(SettingError):
        pip_config(PIP_PREFIX="/elsewhere")  # and it stays set for main
    assert main([str(tmp_path / "no-venv"), "six"]) == 2  # refused before anything is looked for or run
    assert capsys.readouterr().err.strip().splitlines() == [
        "pip is configured with --prefix (`pip config list`), which a virtualenv's install cannot honour: "
        "unset it for `make setup`"]
