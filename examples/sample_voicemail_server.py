"""Serve a sample voicemail over HTTPS on 127.0.0.1, to try the call hand-off locally.

    python examples/sample_voicemail_server.py --port 8443 --ca-out var/sample-ca.pem

A throw-away CA (trustme) signs a certificate for 127.0.0.1 and localhost; its PEM is
written to --ca-out once the server listens (bin/run waits for it), so the service can
trust it (FETCH_CA_BUNDLE). The service refuses loopback hosts unless
UNSAFE_ALLOW_LOOPBACK_FETCH=1 is set: for trying it out only.
"""

from __future__ import annotations

import argparse
import http.server
import os
import ssl
import sys
import tempfile
from pathlib import Path

import trustme

AUDIO = Path(__file__).resolve().parent.parent / "tests" / "audio"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        name = self.path.split("?", 1)[0].lstrip("/")
        path = AUDIO / name
        # tests/audio itself, or its voicemails/ (the labelled set, Czech voices among them).
        if (
            name.count("/") > 1
            or (name.count("/") == 1 and not name.startswith("voicemails/"))
            or ".." in name
            or not path.is_file()
            or path.suffix not in (".mp3", ".wav")
        ):
            self.send_error(404)
            return
        body = path.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "audio/mpeg" if path.suffix == ".mp3" else "audio/wav")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--ca-out", default="var/sample-ca.pem")
    args = parser.parse_args()
    try:  # listen first: the CA file tells whoever waits for it that the server is there
        server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    except OSError as exc:
        sys.exit(
            f"sample server: cannot listen on 127.0.0.1:{args.port}: {exc.strerror} "
            "(bin/run: choose another port with SAMPLE_PORT)"
        )
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as tmp:
        chain, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        cert.private_key_pem.write_to_path(str(key))
        with open(chain, "wb") as out:
            for blob in cert.cert_chain_pems:
                out.write(blob.bytes())
        context.load_cert_chain(chain, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    partial = f"{args.ca_out}.partial"  # whole or absent: a reader never sees half a PEM
    ca.cert_pem.write_to_path(partial)
    os.replace(partial, args.ca_out)
    print(f"serving {AUDIO} on https://localhost:{args.port}/ (CA: {args.ca_out})", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
