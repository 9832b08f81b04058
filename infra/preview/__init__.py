"""The offline preview: the real program under Pulumi's mocks, judged by the real policy
pack over the analyzer gRPC protocol. No cloud credentials, no CLI, no secrets."""
