"""`mlplat deploy --stack S [--preview] [--config KEY=VALUE]`: one run of the real engine
on a stack, exactly as the deploy workflow runs it, so it runs the same outside GitHub
(make up, a rehearsal, a person at the break-glass role).

What a first run against an empty backend needs, in order:
1. the state backend named (PULUMI_BACKEND_URL: the state bucket `mlplat bootstrap`
   made), never Pulumi's service by default;
2. the policy pack's environment, `policies/venv` (PulumiPolicy.yaml names it; the CLI
   starts the pack with that interpreter and does not make it);
3. the stack, created on first deploy with the secrets provider its stack file names
   (the account's state-secrets key), where `pulumi up --stack` alone would stop at "no
   stack named";
4. `pulumi up --yes` with the pack and the environment's pack config.

A preview never creates a stack: where none exists yet, nothing is deployed to compare
with, and it says so and succeeds (the offline preview is the record).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from infra.bootstrap import SECRETS_KEY_ALIAS, kms_secrets_provider
from infra.config import CLUSTER_SUFFIX, ConfigError, read_stack_document, site_of, stack_file

PACK = "policies"
PACK_VENV = "venv"  # PulumiPolicy.yaml: runtime.options.virtualenv
NO_STACK = "no stack named"


class DeployError(Exception):
    """A user error: one line, exit 2."""


def environment_of(stack: str) -> str:
    return stack.removesuffix(CLUSTER_SUFFIX)


def secrets_provider(stack: str, stacks_dir: Path) -> str | None:
    """The stack file's `secretsprovider`, checked: on AWS, the state-secrets key of the
    stack's own region. A customer's cluster chooses its own (docs/onprem.md)."""
    path = stack_file(stack, stacks_dir)
    try:
        document = read_stack_document(path)
    except ConfigError as err:
        raise DeployError(str(err)) from None
    provider, raw = document.get("secretsprovider"), document.get("config") or {}
    region = str(raw.get("aws:region") or raw.get("mlplat:region") or "")
    if site_of(environment_of(stack)) != "aws":
        return provider
    if not isinstance(provider, str) or not provider.startswith("awskms://"):
        raise DeployError(f"{path}: secretsprovider: {provider or 'not set'}; an AWS stack's secrets are encrypted "
                          f"with the state-secrets key: secretsprovider: {kms_secrets_provider(SECRETS_KEY_ALIAS, region)} "
                          "(mlplat bootstrap prints it)")
    named = parse_qs(urlparse(provider).query).get("region", [""])[0]
    if named != region:
        raise DeployError(f"{path}: secretsprovider: {provider} names region {named or 'none'}, not the stack's "
                          f"{region}; the key must be in the stack's region")
    return provider


def check_backend(env: dict[str, str]) -> str:
    url = env.get("PULUMI_BACKEND_URL", "")
    if not url.startswith(("s3://", "file://")):
        raise DeployError(f"PULUMI_BACKEND_URL is {url or 'not set'}: set it to the state bucket "
                          "(s3://mlplat-state-<account>-<region>?region=<region>, printed by mlplat bootstrap)")
    return url


def pack_commands(root: Path, python: str = sys.executable) -> list[list[str]]:
    """Commands that make the pack's environment where it is not there yet."""
    venv = root / PACK / PACK_VENV
    if (venv / "bin" / "python").exists():
        return []
    return [[python, "-m", "venv", str(venv)],
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "-r", str(root / PACK / "requirements.txt")]]


def engine_commands(stack: str, *, preview: bool, provider: str | None, config: Sequence[str],
                    pulumi: str = "pulumi") -> list[list[str]]:
    """The stack selection, then the engine run."""
    select = [pulumi, "stack", "select", "--stack", stack, "--non-interactive"]
    if not preview:
        select += ["--create"] + (["--secrets-provider", provider] if provider else [])
    run = [pulumi, "preview" if preview else "up", "--stack", stack, "--non-interactive",
           "--policy-pack", PACK, "--policy-pack-config", f"{PACK}/config/{environment_of(stack)}.json"]
    if not preview:
        run.append("--yes")
    for item in config:
        run += ["--config", item]
    return [select, run]


def deploy(stack: str, *, preview: bool, config: Sequence[str], root: Path, stacks_dir: Path,
           say: Callable[[str], None], env: dict[str, str] | None = None) -> int:
    """Run every step; the engine's exit code (0 when a preview finds no stack yet)."""
    env = dict(os.environ if env is None else env)
    for item in config:
        if "=" not in item or not item.split("=", 1)[0].count(":"):
            raise DeployError(f"--config {item!r}: expected namespace:key=value, e.g. mlplat:platformImages={{...}}")
    check_backend(env)
    provider = secrets_provider(stack, stacks_dir)
    if not (root / "Pulumi.yaml").is_file():
        raise DeployError(f"{root}: no Pulumi.yaml; run from the project's root")
    pulumi = env.get("PULUMI", "pulumi")
    for command in pack_commands(root):
        say(f"policy pack environment: {' '.join(command[:4])} ...")
        if subprocess.run(command, cwd=root, env=env).returncode != 0:
            raise DeployError(f"could not make {PACK}/{PACK_VENV} (the command above failed); check that pip "
                              f"reaches its index, then run again")
    select, run = engine_commands(stack, preview=preview, provider=provider, config=config, pulumi=pulumi)
    say(" ".join(select))
    try:
        chosen = subprocess.run(select, cwd=root, env=env, capture_output=True, text=True)
    except FileNotFoundError:
        raise DeployError(f"{pulumi}: the Pulumi CLI is not installed (https://www.pulumi.com/docs/install/)") from None
    if chosen.returncode != 0:
        if preview and NO_STACK in chosen.stderr:
            say(f"{stack}: not deployed yet, so there is nothing to compare with; the offline preview stands")
            return 0
        sys.stderr.write(chosen.stderr)
        return chosen.returncode
    say(" ".join(run[:8]) + (" ..." if len(run) > 8 else ""))
    return subprocess.run(run, cwd=root, env=env).returncode
