"""One ComponentResource per capability of the platform."""
