"""The per-stack TPU supervisor's Cloud Functions source, `main.py`; the component that
ships it (with its requirements, `components.tpu_supervisor.REQUIREMENTS`) is
`components.tpu_supervisor`."""
