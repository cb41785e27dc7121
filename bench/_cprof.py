"""``python -m bench._cprof OUT celery-args...``: run celery under cProfile timed by
process CPU (time.process_time), so blocking waits do not count; dump on exit."""

import cProfile
import sys
import time

out = sys.argv[1]
sys.argv = ["celery", *sys.argv[2:]]
prof = cProfile.Profile(time.process_time)
try:
    from celery.__main__ import main

    prof.runcall(main)
except SystemExit:
    pass
finally:
    prof.dump_stats(out)
