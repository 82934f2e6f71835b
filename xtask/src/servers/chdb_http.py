"""ClickHouse's HTTP interface over chDB: the current ClickHouse engine
(PyPI `chdb-core`, in-process) served on loopback, so that spool's
catalog sends every statement through a current release's parser,
analyzer and storage engines (the real tier's `real_chdb` tests; xtask's
`servers/chdb.rs` starts it).

    python chdb_http.py --port PORT --path DIR

One `chdb.session.Session` on DIR (MergeTree data on disk, as a server
keeps it) serves every request, one at a time. A request is what a
ClickHouse server takes over HTTP:

- `POST /` with the SQL as the body, or with `?query=` in the URL, when
  the body is the insert's data (`INSERT ... FORMAT F` with a body goes
  through chDB's streaming insert, so binary formats such as RowBinary
  arrive byte for byte; any other body is appended to the query text, as
  the server does); `GET /?query=...`; `GET /ping` answers `Ok.`.
- URL parameters: `default_format` (the output format unless the SQL
  names one; TabSeparated by default), `database` (the current database
  for this request), `user` / `password` or the `X-ClickHouse-User` /
  `X-ClickHouse-Key` headers (only `default` with an empty password, as
  the real tier's 18.16 server is configured), `param_NAME` (the values of
  `{NAME:Type}` placeholders); `query_id`, `session_id` and the other
  parameters of the HTTP interface that are no settings are ignored.
  Every other parameter is a setting: `SET` before the statement, set
  back to its value at start-up after it, so none leaks into the next
  request.
- A failure answers as the server does: an HTTP error status (401 for
  refused credentials, 400 for a syntax error, 404 for an unknown table
  or database, 500 otherwise), the `X-ClickHouse-Exception-Code` header
  and the body `Code: N. DB::Exception: ...`.

Each request is logged to standard error (status, time, settings, the
SQL, and the whole exception when it failed), so that a failed test can be
read from the log alone.
"""

import argparse
import http.server
import re
import sys
import threading
import time
import urllib.parse

import chdb
from chdb.session import Session

# Parameters of the HTTP interface that are not settings (ClickHouse's
# HTTPHandler reads them itself).
NOT_SETTINGS = {
    "query",
    "database",
    "default_format",
    "user",
    "password",
    "quota_key",
    "query_id",
    "session_id",
    "session_timeout",
    "session_check",
    "stacktrace",
    "role",
    "buffer_size",
    "wait_end_of_query",
    "compress",
    "decompress",
    "client_protocol_version",
}

SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CODE = re.compile(r"Code: (\d+)\.")
INSERT_WITH_FORMAT = re.compile(
    r"^\s*(INSERT\s.*?)\s+FORMAT\s+([A-Za-z0-9_]+)\s*;?\s*$", re.IGNORECASE | re.DOTALL
)
# The server's status for a few exception codes (the rest are 500).
STATUS = {62: 400, 115: 400, 60: 404, 81: 404, 192: 401, 193: 401, 194: 401, 195: 401, 516: 401}
# `Code:` of an exception this program raises itself (not the engine's).
STD_EXCEPTION = 1001


def quote(value):
    """A ClickHouse string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class Failure(Exception):
    """A request refused before it reached the engine."""

    def __init__(self, code, message):
        super().__init__(f"Code: {code}. DB::Exception: {message}")


class Engine:
    """The chDB session, its settings at start-up and the lock that
    serialises requests on it."""

    def __init__(self, path):
        self.session = Session(path)
        self.lock = threading.Lock()
        self.version = self.text("SELECT version()").strip()
        rows = self.text("SELECT name, value FROM system.settings WHERE changed")
        self.initial = dict(line.split("\t", 1) for line in rows.splitlines() if "\t" in line)

    def text(self, sql):
        return self.session.query(sql, "TabSeparated").bytes().decode()

    def run(self, sql, fmt, settings, database, params, data):
        """Runs one statement with its request's settings and database;
        returns the result's bytes."""
        with self.lock:
            applied = []
            try:
                for name, value in settings:
                    if not SETTING_NAME.match(name):
                        raise Failure(115, f"Unknown setting {name!r}")
                    self.session.query(f"SET {name} = {quote(value)}")
                    applied.append(name)
                if database:
                    self.session.query(f"USE `{database}`")
                if data is not None:
                    statement, data_format = data
                    inserter = self.session._conn.send_insert(statement, data_format)
                    try:
                        inserter.append(sql)
                    except BaseException:
                        inserter.cancel()
                        raise
                    inserter.finish()
                    return b""
                return self.session.query(sql, fmt, params=params or None).bytes()
            finally:
                for name in applied:
                    if name in self.initial:
                        self.session.query(f"SET {name} = {quote(self.initial[name])}")
                    else:
                        self.session.query(f"SET {name} = DEFAULT")
                if database:
                    self.session.query("USE default")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    engine = None  # set in main

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass  # each request is logged by `answer`

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/ping":
            self.reply(200, b"Ok.\n", {})
            return
        self.handle_query(url, b"")

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        self.handle_query(url, self.body())

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def handle_query(self, url, body):
        started = time.monotonic()
        args = urllib.parse.parse_qsl(url.query, keep_blank_values=True)
        one = dict(args)
        sql = one.get("query", "")
        settings = [(k, v) for k, v in args if k not in NOT_SETTINGS and not k.startswith("param_")]
        params = {k[len("param_"):]: v for k, v in args if k.startswith("param_")}
        fmt = one.get("default_format") or "TabSeparated"
        database = one.get("database", "")
        shown = sql if "query" in one else body.decode("utf-8", "replace")
        try:
            user = one.get("user") or self.headers.get("X-ClickHouse-User") or "default"
            password = one.get("password") or self.headers.get("X-ClickHouse-Key") or ""
            if user != "default" or password != "":
                raise Failure(
                    516,
                    f"{user}: Authentication failed: password is incorrect, or there is no user with such name. (AUTHENTICATION_FAILED)",
                )
            if one.get("compress") == "1" or one.get("decompress") == "1":
                raise Failure(STD_EXCEPTION, "ClickHouse's native compression (compress=1, decompress=1) is not served here")
            data = None
            if "query" not in one:
                sql = body.decode("utf-8")
            elif body:
                insert = INSERT_WITH_FORMAT.match(sql)
                if insert:
                    data = (insert.group(1), insert.group(2))
                    sql = body
                else:
                    sql = sql + "\n" + body.decode("utf-8")
            if not isinstance(sql, bytes) and not sql.strip():
                raise Failure(62, "Empty query. (SYNTAX_ERROR)")
            out = self.engine.run(sql, fmt, settings, database, params, data)
        except Exception as e:  # the engine's ChdbError, a Failure, or ours
            message = str(e).strip()
            found = CODE.search(message)
            if found is None:
                message = f"Code: {STD_EXCEPTION}. DB::Exception: {type(e).__name__}: {message}"
                code = STD_EXCEPTION
            else:
                code = int(found.group(1))
            message = f"{message} (version {self.engine.version})\n"
            self.log(started, code, fmt, settings, shown, message)
            self.reply(
                STATUS.get(code, 500),
                message.encode(),
                {"X-ClickHouse-Exception-Code": str(code), "Content-Type": "text/plain; charset=UTF-8"},
            )
            return
        self.log(started, 200, fmt, settings, shown, "")
        self.reply(200, out, {"X-ClickHouse-Format": fmt})

    def log(self, started, status, fmt, settings, sql, error):
        ms = (time.monotonic() - started) * 1000
        shown = sql if len(sql) <= 4000 else sql[:4000] + f"... ({len(sql)} chars)"
        extra = "".join(f" {k}={v}" for k, v in settings)
        line = f"{time.strftime('%H:%M:%S')} {status} {ms:.1f} ms {fmt}{extra} | {shown}"
        if error:
            line += "\n    " + error.strip()
        print(line, file=sys.stderr, flush=True)

    def reply(self, status, body, headers):
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--path", required=True, help="the engine's data directory")
    a = p.parse_args()
    Handler.engine = Engine(a.path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    server.daemon_threads = True
    print(f"chdb-http: ClickHouse {Handler.engine.version} (chdb {chdb.__version__}) on 127.0.0.1:{a.port}, data in {a.path}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
