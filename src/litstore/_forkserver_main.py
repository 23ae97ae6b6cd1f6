"""The caller's main module, imported once by the fork server that ingest starts (it is on its preload list).

A process that multiprocessing starts for a caller imports the caller's main script (as
``__mp_main__``) before it runs anything: that is how it finds ``fn`` and whatever the
script defines. A fork server is meant to do that once, for every process it forks
(``"__main__"`` on its preload list), but before Python 3.14 it never does: its
``ensure_running`` hands over the script's path under a key its ``main`` does not read
(CPython gh-98552, fixed by gh-126631). So every worker of every ingest ran the caller's
script again, its imports included: a script that imports torch at the top took 1.5-1.9 s
per ingest of 1,000 small records with two workers (0.1 s without the import).

:func:`litstore.ingest._context` starts the fork server inside :func:`handed_over`, which
puts what a spawned process is told of its caller (its main module, ``sys.path``,
``sys.argv``, working directory) in :data:`ENVIRONMENT`; importing this module there does
what a spawned process does with it. A worker forked afterwards finds the main module in
place and does not run it again. If the script cannot be imported (no
``if __name__ == "__main__":`` guard around the call that starts workers, or it raises),
it is left: each worker runs it, as a spawned worker would, and fails as it would
(``IngestError``). Where multiprocessing has imported the main module already (Python
3.14 on), nothing is run twice: a process whose main module is in place does not import
it again.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from multiprocessing import process, spawn

#: The environment variable that carries the caller's preparation data (JSON) to the fork server.
ENVIRONMENT = "LITSTORE_FORKSERVER_MAIN"

#: What of ``spawn.get_preparation_data`` is handed over: where the main module is, and what it runs with.
KEYS = ("sys_path", "sys_argv", "dir", "orig_dir", "init_main_from_name", "init_main_from_path")


@contextlib.contextmanager
def handed_over() -> Iterator[None]:
    """While this is entered, a fork server started by this process imports its main module as it starts.

    What a spawned process is told (the main module, and what it runs with) is put in
    :data:`ENVIRONMENT`, which the fork server inherits; a process with no main module a
    worker would import (an interactive session, ``python -c``) drops any copy it inherited
    instead, so that its fork server does not import a parent's script. Taken out again on
    leaving: no other child of this process sees it.
    """
    data = spawn.get_preparation_data("litstore-fork-server")
    if "init_main_from_name" in data or "init_main_from_path" in data:
        os.environ[ENVIRONMENT] = json.dumps({key: data[key] for key in KEYS if key in data})
    else:
        os.environ.pop(ENVIRONMENT, None)
    try:
        yield
    finally:
        os.environ.pop(ENVIRONMENT, None)


def _import_main() -> None:
    handed = os.environ.pop(ENVIRONMENT, None)
    if not handed:
        return
    current = process.current_process()
    current._inheriting = True  # type: ignore[attr-defined]  # (starting a process from here is refused)
    try:
        spawn.prepare(json.loads(handed))
    except BaseException:  # noqa: BLE001 - the caller's script: each worker runs it again, and reports it
        pass
    finally:
        del current._inheriting  # type: ignore[attr-defined]


_import_main()
