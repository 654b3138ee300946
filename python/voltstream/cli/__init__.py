"""`voltstream <verb>`: the command line, the only package that knows argparse.

Each verb is a thin layer over a library function (``commands``); errors derived from
VoltstreamError are logged as one line (`voltstream VERB: error: ...`) with exit
status 2, never as a traceback. The options of the run as a service (logging,
--max-loss, --no-progress) belong to the whole command: before or after the verb.
main() applies them alike to every verb: the log format, the signal handling
(service/shutdown.py) and the exit status (service/exit_status.py).

Modules: ``parser`` (every verb's options), ``options`` (the shared vocabulary),
``commands`` and one module per verb family (``simulate``, ``fengine``, ``latency``,
``cluster``, ``replay``, ``run_file``, ``ops``), ``common`` (what the verbs share).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from voltstream.cli.ops import serving
from voltstream.cli.parser import build_parser
from voltstream.errors import VoltstreamError
from voltstream.service import logs
from voltstream.service.exit_status import BAD_INPUT, exit_status
from voltstream.service.shutdown import Shutdown

__all__ = ["build_parser", "main"]

log = logging.getLogger("voltstream.cli")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.setup(args.log_format, args.log_level)
    if args.version:
        from voltstream import __version__

        print(f"voltstream {__version__}")
        return 0
    if args.verb is None:
        parser.print_help()
        return BAD_INPUT
    from voltstream.cli import commands

    args.shutdown = shutdown = Shutdown()
    shutdown.install()
    try:
        with serving(args):
            return exit_status(getattr(commands, args.verb)(args), args.max_loss, args.verb)
    except VoltstreamError as e:
        log.error("voltstream %s: error: %s", args.verb, e)
        return BAD_INPUT
    except KeyboardInterrupt:
        # A verb that cannot stop cleanly (or Ctrl-C outside the run loop): the
        # shell's convention, 128 + the signal.
        log.warning("voltstream %s: interrupted", args.verb)
        return 128 + (shutdown.signum or 2)
    finally:
        shutdown.uninstall()
