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
