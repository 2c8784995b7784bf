"""Act layer: rolling windows, the policy engine, backpressure and replay (the HTTP
service that runs it live is `tailbudget.serve`).

Import from the submodules (`tailbudget.control.engine`, `.windows`,
`.backpressure`, ...); this package imports nothing eagerly so the hot path
pays only for what it uses.
"""
