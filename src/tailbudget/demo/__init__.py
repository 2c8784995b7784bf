"""`tailbudget demo`: a realistic RAG log with planted causes, planned and audited end to end."""

from tailbudget.demo.run import STEPS, DemoState, run_demo

__all__ = ["STEPS", "DemoState", "run_demo"]
