"""Startup scripts that compute components put into VM metadata, shipped as package data.

    from trainstack.components.startup.tpu_worker import render_tpu_worker_script

Each script is a bash template next to its Python renderer (`tpu_worker.sh` and
`tpu_worker.py`); renderers shell-quote every value they substitute.
"""
