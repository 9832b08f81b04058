"""The Pulumi program of the sovereign ML platform and its offline preview."""
