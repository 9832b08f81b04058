"""Entry point the Pulumi CLI runs (`main: infra/` in Pulumi.yaml), for either layer."""

import pulumi

from infra.config import ConfigError, from_pulumi
from infra.platform import build_platform

try:
    layer_config = from_pulumi()
    build_platform(layer_config)
except ConfigError as err:
    # RunError prints one line, no traceback. Config errors, the cluster layer's descriptor
    # errors included, are raised before any resource is registered.
    raise pulumi.RunError(str(err)) from None
