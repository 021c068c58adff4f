"""``python -m vramscope ...`` is the ``vramscope`` command: the same arguments, the same exit
status (for environments whose scripts folder is not on ``PATH``)."""

import os
import sys

from ._binary import VramscopeNotFound, binary


def main() -> None:
    try:
        command = binary()
    except VramscopeNotFound as error:
        print(f"vramscope: {error}", file=sys.stderr)
        sys.exit(2)
    os.execv(command, [command, *sys.argv[1:]])


if __name__ == "__main__":
    main()
