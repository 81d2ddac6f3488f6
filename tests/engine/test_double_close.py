"""The double's Close: which hosts that outlive SIGINT fail the tier. Only one kind is let go,
the one the engine itself lets go: the SDK host's main thread still in its own
`Event().wait()` because the kernel handed SIGINT to a gRPC thread (tests/engine/double.py
`SDK_WAIT_FRAME`). The dumps are faulthandler's, as the double's SIGABRT makes the host print
them (the first one as seen here)."""

from __future__ import annotations

from tests.engine.double import _main_thread_in_sdk_wait

SITE = "/work/main/.venv/lib/python3.11/site-packages"
LIB = "/root/.pyenv/versions/3.11.7/lib/python3.11"
GRPC_THREAD = f"""Fatal Python error: Aborted

Thread 0x00007f20ee6136c0 (most recent call first):
  File "{SITE}/grpc/_server.py", line 1314 in _serve
  File "{LIB}/threading.py", line 982 in run
  File "{LIB}/threading.py", line 1045 in _bootstrap_inner
  File "{LIB}/threading.py", line 1002 in _bootstrap

"""
SDK_WAIT = f"""{GRPC_THREAD}Current thread 0x00007f20f4a73b80 (most recent call first):
  File "{LIB}/threading.py", line 327 in wait
  File "{LIB}/threading.py", line 629 in wait
  File "{SITE}/pulumi/dynamic/__main__.py", line 278 in main
  File "{SITE}/pulumi/dynamic/__main__.py", line 283 in <module>
  File "<frozen runpy>", line 88 in _run_code
  File "<frozen runpy>", line 198 in _run_module_as_main

Extension modules: google._upb._message, grpc._cython.cygrpc (total: 2)
"""
HELD_BY_A_PROVIDER = f"""{GRPC_THREAD}Current thread 0x00007f20f4a73b80 (most recent call first):
  File "/work/main/components/_tpu_queued_provider.py", line 360 in _wait_active
  File "{LIB}/threading.py", line 629 in wait
  File "{SITE}/pulumi/dynamic/__main__.py", line 278 in main
"""
AT_EXIT = f"""{GRPC_THREAD}Current thread 0x00007f20f4a73b80 (most recent call first):
  File "{LIB}/threading.py", line 1112 in _wait_for_tstate_lock
  File "{LIB}/threading.py", line 1590 in _shutdown
"""


def test_a_host_whose_main_thread_missed_sigint_in_the_sdk_wait_is_let_go() -> None:
    assert _main_thread_in_sdk_wait(SDK_WAIT) is True


def test_a_host_held_anywhere_else_still_fails_the_tier() -> None:
    assert _main_thread_in_sdk_wait(HELD_BY_A_PROVIDER) is False
    assert _main_thread_in_sdk_wait(AT_EXIT) is False
    assert _main_thread_in_sdk_wait("") is False
