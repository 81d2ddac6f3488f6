"""The per-stack TPU supervisor's Cloud Functions source, `main.py`; the component that
ships it (with its requirements, `trainstack.components.run_supervisor.REQUIREMENTS`) is
`trainstack.components.run_supervisor`."""
