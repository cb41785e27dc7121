"""A test plugin speaking the raw wire (no SDK), misbehaving as ``config.mode`` says.

Modes: ok (cursor += 1, delivers one item), error (reply config.code), bare (a
reply without the envelope), hang (spawn a grandchild, then sleep forever), exit,
segv, non_json, wrong_id, both, nan, deep, huge (config.mb MB without newline),
env (return os.environ as cursor), flood (config.mb MB to stderr, then reply),
reverse (every reverse call, then ok), metric_notify (config.name/labels as a
metric_inc notification, then ok), deliver_fail (deliver, then error -32001),
slow (sleep config.secs, record concurrency in a file), daemon (double-fork + setsid:
a daemon that keeps the pipes and sleeps, its pid appended to config.pidfile), snoop
(read every ancestor's and config.pids' /proc environ, maps and mem, report what it
could read and whether config.needle was in it), deliver_many (config.n deliveries),
raw_calls (config.calls: [method, params] reverse calls, answers returned).
"""

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time

out_lock = threading.Lock()
waiters = {}


def send(obj):
    data = (json.dumps(obj) + "\n").encode()
    with out_lock:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def raw(data: bytes):
    with out_lock:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def call(method, params):
    import queue

    rid = f"r{time.monotonic_ns()}"
    q = queue.Queue()
    waiters[rid] = q
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    return q.get(timeout=20)


def b64(s: bytes) -> str:
    return base64.urlsafe_b64encode(s).rstrip(b"=").decode()


def tick(msg):
    p = msg["params"]
    cfg = p.get("config") or {}
    mode = cfg.get("mode", "ok")
    if cfg.get("mode_file") and os.path.exists(cfg["mode_file"]):
        with open(cfg["mode_file"]) as f:
            mode = f.read().strip() or mode
    target = cfg.get("deliver")
    if not isinstance(target, dict):
        target = {"channel": "log", "to": "ops"}
    mid = msg["id"]
    tid = p["tick_id"]

    def ok(cursor):
        send(
            {
                "jsonrpc": "2.0",
                "id": mid,
                "result": {
                    "next_cursor": b64(cursor),
                    "metrics": {"items_seen": 1, "items_dispatched": 1},
                },
            }
        )

    last = int(base64.urlsafe_b64decode(p["cursor"] + "==") or b"0") if p.get("cursor") else 0
    if mode == "ok":
        if cfg.get("deliver"):
            call(
                "deliver",
                {
                    "tick_id": tid,
                    "channel": target["channel"],
                    "to": target["to"],
                    "payload": {"text": f"item {last + 1}", "item_id": last + 1},
                },
            )
        ok(str(last + 1).encode())
    elif mode == "error":
        text = "boom " + os.environ.get("PLUGIN_TOKEN", "") if cfg.get("leak") else "boom"
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": cfg["code"], "message": text}})
    elif mode == "bare":
        send({"next_cursor": b64(b"9"), "next_interval_secs": 5})
    elif mode == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(cfg["pidfile"], "w") as f:
            f.write(f"{os.getpid()} {child.pid}")
        time.sleep(600)
    elif mode == "exit":
        sys.stderr.write("fatal: giving up\n" * 10000)
        if cfg.get("leak"):
            sys.stderr.write(f"token={os.environ.get('PLUGIN_TOKEN')}\n")
        sys.stderr.flush()
        os._exit(1)
    elif mode == "segv":
        sys.stderr.write("about to crash\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
    elif mode == "non_json":
        raw(b"this is not json\n")
    elif mode == "wrong_id":
        send({"jsonrpc": "2.0", "id": mid + 1000, "result": {}})
    elif mode == "both":
        send({"jsonrpc": "2.0", "id": mid, "result": {}, "error": {"code": -32001, "message": "x"}})
    elif mode == "nan":
        raw(b'{"jsonrpc":"2.0","id":%d,"result":{"next_interval_secs":NaN}}\n' % mid)
    elif mode == "deep":
        raw(b"[" * 10000 + b"]" * 10000 + b"\n")
    elif mode == "huge":
        chunk = b"x" * (1 << 20)
        for _ in range(cfg.get("mb", 10)):
            raw(chunk)
        time.sleep(600)
    elif mode == "env":
        ok(json.dumps(dict(os.environ)).encode())
    elif mode == "flood":
        line = b"e" * 1023 + b"\n"
        for _ in range(cfg.get("mb", 100) * 1024):
            sys.stderr.buffer.write(line)
        ok(b"flooded")
    elif mode == "metric_notify":  # metric_inc as a notification (no reply), then ok
        params = {"tick_id": tid, "name": cfg["name"], "labels": cfg["labels"]}
        send({"jsonrpc": "2.0", "method": "metric_inc", "params": params})
        ok(b"notified")
    elif mode == "reverse":
        creds = call("credentials_get", {"tick_id": tid, "channel": "webhook"})
        send(
            {
                "jsonrpc": "2.0",
                "method": "log",
                "params": {
                    "tick_id": tid,
                    "level": "info",
                    "message": "token is " + str(creds.get("result", {}).get("token")),
                    "fields": {},
                },
            }
        )
        send(
            {
                "jsonrpc": "2.0",
                "method": "metric_inc",
                "params": {"tick_id": tid, "name": "m", "labels": {"a": "b"}},
            }
        )
        llm = call("llm_invoke", {"tick_id": tid, "request": {"prompt": "hi"}})
        bad = call("no_such_method", {"tick_id": tid})
        dl = call("deliver", {"tick_id": tid, "channel": "log", "to": "ops", "payload": {"n": 1}})
        ok(json.dumps({"creds": creds, "llm": llm, "bad": bad, "deliver": dl}).encode())
    elif mode == "llm":
        answer = call("llm_invoke", {"tick_id": tid, "request": cfg["request"]})
        if "error" in answer:
            send({"jsonrpc": "2.0", "id": mid, "error": answer["error"]})
        else:
            ok(answer["result"]["content"].encode())
    elif mode == "deliver_fail":
        payload = {"text": "must not be sent", "item_id": 999}
        params = {"tick_id": tid, "channel": target["channel"], "to": target["to"]}
        call("deliver", {**params, "payload": payload})
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32001, "message": "after deliver"}})
    elif mode == "daemon":
        daemonize(cfg["pidfile"])
        ok(str(last + 1).encode())
    elif mode == "snoop":
        pids = sorted(set(ancestors()) | set(cfg.get("pids", [])))
        report = {"uid": os.getuid(), "ancestors": ancestors(), "self": os.getpid()}
        pids.append(os.getpid())  # the plugin's own: the probe works
        for pid in pids:
            for what in ("environ", "maps", "mem"):
                report[f"{pid}/{what}"] = snoop(pid, what, cfg["needle"])
        ok(json.dumps(report).encode())
    elif mode == "deliver_many":
        for i in range(cfg["n"]):
            params = {"tick_id": tid, "channel": target["channel"], "to": target["to"]}
            answer = call("deliver", {**params, "payload": {"text": f"n{i}", "item_id": i}})
            if "error" in answer and not cfg.get("ignore_errors"):
                send({"jsonrpc": "2.0", "id": mid, "error": answer["error"]})
                return
        ok(str(cfg["n"]).encode())
    elif mode == "raw_calls":  # each (method, params) as given; the answers are the cursor
        answers = [call(m, {"tick_id": tid, **params}) for m, params in cfg["calls"]]
        ok(json.dumps(answers).encode())
    elif mode == "slow":
        path = cfg["probe"]
        with open(path, "a") as f:
            f.write(f"+ {os.getpid()} {time.time()}\n")
        time.sleep(cfg.get("secs", 0.5))
        with open(path, "a") as f:
            f.write(f"- {os.getpid()} {time.time()}\n")
        ok(b"1")


def daemonize(pidfile):
    """Start the daemon; return once its pid is in ``pidfile``."""
    ready_r, ready_w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:  # the daemon: keeps stdin/stdout/stderr, outlives its parents
            with open(pidfile, "a") as f:
                f.write(f"{os.getpid()}\n")
            os.write(ready_w, b"x")
            time.sleep(600)
            os._exit(0)
        os._exit(0)
    os.close(ready_w)
    os.read(ready_r, 1)
    os.close(ready_r)


def ancestors():
    pid, found = os.getppid(), []
    while pid > 1:
        found.append(pid)
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return found


def snoop(pid, what, needle):
    """ "denied <errno>", "read <n>" or "FOUND" (the needle was in what could be read)."""
    try:
        if what == "mem":
            with open(f"/proc/{pid}/mem", "rb") as mem:
                data = b""
                try:
                    with open(f"/proc/{pid}/maps") as f:
                        maps = [line.split() for line in f]
                except OSError:
                    maps = []
                for fields in maps:
                    if "rw" in fields[1] and (len(fields) < 6 or fields[5].startswith("[")):
                        start, end = (int(x, 16) for x in fields[0].split("-"))
                        mem.seek(start)
                        data += mem.read(min(end - start, 8 << 20))
                if not maps:
                    mem.seek(0x400000)
                    data = mem.read(4096)
        else:
            with open(f"/proc/{pid}/{what}", "rb") as f:
                data = f.read()
    except (OSError, ValueError) as exc:
        return f"denied {getattr(exc, 'errno', exc)}"
    return "FOUND" if needle.encode() in data else f"read {len(data)}"


for line in sys.stdin.buffer:
    if not line.strip():
        continue
    msg = json.loads(line)
    if msg.get("method") == "poll_tick":
        threading.Thread(target=tick, args=(msg,), daemon=True).start()
    elif msg.get("id") in waiters:
        waiters.pop(msg["id"]).put(msg)
