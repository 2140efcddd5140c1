"""TLS files: ``--ssl-certfile`` / ``--ssl-keyfile`` / ``--ssl-ca-certs``, or a self-signed
certificate made at start-up (``--self-signed-certs``, with the ``cryptography`` package), and
``--ssl-ciphers`` / ``--ssl-cert-reqs``.
"""
from __future__ import annotations

import atexit
import os



# ---------------------------------------------------------------------------------------------
# TLS
def make_self_signed_cert(directory: str, host: str = "") -> tuple[str, str]:
    """Write a self-signed certificate and its key (PEM) into ``directory``; returns
    ``(certfile, keyfile)``.

    As the reference's ``--self-signed-certs`` (O="llm-d Inference Simulator", serverAuth, ten
    years) but with an ECDSA P-256 key instead of RSA-4096 (made in milliseconds, not seconds)
    and with subject alternative names ``localhost``, ``127.0.0.1``, ``::1`` and ``host``, so a
    client can pin the file and still check the host name."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "llm-d Inference Simulator"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    sans: list = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                  x509.IPAddress(ipaddress.ip_address("::1"))]
    if host and host not in ("0.0.0.0", "::", "localhost", "127.0.0.1", "::1"):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    certfile = os.path.join(directory, "cert.pem")
    keyfile = os.path.join(directory, "key.pem")
    fd = os.open(keyfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    with open(certfile, "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    return certfile, keyfile


_SELF_SIGNED_DIRS: list[str] = []


def remove_self_signed_files() -> None:
    """Remove the ``--self-signed-certs`` directory once the listeners' TLS context holds the
    pair: a private key never outlives the server's start-up on disk, even when the process is
    killed (SIGKILL runs no ``atexit``; tests and Kubernetes both kill)."""
    import shutil
    while _SELF_SIGNED_DIRS:
        shutil.rmtree(_SELF_SIGNED_DIRS.pop(), True)


def tls_files(config) -> dict | None:
    """The TLS settings for gunicorn (``certfile``, ``keyfile``, ``ca_certs``, ``ciphers``,
    ``cert_reqs``; None where unset), or None for plain HTTP.  ``--self-signed-certs`` makes a pair in a private temporary directory
    (mode 0700), removed by :func:`remove_self_signed_files` once the worker has loaded it.  The pair is loaded once here so that a bad file is one line
    at start-up (raises ValueError naming the flag), not a failure per connection."""
    import ssl
    certfile = getattr(config, "ssl_certfile", "") or ""
    keyfile = getattr(config, "ssl_keyfile", "") or ""
    ca = getattr(config, "ssl_ca_certs", "") or ""
    if getattr(config, "self_signed_certs", False):
        if certfile or keyfile:
            raise ValueError("cannot use both self-signed-certs and explicit ssl-certfile/ssl-keyfile")
        import shutil
        import tempfile
        directory = tempfile.mkdtemp(prefix="vllm-sim-tls-")
        atexit.register(shutil.rmtree, directory, True)
        _SELF_SIGNED_DIRS.append(directory)
        certfile, keyfile = make_self_signed_cert(directory, config.host)
    elif bool(certfile) != bool(keyfile):
        raise ValueError("both ssl-certfile and ssl-keyfile must be provided together")
    if not certfile:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"--ssl-certfile/--ssl-keyfile: cannot load {certfile} / {keyfile}: {e}") from None
    if ca:
        try:
            ctx.load_verify_locations(ca)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"--ssl-ca-certs: cannot load {ca}: {e}") from None
    ciphers = getattr(config, "ssl_ciphers", "") or ""
    if ciphers:
        try:
            ctx.set_ciphers(ciphers)
        except ssl.SSLError as e:
            raise ValueError(f"--ssl-ciphers: {ciphers!r} selects no cipher OpenSSL knows ({e})") from None
    # gunicorn's ssl_context applies them as uvicorn does vLLM's --ssl-ciphers / --ssl-cert-reqs
    return {"certfile": certfile, "keyfile": keyfile, "ca_certs": ca or None, "ciphers": ciphers or None,
            "cert_reqs": getattr(config, "ssl_cert_reqs", 0) or None}


