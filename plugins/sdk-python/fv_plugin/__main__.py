"""``python -m fv_plugin build …`` (see :mod:`fv_plugin.build`)."""

import sys

from .build import main

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "build":
        print("usage: python -m fv_plugin build MODULE.py --kind source|sink|step [-o OUT.wasm]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[2:]))
