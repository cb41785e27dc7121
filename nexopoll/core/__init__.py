"""Pure, framework-free core of nexopoll.

Nothing in this package imports Django, Celery, redis or requests, reads the
clock or draws random numbers: every function takes ``now`` (and any seed) as a
parameter so the scheduling, breaker, template and validation logic is
unit-testable on its own.
"""
