#!/usr/bin/env python3
"""The serving benchmark's model (bench_batching.py): tools/make_bench_model.py with experts Q4_0, other matrices
Q8_0 and tern-tiny's 4096-token vocabulary. usage: make_bench_model.py OUT.gguf [N_LAYER=4]"""
import os
import subprocess
import sys

if len(sys.argv) not in (2, 3):
    sys.exit(__doc__)
tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "make_bench_model.py")
sys.exit(subprocess.call([sys.executable, tool, sys.argv[1], "--layers", sys.argv[2] if len(sys.argv) > 2 else "4",
                          "--type", "q4_0-experts"]))
