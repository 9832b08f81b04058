"""Pure specs: what the network, cluster and node pool resources should look like,
computed without Pulumi so plain pytest can check them."""
