"""TLS configuration (issue 10 Security): the certificate flags go in pairs, and an unreadable
certificate is one line."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("flags,message", [
    (["--ssl-certfile", "c.pem"], "both ssl-certfile and ssl-keyfile must be provided together"),
    (["--ssl-keyfile", "k.pem"], "both ssl-certfile and ssl-keyfile must be provided together"),
    (["--self-signed-certs", "--ssl-certfile", "c.pem", "--ssl-keyfile", "k.pem"],
     "cannot use both self-signed-certs and explicit ssl-certfile/ssl-keyfile"),
])
def test_tls_flag_pairs(flags, message):
    from generation.config.values import ConfigError
    from generation.config.cli import load_config
    with pytest.raises(ConfigError, match=message):
        load_config(flags, env={})


def test_unreadable_certificate_is_one_line(tmp_path):
    from server.tls import tls_files
    from generation.config.cli import load_config
    missing = str(tmp_path / "missing.pem")
    cfg = load_config(["--ssl-certfile", missing, "--ssl-keyfile", missing], env={})
    with pytest.raises(ValueError, match="--ssl-certfile/--ssl-keyfile: cannot load"):
        tls_files(cfg)


def test_ssl_ciphers_and_cert_reqs_reach_gunicorns_tls_context(tmp_path):
    """vLLM 0.34's --ssl-ciphers / --ssl-cert-reqs, which it hands to uvicorn: gunicorn's
    ``ciphers`` / ``cert_reqs`` settings here, checked at start-up."""
    import ssl

    from gunicorn.config import Config
    from gunicorn.sock import ssl_context

    from generation.config.cli import load_config
    from generation.config.values import ConfigError
    from server.serve import apply_server_settings
    from server.tls import make_self_signed_cert, tls_files
    cert, key = make_self_signed_cert(str(tmp_path))
    cipher = "ECDHE-ECDSA-AES256-GCM-SHA384"
    cfg = load_config(["--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-ca-certs", cert, "--ssl-ciphers", cipher,
                       "--ssl-cert-reqs", "2"], env={})
    tls = tls_files(cfg)
    assert (tls["ciphers"], tls["cert_reqs"]) == (cipher, 2)
    g = Config()
    apply_server_settings(g.set, cfg, tls)
    ctx = ssl_context(g)
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"} == {cipher}
    plain = tls_files(load_config(["--ssl-certfile", cert, "--ssl-keyfile", key], env={}))
    assert (plain["ciphers"], plain["cert_reqs"]) == (None, None)          # OpenSSL's defaults, CERT_NONE
    bad = load_config(["--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-ciphers", "NO-SUCH-CIPHER"], env={})
    with pytest.raises(ValueError, match="--ssl-ciphers: 'NO-SUCH-CIPHER' selects no cipher"):
        tls_files(bad)
    with pytest.raises(ConfigError, match="--ssl-cert-reqs must be 0"):
        load_config(["--ssl-cert-reqs", "3"], env={})
