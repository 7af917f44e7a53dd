# For scripts/sanitizer.sh. A sanitizer's runtime must be in a process from its start,
# and only in the Python ones: the tests' other children (Rust examples, the CLI) are not
# instrumented, and the runtime in them would report their memory traffic. So a Python
# started without it (a test's child, an xdist worker) starts again with it, and each
# drops it from the environment its own children get.
import os
import sys

_want = os.environ.get("STOKER_SANITIZER_PRELOAD")
if _want:
    _runtime = os.path.basename(_want.split()[0])
    with open("/proc/self/maps") as _maps:
        _loaded = _runtime in _maps.read()
    if not _loaded:
        os.environ["LD_PRELOAD"] = _want
        os.execv(sys.executable, [sys.executable] + sys.orig_argv[1:])
    os.environ.pop("LD_PRELOAD", None)
