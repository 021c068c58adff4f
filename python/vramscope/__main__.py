"""``python -m vramscope ...``.

``python -m vramscope train.py [ARGS]`` (a script, or ``-m module``) runs it with CUDA
out-of-memory errors caught, as ``vramscope run -- python train.py [ARGS]`` does. Anything else is
the ``vramscope`` command itself (``python -m vramscope info run.vtrace``), for environments whose
scripts folder is not on ``PATH``; the exit status is the command's.
"""

import os
import sys

from ._binary import VramscopeNotFound, binary


def main() -> None:
    try:
        command = binary()
    except VramscopeNotFound as error:
        print(f"vramscope: {error}", file=sys.stderr)
        sys.exit(2)
    args = sys.argv[1:]
    if args and (args[0] == "-m" or args[0].endswith(".py")):
        args = ["run", "--", sys.executable, *args]
    os.execv(command, [command, *args])


if __name__ == "__main__":
    main()
