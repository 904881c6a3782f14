"""The serving certificate and key, checked before a server says it is serving.

gunicorn loads them only in its workers, at the first handshake: a bad file
would otherwise show as a server that logs "Serving ..." and then fails
every TLS handshake. Here each file is read on its own, so the error names
the one at fault, and then the pair is loaded as the server will load it.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization


class TLSMaterialError(ValueError):
    """A certificate or key that cannot serve; the message names the file."""


def check_serving_pair(certfile: Path, keyfile: Path) -> None:
    """Raise TLSMaterialError unless `certfile` holds a PEM certificate and `keyfile` its unencrypted private key."""
    try:
        x509.load_pem_x509_certificates(certfile.read_bytes())
    except OSError as e:
        raise TLSMaterialError(f"{certfile}: cannot be read: {e.strerror}") from None
    except ValueError as e:
        raise TLSMaterialError(f"{certfile}: not a PEM certificate ({e})") from None
    try:
        serialization.load_pem_private_key(keyfile.read_bytes(), password=None)
    except OSError as e:
        raise TLSMaterialError(f"{keyfile}: cannot be read: {e.strerror}") from None
    except TypeError:
        raise TLSMaterialError(f"{keyfile}: the private key is encrypted; the server needs it unencrypted") from None
    except ValueError as e:
        raise TLSMaterialError(f"{keyfile}: not a PEM private key ({e})") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(str(certfile), str(keyfile))
    except ssl.SSLError as e:
        if "KEY_VALUES_MISMATCH" in str(e) or "key values mismatch" in str(e):
            raise TLSMaterialError(f"{keyfile}: is not the private key of the certificate in {certfile}") from None
        raise TLSMaterialError(f"{certfile} with {keyfile}: cannot serve TLS ({e.reason or e})") from None
