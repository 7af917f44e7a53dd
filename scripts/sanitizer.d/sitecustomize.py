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
        # Once only: a runtime the loader cannot preload (a wrong path) would otherwise
        # start this Python again for ever.
        if os.environ.get("STOKER_SANITIZER_REEXEC"):
            sys.exit(f"sitecustomize: {_want} was not preloaded (see the loader's message)")
        os.environ["STOKER_SANITIZER_REEXEC"] = "1"
        os.environ["LD_PRELOAD"] = _want
        # The arguments as given (`-c`, `-u`, `-m` included): `sys.orig_argv` from Python
        # 3.10, the kernel's copy before it (the package supports 3.9).
        _argv = getattr(sys, "orig_argv", None)
        if _argv is None:
            with open("/proc/self/cmdline", "rb") as _cmdline:
                _argv = [os.fsdecode(a) for a in _cmdline.read().split(b"\0")[:-1]]
        os.execv(sys.executable, [sys.executable] + _argv[1:])
    os.environ.pop("LD_PRELOAD", None)
    os.environ.pop("STOKER_SANITIZER_REEXEC", None)
