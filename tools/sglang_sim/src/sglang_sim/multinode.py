# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One SGLang server over several hosts (``--nnodes N --node-rank R --dist-init-addr HOST:PORT``): the nodes'
rendezvous and the links that keep them one server.

SGLang's ranks meet in torch's TCPStore at --dist-init-addr and then talk over NCCL; here one TCP connection per
node to node 0 stands for both. Node 0 listens on the address, every other node connects (retrying, as torch's
client does, until the timeout). The protocol is line-delimited JSON, one object per line:

  node R -> node 0   {"type": "hello", "node_rank": R, "nnodes": N, "tp_size": T, "host": {...}}
  node 0 -> node R   {"type": "welcome", "hosts": [{...} per node in --node-rank order]}
                     or {"type": "reject", "error": "..."} (a second node with the same rank, another tp/nnodes)
  both ways          {"type": "stage", "name": S}       a startup barrier (a collective: all nodes reach S)
  node 0 -> node R   {"type": "activations", "bytes": B, "seq": K}   what the ranks of a TP batch hold
  node R -> node 0   {"type": "ack", "seq": K}          node R's ranks hold them too (or node R dies: no ack)

``host`` is a node's host.json as read plus the memory other processes hold on its GPUs, so that every node
computes the same plan (memory.plan with one host per node): P and A are the MIN over all ranks of all nodes, as
SGLang's all-reduce makes them. The connections stay open while the server lives: a node that dies (OOM, crash,
SIGKILL, SIGTERM) closes them, and the others see what NCCL reports when a remote rank exits, then die too. Node 0
relays for the others (a star), so any node's death ends every node. Every wait is bounded: the rendezvous by
--dist-timeout (default 600 s, torch's for NCCL process groups; 60 s on the fast time scale), a barrier or an
activation ack by the same (at most 30 s fast).
"""
from __future__ import annotations

import json
import queue
import socket
import threading
import time

from sglang_sim import hostspec
from sglang_sim.hostspec import SimConfigError

DEFAULT_TIMEOUT_S = 600.0          # torch.distributed: default_pg_nccl_timeout
# The fast scale shortens SGLang's waits, not systemd's: nodes restarted by Restart=on-failure (RestartSec=15 by
# default) out of step must still meet, as they do in 600 s. With a window shorter than a restart interval, two
# nodes whose starts are more than the window apart keep missing each other until their start limit.
FAST_RENDEZVOUS_TIMEOUT_S = 60.0
FAST_BARRIER_TIMEOUT_S = 30.0


def enabled(args) -> bool:
    """True for a server of more than one node."""
    return int(getattr(args, "nnodes", 1) or 1) > 1


def check(args):
    """Refuse what this simulation does not model (SimConfigError); SGLang's own argument errors first."""
    if not enabled(args):
        return
    nnodes, rank = int(args.nnodes), int(args.node_rank)
    if not 0 <= rank < nnodes:
        raise SimConfigError("--node-rank %d is not in 0..%d (--nnodes %d)" % (rank, nnodes - 1, nnodes))
    if not args.dist_init_addr:
        raise SimConfigError("--nnodes %d needs --dist-init-addr HOST:PORT (node 0's address)" % nnodes)
    split_addr(args.dist_init_addr)
    if args.tp_size % nnodes:
        raise SimConfigError("--tp-size %d is not a multiple of --nnodes %d" % (args.tp_size, nnodes))
    if args.pp_size != 1 or args.dp_size != 1:
        raise SimConfigError("multi-node is simulated for one tensor-parallel group only (--pp-size 1, --dp-size 1)")


def split_addr(addr: str) -> tuple:
    """(host, port) of --dist-init-addr (``[v6]:port`` too)."""
    text = str(addr)
    host, _sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise SimConfigError("--dist-init-addr must be HOST:PORT, got %r" % text)
    return host, int(port)


def timeouts(host, args) -> tuple:
    """(rendezvous, barrier) timeouts in seconds on this host's time scale."""
    realistic = float(args.dist_timeout) if args.dist_timeout else DEFAULT_TIMEOUT_S
    return (host.seconds(realistic, min(realistic, FAST_RENDEZVOUS_TIMEOUT_S)),
            host.seconds(realistic, min(realistic, FAST_BARRIER_TIMEOUT_S)))


def wire_host(host) -> dict:
    """What a node tells the others about its host: host.json as read and the memory others hold on its GPUs."""
    return {"path": host.path, "data": host.data,
            "occupied_mib": {str(index): mib for index, mib in host.occupied_mib.items()}}


def host_from_wire(wire: dict):
    """The Host another node sent (raises SimConfigError if it is not a valid host.json)."""
    host = hostspec.Host(wire["data"], wire.get("path") or "<node>")
    host.occupied_mib = {int(index): int(mib) for index, mib in (wire.get("occupied_mib") or {}).items()}
    return host


class RendezvousError(Exception):
    """The rendezvous failed. ``kind``: timeout, listen, closed or rejected; ``detail``: the numbers for the log."""

    def __init__(self, kind: str, detail: dict):
        super().__init__(kind)
        self.kind = kind
        self.detail = detail


class PeerLost(Exception):
    """A node's connection closed (``peer``: its address as NCCL names it, ``host<port>``) or, with
    ``timeout`` set, a barrier or an ack did not come in time."""

    def __init__(self, peer: str, timeout: float | None = None):
        super().__init__(peer)
        self.peer = peer
        self.timeout = timeout


class _Conn:
    """One node-to-node connection: a socket, its reader and a write lock."""

    def __init__(self, sock, node: int, peer: str):
        self.sock = sock
        self.node = node
        self.peer = peer
        self.reader = sock.makefile("rb")
        self.lock = threading.Lock()

    def send(self, message: dict) -> bool:
        """Write one line; False when the peer is gone."""
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        try:
            with self.lock:
                self.sock.sendall(data)
            return True
        except OSError:
            return False

    def receive(self):
        """One message, or None at the end of the stream (also on a reset connection or a bad line)."""
        try:
            line = self.reader.readline()
        except (OSError, ValueError):
            return None
        if not line:
            return None
        try:
            message = json.loads(line.decode("utf-8"))
        except ValueError:
            return None
        return message if isinstance(message, dict) else None


def _peer_name(address) -> str:
    return "%s<%d>" % (address[0], address[1])


class Link:
    """This node's side of the multi-node server: rendezvous, startup barriers, activations, peer loss."""

    def __init__(self, args, host):
        self.args = args
        self.nnodes = int(args.nnodes)
        self.node_rank = int(args.node_rank)
        self.address = split_addr(args.dist_init_addr)
        self.rendezvous_timeout, self.barrier_timeout = timeouts(host, args)
        self.conns = {}                  # node rank -> _Conn (node 0: every other node; others: node 0)
        self.events = queue.Queue()      # ("stage", node, name) / ("eof", node, peer) while starting
        self.arrived = {}                # stage name -> nodes seen there
        self.lost = None                 # the peer whose connection closed first
        self.serving = False
        self.on_lost = None              # serving: called with the peer name when a connection closes
        self.on_activations = None       # node R serving: called with the bytes; returns False to withhold the ack
        self.acks = threading.Condition()
        self.acked = {}                  # node -> last seq acknowledged
        self.seq = 0
        self.state_lock = threading.Lock()

    @property
    def head(self) -> bool:
        """True on node 0."""
        return self.node_rank == 0

    # -- rendezvous ------------------------------------------------------------------------------------------

    def rendezvous(self, own_host: dict) -> list:
        """Meet the other nodes; every node's host (wire form) in --node-rank order. Raises RendezvousError."""
        hosts = self._lead(own_host) if self.head else self._join(own_host)
        for conn in self.conns.values():
            conn.sock.settimeout(None)
            threading.Thread(target=self._read, args=(conn,), name="node-link-%d" % conn.node, daemon=True).start()
        return hosts

    def _lead(self, own_host: dict) -> list:
        listener = socket.socket(socket.AF_INET6 if ":" in self.address[0] else socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(self.address)
            listener.listen(self.nnodes)
        except OSError as exc:
            listener.close()
            raise RendezvousError("listen", {"port": self.address[1], "errno": exc.errno or 0,
                                             "strerror": (exc.strerror or str(exc)).lower()})
        deadline = time.monotonic() + self.rendezvous_timeout
        hellos = {}
        try:
            while len(hellos) < self.nnodes - 1:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RendezvousError("timeout", {"joined": len(hellos) + 1})
                listener.settimeout(remaining)
                try:
                    sock, address = listener.accept()
                except socket.timeout:
                    continue
                sock.settimeout(max(0.1, deadline - time.monotonic()))
                conn = _Conn(sock, -1, _peer_name(address))
                hello = conn.receive()
                error = self._refusal(hello, hellos)
                if error is not None:
                    if hello is not None and hello.get("type") == "hello":
                        conn.send({"type": "reject", "error": error})
                    sock.close()
                    continue
                conn.node = int(hello["node_rank"])
                hellos[conn.node] = hello
                self.conns[conn.node] = conn
        except RendezvousError:
            for conn in self.conns.values():
                conn.sock.close()
            self.conns = {}
            raise
        finally:
            listener.close()
        hosts = [own_host] + [hellos[node]["host"] for node in range(1, self.nnodes)]
        for conn in self.conns.values():
            conn.send({"type": "welcome", "hosts": hosts})
        return hosts

    def _refusal(self, hello, hellos):
        """Why node 0 turns a hello away (None: welcome)."""
        if not isinstance(hello, dict) or hello.get("type") != "hello" or not isinstance(hello.get("host"), dict):
            return "not a node of this server"
        node = hello.get("node_rank")
        if hello.get("nnodes") != self.nnodes or hello.get("tp_size") != self.args.tp_size:
            return ("node %s runs --nnodes %s --tp-size %s, node 0 --nnodes %d --tp-size %d"
                    % (node, hello.get("nnodes"), hello.get("tp_size"), self.nnodes, self.args.tp_size))
        if not isinstance(node, int) or not 1 <= node < self.nnodes:
            return "--node-rank %r is not in 1..%d" % (node, self.nnodes - 1)
        if node in hellos:
            return "another node already joined as --node-rank %d" % node
        return None

    def _join(self, own_host: dict) -> list:
        deadline = time.monotonic() + self.rendezvous_timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RendezvousError("timeout", {})
            try:
                sock = socket.create_connection(self.address, timeout=min(remaining, 1.0))
                break
            except OSError:
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        conn = _Conn(sock, 0, _peer_name(self.address))
        conn.send({"type": "hello", "node_rank": self.node_rank, "nnodes": self.nnodes,
                   "tp_size": self.args.tp_size, "host": own_host})
        answer = conn.receive()          # None also when node 0 does not answer before the deadline
        if answer is None:
            sock.close()
            if time.monotonic() >= deadline:
                raise RendezvousError("timeout", {})
            raise RendezvousError("closed", {})
        if answer.get("type") != "welcome":
            sock.close()
            raise RendezvousError("rejected", {"error": str(answer.get("error"))})
        self.conns[0] = conn
        return answer["hosts"]

    # -- after the rendezvous --------------------------------------------------------------------------------

    def _read(self, conn: _Conn):
        while True:
            message = conn.receive()
            if message is None:
                break
            kind = message.get("type")
            if kind == "stage":
                self.events.put(("stage", conn.node, message.get("name")))
            elif kind == "activations" and self.on_activations is not None:
                if self.on_activations(int(message.get("bytes") or 0)):
                    conn.send({"type": "ack", "seq": message.get("seq")})
            elif kind == "ack":
                with self.acks:
                    self.acked[conn.node] = int(message.get("seq") or 0)
                    self.acks.notify_all()
        self._closed(conn)

    def _closed(self, conn: _Conn):
        with self.state_lock:
            if self.lost is None:
                self.lost = conn.peer
            serving = self.serving
        with self.acks:
            self.acks.notify_all()
        if serving:
            self.on_lost(conn.peer)
        else:
            self.events.put(("eof", conn.node, conn.peer))

    def barrier(self, name: str):
        """Wait until every node reached startup stage ``name`` (node 0 gathers, then releases the others).
        Raises PeerLost when a node's connection closes or the barrier times out."""
        if self.head:
            self._wait_stage(name, set(self.conns))
            for conn in self.conns.values():
                conn.send({"type": "stage", "name": name})
        else:
            self.conns[0].send({"type": "stage", "name": name})
            self._wait_stage(name, {0})

    def _wait_stage(self, name: str, nodes: set):
        deadline = time.monotonic() + self.barrier_timeout
        while not nodes <= self.arrived.get(name, set()):
            if self.lost is not None:
                raise PeerLost(self.lost)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PeerLost(sorted(self.conns.values(), key=lambda conn: conn.node)[0].peer, self.barrier_timeout)
            try:
                kind, node, value = self.events.get(timeout=remaining)
            except queue.Empty:
                continue
            if kind == "stage":
                self.arrived.setdefault(value, set()).add(node)
            else:
                raise PeerLost(value)

    def wait_lost(self) -> str | None:
        """A failing peer's end, waited for (bounded by the barrier timeout): its name, or None if it stays."""
        deadline = time.monotonic() + self.barrier_timeout
        while self.lost is None and time.monotonic() < deadline:
            try:
                kind, _node, value = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if kind == "eof":
                return value
        return self.lost

    def serve(self, on_lost, on_activations=None):
        """Startup is over: from now on a closed connection calls ``on_lost(peer)`` at once (NCCL's watchdog)."""
        self.on_activations = on_activations
        self.on_lost = on_lost
        with self.state_lock:
            self.serving = True
            lost = self.lost
        if lost is not None:
            on_lost(lost)

    def share_activations(self, size: int):
        """Node 0: the TP batch's activations are held on every node's ranks; wait until each node holds them.
        Raises PeerLost when a node dies (its OOM) or does not answer in time."""
        with self.acks:
            self.seq += 1
            seq = self.seq
        for conn in self.conns.values():
            conn.send({"type": "activations", "bytes": int(size), "seq": seq})
        deadline = time.monotonic() + self.barrier_timeout
        with self.acks:
            while any(self.acked.get(node, 0) < seq for node in self.conns):
                if self.lost is not None:
                    raise PeerLost(self.lost)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise PeerLost(sorted(self.conns.values(), key=lambda conn: conn.node)[0].peer,
                                   self.barrier_timeout)
                self.acks.wait(remaining)
