"""A test plugin built on nexopoll.plugin_sdk; ``config.mode`` picks the behaviour."""

import time

from nexopoll.plugin_sdk import ConfigError, HostError, PermanentError, Result, TransientError, run


def handle(tick):
    mode = tick.config.get("mode", "ok")
    if mode == "sleep":
        time.sleep(tick.config["secs"])
        return Result(next_cursor=tick.job_id.encode())
    if mode in ("transient", "permanent", "config"):
        cls = {"transient": TransientError, "permanent": PermanentError, "config": ConfigError}
        raise cls[mode](f"sdk says {mode}")
    if mode == "crash":
        raise RuntimeError("unexpected bug in the plugin")
    if mode == "creds":
        try:
            tick.credentials("telegram")
        except HostError as exc:
            raise PermanentError(f"no telegram: {exc}") from None
    if mode == "metric":  # the host's answer to metric_inc, as the cursor
        try:
            tick.metric_inc(tick.config["name"], **tick.config["labels"])
        except HostError as exc:
            return Result(next_cursor=f"refused: {exc}".encode())
        return Result(next_cursor=b"counted")
    return Result(next_cursor=(tick.cursor or b"") + b"+", items_seen=1)


if __name__ == "__main__":
    run(handle, concurrency=4)
