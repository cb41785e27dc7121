"""Start one plugin and reap its whole process tree (stdlib only; Linux).

Run by the worker as ``python -I -S launcher.py [--uid N --gid N | --no-caps] --
command args…``, with the plugin's scrubbed environment as its own (so the
plugin's parent holds no secret either) and the plugin's pipes as its stdio.

The launcher is a child subreaper (``PR_SET_CHILD_SUBREAPER``): whatever the plugin
forks stays below it, even a daemon that double-forks and calls ``setsid``. It
forks the plugin, lets go of the pipes, and waits. When the plugin exits, on
``SIGUSR1`` (kill now) or one second after ``SIGTERM``, it SIGKILLs every process
below it, reaps them, and exits as the plugin did (same code, or same signal).

The plugin itself runs with no way to read a nexopoll process: as ``--uid/--gid``
when given (groups cleared), else, when the launcher is root, as root without any
capability (bounding, inheritable and ambient sets emptied, so an ``execve`` gives
none back), and always with ``no_new_privs`` (setuid binaries grant nothing).
nexopoll's own processes are non-dumpable, so without ``CAP_SYS_PTRACE`` their
``/proc/<pid>/environ`` and ``mem`` are closed to it.
"""

import ctypes
import os
import signal
import sys

PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CAP_VERSION_3 = 0x20080522
EXIT_CANNOT_START = 127

libc = ctypes.CDLL(None, use_errno=True)


def prctl(option, arg=0, arg3=0):
    args = (ctypes.c_ulong(arg), ctypes.c_ulong(arg3), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if libc.prctl(option, *args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}, {arg}): {os.strerror(err)}")


def drop_capabilities():
    """Empty every capability set of this (root) process, for good."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        prctl(PR_CAPBSET_DROP, cap)
    try:
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except OSError:  # a kernel without ambient capabilities has none to clear
        pass
    header = (ctypes.c_uint32 * 2)(CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable, 2 words each: all 0
    if libc.capset(header, data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")


def exec_plugin(argv, uid, gid, no_caps):
    """In the forked child: drop privileges, then become the plugin (never returns)."""
    try:
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGUSR1):
            signal.signal(sig, signal.SIG_DFL)
        if uid is not None:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        elif no_caps:
            drop_capabilities()
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, f"nexopoll: cannot start plugin {argv[0]!r}: {exc}\n".encode())
    os._exit(EXIT_CANNOT_START)


def descendants(root):
    """Every process below ``root`` (by parent pid, from /proc)."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(name))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return found


def reap_all():
    """SIGKILL everything below this process and reap it, until nothing is left."""
    me = os.getpid()
    while True:
        for pid in descendants(me):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def exit_as(status):
    reap_all()
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def parse(args):
    uid = gid = None
    no_caps = False
    while args and args[0] != "--":
        flag = args.pop(0)
        if flag == "--uid":
            uid = int(args.pop(0))
        elif flag == "--gid":
            gid = int(args.pop(0))
        elif flag == "--no-caps":
            no_caps = True
        else:
            raise SystemExit(f"launcher: unknown option {flag}")
    if not args[1:] or (uid is None) != (gid is None):
        raise SystemExit("launcher: usage: [--uid N --gid N | --no-caps] -- command args…")
    return args[1:], uid, gid, no_caps


def main():
    argv, uid, gid, no_caps = parse(sys.argv[1:])
    prctl(PR_SET_DUMPABLE, 0)
    prctl(PR_SET_CHILD_SUBREAPER, 1)

    def kill_now(signum, frame):
        reap_all()
        os._exit(128 + signum)

    def stop_soon(signum, frame):
        signal.signal(signal.SIGALRM, kill_now)
        signal.alarm(1)

    signal.signal(signal.SIGUSR1, kill_now)
    signal.signal(signal.SIGTERM, stop_soon)
    leader = os.fork()
    if leader == 0:
        exec_plugin(argv, uid, gid, no_caps)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the pipes are the plugin's: EOF comes when its tree is gone
        os.dup2(null, fd)
    os.close(null)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        if pid == leader:
            exit_as(status)


if __name__ == "__main__":
    main()
