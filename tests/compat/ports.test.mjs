// A server listening inside the sandbox is reachable through the endpoint the SDK resolves for its
// port (getEndpoint / getEndpointUrl), in both endpoint modes: plain HTTP and WebSocket upgrades.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { randomBytes, createHash } from "node:crypto";

import { poll, sh, withSandbox } from "./lib.mjs";

for (const useServerProxy of [true, false]) {
  test(`web server in the sandbox reachable via getEndpointUrl (useServerProxy=${useServerProxy})`, async () => {
    await withSandbox({ useServerProxy, metadata: { case: `ports-${useServerProxy}` } }, async (sbx) => {
      await sh(sbx, "mkdir -p /tmp/www/sub && echo hi-from-sandbox > /tmp/www/hello.txt && echo deep > /tmp/www/sub/x.txt");
      const bg = await sbx.commands.run("cd /tmp/www && exec python3 -m http.server 8000 --bind 127.0.0.1", { background: true });
      assert.ok(bg.id);
      const ep = await sbx.getEndpoint(8000);
      assert.ok(!/^[a-z]+:\/\//i.test(ep.endpoint), `endpoint has no scheme: ${ep.endpoint}`);
      const url = await sbx.getEndpointUrl(8000);
      const headers = { ...(ep.headers ?? {}) };
      const res = await poll(async () => {
        try {
          const r = await fetch(`${url}/hello.txt`, { headers });
          const body = await r.text();
          return r.status === 200 ? { r, body } : null;
        } catch {
          return null;
        }
      }, { timeoutMs: 10_000, intervalMs: 200 });
      assert.ok(res, `GET ${url}/hello.txt never answered 200`);
      assert.equal(res.body, "hi-from-sandbox\n");
      const r2 = await fetch(`${url}/sub/x.txt?q=1&r=two`, { headers });
      assert.equal(r2.status, 200, "sub-path and query string are forwarded");
      assert.equal(await r2.text(), "deep\n");
      const r3 = await fetch(`${url}/missing`, { headers });
      await r3.arrayBuffer();
      assert.equal(r3.status, 404, "the backend's own status comes back");
      await sbx.commands.interrupt(bg.id);
    });
  });
}

const ECHO_SERVER = `
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def _reply(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n).decode() if n else ""
        out = json.dumps({"method": self.command, "path": self.path, "body": body,
                          "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _reply
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 8002), H).serve_forever()
`;

test("proxied requests keep method, path, query and body; credentials are stripped", async () => {
  await withSandbox({ metadata: { case: "ports-headers" } }, async (sbx) => {
    await sbx.files.writeFiles([{ path: "/tmp/echo_server.py", data: ECHO_SERVER }]);
    const bg = await sbx.commands.run("exec python3 /tmp/echo_server.py", { background: true });
    const url = await sbx.getEndpointUrl(8002);
    const epHeaders = (await sbx.getEndpoint(8002)).headers ?? {}; // what the SDK sends
    const send = (method, body) =>
      fetch(`${url}/some/path?x=1&y=two%20words`, {
        method,
        body,
        headers: {
          ...epHeaders,
          "OPEN-SANDBOX-API-KEY": "must-not-leak",
          Authorization: "Bearer must-not-leak",
          Cookie: "session=must-not-leak",
          "X-Compat-Custom": "kept",
          "content-type": "text/plain",
        },
      });
    const first = await poll(async () => {
      try {
        const r = await send("GET");
        return r.status === 200 ? await r.json() : null;
      } catch {
        return null;
      }
    }, { timeoutMs: 10_000, intervalMs: 200 });
    assert.ok(first, `the echo server in the sandbox never answered through ${url}`);
    assert.equal(first.method, "GET");
    assert.equal(first.path, "/some/path?x=1&y=two%20words", "sub-path and query forwarded verbatim");
    assert.equal(first.headers["x-compat-custom"], "kept", "ordinary headers pass");
    for (const h of ["open-sandbox-api-key", "authorization", "cookie", "opensandbox-secure-access"]) {
      assert.equal(first.headers[h], undefined, `${h} is stripped by the proxy`);
    }
    for (const method of ["POST", "PUT", "PATCH", "DELETE"]) {
      const r = await send(method, `payload-${method}`);
      assert.equal(r.status, 200, method);
      const echoed = await r.json();
      assert.equal(echoed.method, method);
      assert.equal(echoed.body, `payload-${method}`, `${method} body forwarded`);
    }
    await sbx.commands.interrupt(bg.id);
  });
});

test("a port with nothing listening gives a 502, not a hang", async () => {
  await withSandbox({ metadata: { case: "ports-502" } }, async (sbx) => {
    const url = await sbx.getEndpointUrl(8001);
    const headers = { ...((await sbx.getEndpoint(8001)).headers ?? {}) }; // what the SDK sends
    const t0 = Date.now();
    const r = await fetch(`${url}/`, { headers, signal: AbortSignal.timeout(10_000) });
    await r.arrayBuffer();
    assert.equal(r.status, 502, `status ${r.status}`);
    assert.ok(Date.now() - t0 < 5_000);
  });
});

// A dependency-free WebSocket echo server (Python standard library) run inside the sandbox:
// answers each text frame with "echo:" + the text, and reports the request path in X-Path.
const WS_ECHO_SERVER = `import base64, hashlib, socket, struct, sys, threading
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def recv_exact(c, n):
    b = b""
    while len(b) < n:
        d = c.recv(n - len(b))
        if not d:
            raise EOFError
        b += d
    return b
def handle(c):
    try:
        req = b""
        while b"\\r\\n\\r\\n" not in req:
            d = c.recv(4096)
            if not d:
                return
            req += d
        head = req.split(b"\\r\\n\\r\\n", 1)[0].decode()
        lines = head.split("\\r\\n")
        hdrs = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
        if hdrs.get("upgrade", "").lower() != "websocket":
            body = b"not a websocket request"
            c.sendall(b"HTTP/1.1 400 Bad Request\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n%s" % (len(body), body))
            return
        acc = base64.b64encode(hashlib.sha1((hdrs["sec-websocket-key"] + GUID).encode()).digest()).decode()
        c.sendall(("HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n"
                   "Sec-WebSocket-Accept: %s\\r\\nX-Path: %s\\r\\n\\r\\n" % (acc, lines[0].split(" ")[1])).encode())
        while True:
            b0, b1 = recv_exact(c, 2)
            op, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", recv_exact(c, 2))[0]
            elif n == 127:
                n = struct.unpack(">Q", recv_exact(c, 8))[0]
            mask = recv_exact(c, 4) if b1 & 0x80 else b"\\0\\0\\0\\0"
            data = bytes(x ^ mask[i % 4] for i, x in enumerate(recv_exact(c, n)))
            if op == 8:
                c.sendall(b"\\x88\\x00")
                return
            out = b"echo:" + data
            hdr = bytes([0x80 | op])
            if len(out) < 126:
                hdr += bytes([len(out)])
            elif len(out) < 65536:
                hdr += bytes([126]) + struct.pack(">H", len(out))
            else:
                hdr += bytes([127]) + struct.pack(">Q", len(out))
            c.sendall(hdr + out)
    except (EOFError, OSError):
        pass
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
while True:
    conn, _ = s.accept()
    threading.Thread(target=handle, args=(conn,), daemon=True).start()
`;

// A minimal RFC 6455 client on node:http's upgrade event: sends messages[0], then each next one
// after the previous echo, then a close frame. Resolves with the echoed texts and the 101 headers.
function wsEcho(url, messages, timeoutMs = 10_000, extraHeaders = {}) {
  return new Promise((resolve, reject) => {
    const key = randomBytes(16).toString("base64");
    const req = http.request(url, {
      headers: { ...extraHeaders, Connection: "Upgrade", Upgrade: "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": key },
    });
    const timer = setTimeout(() => { req.destroy(); reject(new Error(`websocket to ${url}: no answer in ${timeoutMs} ms`)); }, timeoutMs);
    req.on("error", (e) => { clearTimeout(timer); reject(e); });
    req.on("response", (res) => {
      let body = "";
      res.on("data", (d) => (body += d));
      res.on("end", () => { clearTimeout(timer); reject(Object.assign(new Error(`no upgrade: HTTP ${res.statusCode} ${body.slice(0, 200)}`), { status: res.statusCode })); });
    });
    req.on("upgrade", (res, socket, head) => {
      const accept = createHash("sha1").update(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest("base64");
      if (res.headers["sec-websocket-accept"] !== accept) { clearTimeout(timer); socket.destroy(); return reject(new Error("bad Sec-WebSocket-Accept")); }
      let buf = head;
      const got = [];
      const send = (text, op = 1) => {
        const payload = Buffer.from(text);
        const mask = randomBytes(4);
        let hdr;
        if (payload.length < 126) hdr = Buffer.from([0x80 | op, 0x80 | payload.length]);
        else if (payload.length < 65536) { hdr = Buffer.alloc(4); hdr[0] = 0x80 | op; hdr[1] = 0x80 | 126; hdr.writeUInt16BE(payload.length, 2); }
        else { hdr = Buffer.alloc(10); hdr[0] = 0x80 | op; hdr[1] = 0x80 | 127; hdr.writeBigUInt64BE(BigInt(payload.length), 2); }
        const masked = Buffer.from(payload.map((b, i) => b ^ mask[i % 4]));
        socket.write(Buffer.concat([hdr, mask, masked]));
      };
      const pump = () => {
        while (buf.length >= 2) {
          let n = buf[1] & 0x7f, off = 2;
          if (n === 126) { if (buf.length < 4) return; n = buf.readUInt16BE(2); off = 4; }
          else if (n === 127) { if (buf.length < 10) return; n = Number(buf.readBigUInt64BE(2)); off = 10; }
          if (buf.length < off + n) return;
          const op = buf[0] & 0x0f;
          const data = buf.subarray(off, off + n).toString();
          buf = buf.subarray(off + n);
          if (op === 8) { clearTimeout(timer); socket.end(); return resolve({ got, headers: res.headers }); }
          got.push(data);
          if (got.length < messages.length) send(messages[got.length]);
          else send("", 8);
        }
      };
      socket.on("data", (d) => { buf = Buffer.concat([buf, d]); pump(); });
      socket.on("error", (e) => { clearTimeout(timer); reject(e); });
      socket.on("close", () => { clearTimeout(timer); resolve({ got, headers: res.headers }); });
      send(messages[0]);
      pump();
    });
    req.end();
  });
}

for (const useServerProxy of [true, false]) {
  test(`WebSocket through getEndpointUrl(port) reaches a server in the sandbox (useServerProxy=${useServerProxy})`, async () => {
    await withSandbox({ useServerProxy, metadata: { case: `ws-${useServerProxy}` } }, async (sbx) => {
      await sbx.files.writeFiles([{ path: "/tmp/ws_echo.py", data: WS_ECHO_SERVER }]);
      const bg = await sbx.commands.run("exec python3 /tmp/ws_echo.py 8003", { background: true });
      const url = await sbx.getEndpointUrl(8003);
      const headers = { ...((await sbx.getEndpoint(8003)).headers ?? {}) }; // what the SDK sends
      // Wait until the server listens (a plain GET gets its 400 "not a websocket request").
      const up = await poll(async () => {
        try {
          const r = await fetch(`${url}/`, { headers });
          await r.arrayBuffer();
          return r.status === 400;
        } catch {
          return false;
        }
      }, { timeoutMs: 10_000, intervalMs: 200 });
      assert.ok(up, "the WebSocket server in the sandbox answers plain HTTP through the proxy");
      const big = "x".repeat(70_000);
      const res = await wsEcho(`${url}/chat?room=1`, ["hello", big, "bye"], 10_000, headers);
      assert.equal(res.headers["x-path"], "/chat?room=1", "path and query reach the backend");
      assert.deepEqual(res.got, ["echo:hello", `echo:${big}`, "echo:bye"], "frames flow both ways");
      await sbx.commands.interrupt(bg.id);
    });
  });
}
