"""``python -m stoker ARGS``: the ``stoker`` command (see ``stoker._command``)."""

from stoker._command import main

if __name__ == "__main__":
    main()
