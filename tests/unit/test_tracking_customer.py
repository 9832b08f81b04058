"""The tracking server on a customer's cluster (docs/onprem.md), as plain data: its
credentials read from the customer's mounted Secrets, and its pod spec and fences built
from the descriptor's PostgreSQL and object store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from components.tracking_spec import (
    TRACKING_USERS,
    CustomerStores,
    ServerPlan,
    customer_objects,
    deployment,
    network_policies,
)
from workloads.tracking.server import database_from_dsn, settings_from_files

STORES = CustomerStores(database_secret="mlflow-database", database_key="dsn", database_port=5432,
                        database_cidrs=("10.40.9.0/28",), endpoint="https://s3.dc1.example.ae:8443",
                        region="ae-auh-dc1", credentials_secret="object-store", store_cidrs=("10.40.8.0/27",),
                        ca_bundle="-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
PLAN = ServerPlan(image="harbor.dc1.example.ae/mlplat/onprem/tracking:0.1.0@sha256:" + "0" * 64, replicas=2,
                  instance_types=("r760-cpu",), db_host="", master_secret_arn="", admin_secret_arn="",
                  tenant_secret_arns={}, artifacts="s3://models/mlflow", region="ae-auh-dc1", vpc_cidr="",
                  endpoint_cidrs=(), tenants=("research", "applied"), customer=STORES)


def test_a_dsn_is_read_as_libpq_writes_it():
    db = database_from_dsn("postgresql://ml%40flow:p%2Fw@pg.dc1.example.ae:6432/tracking?sslmode=verify-full"
                           "&sslrootcert=/etc/mlplat/ca/ca.crt")
    assert (db.host, db.port, db.name, db.user, db.password) == ("pg.dc1.example.ae", 6432, "tracking", "ml@flow", "p/w")
    assert (db.sslmode, db.sslrootcert) == ("verify-full", "/etc/mlplat/ca/ca.crt")
    plain = database_from_dsn("postgres://u:p@pg/")
    assert (plain.port, plain.name, plain.sslmode) == (5432, "mlflow", "verify-full")  # TLS verified by default
    with pytest.raises(ValueError, match="not postgresql://"):
        database_from_dsn("mysql://u:p@db/mlflow")


def test_the_settings_come_from_the_mounted_secrets(tmp_path: Path):
    (tmp_path / "dsn").write_text("postgresql://mlflow:pw@pg:5432/mlflow\n")
    users = tmp_path / "users"
    users.mkdir()
    for key, value in {"admin": "a", "flask-secret-key": "k", "tenant.research": "r", "tenant.applied": "p"}.items():
        (users / key).write_text(value + "\n")
    env = {"MLPLAT_DB_DSN_FILE": str(tmp_path / "dsn"), "MLPLAT_USERS_DIR": str(users),
           "MLPLAT_ARTIFACTS": "s3://models/mlflow", "MLPLAT_PORT": "5001"}
    settings, tenants = settings_from_files(env)
    assert (settings.admin_password, settings.secret_key, settings.port) == ("a", "k", 5001)
    assert settings.database.password == "pw" and tenants == {"applied": "p", "research": "r"}
    (users / "admin").write_text("\n")
    with pytest.raises(ValueError, match="admin is empty"):
        settings_from_files(env)


def test_the_pod_reads_the_customers_secrets_and_store_and_nothing_of_aws():
    manifest = deployment(PLAN)
    pod = manifest["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert not [name for name in env if "SECRET_ARN" in name or name == "MLPLAT_DB_HOST"]
    assert env["MLFLOW_S3_ENDPOINT_URL"] == env["AWS_ENDPOINT_URL_S3"] == "https://s3.dc1.example.ae:8443"
    assert env["AWS_CA_BUNDLE"] == "/etc/mlplat/ca/ca.crt" and env["AWS_REGION"] == "ae-auh-dc1"
    assert "envFrom" not in container  # every credential a file, none in the environment
    assert env["AWS_SHARED_CREDENTIALS_FILE"] == "/etc/mlplat/object-store/credentials"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["store"]["secret"] == {"secretName": "object-store", "defaultMode": 0o440,
                                          "items": [{"key": "credentials", "path": "credentials"}]}
    assert volumes["database"]["secret"]["items"] == [{"key": "dsn", "path": "dsn"}]
    assert volumes["users"]["secret"]["secretName"] == TRACKING_USERS
    assert all(volumes[v]["secret"]["defaultMode"] == 0o440 for v in ("database", "users", "store"))  # fsGroup
    assert manifest["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    assert deployment(replace(PLAN, customer=None))["metadata"].get("annotations") is None


def test_it_reaches_its_database_and_store_and_nothing_else():
    policies = {p["metadata"]["name"]: p["spec"] for p in network_policies(PLAN)}
    assert set(policies) == {"default-deny", "allow-tenants", "allow-egress"}
    egress = policies["allow-egress"]["egress"]
    assert egress[1] == {"to": [{"ipBlock": {"cidr": "10.40.9.0/28"}}], "ports": [{"protocol": "TCP", "port": 5432}]}
    assert egress[2] == {"to": [{"ipBlock": {"cidr": "10.40.8.0/27"}}], "ports": [{"protocol": "TCP", "port": 8443}]}
    assert len(egress) == 3  # DNS first; no Pod Identity agent, no VPC endpoints
    [ca] = customer_objects(PLAN)
    assert (ca["kind"], ca["metadata"]["namespace"], ca["data"]["ca.crt"]) == ("ConfigMap", "mlflow", STORES.ca_bundle)
    assert customer_objects(replace(PLAN, customer=None)) == []
