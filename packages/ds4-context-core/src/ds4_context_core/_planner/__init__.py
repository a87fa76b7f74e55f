"""Private stages of the context planner; the public surface is ``ds4_context_core.planner``."""
