"""The ``stoker`` command of a pip install: ``stoker convert``, ``inspect``, ``verify``,
``merge``, ``decode`` and ``bench``, as ``stoker --help`` lists them.

The console script that pip puts on ``PATH``, and ``python -m stoker``, run the Rust
command in this process (``stoker._stoker._command``): the same flags, output, log lines
and exit statuses as the binary that ``cargo install`` builds, without a Rust toolchain.
"""

import sys
from typing import NoReturn


def main() -> NoReturn:
    from stoker import _stoker

    # Named "stoker" in usage lines whichever way it was started (a script's path, or
    # "__main__.py" for python -m).
    sys.exit(_stoker._command(["stoker", *sys.argv[1:]]))
