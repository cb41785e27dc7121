"""Out-of-tree pollers as subprocess plugins (``nexopoll-plugin.toml``), over JSON-RPC 2.0.

``manifest`` and ``jsonrpc`` are pure; ``spawn`` (the command line and environment),
``process``, ``session``, ``semaphore`` and ``poller`` run the processes.
``nexopoll.plugin_sdk`` is what Python plugins import.
"""
