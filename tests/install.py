"""`make setup`'s installer for the test and benchmark virtualenvs: uv, with this machine's
pip settings.

uv resolves and installs a virtualenv in seconds where pip takes minutes of CPU (the tracking
server's: 6 s against 124 s on 2 cores), and a fresh machine's `make test` spends most of its
setup there. But uv reads none of pip's configuration (pip.conf, PIP_*), and on a machine
whose pip is pointed at a mirror, a wheel folder or a constraints file, uv alone would
resolve against PyPI. So this asks pip for its settings (`pip config list`, every file and
PIP_* variable in pip's own precedence) and passes each on as uv's equivalent. A setting
that decides where packages come from or what they may be, with no equivalent here, stops
the install in one line rather than be dropped.

    .venv-uv/bin/python tests/install.py VENV REQUIREMENT... [-e .[extras]]

No bytecode is compiled at install (uv's default): Python writes each module's on its first
import, so only what runs is compiled, once (the Makefile does not pass on
PYTHONDONTWRITEBYTECODE, which would make every process compile again).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

# pip's sections, weakest first: [global], then the install command's, then PIP_* variables.
SECTIONS = ("global", "install", ":env:")
# pip setting -> uv flag, for each value (list settings split on whitespace, as pip does).
FLAGS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
         "constraint": "--constraint", "requirement": "--requirement", "trusted-host": "--allow-insecure-host",
         "only-binary": "--only-binary", "no-binary": "--no-binary"}
SWITCHES = {"no-index": "--no-index", "pre": "--prerelease=allow", "require-hashes": "--require-hashes",
            "no-build-isolation": "--no-build-isolation"}
# pip setting -> the environment variable uv reads for it.
ENV = {"cert": "SSL_CERT_FILE", "client-cert": "SSL_CLIENT_CERT", "timeout": "UV_HTTP_TIMEOUT",
       "default-timeout": "UV_HTTP_TIMEOUT", "proxy": "HTTPS_PROXY"}
# Settings about pip's own output, cache and prompts: nothing to pass on.
IGNORED = {"disable-pip-version-check", "no-cache-dir", "cache-dir", "progress-bar", "quiet", "verbose",
           "retries", "no-input", "root-user-action", "no-color", "log", "exists-action", "no-warn-script-location",
           "no-python-version-warning", "break-system-packages", "use-feature", "keyring-provider", "python",
           "config-file"}


class SettingError(Exception):
    """A pip setting that cannot be passed on: one line for the user."""


def pip_settings(listing: str) -> dict[str, str]:
    """`pip config list` lines (`section.key='value'`) as one value a key, the strongest
    section's: pip's PIP_* variables over its install section over its global one."""
    found: dict[tuple[int, str], str] = {}
    for line in listing.splitlines():
        name, sep, raw = line.partition("=")
        section, dot, key = name.rpartition(".")
        if not sep or not dot or section not in SECTIONS:
            continue
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        found[(SECTIONS.index(section), key)] = str(value)
    settings: dict[str, str] = {}
    for (_, key), value in sorted(found.items()):
        settings[key] = value
    return settings


def _on(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def uv_options(settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's flags and environment for pip's settings."""
    flags: list[str] = []
    env: dict[str, str] = {}
    for key, value in settings.items():
        if key in FLAGS:
            flags += [arg for item in value.split() for arg in (FLAGS[key], item)]
        elif key in SWITCHES:
            flags += [SWITCHES[key]] if _on(value) else []
        elif key in ENV:
            env[ENV[key]] = value
        elif key not in IGNORED:
            raise SettingError(f"pip's setting {key}={value!r} (`pip config list`) has no uv equivalent in "
                               f"tests/install.py: add one there, or unset it for `make setup`")
    return flags, env


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: tests/install.py VENV REQUIREMENT...", file=sys.stderr)
        return 2
    venv, requirements = Path(argv[0]), argv[1:]
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                             check=False)
    if listing.returncode != 0:
        print(f"`pip config list` failed: {listing.stderr.strip()[-300:]}", file=sys.stderr)
        return 1
    try:
        flags, env = uv_options(pip_settings(listing.stdout))
    except SettingError as err:
        print(err, file=sys.stderr)
        return 2
    if not (venv / "bin" / "python").is_file():
        print(f"{venv}/bin/python not found: make the virtualenv first (python3 -m venv {venv})", file=sys.stderr)
        return 2
    uv = Path(sys.executable).with_name("uv")
    if not uv.is_file():
        print(f"{uv} not found: `make setup` installs uv there first", file=sys.stderr)
        return 2
    # pip considers every index and takes the best version; uv's default takes the first
    # index that has the package at all. The same choice as pip, so the same environment.
    command = [str(uv), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
               "--index-strategy", "unsafe-best-match", *flags, *requirements]
    return subprocess.run(command, env={**os.environ, **env}, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
