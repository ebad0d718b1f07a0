# SPDX-License-Identifier: Apache-2.0
"""What the tests' stand-in Kubernetes API servers share: JSON answers and Status objects."""
import http.server
import json


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """A quiet request handler that answers JSON, as the API server does."""

    def log_message(self, *args):
        pass

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def status(self, code, reason, message):
        """A failure as the API server says it: a v1 Status."""
        return self.reply(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                                 "code": code, "message": message})
