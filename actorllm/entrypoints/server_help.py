"""``actorllm serve --help`` text of the HTTP server's settings (``ServerSettings``): what
each flag does, its unit and default."""

from __future__ import annotations

from collections.abc import Mapping

SERVER_SETTINGS_HELP: Mapping[str, Mapping[str, str]] = {
    "Frontend": {
        "host": "Address to listen on (0.0.0.0 or :: for every interface).",
        "port": "Port to listen on.",
        "uds": (
            "Serve on this Unix domain socket path instead of host:port (e.g. behind a "
            "local proxy)."
        ),
        "backlog": (
            "Listen backlog: connections the kernel queues before the server accepts them."
        ),
        "keep_alive_timeout_s": (
            "Seconds an idle keep-alive connection stays open waiting for its next request "
            "(streams in progress are not idle)."
        ),
        "keep_alive_max_requests": (
            "Requests served on one keep-alive connection before it is closed (a client "
            "then opens a new one); bounds what one connection can hold on to."
        ),
        "h11_max_incomplete_event_size": (
            "Bytes of request line and headers (HTTP/1.1) accepted before the request is "
            "refused (vLLM's 4 MiB)."
        ),
        "worker_class": "The event loop: trio or asyncio.",
        "graceful_timeout_s": (
            "Seconds shutdown waits for in-flight requests before cancelling them."
        ),
        "ssl_keyfile": (
            "TLS: the private key file (PEM). With ssl_certfile, the server speaks HTTPS."
        ),
        "ssl_certfile": "TLS: the certificate chain file (PEM).",
        "ssl_ca_certs": "TLS: CA certificates to verify client certificates with.",
        "ssl_cert_reqs": (
            "TLS: client certificates: 0 not asked, 1 optional, 2 required (Python's ssl.CERT_*)."
        ),
        "ssl_ciphers": "TLS: the cipher suites (OpenSSL cipher list; TLS 1.2 and below).",
        "uvicorn_log_level": (
            "Log level of the HTTP server's own logger (hypercorn here; vLLM's name)."
        ),
        "log_config_file": (
            "A JSON logging configuration (Python's logging.config.dictConfig schema) "
            "applied at start-up, for actorllm's loggers and hypercorn's."
        ),
    },
}
