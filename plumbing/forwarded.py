"""What a request says about how the client reached the service, believed only as far as
the operator says a proxy in front sets it (TRUST_FORWARDED_PROTO, TRUSTED_PROXY_HOPS):
a client can write every one of these headers itself."""

from __future__ import annotations

import re

import falcon

# A host name or an IP address (IPv6 in brackets), with a port: nothing else is an origin's.
_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}"
    r"[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$"
)


def is_secure(req: falcon.Request, trust_forwarded_proto: bool) -> bool:
    """Whether the browser reached us over https: the WSGI scheme, or the proxy's
    X-Forwarded-Proto when the operator says the proxy sets it (TRUST_FORWARDED_PROTO)."""
    if req.scheme == "https":
        return True
    return trust_forwarded_proto and (req.get_header("X-Forwarded-Proto") or "").lower() == "https"


def public_origin(req: falcon.Request, trust_forwarded_proto: bool, trusted_proxy_hops: int) -> str | None:
    """The origin (`https://clinic.example.org`) the client reached, as the trusted proxy
    in front reports it: its X-Forwarded-Host (the entry `trusted_proxy_hops` from the
    right, as for X-Forwarded-For) or the Host it forwarded, and its X-Forwarded-Proto.
    None when no proxy is trusted (the Host header is then only the client's word) or the
    host is not one."""
    if not trust_forwarded_proto and trusted_proxy_hops <= 0:
        return None
    host = req.get_header("Host") or ""
    forwarded = [entry.strip() for entry in (req.get_header("X-Forwarded-Host") or "").split(",") if entry.strip()]
    if trusted_proxy_hops > 0 and len(forwarded) >= trusted_proxy_hops:
        host = forwarded[-trusted_proxy_hops]
    if not _HOST.match(host):
        return None
    return f"{'https' if is_secure(req, trust_forwarded_proto) else req.scheme}://{host}"
