"""A scripted HTTP server for download tests: good, missing, truncated and slow files."""

import time
from http.server import BaseHTTPRequestHandler

BODY = b"To be, or not to be, that is the question.\n" * 200


class Handler(BaseHTTPRequestHandler):
    hits: list = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.hits.append(self.path)
        if self.path == "/ok.txt":
            self._send(BODY)
        elif self.path == "/other.txt":
            self._send(b"a different file\n")
        elif self.path == "/truncated.txt":
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY[:100])
            self.wfile.flush()
            self.close_connection = True
        elif self.path == "/slow.txt":
            time.sleep(3)
            self._send(BODY)
        else:
            self.send_error(404)

    def _send(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
