"""The Spark source and sink against a cluster with ACL 2.0 on and TLS enforced: with ``accessKey`` /
``secretKey`` and ``tlsCaFile`` they read and write; without credentials the read fails naming the broker's
refusal."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.client.admin import Admin
from sluice.client.auth_admin import policy_entry
from sluice.common.config import AuthUser
from sluice.remoting.tls import client_context
from tests.conftest import Cluster, ServerLoop
from tests.tls_certs import CertificateAuthority

pytestmark = pytest.mark.spark

ROOT = ("root", "root-secret")


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[Cluster, CertificateAuthority]]:
    ca = CertificateAuthority(tmp_path / "pki")
    loop = ServerLoop()
    ns_cert, ns_key = ca.issue("namesrv")
    c = Cluster(tmp_path / "sluice", loop, namesrv_settings={
        "tls_server_mode": "enforcing", "tls_server_cert_path": str(ns_cert), "tls_server_key_path": str(ns_key)})
    c.credentials = ROOT
    try:
        b_cert, b_key = ca.issue("broker")
        c.start_broker(tls_server_mode="enforcing", tls_server_cert_path=str(b_cert), tls_server_key_path=str(b_key),
                       tls_enable=True, tls_client_trust_cert_path=str(ca.cert_path), tls_client_auth_server=True,
                       authentication_enabled=True, authorization_enabled=True,
                       init_authentication_user=AuthUser(username=ROOT[0], password=ROOT[1]))

        async def setup() -> None:
            tls = client_context(cafile=str(ca.cert_path))
            async with Admin(c.namesrv_addr, credentials=ROOT, tls=tls) as admin:
                await admin.create_topic("spark-secured", 2)
                await admin.create_user("sparky", "sparky-secret")
                await admin.create_acl("User:sparky", [policy_entry("Topic:spark-secured", "Pub,Sub,Get"),
                                                       policy_entry("Group:*", "Sub")])
        asyncio.run(setup())
        yield c, ca
    finally:
        c.close()
        loop.close()


def test_the_source_and_sink_read_and_write_with_credentials_over_tls(spark, secured) -> None:
    cluster, ca = secured
    access = {"namesrv": cluster.namesrv_addr, "accessKey": "sparky", "secretKey": "sparky-secret",
              "tlsCaFile": str(ca.cert_path)}
    spark.createDataFrame([(f"row-{i}",) for i in range(20)], ["value"]).write.format("sluice") \
        .mode("append").options(**access, topic="spark-secured").save()
    rows = spark.read.format("sluice").options(**access, topics="spark-secured").load().collect()
    assert sorted(bytes(r.value).decode() for r in rows) == sorted(f"row-{i}" for i in range(20))

    with pytest.raises(Exception, match="username cannot be null|no permission|NO_PERMISSION"):
        spark.read.format("sluice").options(namesrv=cluster.namesrv_addr, topics="spark-secured",
                                            tlsCaFile=str(ca.cert_path)).load().collect()
