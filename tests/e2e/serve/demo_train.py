"""A small training loop for the dashboard: steps, checkpoints, one crash and a restore.

Reports goodput through perdure.runtime (no torch needed); writes a log line per step and,
first, a line that would run script if a page ever parsed the log as HTML.
"""

import os
import sys
import time

from perdure.runtime import goodput

HOSTILE = "<img src=x onerror=window.pwned=1>"
CRASH_AT = 30

restarted = int(os.environ.get("PERDURE_RESTART_COUNT", "0")) > 0
rank = int(os.environ.get("RANK", "0"))
print(HOSTILE, file=sys.stderr, flush=True)
start = 0
if restarted:  # resume from the last checkpoint before the crash
    began = time.perf_counter()
    time.sleep(0.05)
    start = CRASH_AT // 10 * 10
    goodput.checkpoint_restored(start - 1, time.perf_counter() - began)
for step in range(start, 100_000):
    with goodput.step(step):
        time.sleep(0.05)
    print(f"tick {step} loss {1 / (step + 1):.4f}", file=sys.stderr, flush=True)
    print(f"said {step}", flush=True)  # stdout: `print()`, merged with stderr by default
    if step % 10 == 9:
        began = time.perf_counter()
        time.sleep(0.01)
        goodput.checkpoint_saved(step, time.perf_counter() - began)
    if step == CRASH_AT and rank == 1 and not restarted:
        sys.exit(1)  # a crash: the controller restarts the replica
