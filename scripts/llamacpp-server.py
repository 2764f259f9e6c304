#!/usr/bin/env python3
"""Start llama.cpp's server (from PyPI's xllamacpp) on loopback with inferlab's model, for
`inferlab attach` and `inferlab bench serve --peer`.

    pip install xllamacpp==2026.10.11549
    python3 scripts/llamacpp-server.py --port 8080 --parallel 4

It prints one line, `listening on http://127.0.0.1:PORT`, once the model is loaded, and
serves until SIGTERM or SIGINT (Ctrl-C). Metrics (/metrics) and slots (/slots) are on.
"""

import argparse
import os
import signal
import sys
import threading

MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model():
    """The model inferlab fetched: $INFERLAB_MODEL, else inferlab's user cache."""
    if os.environ.get("INFERLAB_MODEL"):
        return os.environ["INFERLAB_MODEL"]
    cache = os.environ.get("INFERLAB_CACHE_DIR")
    if not cache:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        if sys.platform == "darwin":
            base = os.path.expanduser("~/Library/Caches")
        cache = os.path.join(base, "inferlab")
    return os.path.join(cache, MODEL_NAME)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=default_model(), help="GGUF file (default: inferlab's cached model)")
    p.add_argument("--port", type=int, default=8080, help="loopback port (default 8080)")
    p.add_argument("--parallel", type=int, default=4, help="slots: requests decoded together (default 4)")
    p.add_argument("--ctx", type=int, default=4096, help="context tokens, split evenly over the slots (default 4096)")
    p.add_argument("--threads", type=int, default=2, help="CPU threads (default 2)")
    a = p.parse_args()
    if not 1 <= a.port <= 65535:
        p.error("--port must be 1-65535")
    if a.parallel < 1 or a.ctx < a.parallel or a.threads < 1:
        p.error("--parallel, --threads must be at least 1 and --ctx at least --parallel")
    return a


def main():
    a = parse_args()
    if not os.path.isfile(a.model):
        sys.exit(f"no model at {a.model}: run `inferlab model fetch` first, or pass --model")
    try:
        import xllamacpp
    except ImportError:
        sys.exit("xllamacpp is not installed: pip install xllamacpp==2026.10.11549")
    params = xllamacpp.CommonParams()
    params.model.path = a.model
    params.n_parallel = a.parallel
    params.n_ctx = a.ctx
    params.endpoint_metrics = True
    params.endpoint_slots = True
    params.port = a.port
    params.cpuparams.n_threads = a.threads
    params.cpuparams_batch.n_threads = a.threads
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    server = xllamacpp.Server(params)
    print(f"listening on http://127.0.0.1:{a.port}", flush=True)
    done.wait()
    del server
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
