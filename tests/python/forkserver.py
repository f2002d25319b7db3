"""A fork server for the Python tests' child programs: a program's imports (torch, transformers,
Lightning: 3-6 s of CPU each time) are done once, and each run of it is a fork that runs the script
as __main__, with its own argv, environment, working directory and stdio, as `python SCRIPT` would.

The test process (conftest.spawn) starts one server per script, which executes the script's
top-level imports of installed packages (not hydro, not the tests' own modules: the child imports
those itself, under its own environment), then serves on a socket pair: a request is the command,
the environment and the directory, with stdin, stdout and stderr passed as descriptors
(SCM_RIGHTS); the reply is the child's pid, and later its wait status. The child is the server's
child, so the test signals it by its pid as it would a Popen's.

Only what a fresh interpreter would run the same way is forked (spawn checks, in server_for, and
runs anything else with subprocess.Popen): the environment may differ from the server's in hydro's,
the ranks', PYTHONUNBUFFERED and pytest's PYTEST_CURRENT_TEST only, since a library reads its own at import (OpenMP, torch);
and never with HYDRO_PAUSE=on, whose hydro-autopause.pth acts at interpreter start. The server
forks only while it runs one Python thread. What stays shared: str hashes' seed and numpy's global
generator's state (Python's `random` is reseeded in each child).

When the test process ends, or dies, the socket closes, and the server kills its children and
exits."""
import array
import ast
import json
import os
import select
import signal
import socket
import sys

# What may differ between the server's environment and a child's (see above).
CHILD_ONLY = ("HYDRO_", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
              "PYTHONUNBUFFERED", "PYTEST_CURRENT_TEST")  # the last: pytest's, a new value each test
MAX_FDS = 3
MAX_SERVERS = 4  # in one test process (each holds its imports' memory, 0.5 GB with torch's)


def may_differ(name):
    return name.startswith(CHILD_ONLY) and name != "HYDRO_PAUSE"


def installed_imports(script):
    """The script's top-level import statements of installed packages (those found outside the
    script's directory, hydro excepted), as source lines."""
    here = os.path.dirname(os.path.abspath(script))
    with open(script) as f:
        tree = ast.parse(f.read(), script)
    lines = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            roots = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots = [node.module.split(".")[0]]
        else:
            continue
        if all(root != "hydro" and not os.path.exists(os.path.join(here, root + ".py")) for root in roots):
            lines.append(ast.unparse(node))
    return lines


def send(sock, message, fds=()):
    data = json.dumps(message).encode() + b"\n"
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([data], ancillary)


def receive(sock):
    """One message and the descriptors that came with it; None at the socket's end (a test
    process that ended with a reply unread resets it)."""
    try:
        data, ancillary, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize))
    except ConnectionResetError:
        return None, []
    if not data:
        return None, []
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    return json.loads(data), list(fds)


def python_threads():
    """The server's Python threads: it forks with the main one only. Native pools (numpy's
    OpenBLAS starts one at import) stop and restart across a fork themselves (pthread_atfork), as
    every DataLoader worker's fork relies on."""
    import threading
    return threading.active_count()


def serve(sock):
    """Forks a child for each request; returns (in that child only) the request it is to run.
    Reports each child's pid, then its wait status; at the socket's end kills them and exits."""
    children = {}  # pidfd -> pid
    while True:
        ready, _, _ = select.select([sock, *children], [], [])
        for fd in ready:
            if fd is sock:
                request, fds = receive(sock)
                if request is None:
                    end(children)
                threads = python_threads()
                if threads != 1:
                    send(sock, {"refused": f"the server runs {threads} Python threads"})
                    close_all(fds)
                    continue
                pid = os.fork()
                if pid == 0:
                    for other in children:
                        os.close(other)
                    sock.close()
                    return request, fds
                close_all(fds)
                children[os.pidfd_open(pid)] = pid
                send(sock, {"pid": pid})
            else:
                pid = children.pop(fd)
                _, status = os.waitpid(pid, 0)
                os.close(fd)
                try:
                    send(sock, {"pid": pid, "status": status})
                except OSError:  # the test process is gone
                    end(children)


def end(children):
    for pid in children.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os._exit(0)


def close_all(fds):
    for fd in fds:
        os.close(fd)


def become(request, fds):
    """This child, made into `python SCRIPT ARGS...` (request["argv"][1:]) in its environment,
    directory and stdio (fds: stdin, stdout, stderr)."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = request["argv"][1]
    sys.argv = request["argv"][1:]
    sys.orig_argv = request["argv"]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdin = sys.__stdin__ = os.fdopen(0, "r", closefd=False)
    sys.stdout = sys.__stdout__ = text_stream(1, unbuffered, sys.__stdout__)
    sys.stderr = sys.__stderr__ = text_stream(2, unbuffered, sys.__stderr__)
    import faulthandler
    faulthandler.enable(all_threads=True)  # SIGABRT (Child._timed_out) writes every thread's stack
    import runpy
    runpy.run_path(script, run_name="__main__")


def text_stream(fd, unbuffered, like):
    """As the interpreter makes stdout (and, line-buffered, stderr) on a pipe or file: raw with
    PYTHONUNBUFFERED, else buffered; in the encoding of the server's own (`like`), which its
    environment chose as the child's would."""
    import io
    raw = io.FileIO(fd, "w", closefd=False)
    if unbuffered:
        return io.TextIOWrapper(raw, like.encoding, like.errors, write_through=True)
    return io.TextIOWrapper(io.BufferedWriter(raw), like.encoding, like.errors, line_buffering=(fd == 2))


# The test process's side.

class Server:
    """One fork server for `script`, started with `env` (the environment its children differ from
    in may_differ's names only)."""

    def __init__(self, script, env):
        import subprocess
        self.statuses = {}
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen([sys.executable, os.path.abspath(__file__), script, str(theirs.fileno())],
                                        env=env, stdin=subprocess.DEVNULL, pass_fds=[theirs.fileno()])
        theirs.close()
        self.ready = self.reply() == {"ready": True}

    def reply(self):
        """The next message that is not a child's wait status (those are kept); None at the end."""
        while True:
            message, _ = receive(self.sock)
            if message is None or "status" not in message:
                return message
            self.statuses[message["pid"]] = message["status"]

    def start(self, argv, env, cwd, fds):
        """A child running argv, or None where the server refused."""
        send(self.sock, {"argv": list(argv), "env": dict(env), "cwd": cwd or os.getcwd()}, fds)
        message = self.reply()
        return message.get("pid") if message else None

    def wait(self, pid, timeout):
        """The child's wait status, or None after `timeout` seconds (None: no limit)."""
        self.sock.settimeout(timeout)
        try:
            while pid not in self.statuses:
                message, _ = receive(self.sock)
                if message is None:
                    raise RuntimeError("the fork server ended while a child ran")
                if "status" in message:
                    self.statuses[message["pid"]] = message["status"]
        except (TimeoutError, BlockingIOError):  # the latter for timeout 0
            return None
        finally:
            self.sock.settimeout(None)
        return self.statuses.pop(pid)


class Child:
    """A forked child, used as a subprocess.Popen is: pid, stdout, stderr, returncode, poll(),
    wait(), communicate(), send_signal(), terminate(), kill()."""

    def __init__(self, server, pid, argv, stdout, stderr):
        self.server, self.pid, self.args, self.stdout, self.stderr = server, pid, argv, stdout, stderr
        self.stdin, self.returncode = None, None

    def poll(self):
        return self.returncode if self.returncode is not None else self.wait_for(0)

    def wait(self, timeout=None):
        if self.returncode is None and self.wait_for(timeout) is None:
            import subprocess
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def wait_for(self, timeout):
        status = self.server.wait(self.pid, timeout)
        if status is not None:
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def communicate(self, input=None, timeout=None):
        """What stdout and stderr (those piped) give until their end, then wait()."""
        import threading
        assert input is None, "a forked child has no stdin pipe"
        pipes = [f for f in (self.stdout, self.stderr) if f is not None]
        out = {f: None for f in pipes}
        readers = [threading.Thread(target=lambda f=f: out.__setitem__(f, f.read()), daemon=True) for f in pipes]
        for r in readers:
            r.start()
        for r in readers:
            r.join(timeout)
            if r.is_alive():
                self._timed_out(readers, out, timeout)
        for f in pipes:
            f.close()
        self.wait(timeout)
        return out.get(self.stdout), out.get(self.stderr)

    def _timed_out(self, readers, out, timeout):
        """Kills the child that outlived `timeout`, and shows what it wrote (pytest prints a failed
        test's stderr): where it hung, not only that it did. SIGABRT first, on which the child's
        faulthandler (become()) writes each Python thread's stack to its stderr."""
        import subprocess
        self.send_signal(signal.SIGABRT)
        for r in readers:
            r.join(10)
        self.kill()
        for r in readers:
            r.join(10)
        for f, text in out.items():
            print(f"----- {self.args} ({'stdout' if f is self.stdout else 'stderr'}, killed after {timeout} s)\n"
                  f"{text if text is not None else '(still open)'}", file=sys.stderr)
        raise subprocess.TimeoutExpired(self.args, timeout)

    def send_signal(self, sig):
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # it ended, and its status is on its way
                pass

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def __enter__(self):
        return self

    def __exit__(self, *_):
        for f in (self.stdout, self.stderr):
            if f is not None:
                f.close()
        self.wait()


servers = {}  # (script, the environment less may_differ's names) -> Server


def spawn(argv, env=None, stdin=None, stdout=None, stderr=None, text=False, cwd=None):
    """subprocess.Popen(argv, ...), forked by the script's server where that runs it as a fresh
    interpreter would (server_for); else subprocess.Popen itself."""
    import subprocess
    env = dict(os.environ if env is None else env)
    server = server_for(argv, env)
    fds, ours, opened = stdio(stdin, stdout, stderr) if server else ([], {}, [])
    pid = server.start(argv, env, cwd, fds) if fds else None
    close_all(opened)  # the child's ends
    if pid is None:
        close_all(ours.values())
        return subprocess.Popen(argv, env=env, stdin=stdin, stdout=stdout, stderr=stderr, text=text, cwd=cwd)
    mode = "r" if text else "rb"
    return Child(server, pid, argv, *(os.fdopen(ours[k], mode) if k in ours else None for k in ("stdout", "stderr")))


def stdio(stdin, stdout, stderr):
    """The child's stdin, stdout and stderr as descriptors; the pipes' read ends (name -> fd); and
    the descriptors opened for the child. ([], {}, []) for what only Popen does (a pipe to stdin)."""
    import subprocess
    fds, ours, opened = [], {}, []
    for name, fd, given in (("stdin", 0, stdin), ("stdout", 1, stdout), ("stderr", 2, stderr)):
        if given is None:
            fds.append(fd)
        elif given == subprocess.STDOUT and name == "stderr":
            fds.append(fds[1])
        elif given == subprocess.PIPE and name != "stdin":
            ours[name], write = os.pipe()
            fds.append(write)
            opened.append(write)
        elif given == subprocess.DEVNULL:
            fds.append(os.open(os.devnull, os.O_RDWR))
            opened.append(fds[-1])
        elif isinstance(given, int) and given >= 0:
            fds.append(given)
        elif hasattr(given, "fileno"):
            fds.append(given.fileno())
        else:
            close_all(opened + list(ours.values()))
            return [], {}, []
    return fds, ours, opened


def server_for(argv, env):
    """The running server that forks `argv` in `env` as a fresh interpreter would run it (started
    now if none): one whose environment is env's but for may_differ's names, which the key holds.
    None for what it would not (above; also with HYDRO_TEST_FORK=0 in the test's environment:
    every child by subprocess.Popen, to compare)."""
    if os.environ.get("HYDRO_TEST_FORK") == "0" or len(argv) < 2 or argv[0] != sys.executable:
        return None
    base = {k: v for k, v in env.items() if not may_differ(k)}
    if not argv[1].endswith(".py") or base.get("HYDRO_PAUSE") == "on":
        return None
    key = (os.path.abspath(argv[1]), tuple(sorted(base.items())))
    if key not in servers:
        if len(servers) == MAX_SERVERS:
            return None
        servers[key] = Server(key[0], base)
    return servers[key] if servers[key].ready else None


def main():
    script, fd = sys.argv[1], int(sys.argv[2])
    sock = socket.socket(fileno=fd)
    scratch = {}
    for line in installed_imports(script):
        exec(line, scratch)
    del scratch
    send(sock, {"ready": True})
    request, fds = serve(sock)
    become(request, fds)


if __name__ == "__main__":
    main()
