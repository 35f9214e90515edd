"""The `tandem` console script of an installed package: runs the `tandem`
binary the wheel carries (tandem/_bin/tandem), with the same arguments, in
this process (exec), so its exit code and signals are the command's."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def binary() -> Path:
    """The path of the packaged `tandem` binary."""
    return Path(__file__).resolve().parent / "_bin" / "tandem"


def main() -> None:
    exe = binary()
    if not os.access(exe, os.X_OK):
        sys.stderr.write(f"tandem: error: the package has no runnable tandem binary at {exe}; "
                         "reinstall it (pip install ./python builds one)\n")
        sys.exit(127)
    os.execv(exe, [str(exe), *sys.argv[1:]])


if __name__ == "__main__":
    main()
