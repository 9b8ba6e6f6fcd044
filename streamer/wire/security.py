"""CURVE authentication and encryption of the ZeroMQ sockets (pyzmq's ``zmq.auth``).

The worker is the CURVE server on both of its sockets (frames PULL, masks PUB):
it holds a secret key and admits only clients whose public keys are in its
authorized-keys directory. Captures and subscribers are CURVE clients: each
holds its own secret key and the worker's public key. A peer without an
authorized key fails the handshake and gets nothing through, in either
direction. Key files are ZeroMQ certificates (``zmq.auth.create_certificates``:
``NAME.key`` public, ``NAME.key_secret`` public + secret), made with
``kdrsdl keygen``.
"""

import functools
import operator
import os

import zmq
import zmq.auth
import zmq.utils.monitor
from zmq.auth.thread import ThreadAuthenticator


def read_key(path: str, secret: bool) -> tuple[bytes, bytes | None]:
    """Load a ZeroMQ certificate file.

    Parameters
    ----------
    path : str
        ``NAME.key`` (public) or ``NAME.key_secret`` file.
    secret : bool
        Whether the secret key is required (then ``path`` must be a ``.key_secret`` file).

    Returns
    -------
    (bytes, bytes or None)
        Z85 public key and secret key (None when not required).

    Raises
    ------
    ValueError
        If the file is missing, is not a certificate, or lacks the secret key.
    """
    try:
        public, secret_key = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot load a ZeroMQ certificate from {path!r}: {exc}") from None
    if public is None or (secret and secret_key is None):
        raise ValueError(
            f"{path!r} holds no {'secret' if secret else 'public'} key "
            f"({'a NAME.key_secret file' if secret else 'a NAME.key file'} is expected)"
        )
    return public, secret_key if secret else None


def check_key_dir(path: str) -> str:
    """Raise ValueError unless ``path`` is a directory holding at least one ``*.key`` certificate."""
    if not os.path.isdir(path) or not any(n.endswith(".key") for n in os.listdir(path)):
        raise ValueError(f"{path!r} is not a directory of authorized public keys (NAME.key files)")
    return path


def start_authenticator(ctx: zmq.Context, authorized_keys: str) -> ThreadAuthenticator:
    """Start the ZAP handler of ``ctx`` admitting the CURVE clients whose keys are in ``authorized_keys``.

    Returns
    -------
    zmq.auth.thread.ThreadAuthenticator
        Call ``.stop()`` at shutdown.
    """
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=str(authorized_keys))
    return auth


def make_server(sock: zmq.Socket, secret_key_file: str) -> None:
    """Make ``sock`` a CURVE server with the key pair in ``secret_key_file`` (before bind)."""
    public, secret = read_key(secret_key_file, secret=True)
    sock.curve_publickey, sock.curve_secretkey = public, secret
    sock.curve_server = True


def make_client(sock: zmq.Socket, secret_key_file: str, server_key_file: str) -> None:
    """Make ``sock`` a CURVE client of the server whose public key is in ``server_key_file`` (before connect)."""
    public, secret = read_key(secret_key_file, secret=True)
    server_public, _ = read_key(server_key_file, secret=False)
    sock.curve_publickey, sock.curve_secretkey = public, secret
    sock.curve_serverkey = server_public


def create_keys(directory: str, name: str) -> tuple[str, str]:
    """Write a certificate pair ``NAME.key`` and ``NAME.key_secret`` (mode 0600) into ``directory``.

    Returns the two paths (public, secret).
    """
    os.makedirs(directory, exist_ok=True)
    public, secret = zmq.auth.create_certificates(directory, name)
    os.chmod(secret, 0o600)
    return public, secret


#: Monitor events of a refused peer: a wrong or unauthorized key, or no CURVE at all.
FAILED_HANDSHAKE_EVENTS: dict[int, str] = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "not authorized",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "protocol or mechanism mismatch",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake failed",
}


#: The monitor event mask of :data:`FAILED_HANDSHAKE_EVENTS` (``zmq.Socket.monitor``'s ``events``).
FAILED_HANDSHAKE_MASK = functools.reduce(operator.or_, FAILED_HANDSHAKE_EVENTS)


def handshake_monitor(sock: zmq.Socket) -> zmq.Socket:
    """A PAIR socket that receives ``sock``'s failed-handshake events (see :func:`failed_handshakes`)."""
    return sock.get_monitor_socket(FAILED_HANDSHAKE_MASK)


def failed_handshakes(monitor: zmq.Socket) -> list[str]:
    """The failed handshakes queued on ``monitor`` since the last call (non-blocking), as descriptions."""
    out = []
    while monitor.poll(0):
        event = zmq.utils.monitor.recv_monitor_message(monitor)
        out.append(f"{FAILED_HANDSHAKE_EVENTS.get(int(event['event']), 'handshake failed')} from {event['endpoint']!r}")
    return out
