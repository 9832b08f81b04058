"""Each tenant's pipeline-engine database on the tracking server's PostgreSQL (docs/pipelines.md).

One Airflow runs in each tenant's namespace, and each keeps its metadata in its own database
on the platform's PostgreSQL (on AWS: the tracking RDS instance, under the tracking CMK, TLS
only), owned by a login role of its own: `airflow_<tenant>`. The tracking server holds the
instance's master credentials already, so it makes them, as it makes the tenants' MLflow
users, at start and on every round: the role with the password of the tenant's secret (a
rotated secret resets it), the database owned by that role, and CONNECT revoked from PUBLIC,
so one tenant's role cannot even open another tenant's database.

Written for a master user that is not a superuser (RDS's is not): it has CREATEROLE and
CREATEDB, and PostgreSQL 16 and later let it hand a database to a role only after granting
itself that role's membership.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from workloads.tracking.server import Database

PREFIX = "airflow_"


def database_name(tenant: str) -> str:
    """The tenant's role and database: `airflow_` and the tenant's name, '-' as '_' (a
    tenant name is a DNS label, so the result is a plain lowercase identifier)."""
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", tenant):
        raise ValueError(f"{tenant!r} is not a tenant name (a DNS label)")
    return PREFIX + tenant.replace("-", "_")


def ensure_pipeline_databases(database: Database, passwords: Mapping[str, str]) -> None:
    """Each tenant's role (its password set from `passwords`) and its own database; idempotent."""
    if not passwords:
        return
    import psycopg
    from psycopg import sql

    # autocommit: CREATE DATABASE cannot run in a transaction.
    connection = psycopg.connect(database.uri(), autocommit=True)
    try:
        with connection.cursor() as cursor:
            for tenant, password in sorted(passwords.items()):
                name = database_name(tenant)
                role, literal = sql.Identifier(name), sql.Literal(password)
                cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,))
                if cursor.fetchone() is None:
                    cursor.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD {}")
                                   .format(role, literal))
                else:
                    cursor.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(role, literal))
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cursor.fetchone() is None:
                    # Owning it by name needs membership of the role (SET, from PostgreSQL 16).
                    cursor.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(role))
                    cursor.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(role, role))
                cursor.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(role))
    finally:
        connection.close()
