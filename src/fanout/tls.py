"""TLS for the relay's and the publisher's ports (``wss://``, ``https://``) and their clients.

A server is given its certificate chain and private key as PEM files (``--tls-cert``,
``--tls-key``); a client trusts the system's certificate authorities, or the ones in a PEM file
it is given (``--tls-ca``: for a private CA or a self-signed certificate). A server may also
require client certificates signed by authorities it is given (``--mqtt-tls-client-ca``).
"""

from __future__ import annotations

import ssl
from pathlib import Path

from fanout.errors import ConfigError


def server_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """A server's TLS context: TLS 1.2 or newer, with ``cert`` (chain, PEM) and ``key``; with
    ``client_ca`` (PEM), a client must present a certificate one of its authorities signed.

    Raises:
        ConfigError: a file cannot be read, or the key does not match the certificate.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except FileNotFoundError as exc:
        raise ConfigError(f"TLS: no such file {exc.filename}") from None
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"TLS: cannot load the certificate {cert} and key {key}: {exc}") from None
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        try:
            context.load_verify_locations(cafile=client_ca)
        except FileNotFoundError:
            raise ConfigError(f"TLS: no such client CA file {client_ca}") from None
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"TLS: cannot load the client CA file {client_ca}: {exc}") from None
    return context


def client_context(ca: Path | None = None) -> ssl.SSLContext:
    """A client's TLS context, verifying the server's certificate and name against the
    system's authorities, or only those in ``ca`` (PEM) when given.

    Raises:
        ConfigError: ``ca`` cannot be read or holds no certificate.
    """
    if ca is None:
        return ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificates and names
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_verify_locations(cafile=ca)
    except FileNotFoundError:
        raise ConfigError(f"TLS: no such CA file {ca}") from None
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"TLS: cannot load the CA file {ca}: {exc}") from None
    return context


def for_url(url: str, ca: Path | None = None) -> ssl.SSLContext | None:
    """The client context for ``url``: one for ``wss://`` and ``https://``, None otherwise."""
    if url.startswith(("wss://", "https://")):
        return client_context(ca)
    return None
