"""The per-stack supervisor's Cloud Functions source (`main.py`, `requirements.txt`); the
component that ships it is `components.tpu_supervisor`."""
