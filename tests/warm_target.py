"""What tests/unit/test_warm.py runs in the warm process's children (as ``python -m``): echoes
what it was given (argv, an environment variable, the working directory, a line of stdin) and
exits with ``WARM_EXIT``; with ``WARM_SLEEP`` it first sleeps that long."""

import os
import sys
import time

if __name__ == "__main__":
    print(f"argv={sys.argv[1:]} env={os.environ.get('WARM_PROBE')} cwd={os.getcwd()}", flush=True)
    print(f"stdin={sys.stdin.readline().strip()} pid={os.getpid()}", flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    time.sleep(float(os.environ.get("WARM_SLEEP", "0")))
    sys.exit(int(os.environ.get("WARM_EXIT", "0")))
