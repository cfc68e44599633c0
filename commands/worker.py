"""`worker` (the Procfile's worker process) and `requeue`, its sweep of pending calls on
demand."""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import sys
from typing import Any, NoReturn

from config import Config


def cmd_worker(config: Config, args: argparse.Namespace) -> int:
    """An RQ worker with the scheduler, and a playback worker beside it (worker.py)."""
    from worker import create_worker

    built = create_worker(
        config, args.queues, playback=args.playback, warm_up=not args.no_warm_up, parent_pid=args.parent_pid
    )
    exit_at_once(built.run())


def exit_at_once(code: int) -> NoReturn:
    """End the worker without the interpreter's finalization, which frees the spelling
    dictionaries object by object: seconds of a stop's grace. What must happen at exit
    still does: the exit handlers run (the models freed), the logs and output are flushed."""
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _calls_queue(config: Config) -> Any:
    from rq import Queue

    from jobs import queueing

    return Queue(queueing.CALLS, connection=queueing.redis_client(config.redis_url, "worker"))


def cmd_requeue(config: Config, args: argparse.Namespace) -> int:
    """Queue every stored call that is not processed yet and has no live job."""
    from jobs.relay import requeue_pending

    print(f"re-queued {requeue_pending(_calls_queue(config), config)} pending call(s)", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from jobs.queueing import QUEUES

    worker = sub.add_parser("worker", help="run an RQ worker (with scheduler)")
    # "recordings" first: a doctor waits on a link re-fetch, nobody waits on a transcription.
    worker.add_argument("queues", nargs="*", default=list(QUEUES))
    worker.add_argument("--no-warm-up", action="store_true", help="skip loading the transcription model")
    # The playback worker the worker command starts itself (jobs/companions.py).
    worker.add_argument("--playback", action="store_true", help=argparse.SUPPRESS)
    worker.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    worker.set_defaults(func=cmd_worker, needs_db=False, needs_secret=True)
    sub.add_parser("requeue", help="queue stored calls that are not processed yet").set_defaults(
        func=cmd_requeue, needs_db=False
    )
