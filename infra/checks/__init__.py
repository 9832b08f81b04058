"""Checks of what will be applied: rendered charts and the program's own Kubernetes objects,
judged the way the API server, the chart and the registry will judge them."""
