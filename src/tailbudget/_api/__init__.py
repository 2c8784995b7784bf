"""The public Python API, re-exported lazily by `tailbudget/__init__.py`.

One small module per job; each function is what one CLI command calls, with the
command's long options as keyword arguments (cli/ parses, calls, renders).
"""
