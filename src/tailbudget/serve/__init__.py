"""The HTTP service (`tailbudget serve`): ingest bodies, OTLP traces, the write-ahead log,
state, snapshots, the action journal and the Prometheus source, around the policy engine
of `tailbudget.control` (which replay and simulate share).

Import from the submodules (`tailbudget.serve.runtime`, `.app`, `.wal`, ...); this
package imports nothing eagerly so `tailbudget --help` stays light.
"""
