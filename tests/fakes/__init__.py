"""In-process fakes of Google APIs that tests talk to over real HTTP."""
