"""`make setup`'s installer for `.venv` and the test and benchmark virtualenvs: uv, with this
machine's pip settings.

uv resolves and installs a virtualenv in seconds where pip takes minutes of CPU (the tracking
server's: 6 s against 124 s on 2 cores), and a fresh machine's `make test` spent most of its
setup there. But uv reads none of pip's configuration (pip.conf, PIP_*), and on a machine
whose pip is pointed at a mirror, a wheel folder or a constraints file, uv alone would
resolve against PyPI. So this asks pip's own `install` command what its options are with no
arguments (pip's reading of every config file and PIP_* variable, its precedence, empty
values and on/off words included) and passes each that differs from pip's default on as uv's
equivalent. A setting that sends packages somewhere else (--target, --prefix, --root,
--user) stops the install in one line rather than be dropped. Index URLs go to uv in its
environment, not its command line, where any user of the machine could read a token in one.

    .venv-uv/bin/python tests/install.py VENV REQUIREMENT... [-e .[extras]]

No bytecode is compiled at install (uv's default): Python writes each module's on its first
import, so only what runs is compiled, once (the Makefile does not pass on
PYTHONDONTWRITEBYTECODE, which would make every process compile again).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

PYPI = "https://pypi.org/simple"
# pip options that put packages elsewhere than the virtualenv: uv has no place for them here.
REFUSED = {"target_dir": "--target", "prefix_path": "--prefix", "root_path": "--root", "use_user_site": "--user"}


class SettingError(Exception):
    """A pip setting that cannot be passed on: one line for the user (its name, never its value)."""


def pip_options() -> Any:
    """pip install's options as pip itself reads them from this machine's config and PIP_*."""
    from pip._internal.commands import create_command  # the pip of this virtualenv, pinned by it

    options, _ = create_command("install").parse_args([])
    return options


def uv_options(options: Any) -> tuple[list[str], dict[str, str]]:
    """uv's flags and environment for pip's options."""
    for name, flag in REFUSED.items():
        if getattr(options, name, None):
            raise SettingError(f"pip is configured with {flag} (`pip config list`), which a virtualenv's install "
                               f"cannot honour: unset it for `make setup`")
    flags: list[str] = []
    env: dict[str, str] = {}
    if options.index_url and options.index_url != PYPI:
        env["UV_INDEX_URL"] = options.index_url
    if options.extra_index_urls:
        env["UV_EXTRA_INDEX_URL"] = " ".join(options.extra_index_urls)
    if options.find_links:
        env["UV_FIND_LINKS"] = ",".join(options.find_links)
    if options.no_index:
        flags.append("--no-index")
    for path in options.constraints:
        flags += ["--constraint", path]
    for path in options.requirements:
        flags += ["--requirement", path]
    for host in options.trusted_hosts:
        flags += ["--allow-insecure-host", host]
    if options.pre:
        flags.append("--prerelease=allow")
    if options.require_hashes:
        flags.append("--require-hashes")
    if not options.build_isolation:
        flags.append("--no-build-isolation")
    for name in sorted(options.format_control.no_binary):
        flags += ["--no-binary", name]
    for name in sorted(options.format_control.only_binary):
        flags += ["--only-binary", name]
    if options.cert:
        env["SSL_CERT_FILE"] = options.cert
    if options.client_cert:
        env["SSL_CLIENT_CERT"] = options.client_cert
    if options.proxy:
        env["HTTPS_PROXY"] = env["HTTP_PROXY"] = options.proxy
    if options.timeout:
        env["UV_HTTP_TIMEOUT"] = str(math.ceil(options.timeout))  # uv takes whole seconds
    return flags, env


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: tests/install.py VENV REQUIREMENT...", file=sys.stderr)
        return 2
    venv, requirements = Path(argv[0]), argv[1:]
    try:
        flags, env = uv_options(pip_options())
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
    # --no-config: only pip's settings, not a uv.toml that `pip` never read.
    command = [str(uv), "pip", "install", "--quiet", "--no-config", "--python", str(venv / "bin" / "python"),
               "--index-strategy", "unsafe-best-match", *flags, *requirements]
    uv_env = {k: v for k, v in os.environ.items() if not k.startswith("UV_") or k == "UV_CACHE_DIR"}
    return subprocess.run(command, env={**uv_env, **env}, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
