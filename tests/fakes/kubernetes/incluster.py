"""In-cluster access for the fake's Pods, as a real cluster gives it: the API server also serves
HTTPS with a cluster CA, every Pod gets its ServiceAccount token, namespace and CA at
/var/run/secrets/kubernetes.io/serviceaccount plus KUBERNETES_SERVICE_HOST/PORT, and cluster DNS
resolves `<service>.<namespace>.svc.cluster.local`.

Pods share the host network here (there is no kube-proxy), so a Service name resolves to loopback
and reaches the Pod listening on the Service's port there, as with `hostNetwork: true`.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
CLUSTER_DOMAIN = "svc.cluster.local"
TOKEN = "fake-in-cluster-token"


@dataclass(frozen=True)
class InCluster:
    host: str
    port: int
    ca_pem: bytes
    token: str = TOKEN

    def env(self) -> dict[str, str]:
        return {
            "KUBERNETES_SERVICE_HOST": self.host,
            "KUBERNETES_SERVICE_PORT": str(self.port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(self.port),
        }

    def service_account_files(self, namespace: str) -> dict[str, bytes]:
        return {"token": self.token.encode(), "namespace": namespace.encode(), "ca.crt": self.ca_pem}


def service_hosts(services: list[dict[str, Any]]) -> dict[str, str]:
    """Cluster DNS names of every Service -> the loopback address their Pods listen on."""
    hosts = {}
    for service in services:
        name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
        for host in (f"{name}.{namespace}.{CLUSTER_DOMAIN}", f"{name}.{namespace}.svc"):
            hosts[host] = "127.0.0.1"
    return hosts


def server_tls_context(state_dir: Path) -> tuple[ssl.SSLContext, bytes]:
    """A TLS context for the API server with a fresh self-signed certificate for 127.0.0.1 and the
    in-cluster names; returns it with the certificate (the CA Pods trust)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.DNSName("kubernetes.default.svc"),
                    x509.DNSName(f"kubernetes.default.{CLUSTER_DOMAIN}"),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
    state_dir.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = state_dir / "apiserver.crt", state_dir / "apiserver.key"
    cert_path.write_bytes(cert_pem)
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return context, cert_pem


def make_tls_server(cluster: Any, context: ssl.SSLContext, host: str = "127.0.0.1") -> Any:
    """The same API as make_server, over HTTPS; the handshake happens on the request's thread."""
    from fakes.kubernetes.api import ApiHandler, _ApiServer

    class TlsApiServer(_ApiServer):
        def finish_request(self, request: Any, client_address: Any) -> None:
            try:
                wrapped = context.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                return
            super().finish_request(wrapped, client_address)

    handler = type("BoundTlsApiHandler", (ApiHandler,), {"cluster": cluster})
    return TlsApiServer((host, 0), handler)
