"""Flower's deployment engine: a real SuperLink and SuperNodes, started as separate processes.

This is how Flower runs across machines.  :class:`LocalDeployment` starts a
``flower-superlink`` and ``num_nodes`` ``flower-supernode`` processes on the
loopback interface (free ports, a private ``FLWR_HOME``, runtime dependency
installation disabled, so nothing is downloaded) and always tears them down
on leaving the ``with`` block.  :func:`run_server_main` submits a run to a
SuperLink with ``flwr run`` and waits for it.

The Flower App that ``flwr run`` submits is :data:`server_app` and
:data:`client_app` of this module (the app folder holds only a
``pyproject.toml`` naming them; ``repro`` must be installed wherever a
SuperLink or SuperNode runs).  They are generic: the run's own server
function (``main(grid, context)``, e.g. the one
:func:`repro.federated.engine.run_federated` builds around a strategy) and
its own ``ClientApp`` travel in the run config, serialised with cloudpickle,
and the objects the server function fills in (the history, the strategy's
state) come back in a file the ServerApp writes on the SuperLink's host.
So a chapter's strategy and clients run unchanged, in one process per
SuperNode, exchanging messages through the SuperLink.

Several hosts: start ``flower-superlink`` on one host, ``flower-supernode
--superlink HOST:PORT --node-config "partition-id=I num-partitions=N"`` on
the others (see the README), and call :func:`run_server_main` (or a
chapter with ``engine="deployment"`` and ``REPRO_SUPERLINK=HOST:PORT``) on
the SuperLink's host.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence, cast

import cloudpickle
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from repro.watchdog import end_marked, new_run_id, on_terminate

SUPERLINK_ENV = "REPRO_SUPERLINK"
"""Environment variable naming a running SuperLink (``HOST:PORT``) for ``engine="deployment"``."""
SUPERLINK_CA_ENV = "REPRO_SUPERLINK_CA"
"""Environment variable naming the CA certificate (PEM) of a SuperLink with TLS; unset: insecure."""
SERVER_KEY = "repro-server"
CLIENT_KEY = "repro-client"
RESULT_KEY = "repro-result"
APP_NAME = "repro-deployment"
CONNECTION = "repro"
STARTUP_TIMEOUT = 300.0
"""Seconds a Flower process may take to listen, and ``flwr run`` to submit (generous: a bound for a failure,
never a race with a slow start on a loaded machine)."""
RUN_TIMEOUT = 1800.0
STOP_GRACE = 3.0
"""Seconds the Flower processes get to stop on SIGTERM before SIGKILL."""
DEPLOYMENT_ENV = "REPRO_DEPLOYMENT_ID"
"""Marks every process of one :class:`LocalDeployment` (apps the SuperLink starts in sessions of their own too)."""
LOG_TAIL = 3000

ServerMain = Callable[[Grid, Context], None]


class DeploymentError(RuntimeError):
    """A SuperLink, a SuperNode or a run on them failed; the message names the process and shows its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def flower_command(name: str) -> str:
    """Path of a Flower console script of this interpreter's environment (falls back to ``PATH``)."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else name


def flower_env(home: Path) -> dict[str, str]:
    """Environment of the Flower processes: a private ``FLWR_HOME``, this environment's scripts first, one thread."""
    env = dict(os.environ)
    env.update(FLWR_HOME=str(home), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               FLWR_DISABLE_UPDATE_CHECK="1", FLWR_TELEMETRY_ENABLED="0",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return env


def log_tail(path: Path, chars: int = LOG_TAIL) -> str:
    """The last ``chars`` characters of a log file ('' if it does not exist)."""
    try:
        return path.read_text(errors="replace")[-chars:]
    except FileNotFoundError:
        return ""


@dataclass(kw_only=True)
class FlowerProcess:
    """One Flower process this module started: its role, command line, log file and handle."""

    role: str
    command: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str], cwd: Path) -> None:
        """Start the process in its own session (so :meth:`stop` also ends the apps it spawns)."""
        with self.log.open("wb") as out:
            self.popen = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                          start_new_session=True)

    def check_alive(self) -> None:
        """Raise :class:`DeploymentError` naming this process if it has exited."""
        if self.popen is None:
            raise DeploymentError(f"{self.role} was never started")
        code = self.popen.poll()
        if code is not None:
            raise DeploymentError(f"{self.role} exited with code {code}; command: {' '.join(self.command)}\n"
                                  f"--- last lines of {self.log} ---\n{log_tail(self.log)}")

    def wait_listening(self, port: int, timeout: float) -> None:
        """Wait until the process accepts connections on 127.0.0.1:``port``; raise naming it otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if port_open("127.0.0.1", port):
                return
            time.sleep(0.2)
        raise DeploymentError(f"{self.role} did not listen on 127.0.0.1:{port} within {timeout:.0f} s\n"
                              f"--- last lines of {self.log} ---\n{log_tail(self.log)}")

    def running(self) -> bool:
        """Whether the process was started and has not exited."""
        return self.popen is not None and self.popen.poll() is None

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the process's session (it and the apps it spawned there)."""
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, sig)

    def stop(self, grace: float = STOP_GRACE) -> None:
        """Terminate the process and its children (SIGTERM to its session, then SIGKILL after ``grace`` s)."""
        stop_all([self], grace)


def stop_all(processes: Sequence[FlowerProcess], grace: float = STOP_GRACE) -> None:
    """Stop several Flower processes at once: SIGTERM to every session, SIGKILL to those alive after ``grace`` s.

    Parameters
    ----------
    processes
        The processes, signalled in this order.
    grace
        Seconds they get, together, to stop on SIGTERM.
    """
    live = [p for p in processes if p.running()]
    for proc in live:
        proc.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in live:
        assert proc.popen is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
    for proc in live:
        assert proc.popen is not None
        if proc.popen.poll() is None:
            proc.signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(timeout=5.0)


@dataclass(frozen=True, kw_only=True)
class SuperLinkAddress:
    """Where a SuperLink listens, and how to reach it.

    Attributes
    ----------
    host, port
        The SuperLink's HTTP API (Fleet, Control and Runtime share it in Flower 1.42).
    root_certificates
        PEM file of the CA that signed the SuperLink's certificate; ``None``: insecure (loopback only).
    """

    host: str
    port: int
    root_certificates: str | None = None

    @classmethod
    def parse(cls, address: str, root_certificates: str | None = None) -> SuperLinkAddress:
        """``HOST:PORT`` to an address."""
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"a SuperLink address must be HOST:PORT, got {address!r}")
        return cls(host=host, port=int(port), root_certificates=root_certificates)

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(kw_only=True)
class LocalDeployment:
    """A SuperLink and ``num_nodes`` SuperNodes on 127.0.0.1, as separate processes; a context manager.

    SuperNode ``i`` gets the node config ``partition-id=i num-partitions=num_nodes``
    (what the book's clients read).  Every process runs with a private
    ``FLWR_HOME`` in a temporary folder, insecure (loopback only) and with
    runtime dependency installation disabled.

    Parameters
    ----------
    num_nodes
        SuperNodes to start.
    startup_timeout
        Seconds each process may take to listen on its port.

    Examples
    --------
    >>> with LocalDeployment(num_nodes=2) as dep:                      # doctest: +SKIP
    ...     run_server_main(main, client_app, dep.address, dep.home)
    """

    num_nodes: int
    startup_timeout: float = STARTUP_TIMEOUT
    processes: list[FlowerProcess] = field(default_factory=list, init=False)
    address: SuperLinkAddress | None = field(default=None, init=False)
    home: Path | None = field(default=None, init=False)
    marker: str = field(default_factory=new_run_id, init=False)
    hooks: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, init=False)

    def __enter__(self) -> LocalDeployment:
        if self.num_nodes < 1:
            raise ValueError(f"num_nodes must be at least 1, got {self.num_nodes}")
        self.home = Path(tempfile.mkdtemp(prefix="repro-flwr-"))
        self.hooks.enter_context(on_terminate(self.stop))
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the SuperLink, wait for it, then start and wait for every SuperNode."""
        assert self.home is not None
        env = {**flower_env(self.home), DEPLOYMENT_ENV: self.marker}
        port = free_port()
        self.address = SuperLinkAddress(host="127.0.0.1", port=port)
        link = FlowerProcess(role="flower-superlink", command=[
            flower_command("flower-superlink"), "--insecure", "--isolation", "subprocess",
            "--disable-runtime-dependency-installation", "--host", "127.0.0.1", "--port", str(port)],
            log=self.home / "superlink.log")
        self.processes.append(link)
        link.start(env, self.home)
        link.wait_listening(port, self.startup_timeout)
        nodes = []
        for pid in range(self.num_nodes):
            node_port = free_port()
            node = FlowerProcess(role=f"flower-supernode (partition-id={pid})", command=[
                flower_command("flower-supernode"), "--insecure", "--superlink", str(self.address),
                "--isolation", "subprocess", "--host", "127.0.0.1", "--port", str(node_port),
                "--node-config", f"partition-id={pid} num-partitions={self.num_nodes}"],
                log=self.home / f"supernode-{pid}.log")
            self.processes.append(node)
            node.start(env, self.home)
            nodes.append((node, node_port))
        for node, node_port in nodes:
            node.wait_listening(node_port, self.startup_timeout)

    def check_alive(self) -> None:
        """Raise :class:`DeploymentError` naming the first process that has exited."""
        for proc in self.processes:
            proc.check_alive()

    def stop(self) -> None:
        """Stop every process of the deployment and delete the temporary ``FLWR_HOME`` (safe to call twice).

        The SuperNodes and the SuperLink get SIGTERM together and
        :data:`STOP_GRACE` seconds before SIGKILL; then every process still
        carrying the deployment's marker is ended the same way.
        """
        stop_all(list(reversed(self.processes)))
        if self.processes:
            end_marked(self.marker, DEPLOYMENT_ENV, grace_s=STOP_GRACE, give_up_s=30.0)
        self.processes.clear()
        self.hooks.close()
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = None


# ----- the Flower App every deployed run uses ---------------------------------------------
def encode(obj: object) -> str:
    """Cloudpickle + base64 (a run-config string)."""
    return base64.b64encode(cloudpickle.dumps(obj)).decode("ascii")


@functools.lru_cache(maxsize=4)
def decode(text: str) -> object:
    """Inverse of :func:`encode` (cached: a ClientApp process decodes its run's app once)."""
    return cloudpickle.loads(base64.b64decode(text))


server_app = ServerApp()
"""The ServerApp ``flwr run`` starts: runs the shipped server function, writes back what it filled in."""


@server_app.main()
def serve(grid: Grid, context: Context) -> None:
    """Decode ``(main, carried)`` from the run config, run ``main``, write ``carried`` (or the error) to the result file."""
    result = Path(str(context.run_config[RESULT_KEY]))
    try:
        main, carried = cast(tuple[ServerMain, tuple[object, ...]], decode(str(context.run_config[SERVER_KEY])))
        main(grid, context)
        outcome: tuple[str, object] = ("ok", carried)
    except Exception:  # noqa: BLE001 - reported to the caller, who raises it
        outcome = ("error", traceback.format_exc())
    partial = result.with_suffix(".partial")
    partial.write_bytes(cloudpickle.dumps(outcome))
    partial.replace(result)
    if outcome[0] == "error":
        raise RuntimeError(str(outcome[1]))


def shipped_client(context: Context) -> ClientApp:
    """The run's own ``ClientApp``, decoded from the run config."""
    app = decode(str(context.run_config[CLIENT_KEY]))
    assert isinstance(app, ClientApp)
    return app


client_app = ClientApp()
"""The ClientApp every SuperNode runs: hands each message to the run's own ``ClientApp``."""


@client_app.train()
def train(msg: Message, context: Context) -> Message:  # noqa: D103
    return shipped_client(context)(msg, context)


@client_app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:  # noqa: D103
    return shipped_client(context)(msg, context)


@client_app.query()
def query(msg: Message, context: Context) -> Message:  # noqa: D103
    return shipped_client(context)(msg, context)


PYPROJECT = f"""[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{APP_NAME}"
version = "1.0.0"
description = "ReproBook's generic Flower App: the run's ServerApp and ClientApp travel in the run config"
license = "MIT"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "reprobook"

[tool.flwr.app.components]
serverapp = "repro.federated.deployment:server_app"
clientapp = "repro.federated.deployment:client_app"

[tool.flwr.app.config]
{SERVER_KEY} = ""
{CLIENT_KEY} = ""
{RESULT_KEY} = ""
"""


def toml_string(text: str) -> str:
    """A TOML basic string (base64 and paths need no escapes beyond backslash and quote)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_cli_home(home: Path, address: SuperLinkAddress) -> None:
    """A Flower CLI configuration in ``home`` with one connection, :data:`CONNECTION`, to ``address``."""
    home.mkdir(parents=True, exist_ok=True)
    lines = ["[superlink]", f'default = "{CONNECTION}"', "", f"[superlink.{CONNECTION}]",
             f'address = "{address}"']
    if address.root_certificates is None:
        lines.append("insecure = true")
    else:
        lines.append(f"root-certificates = {toml_string(address.root_certificates)}")
    (home / "config.toml").write_text("\n".join(lines) + "\n")


def run_server_main(main: ServerMain, client: ClientApp, address: SuperLinkAddress, carried: Sequence[object] = (),
                    deployment: LocalDeployment | None = None, timeout: float = RUN_TIMEOUT) -> list[object]:
    """Run ``main`` as the ServerApp and ``client`` on every SuperNode of the SuperLink at ``address``.

    Parameters
    ----------
    main
        The server function, ``main(grid, context)``.
    client
        The ``ClientApp`` every SuperNode runs.
    address
        The SuperLink.  The ServerApp runs on its host and writes the result
        file in this host's temporary folder, so call this on the SuperLink's host.
    carried
        Objects ``main`` fills in (reachable from its closure: a history, a
        strategy); they are shipped with ``main`` and come back as the
        returned copies.
    deployment
        The local deployment behind ``address``, if any: its processes are
        checked while waiting, and a failure names the one that died.
    timeout
        Seconds the whole run may take.

    Returns
    -------
    list
        The copies of ``carried`` as the ServerApp left them.

    Raises
    ------
    DeploymentError
        If ``flwr run`` fails, a process of ``deployment`` dies, the run
        exceeds ``timeout`` or the server function raises (its traceback is included).
    """
    with tempfile.TemporaryDirectory(prefix="repro-flwr-run-") as tmp:
        work = Path(tmp)
        app_dir = work / "app"
        app_dir.mkdir()
        (app_dir / "pyproject.toml").write_text(PYPROJECT)
        result = work / "result.pkl"
        server_payload = encode((main, tuple(carried)))
        client_payload = encode(client)
        (work / "run-config.toml").write_text(
            f"{SERVER_KEY} = {toml_string(server_payload)}\n{CLIENT_KEY} = {toml_string(client_payload)}\n"
            f"{RESULT_KEY} = {toml_string(str(result))}\n")
        cli_home = work / "cli"
        write_cli_home(cli_home, address)
        command = [flower_command("flwr"), "run", str(app_dir), CONNECTION, "--run-config",
                   str(work / "run-config.toml")]
        log = work / "flwr-run.log"
        with log.open("wb") as out:
            submitted = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=flower_env(cli_home),
                                       cwd=work, timeout=STARTUP_TIMEOUT, check=False)
        if submitted.returncode != 0:
            raise DeploymentError(f"flwr run exited with code {submitted.returncode}; command: {' '.join(command)}\n"
                                  f"--- its output ---\n{log_tail(log)}")
        deadline = time.monotonic() + timeout
        while not result.exists():
            if deployment is not None:
                deployment.check_alive()
            if time.monotonic() > deadline:
                detail = "" if deployment is None or deployment.home is None else (
                    f"\n--- last lines of the SuperLink's log ---\n{log_tail(deployment.home / 'superlink.log')}")
                raise DeploymentError(f"the run on the SuperLink at {address} did not finish within {timeout:.0f} s"
                                      + detail)
            time.sleep(0.2)
        status, value = cloudpickle.loads(result.read_bytes())
    if status != "ok":
        raise DeploymentError(f"the ServerApp failed on the SuperLink at {address}:\n{value}")
    return list(value)


def adopt_state(target: object, source: object) -> None:
    """Copy ``source``'s attributes into ``target`` (the caller's object takes the state the ServerApp left)."""
    if type(target) is not type(source):
        raise TypeError(f"cannot adopt the state of a {type(source).__name__} into a {type(target).__name__}")
    vars(target).update(vars(source))


def run_deployed(main: ServerMain, client: ClientApp, num_nodes: int, carried: Sequence[object] = (),
                 timeout: float = RUN_TIMEOUT) -> None:
    """Run ``main`` and ``client`` on Flower's deployment engine; ``carried`` objects take the server's final state.

    With :data:`SUPERLINK_ENV` set (``HOST:PORT``; :data:`SUPERLINK_CA_ENV`
    for TLS) the run goes to that SuperLink, whose SuperNodes must already
    be connected; otherwise a :class:`LocalDeployment` of ``num_nodes``
    SuperNodes is started for this run and torn down after it.
    """
    def run_on(address: SuperLinkAddress, deployment: LocalDeployment | None) -> None:
        for target, source in zip(carried, run_server_main(main, client, address, carried, deployment, timeout)):
            adopt_state(target, source)

    remote = os.environ.get(SUPERLINK_ENV)
    if remote:
        run_on(SuperLinkAddress.parse(remote, os.environ.get(SUPERLINK_CA_ENV)), None)
        return
    with LocalDeployment(num_nodes=num_nodes) as dep:
        assert dep.address is not None
        run_on(dep.address, dep)

