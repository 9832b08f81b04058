"""Entry point the Pulumi CLI runs (`main: infra/` in Pulumi.yaml)."""

import pulumi

from infra.config import ConfigError, from_pulumi
from infra.platform import build_platform

try:
    platform_config = from_pulumi()
except ConfigError as err:
    # RunError prints one line, no traceback, and nothing gets registered.
    raise pulumi.RunError(str(err)) from None

build_platform(platform_config)
