"""SQL: parse (``ddl``), bind and plan (``planner``, ``binder``) into the plan of ``plan.py``; the
bottom layer — it imports nothing from ``operators/``, ``connectors/`` or the engine."""
