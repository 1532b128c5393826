"""`perdure sim`: what a large run's effective training time (ETTR) will be, policy by policy.

The real core (`perdure.core.decide`: admission, scheduler, failure policy, elastic, watchdog
verdicts; `perdure.core.interval` for `checkpoint.every: auto`; `perdure.core.goodput` for the
account) runs against a simulated backend on a simulated clock. Failures are drawn from a
failure file, costs come from a calibration file measured on real runs.
"""
