"""A job's own TLS material for the setup proxy, so it can add credentials to HTTPS indexes."""

# The proxy (proxy.py) can add an Authorization header only to requests it can read, so for
# an HTTPS index with configured credentials it intercepts TLS: it verifies the index's real
# certificate upstream and shows setup a certificate of its own for that host. Setup trusts
# that certificate through a CA made for this job alone, which:
#   - is name-constrained to the job's credentialed hosts (RFC 5280 4.2.1.10; a DNS name
#     covers its subdomains too), so it vouches for nothing else even where a client keeps
#     trusting it;
#   - lives one day;
#   - has its private key dropped as soon as the host certificates are signed: the key is
#     never written to disk, so no one, the proxy included, can sign anything more with it.
# Hosts without credentials are never intercepted: their TLS goes through as an opaque tunnel.

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field

import certifi
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LIFETIME = dt.timedelta(days=1)
SKEW = dt.timedelta(minutes=5)  # a container's clock a little behind the worker's
# Stand-ins that can never match, so a CA for DNS hosts alone vouches for no IP address and
# the other way round (a name type left out of the constraints would be unconstrained).
_NO_DNS = x509.DNSName("onloop-no-host.invalid")
_NO_IP: list[x509.GeneralName] = [
    x509.IPAddress(ipaddress.ip_network("0.0.0.0/32")),
    x509.IPAddress(ipaddress.ip_network("::/128")),
]


@dataclass(frozen=True)
class JobTls:
    """What the proxy needs (host certificates and their key) and what setup trusts (the CA)."""

    ca_pem: bytes
    key_pem: bytes = field(repr=False)  # the host certificates' key (not the CA's)
    certs: dict[str, bytes]  # host -> certificate (PEM), as proxy.py names them: <host>.pem

    def proxy_files(self, upstream_ca: bytes = b"") -> dict[str, bytes]:
        """The proxy's files (paths relative to its config directory; see `proxy_flags`).
        It verifies the real index against the public CAs and `upstream_ca`."""
        files = {"tls/key.pem": self.key_pem, "tls/ca.pem": self.ca_pem}
        files["tls/upstream.pem"] = certifi.contents().encode() + b"\n" + upstream_ca
        return files | {f"certs/{host}.pem": pem for host, pem in self.certs.items()}

    def trust_files(self, extra_ca: bytes = b"") -> dict[str, bytes]:
        """What setup trusts: the job CA, and a bundle of the public CAs, `extra_ca` (the
        operator's, e.g. a company CA) and the job CA (no secret in either)."""
        bundle = b"\n".join([certifi.contents().encode(), extra_ca, self.ca_pem])
        return {"ca.pem": self.ca_pem, "bundle.pem": bundle}


def check_ca_bundle(data: bytes) -> int:
    """How many CA certificates a PEM bundle (ONLOOP_EGRESS_CA_FILE) holds; ValueError when
    it holds none or something else."""
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise ValueError("not a PEM bundle of certificates") from exc
    for cert in certs:
        try:
            if not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
                raise ValueError(f"{cert.subject.rfc4514_string()} is not a CA certificate")
        except x509.ExtensionNotFound:
            continue  # an old root without the extension
    return len(certs)


def proxy_flags(conf: str) -> list[str]:
    """proxy.py's TLS interception with `JobTls.proxy_files` under `conf`. proxy.py turns
    interception on only with a CA key file too; that flag names the host key, as the CA's
    key no longer exists. It would serve only to sign a certificate for a host the job has
    none for, and the plugin never intercepts such a host."""
    flags = ["--ca-cert-dir", f"{conf}/certs", "--ca-cert-file", f"{conf}/tls/ca.pem"]
    flags += ["--ca-key-file", f"{conf}/tls/key.pem"]
    flags += ["--ca-signing-key-file", f"{conf}/tls/key.pem"]
    return [*flags, "--ca-file", f"{conf}/tls/upstream.pem"]


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _constraints(hosts: Sequence[str]) -> x509.NameConstraints:
    names = [_general_name(h) for h in hosts]
    dns: list[x509.GeneralName] = [n for n in names if isinstance(n, x509.DNSName)]
    ips: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_network(n.value))
        for n in names
        if isinstance(n, x509.IPAddress)
    ]
    permitted = (dns or [_NO_DNS]) + (ips or _NO_IP)
    return x509.NameConstraints(permitted_subtrees=permitted, excluded_subtrees=None)


def make_job_tls(hosts: Sequence[str], job_id: int | None = None) -> JobTls:
    """A CA for `hosts` alone and a certificate for each host, signed, the CA key dropped."""
    hosts = sorted(set(hosts))
    if not hosts:
        raise ValueError("a job CA needs at least one host")
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    name = "onloop setup" if job_id is None else f"onloop setup job {job_id}"
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - SKEW)
        .not_valid_after(now + LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(_constraints(hosts), critical=True)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    certs = {}
    for host in hosts:
        cert = (
            x509.CertificateBuilder()
            # No common name: OpenSSL would check one that looks like a host name (an IP
            # address does) against the DNS constraints. The name is in the SAN alone.
            .subject_name(x509.Name([]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - SKEW)
            .not_valid_after(now + LIFETIME)
            .add_extension(x509.SubjectAlternativeName([_general_name(host)]), critical=True)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        certs[host] = cert.public_bytes(serialization.Encoding.PEM)
    del ca_key  # never serialised: nothing more can be signed with it
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return JobTls(ca.public_bytes(serialization.Encoding.PEM), key_pem, certs)
