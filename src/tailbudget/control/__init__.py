"""Act layer: rolling windows, the policy engine, backpressure, replay and the service.

Import from the submodules (`tailbudget.control.engine`, `.windows`,
`.backpressure`, ...); this package imports nothing eagerly so the hot path
pays only for what it uses.
"""
